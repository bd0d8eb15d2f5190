// Usage totals in Redis (../usage-totals.ts): hashes in each hour's slot, written by the
// record's own script (./records.ts), so a record and its totals land together, exactly once
// (a write repeated with the same id finds its mark and adds nothing), and expire with the
// hour's stream. Keys (P{usage:H} = the hour's stream):
//   P{usage:H}:t:C:M   hash   column C (COLUMNS), metric M (METRIC_NAMES): id -> sum
// A read sends its commands at once (they pipeline on the connection): an hourly series of
// 31 days is 744 x 5 HGETs, a top reads two hashes (requests, units) of one column per hour.

import type { RedisClient } from './connect.js';
import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from '../types.js';
import { ALL, ALL_COLUMN, COLUMN_NAMES, METRICS, columnFor, columnsOf, hourRow, hoursOf, metricsOf, topRows } from '../usage-totals.js';

export const COLUMNS = COLUMN_NAMES;
/** METRICS as stored: requests, errors, prompt_tokens, completion_tokens, units. */
export const METRIC_NAMES = ['r', 'e', 'p', 'c', 'u'] as const;
if (METRIC_NAMES.length !== METRICS.length) throw new Error('a metric without a stored name');
export const TOTALS_KEYS = COLUMNS.length * METRIC_NAMES.length;

function totalsKey(hourKey: string, column: string, metric: string): string {
  return `${hourKey}:t:${column}:${metric}`;
}

/** The totals hashes of the hour whose stream is `hourKey`, in the script's order. */
export function totalsKeys(hourKey: string): string[] {
  return COLUMNS.flatMap((c) => METRIC_NAMES.map((m) => totalsKey(hourKey, c, m)));
}

/** The script's totals arguments of `r`: its metrics, then its id in each column ('' for none). */
export function totalsArgs(r: UsageRecord): string[] {
  const ids = new Map(columnsOf(r));
  return [...metricsOf(r).map(String), ...COLUMNS.map((c) => ids.get(c) ?? '')];
}

export class RedisTotals {
  readonly #redis: RedisClient;
  readonly #hourKey: (hour: number) => string;

  constructor(redis: RedisClient, hourKey: (hour: number) => string) {
    this.#redis = redis;
    this.#hourKey = hourKey;
  }

  async hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    const { from, to } = hoursOf(since, until);
    const [column, id] = account === undefined ? [ALL_COLUMN, ALL] : ['account', account];
    const hours = Array.from({ length: to - from }, (_, i) => from + i);
    const sums = await Promise.all(hours.map((h) => Promise.all(
      METRIC_NAMES.map((m) => this.#redis.hget(totalsKey(this.#hourKey(h), column, m), id)),
    )));
    return hours.map((h, i) => hourRow(h, sums[i]!.map((v) => (v === null ? 0 : Number(v)))));
  }

  async top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    const { from, to } = hoursOf(since, until);
    const { column, shown } = columnFor(by, account);
    const hours = Array.from({ length: to - from }, (_, i) => from + i);
    const read = await Promise.all(hours.map((h) => Promise.all([
      this.#redis.hgetall(totalsKey(this.#hourKey(h), column, 'r')),
      this.#redis.hgetall(totalsKey(this.#hourKey(h), column, 'u')),
    ])));
    const sums = new Map<string, { requests: number; units: number }>();
    const at = (id: string): { requests: number; units: number } | undefined => {
      const name = shown(id);
      if (name === undefined) return undefined;
      let s = sums.get(name);
      if (s === undefined) sums.set(name, (s = { requests: 0, units: 0 }));
      return s;
    };
    for (const [requests, units] of read) {
      for (const [id, v] of Object.entries(requests)) { const s = at(id); if (s !== undefined) s.requests += Number(v); }
      for (const [id, v] of Object.entries(units)) { const s = at(id); if (s !== undefined) s.units += Number(v); }
    }
    return topRows(sums, limit);
  }
}
