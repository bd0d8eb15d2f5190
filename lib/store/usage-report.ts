// GET /admin/usage's report (CONTRACT sections 5, 8 and 15): the records since a moment,
// summed in all and by model, key and team, for one account or all. Since section 21 ("reads
// are bounded") it is read from the totals kept as records are written (./usage-totals.ts),
// four totals reads over the whole hours from `since` on, whatever the history's length. A
// `since` inside an hour (the report is exact to the millisecond) adds the records of that
// hour after it, read page by page: at most one hour's records of the account (of its UTC day
// in the memory stores, whose buckets are days), never the history. A `since` on the hour (a
// date, the start of a month: what the CLI and the console send) reads totals alone.

import type { TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageSums } from './types.js';
import { DAY_MS } from '../utc-day.js';
import { HOUR_MS } from './usage-totals.js';

/** Records timed up to this far past this instance's clock still count (instances' clocks differ a little). */
const AHEAD_MS = DAY_MS;

/** What a store's usage log answers a report from. */
export interface ReportSource {
  totals(q: TotalsQuery): Promise<TotalsRow[]>;
  page(q: UsageQuery): Promise<UsagePage>;
}

const sumsOf = (r: TotalsRow): UsageSums => ({ requests: r.requests, prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, units: r.units });

function addRecord(m: Map<string, UsageSums>, id: string, r: UsageRecord): void {
  let s = m.get(id);
  if (s === undefined) m.set(id, (s = { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 }));
  s.requests += 1;
  s.prompt_tokens += r.prompt_tokens;
  s.completion_tokens += r.completion_tokens;
  s.units += r.units;
}

function sorted(m: Map<string, UsageSums>): Record<string, UsageSums> {
  return Object.fromEntries([...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * The report of the records at or after `since` (Unix ms) that the store shows (from `visible`
 * on: its retention, down to a bucket's start), of `account` or all.
 */
export async function reportOf(src: ReportSource, account: string | undefined, since: number, visible: number, now: number): Promise<UsageReport> {
  if (typeof since !== 'number' || Number.isNaN(since)) throw new TypeError('since must be a number');
  const start = Math.max(since, visible, 0);
  const horizon = (Math.floor(now / HOUR_MS) + 1) * HOUR_MS + AHEAD_MS;
  const total = new Map<string, UsageSums>();
  const byModel = new Map<string, UsageSums>();
  const byKey = new Map<string, UsageSums>();
  const byTeam = new Map<string, UsageSums>();
  if (start < horizon) {
    const firstHour = Math.ceil(start / HOUR_MS) * HOUR_MS;
    const read = (by: TotalsQuery['by']) => src.totals({ by, account, since: firstHour, until: horizon });
    const [all, models, keys, teams] = await Promise.all([read([]), read(['model']), read(['key']), read(['team'])]);
    for (const [rows, into] of [[all, total], [models, byModel], [keys, byKey], [teams, byTeam]] as const) {
      for (const r of rows) into.set(r.values[0] ?? '', sumsOf(r));
    }
    // The part of since's hour after since: its records, a page at a time.
    let cursor: string | undefined;
    while (start < firstHour) {
      const page = await src.page({ account, since: start, until: firstHour, limit: 1000, cursor });
      for (const r of page.records) {
        addRecord(total, '', r);
        addRecord(byModel, r.model, r);
        if (r.key_id !== null) addRecord(byKey, r.key_id, r);
        if (r.team !== null) addRecord(byTeam, r.team, r);
      }
      if (page.next_cursor === null) break;
      cursor = page.next_cursor;
    }
  }
  const t = total.get('') ?? { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
  return { ...t, by_model: sorted(byModel), by_key: sorted(byKey), by_team: sorted(byTeam) };
}
