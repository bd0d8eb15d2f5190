// The hours of the Redis usage totals (../usage-totals.ts): what the record's script adds, where
// (one key per column, in the hour's slot, beside its stream), and how a read knows an hour's
// totals are whole. Keys (P{usage:H} = the hour's stream):
//   P{usage:H}:t:C          hash    column C: id -> "requests errors prompt_tokens completion_tokens units"
//   P{usage:H}:t:C:G        hash    group G of a grouped column (key@: G = ACCOUNT; key+model: G = ACCOUNT<SEP>KEY)
//   P{usage:H}:t#V          string  records whose totals a writer of totals version V counted
//   P{usage:H}:b:D:A        set     the values of bounded dimension D (tag, end_user) of account A
//                                   the hour's totals keep by name (../usage-totals.ts BOUNDS)
// An hour's totals are whole when its counter equals its stream's length. They are not when
// records were written by a version with other columns (one before this, or one running beside
// it during a rolling upgrade): such an hour is summed anew from its records, once (rebuild: the
// stream read a page at a time, then one script that replaces every column of the hour if the
// stream still has as many records as were read, else tried again). A new column bumps
// TOTALS_VERSION; every hour is then rebuilt once, in the background after start (RedisUsage)
// or by the first read that covers it. Reads send up to `batch` hours in one script call (24:
// a day; 1 on a Cluster, where each hour is its own slot, and from the first CROSSSLOT refusal
// of a server behind one URL that turns out to be a Cluster node).

import type { RedisClient } from './connect.js';
import type { UsageRecord } from '../types.js';
import { BOUNDS, COLUMNS, HourBounds, METRICS, SEP, cellsOf, metricsOf, type BoundValue, type Cell, type Sums } from '../usage-totals.js';
import { readRecord, yieldToLoop, type ReadCount } from '../usage-records.js';

/** The version of COLUMNS: bumped when a column is added, so that every hour is summed anew once. */
export const TOTALS_VERSION = 3;

export function columnKey(hourKey: string, column: string, group: string): string {
  return group === '' ? `${hourKey}:t:${column}` : `${hourKey}:t:${column}:${group}`;
}

export function counterKey(hourKey: string): string {
  return `${hourKey}:t#${TOTALS_VERSION}`;
}

/**
 * The keys of a record's totals, one per column in COLUMNS order (a grouped column's: the
 * record's group, or the column's empty group when it has none), after the counter. A fixed
 * count, so the record's script is sent the cheap way (./connect.ts directScripts); a grouped
 * column's first dimension has one value per record.
 */
export function totalsKeys(hourKey: string, r: UsageRecord): string[] {
  const groups = plainShape(r)?.groups ?? groupsOf(cellsOf(r));
  return [
    counterKey(hourKey), ...COLUMNS.map((c, i) => columnKey(hourKey, c.name, groups[i]!)),
    ...BOUNDED.map((d) => boundKey(hourKey, d, r.account)),
  ];
}

/** Each column's group of `cells` (a grouped column's: the record's, or '' when it has none), in COLUMNS order. */
function groupsOf(cells: readonly Cell[]): string[] {
  return COLUMNS.map((c) => (c.group > 0 ? cells.find((x) => x.column === c)?.group ?? '' : ''));
}

/** The (column number, id) pairs of `cells`, as the script's arguments take them. */
function cellArgs(cells: readonly Cell[]): string[] {
  const out: string[] = [];
  for (const cell of cells) out.push(COLUMN_NUMBERS.get(cell.column)!, cell.id);
  return out;
}

const COLUMN_NUMBERS = new Map(COLUMNS.map((c, i) => [c, String(i + 1)]));

/** What a record without tags or end user gives every record of its shape: its columns' groups and its cells' arguments. */
interface Shape { groups: readonly string[]; args: readonly string[] }

/** Record shapes kept by plainShape; past it the list starts anew. */
const SHAPES = 4096;
const shapes = new Map<string, Shape>();

/**
 * The shape of a record without tags or end user (undefined for one with either): it has no
 * value the script bounds, so its groups and cells are those of every such record of its
 * account, key, team and model, kept here (issue #46: the attribution columns are paid by every
 * record; this makes the common record cost one lookup). No id holds SEP or SOH.
 */
function plainShape(r: UsageRecord): Shape | undefined {
  if (r.tags.length > 0 || r.end_user !== null) return undefined;
  const name = `${r.account}${SEP}${r.key_id ?? '\u0001'}${SEP}${r.team ?? '\u0001'}${SEP}${r.model}`;
  let shape = shapes.get(name);
  if (shape === undefined) {
    if (shapes.size >= SHAPES) shapes.clear();
    const cells = cellsOf(r);
    shapes.set(name, (shape = { groups: groupsOf(cells), args: cellArgs(cells) }));
  }
  return shape;
}

/** The bounded dimensions, in the order of their sets' keys after the columns'. */
const BOUNDED = Object.keys(BOUNDS) as Array<keyof typeof BOUNDS>;

export function boundKey(hourKey: string, dim: string, account: string): string {
  return `${hourKey}:b:${dim}:${account}`;
}

/**
 * The script's totals arguments of `r`: its metrics; its bounded values, as a count then
 * (set key number, value, bound) each; then (column number, id) for each cell, where the
 * script puts each bounded value, or OTHER past its bound, in place of \u0001N\u0001 (value N).
 */
export function totalsArgs(r: UsageRecord): string[] {
  const out = metricsOf(r).map(String);
  const plain = plainShape(r);
  if (plain !== undefined) {
    out.push('0', ...plain.args);
    return out;
  }
  const bounded: string[] = [];
  let n = 0;
  const seen = new Map<string, string>();
  const placeholder: BoundValue = (dim, value) => {
    const k = `${dim}\u0000${value}`;
    let p = seen.get(k);
    if (p === undefined) {
      seen.set(k, (p = `\u0001${++n}\u0001`));
      bounded.push(String(1 + COLUMNS.length + 1 + BOUNDED.indexOf(dim as keyof typeof BOUNDS)), value, String(BOUNDS[dim]));
    }
    return p;
  };
  const cells = cellsOf(r, (dim, value) => (value === '' ? value : placeholder(dim, value)));
  out.push(String(n), ...bounded, ...cellArgs(cells));
  return out;
}

export const TOTALS_KEYS = 1 + COLUMNS.length + BOUNDED.length;

/** A stored value's five sums (zeros for none or an unreadable one). */
export function sumsOf(v: string | null | undefined): number[] {
  const parts = v == null ? [] : v.split(' ').map(Number);
  return parts.length === 5 && parts.every(Number.isSafeInteger) ? parts : [0, 0, 0, 0, 0];
}

export interface HourScripts {
  tgTotalsRead(numberOfKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
  tgTotalsRebuild(numberOfKeys: number, ...keysAndArgs: string[]): Promise<unknown>;
}

/** Scripts with as many keys as the call brings (the count first). */
export const HOUR_SCRIPTS: Record<keyof HourScripts, { keys: undefined; lua: string }> = {
  // Per hour (KEYS in runs of ARGV[1]: stream, counter[, hash]): the hour's record count when
  // its totals are whole, else -1; with a hash, then its fields (HGETALL) or field ARGV[2].
  tgTotalsRead: { keys: undefined, lua: `
local per = tonumber(ARGV[1])
local field = ARGV[2]
local out = {}
for i = 1, #KEYS, per do
  local n = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
  if n ~= redis.call('XLEN', KEYS[i]) then n = -1 end
  out[#out + 1] = n
  if per == 3 then
    if field == '' then out[#out + 1] = redis.call('HGETALL', KEYS[i + 2])
    else out[#out + 1] = redis.call('HGET', KEYS[i + 2], field) or '' end
  end
end
return out` },
  // An hour's totals anew (KEYS: stream, counter, then every column's hash): when the stream
  // holds ARGV[1] records (those summed), each hash is replaced by its fields (ARGV from 3: a
  // count, then field, value pairs, per hash), expiring with the stream (ARGV[2]), and the
  // counter set to the count. 0 when the stream holds another count (summed again).
  tgTotalsRebuild: { keys: undefined, lua: `
if redis.call('XLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
local i = 3
for k = 3, #KEYS do
  redis.call('DEL', KEYS[k])
  local n = tonumber(ARGV[i])
  i = i + 1
  local j = 0
  while j < n do
    local last = math.min(n, j + 500)
    redis.call('HSET', KEYS[k], unpack(ARGV, i + 2 * j, i + 2 * last - 1))
    j = last
  end
  if n > 0 then redis.call('PEXPIREAT', KEYS[k], ARGV[2]) end
  i = i + 2 * n
end
redis.call('SET', KEYS[2], ARGV[1], 'PXAT', ARGV[2])
return 1` },
};

/** An hour's totals summed from its records in this process: hash key -> id -> sums. */
export type HourSums = Map<string, Map<string, number[]>>;

/** One hour as a read found it: its record count (-1: not whole), and its hash's fields. */
export interface HourRead {
  hour: number;
  count: number;
  /** The hash's fields (id -> sums), or its one field's sums; empty without a hash. */
  fields: Map<string, number[]>;
}

/** Script calls a read has in flight at once. */
const CALLS_AT_ONCE = 16;
/** Records read from a stream per page while an hour is summed. */
const REBUILD_PAGE = 1000;
/** Tries to write an hour's sums before its read uses them as they are. */
const REBUILD_TRIES = 3;
/** Hours summed anew at once. */
const REBUILDS_AT_ONCE = 4;

export class RedisHours {
  readonly #redis: RedisClient & HourScripts;
  readonly #hourKey: (hour: number) => string;
  readonly #retentionMs: number;
  /** Hours per script call: 1 once a server refused hours of several slots in one (a Cluster behind one URL). */
  #batch: number;
  readonly #reads: ReadCount;
  /** Hours being summed by this instance (a concurrent read waits for the same sum). */
  readonly #rebuilding = new Map<number, Promise<HourSums | null>>();

  constructor(redis: RedisClient & HourScripts, hourKey: (hour: number) => string, retentionMs: number, batch: number, reads: ReadCount) {
    this.#redis = redis;
    this.#hourKey = hourKey;
    this.#retentionMs = retentionMs;
    this.#batch = batch;
    this.#reads = reads;
  }

  /**
   * Reads `hours` (their counts; with `hash`, that hash of each, or its `field`), making whole
   * any hour that is not first. An hour whose sums could not be written back (records kept
   * landing while it was summed) is answered from the sums made here (count -1).
   */
  async read(hours: readonly number[], hash?: (hourKey: string) => string, field = ''): Promise<HourRead[]> {
    const found = await this.#readOnce(hours, hash, field);
    const broken = found.filter((h) => h.count < 0);
    if (broken.length === 0) return found;
    const reread: number[] = [];
    for (let i = 0; i < broken.length; i += REBUILDS_AT_ONCE) {
      const batch = broken.slice(i, i + REBUILDS_AT_ONCE);
      const made = await Promise.all(batch.map((h) => this.rebuild(h.hour)));
      for (const [j, sums] of made.entries()) {
        const h = batch[j]!;
        if (sums === null) {
          reread.push(h.hour);
        } else if (hash !== undefined) {
          const kept = sums.get(hash(this.#hourKey(h.hour))) ?? new Map<string, number[]>();
          h.fields = field === '' ? kept : new Map(kept.has(field) ? [[field, kept.get(field)!]] : []);
        }
      }
    }
    if (reread.length === 0) return found;
    const fresh = new Map((await this.#readOnce(reread, hash, field)).map((h) => [h.hour, h]));
    return found.map((h) => fresh.get(h.hour) ?? h);
  }

  async #readOnce(hours: readonly number[], hash: ((hourKey: string) => string) | undefined, field: string): Promise<HourRead[]> {
    const batch = this.#batch;
    try {
      return await this.#readCalls(hours, hash, field, batch);
    } catch (err) {
      if (batch === 1 || !(err instanceof Error) || !err.message.startsWith('CROSSSLOT')) throw err;
      this.#batch = 1;
      return this.#readCalls(hours, hash, field, 1);
    }
  }

  async #readCalls(hours: readonly number[], hash: ((hourKey: string) => string) | undefined, field: string, batch: number): Promise<HourRead[]> {
    const per = hash === undefined ? 2 : 3;
    const calls: number[][] = [];
    for (let i = 0; i < hours.length; i += batch) calls.push(hours.slice(i, i + batch));
    const out: HourRead[] = [];
    for (let i = 0; i < calls.length; i += CALLS_AT_ONCE) {
      const answers = await Promise.all(calls.slice(i, i + CALLS_AT_ONCE).map((batch) => {
        const keys: string[] = [];
        for (const h of batch) {
          const hk = this.#hourKey(h);
          keys.push(hk, counterKey(hk));
          if (hash !== undefined) keys.push(hash(hk));
        }
        return this.#redis.tgTotalsRead(keys.length, ...keys, String(per), field);
      }));
      for (const [j, answer] of answers.entries()) {
        const batch = calls[i + j]!;
        if (!Array.isArray(answer)) throw new Error('unexpected answer of tgTotalsRead');
        const step = per === 3 ? 2 : 1;
        for (const [k, h] of batch.entries()) {
          const count = Number(answer[k * step]);
          const fields = new Map<string, number[]>();
          const v: unknown = per === 3 ? answer[k * step + 1] : undefined;
          if (Array.isArray(v)) for (let x = 0; x + 1 < v.length; x += 2) fields.set(String(v[x]), sumsOf(String(v[x + 1])));
          else if (typeof v === 'string' && v !== '') fields.set(field, sumsOf(v));
          out.push({ hour: h, count: Number.isSafeInteger(count) ? count : -1, fields });
        }
      }
    }
    return out;
  }

  /**
   * Sums hour `hour` anew from its records and writes the sums in place of its totals; null
   * once written, else (records kept landing) the sums made, for the read that asked.
   */
  rebuild(hour: number): Promise<HourSums | null> {
    let build = this.#rebuilding.get(hour);
    if (build === undefined) {
      build = this.#rebuild(hour).finally(() => this.#rebuilding.delete(hour));
      this.#rebuilding.set(hour, build);
    }
    return build;
  }

  async #rebuild(hour: number): Promise<HourSums | null> {
    const hk = this.#hourKey(hour);
    let sums: HourSums = new Map();
    for (let attempt = 0; attempt < REBUILD_TRIES; attempt++) {
      const { n, sums: made } = await this.#sumStream(hk);
      sums = made;
      const keys = [hk, counterKey(hk)];
      const args = [String(n), String((hour + 1) * 3_600_000 + this.#retentionMs)];
      // Every column's hash of no group too: a grouped column's of an earlier layout is deleted.
      const fixed = COLUMNS.map((c) => columnKey(hk, c.name, ''));
      for (const k of new Set([...fixed, ...sums.keys()])) {
        keys.push(k);
        const fields = sums.get(k) ?? new Map<string, number[]>();
        args.push(String(fields.size));
        for (const [id, s] of fields) args.push(id, s.map((x) => x.toFixed(0)).join(' '));
      }
      if (Number(await this.#redis.tgTotalsRebuild(keys.length, ...keys, ...args)) === 1) return null;
    }
    return sums;
  }

  /** Every record of the hour's stream, read a page at a time, summed per column. */
  async #sumStream(hk: string): Promise<{ n: number; sums: HourSums }> {
    const sums: HourSums = new Map();
    // The bounds decided again in the stream's order: as the record script decided them.
    const bounds = new HourBounds();
    let n = 0;
    let from = '-';
    for (;;) {
      const page = await this.#redis.xrange(hk, from, '+', 'COUNT', REBUILD_PAGE);
      n += page.length;
      this.#reads.n += page.length;
      for (const [, fields] of page) {
        const i = fields.indexOf('r');
        let r: UsageRecord | undefined;
        try { r = i >= 0 && i % 2 === 0 ? readRecord(JSON.parse(fields[i + 1]!)) : undefined; } catch { r = undefined; }
        if (r === undefined) continue;
        const m: Sums = metricsOf(r);
        for (const cell of cellsOf(r, bounds.of(r))) {
          const key = columnKey(hk, cell.column.name, cell.group);
          let col = sums.get(key);
          if (col === undefined) sums.set(key, (col = new Map()));
          const s = col.get(cell.id);
          if (s === undefined) col.set(cell.id, [...m]);
          else for (let x = 0; x < METRICS.length; x++) s[x]! += m[x]!;
        }
      }
      if (page.length < REBUILD_PAGE) return { n, sums };
      from = `(${page[page.length - 1]![0]}`;
      await yieldToLoop();
    }
  }
}
