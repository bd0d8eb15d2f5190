// Usage records (CONTRACT section 8): one per metered request, kept until `retention_days`
// after its time and never dropped before, paged with a stable cursor. Both stores keep them
// in time buckets that are only ever appended to and are removed whole once every record in
// them is past retention (trimming by time only, never by count):
// - memory store without a path: per UTC day, column by column (MemoryUsageLog,
//   ./memory/usage-columns.ts);
// - memory store with a path: one append-only JSON-lines file per UTC day of the records'
//   time, <path>/usage/YYYY-MM-DD.jsonl (FileUsageLog, ./memory/usage-files.ts);
// - redis store: one stream per UTC hour (./redis/records.ts).
//
// A cursor is `<bucket>:<position>`: the bucket (day or hour number since the epoch) and the
// position in it after the last record the page returned (an array index, a byte offset, a
// stream id). Buckets are append-only, so a position never moves: each record is returned
// once across the pages of a query, however many records are written meanwhile (those that
// land behind the cursor belong to a later query; those ahead of it show up in later pages).

import type { HourTotals, TopRow, TotalsDimension, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageSums } from './types.js';
import { DAY_MS } from '../utc-day.js';

export { DAY_MS };
/**
 * How long a record's write id is remembered (Store.recordUsage): a repeat later than that may
 * append it again.
 */
export const WRITE_MARK_MS = 300_000;
/** How often expired buckets are looked for while records are written. */
export const PRUNE_EVERY_MS = 60_000;
/** A page reads at most this many records (matching or not) before it answers with a cursor. */
export const SCAN_CAP = 20_000;
/** Records read from a bucket at a time. */
const READ_BATCH = 500;

const CURSOR = /^(\d{1,12}):(\d{1,20}(?:-\d{1,20})?)$/;

/** Whether `text` has the shape of a cursor (the admin API refuses others with 400). */
export function isCursor(text: string): boolean {
  return CURSOR.test(text);
}

export function encodeCursor(bucket: number, pos: string): string {
  return `${bucket}:${pos}`;
}

export function decodeCursor(text: string): { bucket: number; pos: string } {
  const m = CURSOR.exec(text);
  if (m === null) throw new TypeError('not a usage cursor');
  return { bucket: Number(m[1]), pos: m[2]! };
}

const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const count = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const SOURCES: ReadonlySet<unknown> = new Set(['upstream', 'counted', 'none']);

/** Refuses a record that could not be read back (a bug of the caller, not an outage). */
export function validateUsageRecord(r: UsageRecord): void {
  if (!isObject(r) || typeof r.request_id !== 'string' || r.request_id === '' || typeof r.account !== 'string' || r.account === '') {
    throw new TypeError('a usage record needs a request_id and an account');
  }
  if (!num(r.at) || r.at < 0) throw new TypeError('a usage record needs a time (at, Unix ms)');
  for (const f of ['prompt_tokens', 'cached_tokens', 'completion_tokens', 'units', 'queue_ms'] as const) {
    if (!count(r[f])) throw new TypeError(`a usage record's ${f} must be a non-negative safe integer`);
  }
  if (typeof r.model !== 'string' || typeof r.provider !== 'string' || typeof r.route !== 'string') {
    throw new TypeError('a usage record needs model, provider and route strings');
  }
  if (!SOURCES.has(r.usage_source)) throw new TypeError('a usage record needs a usage_source');
  if (!Number.isInteger(r.status) || !num(r.duration_ms)) throw new TypeError('a usage record needs a status and a duration');
}

/**
 * A stored record read back, with the contract's fields in their order; undefined when
 * unreadable. Records of earlier versions (credential, latency_ms, ttfc_ms; no cached_tokens
 * or queue_ms, read as 0) are read too.
 */
export function readRecord(v: unknown): UsageRecord | undefined {
  if (!isObject(v) || typeof v.request_id !== 'string' || !num(v.at) || typeof v.account !== 'string' || typeof v.model !== 'string') {
    return undefined;
  }
  if (!count(v.prompt_tokens) || !count(v.completion_tokens) || !count(v.units)) return undefined;
  const legacyKey = typeof v.credential === 'string' && v.credential.startsWith('key_') ? v.credential : null;
  return {
    request_id: v.request_id,
    at: v.at,
    account: v.account,
    key_id: typeof v.key_id === 'string' ? v.key_id : v.key_id === null ? null : legacyKey,
    model: v.model,
    provider: typeof v.provider === 'string' ? v.provider : '',
    target: typeof v.target === 'string' ? v.target : null,
    route: typeof v.route === 'string' ? v.route : '',
    status: num(v.status) ? v.status : 0,
    prompt_tokens: v.prompt_tokens,
    cached_tokens: count(v.cached_tokens) ? v.cached_tokens : 0,
    completion_tokens: v.completion_tokens,
    units: v.units,
    usage_source: SOURCES.has(v.usage_source) ? (v.usage_source as UsageRecord['usage_source']) : 'none',
    duration_ms: num(v.duration_ms) ? v.duration_ms : num(v.latency_ms) ? v.latency_ms : 0,
    ttft_ms: num(v.ttft_ms) ? v.ttft_ms : num(v.ttfc_ms) ? v.ttfc_ms : null,
    queue_ms: count(v.queue_ms) ? v.queue_ms : 0,
  };
}

export function parseRecord(line: string): UsageRecord | undefined {
  try {
    return readRecord(JSON.parse(line));
  } catch {
    return undefined;
  }
}

function matches(q: Omit<UsageQuery, 'limit' | 'cursor'>, r: UsageRecord, cutoff: number): boolean {
  return r.at >= q.since && r.at >= cutoff && (q.until === undefined || r.at < q.until) &&
    (q.account === undefined || r.account === q.account) && (q.keyId === undefined || r.key_id === q.keyId) &&
    (q.model === undefined || r.model === q.model);
}

const zero = (): UsageSums => ({ requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 });

function add(t: UsageSums, r: UsageRecord): void {
  t.requests += 1;
  t.prompt_tokens += r.prompt_tokens;
  t.completion_tokens += r.completion_tokens;
  t.units += r.units;
}

function sorted(m: Map<string, UsageSums>): Record<string, UsageSums> {
  return Object.fromEntries([...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** One record read from a bucket, and the position just after it. */
export interface Entry { record: UsageRecord | undefined; pos: string }

/** Where records live: time buckets, each read forward from a position. */
export interface Buckets {
  /** Bucket length in ms (a day, an hour). */
  readonly bucketMs: number;
  /** The buckets that may hold records, from `from` to `to` (inclusive), ascending. */
  list(from: number, to: number): Promise<number[]>;
  /** Up to `max` entries after `pos` (undefined: from the start); done once the bucket has no more now. */
  read(bucket: number, pos: string | undefined, max: number): Promise<{ entries: Entry[]; done: boolean }>;
}

/** One page of a query over `buckets`; records before `cutoff` (past retention) are never shown. */
export async function pageOf(buckets: Buckets, q: UsageQuery, cutoff: number): Promise<UsagePage> {
  const since = Math.max(q.since, cutoff, 0);
  let from = Math.floor(since / buckets.bucketMs);
  let after: string | undefined;
  if (q.cursor !== undefined) {
    const c = decodeCursor(q.cursor);
    if (c.bucket >= from) {
      from = c.bucket;
      after = c.pos;
    }
  }
  const to = q.until === undefined ? Number.MAX_SAFE_INTEGER : Math.floor((q.until - 1) / buckets.bucketMs);
  const records: UsageRecord[] = [];
  let scanned = 0;
  if (to < from) return { records, next_cursor: null };
  for (const b of await buckets.list(from, to)) {
    let pos = b === from ? after : undefined;
    for (;;) {
      const { entries, done } = await buckets.read(b, pos, READ_BATCH);
      for (const e of entries) {
        pos = e.pos;
        scanned++;
        if (e.record !== undefined && matches(q, e.record, cutoff)) {
          records.push(e.record);
          if (records.length >= q.limit) return { records, next_cursor: encodeCursor(b, pos) };
        }
      }
      if (done || entries.length === 0) break;
      if (scanned >= SCAN_CAP) return { records, next_cursor: encodeCursor(b, pos!) };
    }
  }
  return { records, next_cursor: null };
}

/** Totals of every record since `since` (for one account or all), with by_model and by_key. */
export async function reportOf(buckets: Buckets, account: string | undefined, since: number, cutoff: number): Promise<UsageReport> {
  const total = zero();
  const byModel = new Map<string, UsageSums>();
  const byKey = new Map<string, UsageSums>();
  const q = { since, account };
  const start = Math.max(since, cutoff, 0);
  for (const b of await buckets.list(Math.floor(start / buckets.bucketMs), Number.MAX_SAFE_INTEGER)) {
    let pos: string | undefined;
    for (;;) {
      const { entries, done } = await buckets.read(b, pos, READ_BATCH * 4);
      for (const e of entries) {
        pos = e.pos;
        const r = e.record;
        if (r === undefined || !matches(q, r, cutoff)) continue;
        add(total, r);
        let m = byModel.get(r.model);
        if (m === undefined) byModel.set(r.model, (m = zero()));
        add(m, r);
        if (r.key_id !== null) {
          let k = byKey.get(r.key_id);
          if (k === undefined) byKey.set(r.key_id, (k = zero()));
          add(k, r);
        }
      }
      if (done || entries.length === 0) break;
    }
  }
  return { ...total, by_model: sorted(byModel), by_key: sorted(byKey) };
}

/** The retention as the stores take it: whole days, at least one. */
export function retentionMs(days: number | undefined): number {
  const d = days ?? 90;
  if (!Number.isSafeInteger(d) || d < 1) throw new RangeError('usage retention must be a positive whole number of days');
  return d * DAY_MS;
}

export interface UsageLog {
  record(r: UsageRecord): Promise<void>;
  /** Totals per hour (./usage-totals.ts); the range is checked by the caller. */
  hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]>;
  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]>;
  report(account: string | undefined, since: number): Promise<UsageReport>;
  page(q: UsageQuery): Promise<UsagePage>;
  close(): Promise<void>;
}
