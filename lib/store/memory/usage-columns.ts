// One UTC day of usage records held in memory column by column (the memory store without a
// path keeps every record for usage.retention_days, 90 by default, in its heap). As objects, a
// record cost about 600 bytes of heap, all of it traced by every major GC; here it costs under
// 200: its nine numbers in a Float64Array, its eight repeated strings (account, key, team, model,
// provider, target, route, usage source) as indices into the day's table of distinct values,
// and its request id, made flat, as the one string of its own (a batch line's batch_id and
// custom_id, beside, in a map by index). Records are rebuilt as objects
// only when read (admin queries), with the contract's fields in their order, as the other
// stores return them: a record reads back exactly as written (numbers are kept as float64, so
// every safe integer and every duration is exact); fields outside the contract are not kept.
// MemoryUsageLog, at the end, is that store's usage log: one DayColumns per UTC day (the
// bucket layout and the queries are in ../usage-records.ts).

import { flattened } from '../../strings.js';
import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';
import { TotalsBook } from '../totals-book.js';
import { reportOf } from '../usage-report.js';
import { DAY_MS, PRUNE_EVERY_MS, ReadCount, pageOf, retentionMs, visibleFrom, type Buckets, type Entry, type Selection, type UsageFilter, type UsageLog } from '../usage-records.js';

const SOURCES: readonly UsageRecord['usage_source'][] = ['upstream', 'counted', 'none'];

/** Numbers per record, in this order; ttft_ms null is NaN. */
const NUMS = 9;
/** Strings per record held as table indices, in this order; null (key_id, target, team, end_user), absent (tool) or none (tags) is 0. */
const REFS = 10;
const FIRST_CAPACITY = 256;

export class DayColumns {
  #length = 0;
  #ids: string[] = [];
  /** A batch line's batch_id and custom_id (CONTRACT section 18), by record index: few records have them. */
  readonly #batch = new Map<number, [string, string]>();
  #nums = new Float64Array(FIRST_CAPACITY * NUMS);
  #refs = new Uint32Array(FIRST_CAPACITY * REFS);
  #sources = new Uint8Array(FIRST_CAPACITY);
  /** Index 0 stands for null; each distinct string of the day is stored once. */
  readonly #table: string[] = [''];
  readonly #index = new Map<string, number>();

  get length(): number {
    return this.#length;
  }

  /** Appends `r` (a record validateUsageRecord accepts). */
  push(r: UsageRecord): void {
    const source = SOURCES.indexOf(r.usage_source);
    if (source < 0) throw new TypeError('a usage record needs a usage_source');
    const i = this.#length;
    if (i === this.#sources.length) this.#grow();
    this.#ids.push(flattened(r.request_id));
    const n = i * NUMS;
    const nums = this.#nums;
    nums[n] = r.at;
    nums[n + 1] = r.status;
    nums[n + 2] = r.prompt_tokens;
    nums[n + 3] = r.cached_tokens;
    nums[n + 4] = r.completion_tokens;
    nums[n + 5] = r.units;
    nums[n + 6] = r.duration_ms;
    nums[n + 7] = r.ttft_ms ?? Number.NaN;
    nums[n + 8] = r.queue_ms;
    const s = i * REFS;
    const refs = this.#refs;
    refs[s] = this.#ref(r.account);
    refs[s + 1] = r.key_id === null ? 0 : this.#ref(r.key_id);
    refs[s + 2] = this.#ref(r.model);
    refs[s + 3] = this.#ref(r.provider);
    refs[s + 4] = r.target === null ? 0 : this.#ref(r.target);
    refs[s + 5] = this.#ref(r.route);
    refs[s + 6] = r.team === null ? 0 : this.#ref(r.team);
    refs[s + 7] = r.tool === undefined ? 0 : this.#ref(r.tool);
    // Tags as one string of the day's table (joined by ',', which no tag holds); none is 0.
    refs[s + 8] = r.tags.length === 0 ? 0 : this.#ref(r.tags.join(','));
    refs[s + 9] = r.end_user === null ? 0 : this.#ref(r.end_user);
    this.#sources[i] = source;
    if (r.batch_id !== undefined) this.#batch.set(i, [flattened(r.batch_id), flattened(r.custom_id ?? '')]);
    this.#length = i + 1;
  }

  /** Record `i` (0 <= i < length), rebuilt. */
  get(i: number): UsageRecord {
    const n = i * NUMS;
    const nums = this.#nums;
    const s = i * REFS;
    const refs = this.#refs;
    const table = this.#table;
    const ttft = nums[n + 7]!;
    const batch = this.#batch.get(i);
    return {
      request_id: this.#ids[i]!,
      at: nums[n]!,
      account: table[refs[s]!]!,
      key_id: refs[s + 1] === 0 ? null : table[refs[s + 1]!]!,
      team: refs[s + 6] === 0 ? null : table[refs[s + 6]!]!,
      model: table[refs[s + 2]!]!,
      provider: table[refs[s + 3]!]!,
      target: refs[s + 4] === 0 ? null : table[refs[s + 4]!]!,
      route: table[refs[s + 5]!]!,
      status: nums[n + 1]!,
      prompt_tokens: nums[n + 2]!,
      cached_tokens: nums[n + 3]!,
      completion_tokens: nums[n + 4]!,
      units: nums[n + 5]!,
      usage_source: SOURCES[this.#sources[i]!]!,
      duration_ms: nums[n + 6]!,
      ttft_ms: Number.isNaN(ttft) ? null : ttft,
      queue_ms: nums[n + 8]!,
      tags: refs[s + 8] === 0 ? [] : table[refs[s + 8]!]!.split(','),
      end_user: refs[s + 9] === 0 ? null : table[refs[s + 9]!]!,
      // An MCP tool call's tool (CONTRACT section 17): only its records carry one.
      ...(refs[s + 7] === 0 ? {} : { tool: table[refs[s + 7]!]! }),
      ...(batch === undefined ? {} : { batch_id: batch[0], custom_id: batch[1] }),
    };
  }

  /**
   * Records from `start` on that match `f`, looking at up to `max` records: their strings are
   * compared as table indices, and only the matches are rebuilt. Returns where the look stopped.
   */
  select(f: UsageFilter, start: number, max: number): { found: Array<[number, UsageRecord]>; end: number; looked: number } {
    const want: Array<[number, number]> = [];
    for (const [offset, text] of [[0, f.account], [1, f.keyId], [2, f.model]] as const) {
      if (text === undefined) continue;
      const ref = this.#index.get(text);
      if (ref === undefined) return { found: [], end: this.#length, looked: 0 }; // not in this day at all
      want.push([offset, ref]);
    }
    const refs = this.#refs;
    const end = Math.min(this.#length, start + max);
    const found: Array<[number, UsageRecord]> = [];
    outer: for (let i = start; i < end; i++) {
      const s = i * REFS;
      for (const [offset, ref] of want) if (refs[s + offset] !== ref) continue outer;
      found.push([i, this.get(i)]);
    }
    return { found, end, looked: Math.max(0, end - start) };
  }

  #ref(text: string): number {
    let i = this.#index.get(text);
    if (i === undefined) {
      i = this.#table.push(text) - 1;
      this.#index.set(text, i);
    }
    return i;
  }

  #grow(): void {
    const capacity = this.#sources.length * 2;
    const nums = new Float64Array(capacity * NUMS);
    nums.set(this.#nums);
    this.#nums = nums;
    const refs = new Uint32Array(capacity * REFS);
    refs.set(this.#refs);
    this.#refs = refs;
    const sources = new Uint8Array(capacity);
    sources.set(this.#sources);
    this.#sources = sources;
  }
}

/** Records in memory, columns per UTC day; days past retention are dropped whole. */
export class MemoryUsageLog implements UsageLog, Buckets {
  readonly bucketMs = DAY_MS;
  readonly #days = new Map<number, DayColumns>();
  readonly #retentionMs: number;
  readonly #now: () => number;
  /** Totals per hour and day, counted as records are kept (../usage-totals.ts). */
  readonly #totals = new TotalsBook();
  readonly reads = new ReadCount();
  #prunedAt = 0;

  constructor(retentionDays?: number, now: () => number = Date.now) {
    this.#retentionMs = retentionMs(retentionDays);
    this.#now = now;
  }

  #cutoff(): number { return this.#now() - this.#retentionMs; }

  record(r: UsageRecord): Promise<void> {
    this.keep(r);
    return Promise.resolve();
  }

  /** Keeps `r` at once (record() without its promise): its values are copied, never `r` itself. */
  keep(r: UsageRecord): void {
    const day = Math.floor(r.at / DAY_MS);
    const now = this.#now();
    if (now - this.#prunedAt >= PRUNE_EVERY_MS || !this.#days.has(day)) this.#prune(now);
    // A record already past retention when written is not kept (it would be dropped at once).
    if ((day + 1) * DAY_MS <= this.#cutoff()) return;
    let list = this.#days.get(day);
    if (list === undefined) this.#days.set(day, (list = new DayColumns()));
    list.push(r);
    this.#totals.add(r);
  }

  #prune(now: number): void {
    this.#prunedAt = now;
    const cutoff = now - this.#retentionMs;
    for (const day of this.#days.keys()) if ((day + 1) * DAY_MS <= cutoff) this.#days.delete(day);
    this.#totals.prune(cutoff);
  }

  hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    this.#prune(this.#now());
    return Promise.resolve(this.#totals.hourly(since, until, account));
  }

  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    this.#prune(this.#now());
    return Promise.resolve(this.#totals.top(by, since, until, limit, account));
  }

  totals(q: TotalsQuery): Promise<TotalsRow[]> {
    this.#prune(this.#now());
    return Promise.resolve(this.#totals.read(q));
  }

  list(from: number, to: number): Promise<number[]> {
    return Promise.resolve([...this.#days.keys()].filter((d) => d >= from && d <= to).sort((a, b) => a - b));
  }

  select(bucket: number, f: UsageFilter, pos: string | undefined, max: number): Promise<Selection> {
    const list = this.#days.get(bucket);
    if (list === undefined) return Promise.resolve({ entries: [], examined: 0, pos, done: true });
    // Comparing indices is cheap: a call looks at up to 50 times what a read would rebuild.
    const start = pos === undefined ? 0 : Number(pos);
    const { found, end, looked } = list.select(f, start, max * 50);
    this.reads.n += found.length;
    const examined = found.length + Math.ceil(looked / 50);
    return Promise.resolve({ entries: found.map(([i, record]) => ({ record, pos: String(i + 1) })), examined, pos: String(end), done: end >= list.length });
  }

  read(bucket: number, pos: string | undefined, max: number): Promise<{ entries: Entry[]; done: boolean }> {
    const list = this.#days.get(bucket);
    const length = list?.length ?? 0;
    const start = pos === undefined ? 0 : Number(pos);
    const end = Math.min(length, start + max);
    const entries: Entry[] = [];
    for (let i = start; i < end; i++) entries.push({ record: list!.get(i), pos: String(i + 1) });
    this.reads.n += entries.length;
    return Promise.resolve({ entries, done: end >= length });
  }

  report(account: string | undefined, since: number): Promise<UsageReport> {
    const now = this.#now();
    return reportOf(this, account, since, visibleFrom(now - this.#retentionMs, DAY_MS), now);
  }

  page(q: UsageQuery): Promise<UsagePage> {
    return pageOf(this, q, this.#cutoff());
  }

  close(): Promise<void> { return Promise.resolve(); }
}
