// Usage records in Redis (the layout of ../usage-records.ts, in hourly streams).
//
// Keys (P = the store's prefix; H = hours since the epoch, UTC, of the records' time):
//   P{usage:H}       stream  one entry per record, field "r" = the record's JSON; entry ids are
//                            Redis's own (XADD *), so they only grow within a stream
//   P{usage:index}   zset    H scored by H: the hours that have a stream
//   P{usage:H}:t:...         the hour's totals (../usage-totals.ts; the keys: ./totals-hours.ts),
//                            written by the record's own script, so a record is counted
//                            exactly when it is appended
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
import { ReadCount, WRITE_MARK_MS, pageOf, readRecord, retentionMs, validateUsageRecord, visibleFrom, type Buckets, type Entry, type Selection, type UsageFilter } from '../usage-records.js';
import { reportOf } from '../usage-report.js';
import { RedisTotals, type TotalsScripts } from './totals.js';
import { RedisHours, TOTALS_KEYS, columnKey, counterKey, totalsArgs, totalsKeys, type HourScripts } from './totals-hours.js';
import { METRICS, OTHER } from '../usage-totals.js';
import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';

export const HOUR_MS = 3_600_000;

/** The script of a record: registered by RedisStore with defineCommand. */
export interface UsageScripts extends TotalsScripts, HourScripts {
  /** Keys: the stream, the write's mark, then totalsKeys(); args: see the script. */
  tgUsageAdd(...args: string[]): Promise<unknown>;
  /** Keys: the stream; args: start, count, needles. See the script. */
  tgUsageSelect(...args: string[]): Promise<unknown>;
}

export const USAGE_SCRIPTS: Record<Exclude<keyof UsageScripts, keyof TotalsScripts | keyof HourScripts>, { keys: number; lua: string }> = {
  // One slot, one round trip: mark the write (2 when it was marked: written before), append the
  // record, (re)set the stream's expiry; 1 when this record created the stream.
  // Then, the totals: the hour's counter (KEYS[3]) counts the record, and for each (column c,
  // id) pair of ARGV after the metrics, column c's hash (KEYS[3 + c]) gets the record's metrics
  // (ARGV[4 ..]) added to the id's sums, kept as one value "requests errors prompt completion
  // units" (exact to 2^53); a key gets the stream's expiry when it is created. A bounded value
  // (a tag, an end user: totalsArgs) stands in ids as \\u0001N\\u0001 and is put in first: itself
  // when its hour's set (KEYS after the columns') holds it or has room, else OTHER.
  tgUsageAdd: { keys: 2 + TOTALS_KEYS, lua: `
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then return 2 end
redis.call('XADD', KEYS[1], '*', 'r', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
if redis.call('INCR', KEYS[3]) == 1 then redis.call('PEXPIREAT', KEYS[3], ARGV[2]) end
local nm = ${METRICS.length}
local add = {}
for m = 1, nm do add[m] = tonumber(ARGV[3 + m]) end
local nb = tonumber(ARGV[4 + nm])
local vals = {}
local q = 5 + nm
for b = 1, nb do
  local set = KEYS[2 + tonumber(ARGV[q])]
  local v = ARGV[q + 1]
  if redis.call('SISMEMBER', set, v) == 1 then vals[b] = v
  elseif redis.call('SCARD', set) < tonumber(ARGV[q + 2]) then
    if redis.call('SADD', set, v) == 1 and redis.call('SCARD', set) == 1 then redis.call('PEXPIREAT', set, ARGV[2]) end
    vals[b] = v
  else vals[b] = '${OTHER}' end
  q = q + 3
end
local done = {}
for p = q, #ARGV - 1, 2 do
  local id = ARGV[p + 1]
  local fresh = true
  if nb > 0 then
    id = string.gsub(id, '\\1(%d+)\\1', function(i) return vals[tonumber(i)] end)
    -- Two values past the bound are one OTHER: the record counts once in it.
    local cell = ARGV[p] .. '|' .. id
    fresh = not done[cell]
    done[cell] = true
  end
  if fresh then
    local key = KEYS[3 + tonumber(ARGV[p])]
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
  // A filtered look at up to ARGV[2] entries of one stream from ARGV[1] ('-' or '(ID'): the
  // entries whose JSON holds every needle (ARGV[3..]: '"account":"A"' and the like, the exact
  // text JSON.stringify writes; a needle cannot match inside a string value, whose quotes are
  // escaped), as {last id looked at ('' for none), 1 when the stream ended, the entries looked
  // at, id, json, ...}. Only the matches cross the network; the caller checks them again.
  tgUsageSelect: { keys: 1, lua: `
local count = tonumber(ARGV[2])
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', count)
local n = #entries
local out = {'', 0, n}
if n < count then out[2] = 1 end
if n > 0 then out[1] = entries[n][1] end
for i = 1, n do
  local fields = entries[i][2]
  local json = nil
  for j = 1, #fields - 1, 2 do if fields[j] == 'r' then json = fields[j + 1] end end
  if json then
    local all = true
    for k = 3, #ARGV do
      if not string.find(json, ARGV[k], 1, true) then all = false; break end
    end
    if all then out[#out + 1] = entries[i][1]; out[#out + 1] = json end
  end
end
return out` },
};

/** Stream entries a select script looks at per call. */
const SELECT_SCAN = 2000;

export class RedisUsage implements Buckets {
  readonly bucketMs = HOUR_MS;
  readonly #redis: RedisClient & UsageScripts;
  readonly #prefix: string;
  readonly #index: string;
  readonly #retentionMs: number;
  /** Hours this instance has put in the index. */
  readonly #indexed = new Set<number>();
  readonly #hours: RedisHours;
  readonly #totals: RedisTotals;
  readonly reads = new ReadCount();
  #wholeStarted = false;

  /** `hoursPerCall`: hours a totals read asks for in one script call (1 on a Cluster: each hour is its own slot). */
  constructor(redis: RedisClient & UsageScripts, prefix: string, retentionDays?: number, hoursPerCall = 24) {
    this.#redis = redis;
    this.#prefix = prefix;
    this.#index = `${prefix}{usage:index}`;
    this.#retentionMs = retentionMs(retentionDays);
    const hourKey = (hour: number) => this.#key(hour);
    this.#hours = new RedisHours(redis, hourKey, this.#retentionMs, hoursPerCall, this.reads);
    this.#totals = new RedisTotals(redis, this.#hours, hourKey, (from, to) => this.list(from, to), prefix, this.#retentionMs);
  }

  hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    return this.#totals.hourly(since, until, account);
  }

  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    return this.#totals.top(by, since, until, limit, account);
  }

  /** A totals read (checked by the caller: checkTotalsQuery). */
  totals(q: TotalsQuery): Promise<TotalsRow[]> {
    return this.#totals.read(q);
  }

  /**
   * Makes whole, in the background and once per start, the totals of the hours whose records
   * were written by a version with other columns (./totals-hours.ts), newest first, so that
   * reads find them whole. Reads do the same for the hours they cover, should they come first.
   */
  wholeInBackground(onError: (err: Error) => void): void {
    if (this.#wholeStarted) return;
    this.#wholeStarted = true;
    const run = async () => {
      const from = Math.floor((Date.now() - this.#retentionMs) / HOUR_MS);
      const hours = (await this.list(from, Number.MAX_SAFE_INTEGER)).reverse();
      for (let i = 0; i < hours.length; i += 24) await this.#hours.read(hours.slice(i, i + 24));
    };
    run().catch((err: unknown) => {
      this.#wholeStarted = false;
      onError(err instanceof Error ? err : new Error(String(err)));
    });
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
      // A new day: once late writes of the last one are past, its totals are summed (./totals.ts).
      if (hour % 24 === 0 && (hour + 1) * HOUR_MS > now) {
        setTimeout(() => { void this.#totals.warm(hour / 24 - 1).catch(() => undefined); }, WRITE_MARK_MS).unref();
      }
    }
    const key = this.#key(hour);
    const created = await this.#redis.tgUsageAdd(
      key, `${key}:w:${writeId}`, ...totalsKeys(key, r), JSON.stringify(r), String(expireAt), String(WRITE_MARK_MS), ...totalsArgs(r),
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
    this.reads.n += entries.length;
    return { entries, done: page.length < max };
  }

  /** A filtered look at one hour's stream, in Redis (the tgUsageSelect script). */
  async select(bucket: number, f: UsageFilter, pos: string | undefined, max: number): Promise<Selection> {
    if (pos !== undefined && !beforeLastId(pos)) return { entries: [], examined: 0, pos, done: true };
    const needles: string[] = [];
    if (f.account !== undefined) needles.push(`"account":${JSON.stringify(f.account)}`);
    if (f.keyId !== undefined) needles.push(`"key_id":${JSON.stringify(f.keyId)}`);
    if (f.model !== undefined) needles.push(`"model":${JSON.stringify(f.model)}`);
    const count = Math.min(max, SELECT_SCAN);
    const out = await this.#redis.tgUsageSelect(this.#key(bucket), pos === undefined ? '-' : `(${pos}`, String(count), ...needles);
    if (!Array.isArray(out) || out.length < 3) throw new Error('unexpected answer of tgUsageSelect');
    const entries: Entry[] = [];
    for (let i = 3; i + 1 < out.length; i += 2) {
      let record: UsageRecord | undefined;
      try { record = readRecord(JSON.parse(String(out[i + 1]))); } catch { record = undefined; }
      entries.push({ record, pos: String(out[i]) });
    }
    const last = String(out[0]);
    this.reads.n += entries.length;
    // The entries the script looked at in Redis, parsing none: a quarter of a read each (so a
    // page has Redis look at 80,000 entries at most).
    return { entries, examined: entries.length + Math.ceil(Number(out[2]) / 4), pos: last === '' ? pos : last, done: Number(out[1]) === 1 };
  }

  /**
   * Which hours may hold records of the filter, from their totals (one HEXISTS per hour, sent at
   * once): the most selective column the filter names. `keyAccount`: the account of the
   * filter's key, when known (a key's records all carry its account).
   */
  async mayHold(hours: number[], f: UsageFilter, keyAccount?: string): Promise<boolean[]> {
    const account = f.account ?? keyAccount;
    let column: string;
    let id: string;
    let group = '';
    if (f.keyId !== undefined && account !== undefined) [column, group, id] = ['key@', account, f.keyId];
    else if (f.model !== undefined && account !== undefined) [column, group, id] = ['model@', account, f.model];
    else if (f.model !== undefined) [column, id] = ['model', f.model];
    else if (account !== undefined) [column, id] = ['account', account];
    else return hours.map(() => true);
    // An hour whose totals are not whole (records written by a version with other columns) may hold any.
    const found = await Promise.all(hours.map((h) => {
      const hk = this.#key(h);
      return Promise.all([this.#redis.hexists(columnKey(hk, column, group), id), this.#redis.get(counterKey(hk)), this.#redis.xlen(hk)]);
    }));
    return found.map(([has, counted, length]) => has === 1 || Number(counted ?? 0) !== length);
  }

  #cutoff(): number { return Date.now() - this.#retentionMs; }

  report(account: string | undefined, since: number): Promise<UsageReport> {
    const now = Date.now();
    return reportOf(this, account, since, visibleFrom(now - this.#retentionMs, HOUR_MS), now);
  }

  /** `keyAccount`: the account of q.keyId, when known (hours without it are skipped). */
  page(q: UsageQuery, keyAccount?: string): Promise<UsagePage> {
    const buckets: Buckets = {
      bucketMs: HOUR_MS,
      list: (from, to) => this.list(from, to),
      read: (b, pos, max) => this.read(b, pos, max),
      select: (b, f, pos, max) => this.select(b, f, pos, max),
      mayHold: (hours, f) => this.mayHold(hours, f, keyAccount),
    };
    return pageOf(buckets, q, this.#cutoff());
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
