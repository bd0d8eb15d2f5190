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

import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from './types.js';
import { DAY_MS } from '../utc-day.js';

export { DAY_MS };
/**
 * How long a record's write id is remembered (Store.recordUsage): a repeat later than that may
 * append it again.
 */
export const WRITE_MARK_MS = 300_000;
/** How often expired buckets are looked for while records are written. */
export const PRUNE_EVERY_MS = 60_000;
/**
 * A page looks at most at this many records (matching or not: read, or examined by a bucket's
 * select) before it answers with a cursor; it yields to the event loop between batches. So a
 * page costs the same however long the history, and never holds the loop for all of it.
 */
export const SCAN_CAP = 20_000;
/** Records read from a bucket at a time. */
const READ_BATCH = 500;

/** Lets the event loop run what waits (I/O, timers) before the next batch of a read. */
export function yieldToLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Usage records a store has read back (rebuilt from columns, parsed from a file or a stream). */
export class ReadCount {
  n = 0;
}

/** The start of what a store shows: `cutoff` (now less the retention) down to its bucket's start, as buckets go whole. */
export function visibleFrom(cutoff: number, bucketMs: number): number {
  return Math.max(0, Math.floor(cutoff / bucketMs) * bucketMs);
}

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
/** A record's counts: non-negative safe integers. */
const COUNTED = ['prompt_tokens', 'cached_tokens', 'completion_tokens', 'units', 'queue_ms'] as const;

/** Refuses a record that could not be read back (a bug of the caller, not an outage). */
export function validateUsageRecord(r: UsageRecord): void {
  if (!isObject(r) || typeof r.request_id !== 'string' || r.request_id === '' || typeof r.account !== 'string' || r.account === '') {
    throw new TypeError('a usage record needs a request_id and an account');
  }
  if (!num(r.at) || r.at < 0) throw new TypeError('a usage record needs a time (at, Unix ms)');
  for (const f of COUNTED) {
    if (!count(r[f])) throw new TypeError(`a usage record's ${f} must be a non-negative safe integer`);
  }
  if (!(r.team === null || (typeof r.team === 'string' && r.team !== ''))) throw new TypeError("a usage record's team must be a non-empty string or null");
  if (typeof r.model !== 'string' || typeof r.provider !== 'string' || typeof r.route !== 'string') {
    throw new TypeError('a usage record needs model, provider and route strings');
  }
  if (!SOURCES.has(r.usage_source)) throw new TypeError('a usage record needs a usage_source');
  if (!Number.isInteger(r.status) || !num(r.duration_ms)) throw new TypeError('a usage record needs a status and a duration');
  if (!Array.isArray(r.tags) || !r.tags.every((t) => typeof t === 'string' && t !== '')) throw new TypeError("a usage record's tags must be a list of non-empty strings");
  if (!(r.end_user === null || (typeof r.end_user === 'string' && r.end_user !== ''))) throw new TypeError("a usage record's end_user must be a non-empty string or null");
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
    // Records from before teams have none.
    team: typeof v.team === 'string' ? v.team : null,
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
    // Records from before attribution (CONTRACT section 20) have neither.
    tags: Array.isArray(v.tags) ? v.tags.filter((t): t is string => typeof t === 'string' && t !== '') : [],
    end_user: typeof v.end_user === 'string' && v.end_user !== '' ? v.end_user : null,
    ...(typeof v.tool === 'string' ? { tool: v.tool } : {}),
    // A batch line's (CONTRACT section 18).
    ...(typeof v.batch_id === 'string' ? { batch_id: v.batch_id } : {}),
    ...(typeof v.custom_id === 'string' ? { custom_id: v.custom_id } : {}),
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
    (q.team === undefined || r.team === q.team) &&
    (q.model === undefined || r.model === q.model) &&
    (q.tag === undefined || r.tags.includes(q.tag)) && (q.endUser === undefined || r.end_user === q.endUser) &&
    (q.batchId === undefined || r.batch_id === q.batchId);
}

/** One record read from a bucket, and the position just after it. */
export interface Entry { record: UsageRecord | undefined; pos: string }

/** The filters of a query that select records by their fields (the time range aside). */
export type UsageFilter = Pick<UsageQuery, 'account' | 'keyId' | 'model'>;

/** What Buckets.select answers: candidates in order, and where the look stopped. */
export interface Selection {
  /** Records after the position asked that may match (every one that does, in order). */
  entries: Entry[];
  /** How many records the look cost, as records read (an index compare is a fraction of one). */
  examined: number;
  /** The position the look reached (after the last record it considered); undefined: none. */
  pos: string | undefined;
  /** Whether the bucket has nothing more now. */
  done: boolean;
}

/** Where records live: time buckets, each read forward from a position. */
export interface Buckets {
  /** Bucket length in ms (a day, an hour). */
  readonly bucketMs: number;
  /** The buckets that may hold records, from `from` to `to` (inclusive), ascending. */
  list(from: number, to: number): Promise<number[]>;
  /** Up to `max` entries after `pos` (undefined: from the start); done once the bucket has no more now. */
  read(bucket: number, pos: string | undefined, max: number): Promise<{ entries: Entry[]; done: boolean }>;
  /**
   * With a filter: the records of `bucket` after `pos` that may match `f`, looking at no more
   * than about `max` (an index's, or a scan that skips the others without reading them whole).
   * Absent: a filtered page reads every record.
   */
  select?(bucket: number, f: UsageFilter, pos: string | undefined, max: number): Promise<Selection>;
  /** Which of `buckets` may hold records matching `f` (false: none does); absent: all may. */
  mayHold?(buckets: number[], f: UsageFilter): Promise<boolean[]>;
}

/** Records a select looks at per call. */
const SELECT_BATCH = 5000;

/**
 * One page of a query over `buckets`; records before `cutoff` (past retention; down to the
 * start of its bucket, as buckets are dropped whole) are never shown.
 */
export async function pageOf(buckets: Buckets, q: UsageQuery, retentionCutoff: number): Promise<UsagePage> {
  const cutoff = visibleFrom(retentionCutoff, buckets.bucketMs);
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
  const filtered = q.account !== undefined || q.keyId !== undefined || q.model !== undefined;
  if (filtered && buckets.select !== undefined) return selectPage(buckets, q, cutoff, from, after, to);
  for (const b of await buckets.list(from, to)) {
    let pos = b === from ? after : undefined;
    for (;;) {
      // While every record read matched, no more than the page still needs (a page of matches
      // reads exactly its records); never past SCAN_CAP.
      const need = scanned === records.length ? q.limit - records.length : READ_BATCH;
      const { entries, done } = await buckets.read(b, pos, Math.min(READ_BATCH, need, SCAN_CAP - scanned));
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
      await yieldToLoop();
    }
  }
  return { records, next_cursor: null };
}

/**
 * A filtered page from the buckets' own selection (an index, a scan in the store): buckets that
 * cannot hold a match are skipped; once the selections examined SCAN_CAP records, the page
 * answers with what it found and a cursor.
 */
async function selectPage(buckets: Buckets, q: UsageQuery, cutoff: number, from: number, after: string | undefined, to: number): Promise<UsagePage> {
  let examined = 0;
  const f: UsageFilter = { account: q.account, keyId: q.keyId, model: q.model };
  const records: UsageRecord[] = [];
  let list = await buckets.list(from, to);
  if (buckets.mayHold !== undefined && list.length > 0) {
    const may = await buckets.mayHold(list, f);
    // The cursor's own bucket is read from its position whatever the totals say.
    list = list.filter((b, i) => may[i] === true || (b === from && after !== undefined));
  }
  for (let i = 0; i < list.length; i++) {
    const b = list[i]!;
    let pos = b === from ? after : undefined;
    for (;;) {
      const s = await buckets.select!(b, f, pos, SELECT_BATCH);
      for (const e of s.entries) {
        if (e.record !== undefined && matches(q, e.record, cutoff)) {
          records.push(e.record);
          if (records.length >= q.limit) return { records, next_cursor: encodeCursor(b, e.pos) };
        }
      }
      if (s.pos !== undefined) pos = s.pos;
      examined += s.examined;
      if (s.done) break;
      if (examined >= SCAN_CAP) return { records, next_cursor: encodeCursor(b, pos ?? '0') };
      await yieldToLoop();
    }
    if (i + 1 < list.length && examined >= SCAN_CAP) return { records, next_cursor: encodeCursor(list[i + 1]!, '0') };
    if (examined > 0) await yieldToLoop();
  }
  return { records, next_cursor: null };
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
  /** A totals read, checked by the caller (checkTotalsQuery). */
  totals(q: TotalsQuery): Promise<TotalsRow[]>;
  report(account: string | undefined, since: number): Promise<UsageReport>;
  page(q: UsageQuery): Promise<UsagePage>;
  /** Records read back so far. */
  readonly reads: ReadCount;
  close(): Promise<void>;
}
