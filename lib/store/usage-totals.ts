// Usage totals kept as records are written (CONTRACT sections 12 and 21, "reads are bounded"):
// per UTC hour and per UTC day, the five sums of METRICS in "columns". The console's Overview
// (Store.usageHourly, usageTop), GET /admin/usage (./usage-report.ts) and GET /v1/usage
// (Store.usageTotals) read these, never the records. Both stores keep them beside their
// records, for as long as the records (memory: ./totals-book.ts; Redis: hashes in each hour's
// slot, ./redis/totals.ts and ./redis/totals-hours.ts).
//
// A column (COLUMNS) maps an id to its sums: the id is the record's values in the column's
// dimensions (DIMENSIONS), joined by SEP, led by the record's account in a column `within`
// accounts (`key`: ACCOUNT<SEP>KEY). A grouped column keeps its ids per group, the first
// `group` parts of an id: `key@` (an account's keys) is read one account at a time and
// `key+model` (a key's models) one key at a time (Redis: one hash per group and hour), never as
// a whole, so a read within one account costs that account's ids alone. A read (TotalsQuery: the
// dimensions of a row, an account or a key to narrow to) is answered by the one column that
// holds exactly those values (planOf). To total by something new (a request's tags, its end
// user: issue #45), add its line to DIMENSIONS and the columns that answer its reads to
// COLUMNS: a dimension may give a record several values (tags), and the record counts once
// under each.

import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsageRecord } from './types.js';
import { DAY_MS } from '../utc-day.js';

export const HOUR_MS = 3_600_000;
/** The longest range usageHourly and usageTop answer for. */
export const MAX_RANGE_MS = 31 * DAY_MS;
/** The longest range usageTotals answers for: the longest retention (usage.retention_days), and a day. */
export const MAX_TOTALS_RANGE_MS = 36_502 * DAY_MS;

/** The sums kept, in this order: every record counts 1 request; errors are statuses >= 400. */
export const METRICS = ['requests', 'errors', 'prompt_tokens', 'completion_tokens', 'units'] as const;
export type Sums = [number, number, number, number, number];

export function metricsOf(r: UsageRecord): Sums {
  return [1, r.status >= 400 ? 1 : 0, r.prompt_tokens, r.completion_tokens, r.units];
}

/** metricsOf written into `out` (no array per record). */
export function metricsInto(r: UsageRecord, out: Float64Array): Float64Array {
  out[0] = 1;
  out[1] = r.status >= 400 ? 1 : 0;
  out[2] = r.prompt_tokens;
  out[3] = r.completion_tokens;
  out[4] = r.units;
  return out;
}

interface Dimension {
  /** The record's values in this dimension: none (it counts in no id of it), one, or several. */
  values(r: UsageRecord): readonly string[];
  /** Whether a value belongs to one account (a key id, a team id: unique across accounts). */
  owned: boolean;
}

const one = (v: string | null): readonly string[] => (v === null ? [] : [v]);

/**
 * The value a record without tags, or without an end user, counts under in those dimensions
 * (no tag or end user is empty), so that every record counts in each: a read shows it as null.
 */
export const NONE = '';
const NONE_LIST: readonly string[] = [NONE];

/**
 * Cardinality (CONTRACT section 20): per account and UTC hour, the totals keep at most this
 * many distinct values of a bounded dimension by name; a record's value past the bound counts
 * under OTHER instead, so every record still counts once and the sums stay exact. The first
 * values of the hour (in the order records were written) keep their names.
 */
export const BOUNDS: Readonly<Partial<Record<TotalsDimension, number>>> = { tag: 1_000, end_user: 10_000 };
/** The value records past a bound count under (no tag or end user may be it). */
export const OTHER = '(other)';

/** What a bounded value counts as: itself, or OTHER (see BOUNDS); given per record. */
export type BoundValue = (dim: TotalsDimension, value: string) => string;

/** The distinct bounded values of one hour, per dimension and account (the memory store's, and a Redis hour's rebuild). */
export class HourBounds {
  readonly #seen = new Map<string, Set<string>>();

  /** `value` of `account` in `dim`, as the totals count it. */
  value(dim: TotalsDimension, account: string, value: string): string {
    const cap = BOUNDS[dim];
    if (cap === undefined || value === NONE) return value;
    const key = `${dim}${SEP}${account}`;
    let set = this.#seen.get(key);
    if (set === undefined) this.#seen.set(key, (set = new Set()));
    if (set.has(value)) return value;
    if (set.size >= cap) return OTHER;
    set.add(value);
    return value;
  }

  /** The BoundValue of record `r`. */
  of(r: UsageRecord): BoundValue {
    return (dim, value) => this.value(dim, r.account, value);
  }
}

/** Every dimension totals are kept by: one line each. */
export const DIMENSIONS: Readonly<Record<TotalsDimension, Dimension>> = {
  account: { values: (r) => [r.account], owned: false },
  key: { values: (r) => one(r.key_id), owned: true },
  model: { values: (r) => [r.model], owned: false },
  team: { values: (r) => one(r.team), owned: true },
  // A record counts once under each of its tags (CONTRACT section 20).
  tag: { values: (r) => (r.tags.length === 0 ? NONE_LIST : r.tags), owned: false },
  end_user: { values: (r) => [r.end_user ?? NONE], owned: false },
};

export interface ColumnSpec {
  /** Its name where it is stored (a Redis key's part): never renamed, for the totals kept. */
  readonly name: string;
  /** The dimensions of its ids, in order ([]: one id, ALL, for every record). */
  readonly dims: readonly TotalsDimension[];
  /** Ids led by the record's account. */
  readonly within: boolean;
  /** Ids kept per group, their first `group` parts (0: one group); a read names its group. */
  readonly group: number;
  /** In the memory store, kept per UTC day only (read by whole days: GET /v1/usage). */
  readonly daily: boolean;
  /**
   * Kept by the memory store too. False for a column that spares Redis reads only: the memory
   * store reads the same ids from the column of every account's (key for key@), in its process.
   */
  readonly memory: boolean;
}

const column = (name: string, dims: TotalsDimension[], within = false, group = 0, daily = false, memory = true): ColumnSpec =>
  ({ name, dims, within, group, daily, memory });

/** Between the parts of an id (an account and a key id; a key and a model). */
export const SEP = '\u0000';
/** The column holding the totals of all records, under the id ALL. */
export const ALL_COLUMN = '*';
export const ALL = '*';

/**
 * Every column, in a fixed order (Redis writes them in it). Reads of all accounts use the
 * columns not grouped (`key`: every key of the gateway); reads within one account, those grouped
 * by account (`key@`: its keys alone); GET /v1/usage, `key+model` (a key's models, per day).
 */
export const COLUMNS: readonly ColumnSpec[] = [
  column(ALL_COLUMN, []),
  column('account', ['account']),
  column('key', ['key'], true),
  column('model', ['model']),
  column('model@', ['model'], true, 1),
  column('team', ['team'], true),
  column('key@', ['key'], true, 1, false, false),
  column('team@', ['team'], true, 1, false, false),
  column('key+model', ['key', 'model'], true, 2, true),
  // Spend attribution (CONTRACT section 20): by tag and by end user, alone, with the model, and
  // with each other; of all accounts, and of one (@: grouped by account). The pairs are kept per
  // UTC day only: per hour, a fleet with many end users and few requests each would keep nearly
  // an entry per record in each (a bench of 1,000,000 sparse records: 3.7 GB of RSS with them
  // hourly), and a pair is read over days.
  column('tag', ['tag']),
  column('tag@', ['tag'], true, 1),
  column('end_user', ['end_user']),
  column('end_user@', ['end_user'], true, 1),
  column('tag+model', ['tag', 'model'], false, 0, true),
  column('tag+model@', ['tag', 'model'], true, 1, true),
  column('end_user+model', ['end_user', 'model'], false, 0, true),
  column('end_user+model@', ['end_user', 'model'], true, 1, true),
  column('tag+end_user', ['tag', 'end_user'], false, 0, true),
  column('tag+end_user@', ['tag', 'end_user'], true, 1, true),
  // GET /v1/usage?tag= / ?end_user=: a key's models per day, of one tag or end user.
  column('key+tag+model', ['key', 'tag', 'model'], true, 2, true),
  column('key+end_user+model', ['key', 'end_user', 'model'], true, 2, true),
];

export const COLUMN_NAMES: readonly string[] = COLUMNS.map((c) => c.name);

/** Where a record counts: a column, its group ('' when not grouped), the id in it. */
export interface Cell { column: ColumnSpec; group: string; id: string }

/** The combinations of the record's values in `dims` (none when a dimension has no value). */
function combinations(dims: readonly TotalsDimension[], r: UsageRecord, bound: BoundValue | undefined): string[][] {
  let out: string[][] = [[]];
  for (const d of dims) {
    let values = DIMENSIONS[d].values(r);
    if (bound !== undefined && BOUNDS[d] !== undefined) values = [...new Set(values.map((v) => bound(d, v)))];
    if (values.length === 0) return [];
    out = values.length === 1 ? out.map((p) => [...p, values[0]!]) : out.flatMap((p) => values.map((v) => [...p, v]));
  }
  return out;
}

/**
 * The cells record `r` adds to, in the order of COLUMNS (the totals of all records first).
 * `bound`: what its values of bounded dimensions count as (BOUNDS); without it, themselves.
 */
export function cellsOf(r: UsageRecord, bound?: BoundValue): Cell[] {
  const out: Cell[] = [];
  for (const c of COLUMNS) {
    if (c.dims.length === 0) {
      out.push({ column: c, group: '', id: ALL });
      continue;
    }
    for (const values of combinations(c.dims, r, bound)) {
      const parts = c.within ? [r.account, ...values] : values;
      out.push({ column: c, group: parts.slice(0, c.group).join(SEP), id: parts.slice(c.group).join(SEP) });
    }
  }
  return out;
}

/** How a read is answered: the column, the group read, and what a stored id stands for. */
export interface Plan {
  column: ColumnSpec;
  /** The group read ('' for a column not grouped). */
  group: string;
  /** The values of the query's `by` that stored id `id` (of the group) stands for; undefined: not the query's. */
  shown(id: string): string[] | undefined;
  /** The one id read, when the filters name it whole (no `by`): read it alone. */
  exactId: string | undefined;
}

/**
 * The column that answers `q`: one whose id parts are exactly the query's dimensions and its
 * filters (the account part may be left out of a read of owned values: a key id names its
 * account). Of several, the one that reads least. RangeError when no column answers it.
 */
export function planOf(q: Pick<TotalsQuery, 'by' | 'account' | 'key' | 'tag' | 'end_user'>, kept: (c: ColumnSpec) => boolean = () => true): Plan {
  if (q.key !== undefined && q.account === undefined) throw new RangeError('a totals read of a key names its account');
  const filters = new Map<string, string>();
  if (q.account !== undefined) filters.set('account', q.account);
  if (q.key !== undefined) filters.set('key', q.key);
  if (q.tag !== undefined) filters.set('tag', q.tag);
  if (q.end_user !== undefined) filters.set('end_user', q.end_user);
  let best: { plan: Plan; rank: number } | undefined;
  for (const c of COLUMNS) {
    if (!kept(c)) continue;
    const fit = fitOf(c, q.by, filters);
    if (fit !== undefined && (best === undefined || fit.rank < best.rank)) best = fit;
  }
  if (best === undefined) {
    throw new RangeError(`no totals are kept by [${q.by.join(', ')}]${filters.size > 0 ? ` within one ${[...filters.keys()].join(' and ')}` : ''}`);
  }
  return best.plan;
}

function fitOf(c: ColumnSpec, by: readonly TotalsDimension[], filters: Map<string, string>): { plan: Plan; rank: number } | undefined {
  const parts: string[] = c.within ? ['account', ...c.dims] : [...c.dims];
  if (new Set(parts).size !== parts.length) return undefined;
  for (const d of by) if (!parts.includes(d)) return undefined;
  for (const f of filters.keys()) if (!parts.includes(f)) return undefined;
  // A part neither shown nor filtered is summed over: only an account that owned values imply.
  let dropped = false;
  for (const p of parts) {
    if (by.includes(p as TotalsDimension) || filters.has(p)) continue;
    if (p !== 'account' || !c.within || !c.dims.every((d) => DIMENSIONS[d].owned)) return undefined;
    dropped = true;
  }
  let group = '';
  let stored = parts;
  if (c.group > 0) {
    // Read one group: the parts that name it are filters.
    const named = parts.slice(0, c.group);
    if (!named.every((p) => filters.has(p))) return undefined;
    group = named.map((p) => filters.get(p)!).join(SEP);
    stored = parts.slice(c.group);
  }
  const shownAt = by.map((d) => stored.indexOf(d));
  const checks = [...filters].map(([f, v]) => [stored.indexOf(f), v] as const).filter(([i]) => i >= 0);
  const exact = shownAt.length === 0 && checks.length === stored.length;
  const shown = (id: string): string[] | undefined => {
    const values = stored.length === 0 ? (id === ALL ? [] : undefined) : stored.length === 1 ? [id] : id.split(SEP);
    if (values === undefined || values.length !== stored.length) return undefined;
    for (const [i, v] of checks) if (values[i] !== v) return undefined;
    return shownAt.map((i) => values[i]!);
  };
  const exactId = !exact ? undefined : stored.length === 0 ? ALL : stored.map((p) => filters.get(p)!).join(SEP);
  const rank = c.group > 0 ? 0 : exact ? 1 : dropped ? 3 : 2;
  return { plan: { column: c, group, shown, exactId }, rank };
}

/** A row's sums from five stored sums (zeros for none). */
export function totalsRow(day: number | null, values: string[], s: ArrayLike<number> | undefined): TotalsRow {
  return {
    day, values, requests: s?.[0] ?? 0, errors: s?.[1] ?? 0, prompt_tokens: s?.[2] ?? 0, completion_tokens: s?.[3] ?? 0, units: s?.[4] ?? 0,
  };
}

/** Sums per (day, values) as a read adds them up: rows in day, then values order. */
export class RowSums {
  readonly #rows = new Map<string, { day: number | null; values: string[]; sums: number[] }>();

  add(day: number | null, values: string[], s: ArrayLike<number>): void {
    const key = `${day ?? ''}${SEP}${values.join(SEP)}`;
    let row = this.#rows.get(key);
    if (row === undefined) this.#rows.set(key, (row = { day, values, sums: [0, 0, 0, 0, 0] }));
    for (let i = 0; i < 5; i++) row.sums[i]! += s[i]!;
  }

  rows(): TotalsRow[] {
    const out = [...this.#rows.values()].map((r) => totalsRow(r.day, r.values, r.sums));
    return out.sort((a, b) => (a.day ?? 0) - (b.day ?? 0) || compareValues(a.values, b.values));
  }
}

function compareValues(a: string[], b: string[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return 0;
}

/** The hours starting in [since, until): from the first to one past the last, as hour numbers. */
export function hoursOf(since: number, until: number): { from: number; to: number } {
  const from = Math.ceil(since / HOUR_MS);
  return { from, to: Math.max(from, Math.ceil(until / HOUR_MS)) };
}

/** Hours [from, to) as whole UTC days where a day is wholly inside, and the hours left over. */
export function spans(from: number, to: number): { days: number[]; hours: number[] } {
  const days: number[] = [];
  const hours: number[] = [];
  for (let h = from; h < to;) {
    if (h % 24 === 0 && h + 24 <= to) {
      days.push(h / 24);
      h += 24;
    } else {
      hours.push(h++);
    }
  }
  return { days, hours };
}

/** The first `limit` rows of summed (requests, units) per id: units desc, then id asc. */
export function topRows(rows: readonly TotalsRow[], limit: number): TopRow[] {
  const top = rows.map((r) => ({ id: r.values[0]!, requests: r.requests, units: r.units }));
  top.sort((a, b) => b.units - a.units || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return top.slice(0, limit);
}

export function hourRow(hour: number, s: ArrayLike<number> | undefined): HourTotals {
  return {
    hour: hour * HOUR_MS, requests: s?.[0] ?? 0, errors: s?.[1] ?? 0, prompt_tokens: s?.[2] ?? 0,
    completion_tokens: s?.[3] ?? 0, units: s?.[4] ?? 0,
  };
}

/** Refuses a range the stores do not answer (a bug of the caller: the admin API checks first). */
export function checkRange(since: number, until: number): void {
  if (!Number.isSafeInteger(since) || !Number.isSafeInteger(until) || since < 0 || until < since) {
    throw new RangeError('since and until must be Unix ms with since <= until');
  }
  if (until - since > MAX_RANGE_MS) throw new RangeError('a totals range spans at most 31 days');
}

export function checkTop(by: unknown, limit: unknown): void {
  if (typeof by !== 'string' || !Object.hasOwn(DIMENSIONS, by)) throw new RangeError(`by must be one of ${Object.keys(DIMENSIONS).join(', ')}`);
  if (!Number.isSafeInteger(limit) || (limit as number) < 1) throw new RangeError('limit must be a positive integer');
}

/** Refuses a totals read the stores do not answer; returns the plan that does. */
export function checkTotalsQuery(q: TotalsQuery): Plan {
  const unit = q.daily === true ? DAY_MS : HOUR_MS;
  if (!Number.isSafeInteger(q.since) || !Number.isSafeInteger(q.until) || q.since < 0 || q.until < q.since || q.since % unit !== 0 || q.until % unit !== 0) {
    throw new RangeError(`since and until must be Unix ms of whole ${q.daily === true ? 'UTC days' : 'hours'} with since <= until`);
  }
  if (q.until - q.since > MAX_TOTALS_RANGE_MS) throw new RangeError('a totals read spans at most 36502 days');
  if (!Array.isArray(q.by) || q.by.some((d) => !Object.hasOwn(DIMENSIONS, d))) throw new RangeError(`by must list dimensions of ${Object.keys(DIMENSIONS).join(', ')}`);
  const plan = planOf(q);
  if (plan.column.daily && q.daily !== true && (q.since % DAY_MS !== 0 || q.until % DAY_MS !== 0)) {
    throw new RangeError(`totals by [${q.by.join(', ')}] of a key are kept per UTC day: read whole days`);
  }
  return plan;
}
