// Usage totals in Redis (../usage-totals.ts): hashes in each hour's slot, written by the
// record's own script (./records.ts), so a record and its totals land together, exactly once
// (a write repeated with the same id finds its mark and adds nothing), and expire with the
// hour's stream. Keys (P{usage:H} = the hour's stream):
//   P{usage:H}:t:C   hash   column C (COLUMNS): id -> "requests errors prompt_tokens
//                           completion_tokens units" (one field per id: a fifth of the memory
//                           of a hash per sum)
// A read sends its commands at once (they pipeline on the connection): an hourly series is
// one HGET per hour; a top reads one hash per whole finished day in its range (derived from
// the hours: RedisTotals below) and one per other hour.

import type { RedisClient } from './connect.js';
import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from '../types.js';
import { createHash } from 'node:crypto';
import { DAY_MS } from '../../utc-day.js';
import { ALL, ALL_COLUMN, COLUMN_NAMES, columnFor, columnsOf, hourRow, hoursOf, metricsOf, spans, topRows } from '../usage-totals.js';

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

/** The script that writes a day's totals of one column (TOTALS_SCRIPTS). */
export interface TotalsScripts {
  tgTotalsDay(meta: string, hash: string, old: string, expireAt: string, counts: string, ...fieldsAndValues: string[]): Promise<unknown>;
}

export const TOTALS_SCRIPTS: Record<keyof TotalsScripts, { keys: number; lua: string }> = {
  // A day's totals of one column, summed from its hours: the fields into the hash of this build
  // (KEYS[2], named by the hours' counts it summed), then the meta (KEYS[1]) naming them, then
  // the hash of the build the meta named before (KEYS[3]) deleted, as its one access.
  tgTotalsDay: { keys: 3, lua: `
local n = #ARGV
local i = 3
while i <= n do
  local last = math.min(n, i + 999)
  redis.call('HSET', KEYS[2], unpack(ARGV, i, last))
  i = last + 1
end
if n >= 3 then redis.call('PEXPIREAT', KEYS[2], ARGV[1]) end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[1])
if KEYS[3] ~= KEYS[2] then redis.call('DEL', KEYS[3]) end
return 1` },
};

/** Big hashes read at once (each answer must come within the command timeout). */
const READ_AT_ONCE = 8;

async function inBatches<T, R>(items: T[], n: number, f: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += n) out.push(...(await Promise.all(items.slice(i, i + n).map(f))));
  return out;
}

/**
 * Reads the hour totals, and the day totals derived from them. A day's totals (of a column) are
 * summed from its 24 hours once the day has ended, and kept in the day's own slot:
 *   P{usage:day:D}:m:C      string  the requests of each of the day's hours when summed
 *   P{usage:day:D}:t:C:V    hash    id -> the five sums; V names the counts above
 * They are used only while every hour still counts what the meta says (one HGET per hour); a
 * record landing later in a summed hour (a retried write) makes the day be summed again. They
 * are derived, so a record is never counted in them twice or lost: the hours are the truth.
 */
export class RedisTotals {
  readonly #redis: RedisClient & TotalsScripts;
  readonly #hourKey: (hour: number) => string;
  readonly #prefix: string;
  readonly #retentionMs: number;
  /** Days being summed by this instance (a concurrent query waits for the same sum). */
  readonly #building = new Map<string, Promise<void>>();

  constructor(redis: RedisClient & TotalsScripts, hourKey: (hour: number) => string, prefix: string, retentionMs: number) {
    this.#redis = redis;
    this.#hourKey = hourKey;
    this.#prefix = prefix;
    this.#retentionMs = retentionMs;
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
    const { days, hours } = spans(from, to);
    const today = Math.floor(Date.now() / DAY_MS);
    // A day not yet over is read by its hours.
    for (const d of days.filter((d) => d >= today)) for (let h = d * 24; h < d * 24 + 24; h++) hours.push(h);
    const finished = days.filter((d) => d < today);
    // Which kept days still hold, all asked at once; the others are summed one after another.
    const metas = await Promise.all(finished.map((d) => Promise.all([this.#redis.get(this.#meta(d, column)), this.#counts(d)])));
    const kept = finished.filter((_, i) => metas[i]![0] === metas[i]![1]);
    for (const [i, d] of finished.entries()) if (metas[i]![0] !== metas[i]![1]) await this.#sum(d, column, metas[i]![0]);
    const hashes = [
      ...(await inBatches(kept, READ_AT_ONCE, (d) => this.#redis.hgetall(this.#hash(d, column, metas[finished.indexOf(d)]![1])))),
      ...(await inBatches(finished.filter((d) => !kept.includes(d)), READ_AT_ONCE, (d) => this.#dayFromMeta(d, column))),
      ...(await inBatches(hours, READ_AT_ONCE * 3, (h) => this.#redis.hgetall(totalsKey(this.#hourKey(h), column)))),
    ];
    const sums = new Map<string, { requests: number; units: number }>();
    for (const hash of hashes) {
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

  #dayKey(day: number): string { return `${this.#prefix}{usage:day:${day}}`; }
  #meta(day: number, column: string): string { return `${this.#dayKey(day)}:m:${column}`; }
  #hash(day: number, column: string, counts: string): string {
    return `${this.#dayKey(day)}:t:${column}:${createHash('sha256').update(counts).digest('hex').slice(0, 16)}`;
  }

  /** The requests of each hour of `day`, as the meta records them. */
  async #counts(day: number): Promise<string> {
    const all = await Promise.all(Array.from({ length: 24 }, (_, i) => this.#redis.hget(totalsKey(this.#hourKey(day * 24 + i), ALL_COLUMN), ALL)));
    return all.map((v) => String(sumsOf(v)[0])).join(',');
  }

  /** Sums `day`'s totals of every column that lacks them (in the background after a day ends). */
  async warm(day: number): Promise<void> {
    for (const column of COLUMNS) {
      const [meta, counts] = await Promise.all([this.#redis.get(this.#meta(day, column)), this.#counts(day)]);
      if (meta !== counts) await this.#sum(day, column, meta);
    }
  }

  /** Sums a finished day's totals of `column` anew (a concurrent query waits for the same sum). */
  #sum(day: number, column: string, meta: string | null): Promise<void> {
    const key = `${day}:${column}`;
    let build = this.#building.get(key);
    if (build === undefined) {
      build = this.#sumDay(day, column, meta).finally(() => this.#building.delete(key));
      this.#building.set(key, build);
    }
    return build;
  }

  async #dayFromMeta(day: number, column: string): Promise<Record<string, string>> {
    const meta = await this.#redis.get(this.#meta(day, column));
    return meta === null ? {} : this.#redis.hgetall(this.#hash(day, column, meta));
  }

  /** Sums the day's 24 hours of `column` (their counts read first) and keeps the result. */
  async #sumDay(day: number, column: string, oldMeta: string | null): Promise<void> {
    const counts = await this.#counts(day);
    const hours = await inBatches(Array.from({ length: 24 }, (_, i) => day * 24 + i), READ_AT_ONCE, (h) => this.#redis.hgetall(totalsKey(this.#hourKey(h), column)));
    const sums = new Map<string, number[]>();
    for (const hash of hours) {
      for (const [id, v] of Object.entries(hash)) {
        const add = sumsOf(v);
        const s = sums.get(id);
        if (s === undefined) sums.set(id, add);
        else for (let i = 0; i < 5; i++) s[i]! += add[i]!;
      }
    }
    const args: string[] = [];
    for (const [id, s] of sums) args.push(id, s.join(' '));
    const expireAt = (day + 1) * DAY_MS + this.#retentionMs;
    const hash = this.#hash(day, column, counts);
    const old = oldMeta === null ? hash : this.#hash(day, column, oldMeta);
    await this.#redis.tgTotalsDay(this.#meta(day, column), hash, old, String(expireAt), counts, ...args);
  }
}
