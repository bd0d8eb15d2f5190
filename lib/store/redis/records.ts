// Usage records in Redis (the layout of ../usage-records.ts, in hourly streams).
//
// Keys (P = the store's prefix; H = hours since the epoch, UTC, of the records' time):
//   P{usage:H}       stream  one entry per record, field "r" = the record's JSON; entry ids are
//                            Redis's own (XADD *), so they only grow within a stream
//   P{usage:index}   zset    H scored by H: the hours that have a stream
//   P{usage:H}:t:C   hash    the hour's totals (../usage-totals.ts) of column C (*, account, key,
//                            model, model@): field = the id, value = its five sums; written by
//                            the record's own script, so a record is counted exactly when it
//                            is appended (./totals.ts)
//
// Trimmed by time only: a stream expires (PEXPIREAT) at the end of its hour plus the retention,
// so no record goes before `retention_days` after its time, and nothing is ever trimmed by
// length. Each hour has its own hash tag, so on a Redis Cluster the hours spread over the
// nodes instead of one ever-growing key sitting on one; every command touches one key.
// A record is one script on its hour's key (XADD, PEXPIREAT): one command per request. It
// first sets a marker of the write's id beside the stream (P{usage:H}:w:<id>, same hash tag,
// WRITE_MARK_MS): a write repeated after a timeout or a lost connection, when the first had
// landed unseen, finds it and appends nothing (the marker costs a small key per record for
// those minutes: about 100 bytes, some 30 MB at 1,000 requests a second). The
// index is written before an hour's first record (once per hour and instance), so a reader
// listing the index never misses an hour that has records, and again whenever a record finds
// its stream new (a Redis restarted empty); hours past retention are removed from it as new
// hours begin.

import { randomUUID } from 'node:crypto';
import type { RedisClient } from './connect.js';
export { WRITE_MARK_MS } from '../usage-records.js';
import { WRITE_MARK_MS, pageOf, readRecord, reportOf, retentionMs, validateUsageRecord, type Buckets, type Entry } from '../usage-records.js';
import { COLUMNS, RedisTotals, TOTALS_KEYS, totalsArgs, totalsKeys } from './totals.js';
import { METRICS } from '../usage-totals.js';
import type { HourTotals, TopRow, TotalsDimension, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';

export const HOUR_MS = 3_600_000;

/** The script of a record: registered by RedisStore with defineCommand. */
export interface UsageScripts {
  /** Keys: the stream, the write's mark, then totalsKeys(); args: see the script. */
  tgUsageAdd(...args: string[]): Promise<unknown>;
}


export const USAGE_SCRIPTS: Record<keyof UsageScripts, { keys: number; lua: string }> = {
  // One slot, one round trip: mark the write (2 when it was marked: written before), append the
  // record, (re)set the stream's expiry; 1 when this record created the stream.
  // Then, the totals: for each column c (KEYS[2 + c]), the record's id in it (ARGV[3 + #metrics
  // + c]; '' adds nothing) gets the record's metrics (ARGV[4 ..]) added to its sums, kept as
  // one value "requests errors prompt completion units" (exact to 2^53); a hash gets the
  // stream's expiry when it gains a field (so at least when it is created).
  tgUsageAdd: { keys: 2 + TOTALS_KEYS, lua: `
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then return 2 end
redis.call('XADD', KEYS[1], '*', 'r', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
local nm = ${METRICS.length}
local add = {}
for m = 1, nm do add[m] = tonumber(ARGV[3 + m]) end
for c = 1, ${COLUMNS.length} do
  local id = ARGV[3 + nm + c]
  if id ~= '' then
    local key = KEYS[2 + c]
    local old = redis.call('HGET', key, id)
    local sums = {}
    local m = 0
    if old then
      for v in string.gmatch(old, '%d+') do m = m + 1; sums[m] = string.format('%.0f', tonumber(v) + add[m]) end
    else
      for i = 1, nm do sums[i] = string.format('%.0f', add[i]) end
    end
    redis.call('HSET', key, id, table.concat(sums, ' '))
    if not old then redis.call('PEXPIREAT', key, ARGV[2]) end
  end
end
if redis.call('XLEN', KEYS[1]) == 1 then return 1 end
return 0` },
};

export class RedisUsage implements Buckets {
  readonly bucketMs = HOUR_MS;
  readonly #redis: RedisClient & UsageScripts;
  readonly #prefix: string;
  readonly #index: string;
  readonly #retentionMs: number;
  /** Hours this instance has put in the index. */
  readonly #indexed = new Set<number>();
  readonly #totals: RedisTotals;

  constructor(redis: RedisClient & UsageScripts, prefix: string, retentionDays?: number) {
    this.#redis = redis;
    this.#prefix = prefix;
    this.#index = `${prefix}{usage:index}`;
    this.#retentionMs = retentionMs(retentionDays);
    this.#totals = new RedisTotals(redis, (hour) => this.#key(hour));
  }

  hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    return this.#totals.hourly(since, until, account);
  }

  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    return this.#totals.top(by, since, until, limit, account);
  }

  #key(hour: number): string { return `${this.#prefix}{usage:${hour}}`; }

  /** `writeId`: see Store.recordUsage; a write without one is given its own. */
  async record(r: UsageRecord, writeId: string = randomUUID()): Promise<void> {
    validateUsageRecord(r);
    const hour = Math.floor(r.at / HOUR_MS);
    const expireAt = (hour + 1) * HOUR_MS + this.#retentionMs;
    const now = Date.now();
    if (expireAt <= now) return; // past retention already: it would be gone at once
    if (!this.#indexed.has(hour)) {
      // The first record of an hour (for this instance): the index first, so a reader never
      // lists the hours without one that has records; and the hours past retention out of it.
      await this.#redis.zadd(this.#index, hour, String(hour));
      this.#indexed.add(hour);
      const oldest = Math.floor((now - this.#retentionMs) / HOUR_MS) - 1;
      await this.#redis.zremrangebyscore(this.#index, '-inf', oldest);
      for (const h of this.#indexed) if (h <= oldest) this.#indexed.delete(h);
    }
    const key = this.#key(hour);
    const created = await this.#redis.tgUsageAdd(
      key, `${key}:w:${writeId}`, ...totalsKeys(key), JSON.stringify(r), String(expireAt), String(WRITE_MARK_MS), ...totalsArgs(r),
    );
    // A stream this instance thought indexed was created anew (Redis restarted empty): index it.
    if (created === 1) await this.#redis.zadd(this.#index, hour, String(hour));
  }

  async list(from: number, to: number): Promise<number[]> {
    const hours = await this.#redis.zrangebyscore(this.#index, from, to >= Number.MAX_SAFE_INTEGER ? '+inf' : to);
    return hours.map(Number).filter(Number.isSafeInteger).sort((a, b) => a - b);
  }

  async read(bucket: number, pos: string | undefined, max: number): Promise<{ entries: Entry[]; done: boolean }> {
    // A cursor is the client's to send back: a position past the largest stream id has nothing
    // after it (Redis would refuse it as an id, which is no store fault).
    if (pos !== undefined && !beforeLastId(pos)) return { entries: [], done: true };
    const page = await this.#redis.xrange(this.#key(bucket), pos === undefined ? '-' : `(${pos}`, '+', 'COUNT', max);
    const entries: Entry[] = page.map(([id, fields]) => ({ record: recordOf(fields), pos: id }));
    return { entries, done: page.length < max };
  }

  #cutoff(): number { return Date.now() - this.#retentionMs; }

  async report(account: string | undefined, since: number): Promise<UsageReport> {
    if (typeof since !== 'number' || Number.isNaN(since)) throw new TypeError('since must be a number');
    return reportOf(this, account, since, this.#cutoff());
  }

  page(q: UsageQuery): Promise<UsagePage> {
    return pageOf(this, q, this.#cutoff());
  }
}

const MAX_ID_PART = 2n ** 64n - 1n;

/** Whether `pos` ('ms' or 'ms-seq') is a stream id with ids after it. */
function beforeLastId(pos: string): boolean {
  const [ms, seq] = pos.split('-');
  const m = BigInt(ms!);
  const q = seq === undefined ? 0n : BigInt(seq);
  return m < MAX_ID_PART ? q <= MAX_ID_PART : m === MAX_ID_PART && q < MAX_ID_PART;
}

function recordOf(fields: string[]): UsageRecord | undefined {
  const i = fields.indexOf('r');
  const text = i >= 0 && i % 2 === 0 ? fields[i + 1] : undefined;
  if (text === undefined) return undefined;
  try {
    return readRecord(JSON.parse(text));
  } catch {
    return undefined;
  }
}
