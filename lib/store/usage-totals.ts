// Usage totals kept as records are written (CONTRACT section 12, "fast on a big store"): per UTC
// hour and per UTC day, of all records and per account, key and model, the five sums of
// METRICS. The operator console's Overview reads these (Store.usageHourly, Store.usageTop),
// never the records. Both stores keep them beside their records, for as long as the records
// (the memory store: ./totals-book.ts; Redis: hashes in each hour's slot, ./redis/totals.ts).
//
// Totals are kept in "columns": a column maps an id to its five sums. Each dimension gives one
// or two columns (columnsOf): `account` its own; a dimension owned by an account (a key
// belongs to one account) one column whose ids are `ACCOUNT<SEP>ID`; any other (a model is
// used by many accounts) two, `model` (plain ids, for the whole store) and `model@` (ids
// within their account, for a top of one account). A new dimension (a team) is one more line
// in DIMENSIONS and its name in TotalsDimension (./types.ts).

import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from './types.js';
import { DAY_MS } from '../utc-day.js';

export const HOUR_MS = 3_600_000;
/** The longest range usageHourly and usageTop answer for. */
export const MAX_RANGE_MS = 31 * DAY_MS;

/** The sums kept, in this order: every record counts 1 request; errors are statuses >= 400. */
export const METRICS = ['requests', 'errors', 'prompt_tokens', 'completion_tokens', 'units'] as const;
export type Sums = [number, number, number, number, number];

export function metricsOf(r: UsageRecord): Sums {
  return [1, r.status >= 400 ? 1 : 0, r.prompt_tokens, r.completion_tokens, r.units];
}

interface Dimension {
  /** The record's id in this dimension; null: the record counts in none of its ids. */
  id(r: UsageRecord): string | null;
  /** Whether an id belongs to one account (kept only within its account). */
  owned: boolean;
}

/** Every dimension totals are kept by: one line each. */
export const DIMENSIONS: Readonly<Record<TotalsDimension, Dimension>> = {
  account: { id: (r) => r.account, owned: false },
  key: { id: (r) => r.key_id, owned: true },
  model: { id: (r) => r.model, owned: false },
};

/** Between an account and an id in a column of ids within accounts. */
export const SEP = '\u0000';
/** The column holding the totals of all records, under the id ALL. */
export const ALL_COLUMN = '*';
export const ALL = '*';

/** Every column, in a fixed order: the totals of all records first. */
export const COLUMN_NAMES: readonly string[] = [ALL_COLUMN, ...(Object.entries(DIMENSIONS) as Array<[TotalsDimension, Dimension]>)
  .flatMap(([by, d]) => (by === 'account' || d.owned ? [by] : [by, `${by}@`]))];

/** The (column, id) pairs record `r` adds to, the totals of all records first. */
export function columnsOf(r: UsageRecord): Array<[string, string]> {
  const out: Array<[string, string]> = [[ALL_COLUMN, ALL]];
  for (const [by, d] of Object.entries(DIMENSIONS) as Array<[TotalsDimension, Dimension]>) {
    const id = d.id(r);
    if (id === null) continue;
    if (by === 'account') out.push([by, id]);
    else if (d.owned) out.push([by, `${r.account}${SEP}${id}`]);
    else out.push([by, id], [`${by}@`, `${r.account}${SEP}${id}`]);
  }
  return out;
}

/**
 * Where a top of `by` (within `account`, when given) reads: the column, and for a stored id the
 * id shown (undefined: not one of the top's).
 */
export function columnFor(by: TotalsDimension, account?: string): { column: string; shown(id: string): string | undefined } {
  if (by === 'account') return { column: by, shown: (id) => (account === undefined || id === account ? id : undefined) };
  const within = (id: string): string | undefined => {
    const i = id.indexOf(SEP);
    if (i < 0) return undefined;
    return account === undefined || id.slice(0, i) === account ? id.slice(i + 1) : undefined;
  };
  if (DIMENSIONS[by].owned) return { column: by, shown: within };
  return account === undefined ? { column: by, shown: (id) => id } : { column: `${by}@`, shown: within };
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
export function topRows(sums: Map<string, { requests: number; units: number }>, limit: number): TopRow[] {
  const rows = [...sums].map(([id, s]) => ({ id, requests: s.requests, units: s.units }));
  rows.sort((a, b) => b.units - a.units || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return rows.slice(0, limit);
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
