// Usage totals in Redis (../usage-totals.ts): hashes in each hour's slot, written by the
// record's own script (./records.ts), so a record and its totals land together, exactly once
// (a write repeated with the same id finds its mark and adds nothing), and expire with the
// hour's stream. Keys (P{usage:H} = the hour's stream):
//   P{usage:H}:t:C   hash   column C (COLUMNS): id -> "requests errors prompt_tokens
//                           completion_tokens units" (one field per id: a fifth of the memory
//                           of a hash per sum)
// A read sends its commands at once (they pipeline on the connection): an hourly series is
// one HGET per hour, a top one HGETALL of the column per hour.

import type { RedisClient } from './connect.js';
import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from '../types.js';
import { ALL, ALL_COLUMN, COLUMN_NAMES, columnFor, columnsOf, hourRow, hoursOf, metricsOf, topRows } from '../usage-totals.js';

export const COLUMNS = COLUMN_NAMES;
export const TOTALS_KEYS = COLUMNS.length;

function totalsKey(hourKey: string, column: string): string {
  return `${hourKey}:t:${column}`;
}

/** The totals hashes of the hour whose stream is `hourKey`, in the script's order. */
export function totalsKeys(hourKey: string): string[] {
  return COLUMNS.map((c) => totalsKey(hourKey, c));
}

/** The script's totals arguments of `r`: its metrics, then its id in each column ('' for none). */
export function totalsArgs(r: UsageRecord): string[] {
  const ids = new Map(columnsOf(r));
  return [...metricsOf(r).map(String), ...COLUMNS.map((c) => ids.get(c) ?? '')];
}

/** A stored value's five sums (zeros for none or an unreadable one). */
function sumsOf(v: string | null | undefined): number[] {
  const parts = v == null ? [] : v.split(' ').map(Number);
  return parts.length === 5 && parts.every(Number.isSafeInteger) ? parts : [0, 0, 0, 0, 0];
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
    const values = await Promise.all(hours.map((h) => this.#redis.hget(totalsKey(this.#hourKey(h), column), id)));
    return hours.map((h, i) => hourRow(h, sumsOf(values[i])));
  }

  async top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    const { from, to } = hoursOf(since, until);
    const { column, shown } = columnFor(by, account);
    const hours = Array.from({ length: to - from }, (_, i) => from + i);
    const read = await Promise.all(hours.map((h) => this.#redis.hgetall(totalsKey(this.#hourKey(h), column))));
    const sums = new Map<string, { requests: number; units: number }>();
    for (const hash of read) {
      for (const [id, v] of Object.entries(hash)) {
        const name = shown(id);
        if (name === undefined) continue;
        const [requests, , , , units] = sumsOf(v);
        let s = sums.get(name);
        if (s === undefined) sums.set(name, (s = { requests: 0, units: 0 }));
        s.requests += requests!;
        s.units += units!;
      }
    }
    return topRows(sums, limit);
  }
}
