// GET /admin/usage?group_by=…&tag=…&end_user=… (CONTRACT section 20): usage grouped by one or
// two of tag, end_user, key, team, model and day, and filtered by a tag or an end user, read
// from the totals kept as records are written (../store/usage-totals.ts), never the records:
// the cost is the range's hours (or days) and the groups' ids, whatever the history's length.
//
// Exact to the unit, by these rules (docs/attribution.md):
// - a group read covers whole hours (whole UTC days with `day`, or when two of tag, end_user and
//   model meet, grouped or filtered: those totals are kept per day): `since` is taken back to the start of its hour
//   (day), and the answer says so; its `totals` cover the same records;
// - key, team, model, end_user and day give each record one value: their groups sum to `totals`
//   exactly (records without a key, team or end user form the group whose value is null);
// - tag gives a record each of its tags: a request with two tags counts whole in both groups,
//   so each tag's group is exact for that tag and the groups may sum to more than `totals`;
//   records without a tag form the group `tag: null`.

import { GatewayError, clip } from '../errors.js';
import type { Store, TotalsDimension, TotalsRow } from '../store/types.js';
import { planOf } from '../store/usage-totals.js';
import { DAY_MS } from '../utc-day.js';
import { OTHER_END_USERS, TAG, checkEndUser } from '../auth/attribution.js';

const HOUR_MS = 3_600_000;
/** What group_by may name. */
export const GROUP_DIMS = ['tag', 'end_user', 'key', 'team', 'model', 'day'] as const;
type GroupDim = (typeof GROUP_DIMS)[number];
/** Records timed up to this far past the clock still count (instances' clocks differ a little). */
const AHEAD_MS = DAY_MS;

interface Sums { requests: number; prompt_tokens: number; completion_tokens: number; units: number }

const sumsOf = (r: TotalsRow): Sums => ({ requests: r.requests, prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, units: r.units });

function groupByOf(text: string): GroupDim[] {
  const dims = text.split(',').map((d) => d.trim());
  const bad = dims.find((d) => !(GROUP_DIMS as readonly string[]).includes(d));
  if (bad !== undefined || dims.length > 2 || new Set(dims).size !== dims.length) {
    throw new GatewayError('unsupported_value',
      `Unsupported value for 'group_by': ${clip(JSON.stringify(text), 64)}. Supported: one or two of ${GROUP_DIMS.map((d) => `'${d}'`).join(', ')}, comma-separated.`,
      { param: 'group_by' });
  }
  return dims as GroupDim[];
}

/** Whether GET /admin/usage asks for groups or attribution filters (else the plain report). */
export function wantsGroups(q: URLSearchParams): boolean {
  return q.has('group_by') || q.has('tag') || q.has('end_user');
}

/** The grouped (or filtered) usage of `account` (or all) from `since` (Unix ms). */
export async function usageGroups(store: Store, q: URLSearchParams, account: string | undefined, since: number, now = Date.now()): Promise<Record<string, unknown>> {
  const dims = q.has('group_by') ? groupByOf(q.get('group_by')!) : [];
  const tag = q.get('tag') ?? undefined;
  if (tag !== undefined && tag !== OTHER_END_USERS && !TAG.test(tag)) {
    throw new GatewayError('invalid_value', "Invalid value for 'tag': a tag of 1-64 of a-z 0-9 . _ : -.", { param: 'tag' });
  }
  const endUser = q.get('end_user') ?? undefined;
  // The group of end users past the bound may be read by its name.
  if (endUser !== undefined && endUser !== OTHER_END_USERS) checkEndUser(endUser, 'end_user');
  const daily = dims.includes('day');
  const by = dims.filter((d): d is Exclude<GroupDim, 'day'> => d !== 'day') as TotalsDimension[];
  // Totals kept per UTC day only (two of tag, end_user and model) are read over whole days.
  let perDay = daily;
  try {
    perDay ||= planOf({ by, account, ...(tag === undefined ? {} : { tag }), ...(endUser === undefined ? {} : { end_user: endUser }) }).column.daily;
  } catch (err) {
    if (!(err instanceof RangeError)) throw err; // refused below, by the read itself
  }
  const unit = perDay ? DAY_MS : HOUR_MS;
  const start = Math.floor(Math.max(since, 0) / unit) * unit;
  const until = Math.max(start, Math.ceil((now + HOUR_MS + AHEAD_MS) / unit) * unit);
  const base = { account, since: start, until, ...(tag === undefined ? {} : { tag }), ...(endUser === undefined ? {} : { end_user: endUser }) };
  let rows: TotalsRow[];
  let all: TotalsRow[];
  try {
    [rows, all] = await Promise.all([store.usageTotals({ ...base, by, daily }), store.usageTotals({ ...base, by: [], daily })]);
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new GatewayError('unsupported_value', `Unsupported value for 'group_by': ${clip(err.message, 200)}.`, { param: dims.length > 0 ? 'group_by' : tag !== undefined ? 'tag' : 'end_user' });
  }
  const dayText = (d: number | null) => new Date(d ?? 0).toISOString().slice(0, 10);
  const groups: Array<Record<string, unknown>> = rows.map((r) => {
    const g: Record<string, unknown> = {};
    if (daily) g.day = dayText(r.day);
    by.forEach((d, i) => { g[d] = r.values[i] === '' ? null : r.values[i]; });
    return { ...g, ...sumsOf(r) };
  });
  // Key and team leave records without one out of their totals: those form the null group.
  if (by.length === 1 && (by[0] === 'key' || by[0] === 'team')) {
    for (const total of all) {
      const rest = sumsOf(total);
      for (const r of rows) {
        if (r.day !== total.day) continue;
        rest.requests -= r.requests;
        rest.prompt_tokens -= r.prompt_tokens;
        rest.completion_tokens -= r.completion_tokens;
        rest.units -= r.units;
      }
      if (rest.requests > 0) groups.push({ ...(daily ? { day: dayText(total.day) } : {}), [by[0]]: null, ...rest });
    }
  }
  const totals: Sums = { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
  for (const r of all) {
    totals.requests += r.requests;
    totals.prompt_tokens += r.prompt_tokens;
    totals.completion_tokens += r.completion_tokens;
    totals.units += r.units;
  }
  return {
    account: account ?? null, since: new Date(start).toISOString(), until: new Date(until).toISOString(), group_by: dims,
    tag: tag ?? null, end_user: endUser ?? null, groups, totals,
  };
}
