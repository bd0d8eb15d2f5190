// Usage totals in Redis (../usage-totals.ts): written per hour by the record's own script
// (./records.ts), so a record and its totals land together, exactly once (a write repeated with
// the same id finds its mark and adds nothing), and expire with the hour's stream. The hours'
// keys, and how a read knows an hour's totals are whole (else sums it anew), are
// ./totals-hours.ts. A read lists the hours that have records (the index), then reads:
// - a grouped column (an account's keys, a key's models), that group's hash of each hour;
// - any other column, a whole finished UTC day from the day's totals, summed from its 24 hours
//   once and kept in the day's own slot (below), and the other hours one by one.
// An hourly series is one field of each hour. Each read costs the hours and days of its range
// that have records, and the ids of what it reads, never a record.

import type { RedisClient } from './connect.js';
import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow } from '../types.js';
import { createHash } from 'node:crypto';
import { DAY_MS } from '../../utc-day.js';
import { ALL, ALL_COLUMN, COLUMNS, HOUR_MS, RowSums, hourRow, hoursOf, planOf, topRows, type Plan } from '../usage-totals.js';
import { columnKey, sumsOf, type RedisHours } from './totals-hours.js';

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

/** Adds the fields of one hash (an hour's, a day's) that the plan shows. */
function addFields(sums: RowSums, plan: Plan, day: number | null, fields: Iterable<[string, number[]]>): void {
  for (const [id, s] of fields) {
    const values = plan.shown(id);
    if (values !== undefined) sums.add(day, values, s);
  }
}

/**
 * Reads the totals. A finished day's totals (of a column not grouped) are summed from its 24
 * hours once, and kept in the day's own slot:
 *   P{usage:day:D}:m:C      string  the record count of each of the day's hours when summed
 *   P{usage:day:D}:t:C:V    hash    id -> the five sums; V names the counts above
 * They are used only while every hour still counts what the meta says (one script call for a
 * day's 24 counts); a record landing later in a summed hour (a retried write) makes the day be
 * summed again. They are derived, so a record is never counted in them twice or lost: the
 * hours are the truth.
 */
export class RedisTotals {
  readonly #redis: RedisClient & TotalsScripts;
  readonly #hours: RedisHours;
  readonly #hourKey: (hour: number) => string;
  readonly #list: (from: number, to: number) => Promise<number[]>;
  readonly #prefix: string;
  readonly #retentionMs: number;
  /** Days being summed by this instance (a concurrent query waits for the same sum). */
  readonly #building = new Map<string, Promise<void>>();
  /** Days whose hour counts are being read (./#counts). */
  readonly #counting = new Map<number, Promise<string | null>>();

  constructor(redis: RedisClient & TotalsScripts, hours: RedisHours, hourKey: (hour: number) => string, list: (from: number, to: number) => Promise<number[]>, prefix: string, retentionMs: number) {
    this.#redis = redis;
    this.#hours = hours;
    this.#hourKey = hourKey;
    this.#list = list;
    this.#prefix = prefix;
    this.#retentionMs = retentionMs;
  }

  async hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    const { from, to } = hoursOf(since, until);
    const [column, id] = account === undefined ? [ALL_COLUMN, ALL] : ['account', account];
    const hours = Array.from({ length: to - from }, (_, i) => from + i);
    const found = await this.#hours.read(hours, (hk) => columnKey(hk, column, ''), id);
    return found.map((h) => hourRow(h.hour, h.fields.get(id)));
  }

  async top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    const { from, to } = hoursOf(since, until);
    return topRows(await this.read({ by: [by], account, since: from * HOUR_MS, until: to * HOUR_MS }), limit);
  }

  /** A totals read (checked by the caller: checkTotalsQuery). */
  async read(q: TotalsQuery): Promise<TotalsRow[]> {
    const plan = planOf(q);
    const sums = new RowSums();
    const from = q.since / HOUR_MS;
    const to = q.until / HOUR_MS;
    if (to <= from) return [];
    const listed = await this.#list(from, to - 1);
    const dayOf = (h: number): number | null => (q.daily === true ? Math.floor(h / 24) * DAY_MS : null);
    if (plan.column.group > 0) {
      const found = await this.#hours.read(listed, (hk) => columnKey(hk, plan.column.name, plan.group));
      for (const h of found) addFields(sums, plan, dayOf(h.hour), h.fields);
      return sums.rows();
    }
    // Whole finished days from their day totals; the rest hour by hour.
    const today = Math.floor(Date.now() / DAY_MS);
    const days = new Set<number>();
    const hours: number[] = [];
    for (const h of listed) {
      const d = Math.floor(h / 24);
      if (d < today && d * 24 >= from && d * 24 + 24 <= to) days.add(d);
      else hours.push(h);
    }
    const dayList = [...days];
    const counts = await inBatches(dayList, READ_AT_ONCE, (d) => this.#counts(d));
    for (const [i, d] of dayList.entries()) {
      // A day with an hour that could not be made whole is read by its hours.
      if (counts[i] === null) for (let h = d * 24; h < d * 24 + 24; h++) hours.push(h);
    }
    const whole = dayList.filter((_, i) => counts[i] !== null);
    const dayHashes = await inBatches(whole, READ_AT_ONCE, (d) => this.#day(d, plan.column.name, counts[dayList.indexOf(d)]!, plan.exactId));
    for (const [i, d] of whole.entries()) addFields(sums, plan, dayOf(d * 24), dayHashes[i]!);
    const found = await this.#hours.read(hours, (hk) => columnKey(hk, plan.column.name, ''), plan.exactId ?? '');
    for (const h of found) addFields(sums, plan, dayOf(h.hour), h.fields);
    return sums.rows();
  }

  #dayKey(day: number): string { return `${this.#prefix}{usage:day:${day}}`; }
  #meta(day: number, column: string): string { return `${this.#dayKey(day)}:m:${column}`; }
  #hash(day: number, column: string, counts: string): string {
    return `${this.#dayKey(day)}:t:${column}:${createHash('sha256').update(counts).digest('hex').slice(0, 16)}`;
  }

  /**
   * The record count of each hour of `day` (each made whole first); null when an hour could not
   * be. Reads in flight at once (a report's four) share one look.
   */
  #counts(day: number): Promise<string | null> {
    let look = this.#counting.get(day);
    if (look === undefined) {
      look = this.#hours.read(Array.from({ length: 24 }, (_, i) => day * 24 + i))
        .then((found) => (found.some((h) => h.count < 0) ? null : found.map((h) => String(h.count)).join(',')))
        .finally(() => this.#counting.delete(day));
      this.#counting.set(day, look);
    }
    return look;
  }

  /** The day's totals of `column` (or its one id `only`) as of hour counts `counts`: kept ones, or summed now. */
  async #day(day: number, column: string, counts: string, only: string | undefined): Promise<Map<string, number[]>> {
    let meta = await this.#redis.get(this.#meta(day, column));
    if (meta !== counts) {
      await this.#sum(day, column);
      meta = await this.#redis.get(this.#meta(day, column));
    }
    if (meta === null) return new Map();
    const hash = this.#hash(day, column, meta);
    if (only !== undefined) {
      const v = await this.#redis.hget(hash, only);
      return new Map(v === null ? [] : [[only, sumsOf(v)]]);
    }
    return new Map(Object.entries(await this.#redis.hgetall(hash)).map(([id, v]) => [id, sumsOf(v)]));
  }

  /** Sums `day`'s totals of every column that lacks them (in the background after a day ends). */
  async warm(day: number): Promise<void> {
    const counts = await this.#counts(day);
    if (counts === null) return;
    for (const c of COLUMNS) {
      if (c.group === 0 && (await this.#redis.get(this.#meta(day, c.name))) !== counts) await this.#sum(day, c.name);
    }
  }

  /** Sums a finished day's totals of `column` anew (a concurrent query waits for the same sum). */
  #sum(day: number, column: string): Promise<void> {
    const key = `${day}:${column}`;
    let build = this.#building.get(key);
    if (build === undefined) {
      build = this.#sumDay(day, column).finally(() => this.#building.delete(key));
      this.#building.set(key, build);
    }
    return build;
  }

  /** Sums the day's 24 hours of `column` (their counts read first) and keeps the result. */
  async #sumDay(day: number, column: string): Promise<void> {
    const oldMeta = await this.#redis.get(this.#meta(day, column));
    const counts = await this.#counts(day);
    if (counts === null) return;
    const hours = await inBatches(Array.from({ length: 24 }, (_, i) => day * 24 + i), READ_AT_ONCE, (h) => this.#redis.hgetall(columnKey(this.#hourKey(h), column, '')));
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
    for (const [id, s] of sums) args.push(id, s.map((x) => x.toFixed(0)).join(' '));
    const expireAt = (day + 1) * DAY_MS + this.#retentionMs;
    const hash = this.#hash(day, column, counts);
    const old = oldMeta === null ? hash : this.#hash(day, column, oldMeta);
    await this.#redis.tgTotalsDay(this.#meta(day, column), hash, old, String(expireAt), counts, ...args);
  }
}
