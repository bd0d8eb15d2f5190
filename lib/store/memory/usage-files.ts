// The memory store's usage records on disk: one append-only JSON-lines file per UTC day of
// the records' time (the bucket layout and the queries are in ../usage-records.ts).

import { open, readdir, rm, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs } from './make-dirs.js';
import { migrateLegacy } from './usage-migrate.js';
import { readLines, readLinesAt } from './day-lines.js';
import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';
import { TotalsBook } from '../totals-book.js';
import { hoursOf } from '../usage-totals.js';
import { reportOf } from '../usage-report.js';
import { DAY_MS, PRUNE_EVERY_MS, ReadCount, pageOf, retentionMs, visibleFrom, type Buckets, type Entry, type Selection, type UsageFilter, type UsageLog } from '../usage-records.js';
import { DayPostings } from './postings.js';

/** Lines a select reads at most per call (at once). */
const SELECT_READS = 256;

/** The folder of the day files, under the store's path. */
export const USAGE_DIR = 'usage';
export { LEGACY_USAGE_FILE } from './usage-migrate.js';

const DAY_FILE = /^(\d{4}-\d{2}-\d{2})\.jsonl$/;

function dayName(day: number): string {
  return `${new Date(day * DAY_MS).toISOString().slice(0, 10)}.jsonl`;
}

/** An append handle of a day file, whether it has unsynced writes, and the file's size. */
interface Handle { fh: FileHandle; dirty: boolean; size: number }

/** A day file found on open and not counted yet: what waits for it, settled once it is. */
interface Uncounted { done: Promise<void>; resolve(): void; reject(e: Error): void }

function uncounted(): Uncounted {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const done = new Promise<void>((res, rej) => { resolve = res; reject = rej; });
  done.catch(() => undefined); // a day nobody waited for
  return { done, resolve, reject };
}

export interface FileUsageLogOptions {
  retentionDays?: number;
  fsyncMs?: number;
  now?: () => number;
  /** Awaited before each day file found on open is counted (tests hold the count with it). */
  beforeCount?: (day: number) => Promise<void> | void;
}

/**
 * A write that failed, and the records of it that are in their files all the same (the lines
 * written before the failure): those are read by every query, and counted.
 */
export class UsageWriteError extends Error {
  readonly landed: ReadonlySet<UsageRecord>;

  constructor(cause: unknown, landed: ReadonlySet<UsageRecord>) {
    super(`usage records not written: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'UsageWriteError';
    this.landed = landed;
  }
}

/**
 * Records in `<dir>/usage/YYYY-MM-DD.jsonl`, one JSON line each, the day of the record's time.
 * Appends are written in call order, concurrent ones grouped into one write per file; record()
 * resolves once its line is written to the kernel (a kill -9 loses nothing acknowledged). Files
 * are fdatasync'ed every `fsyncMs` and on close, so a power loss takes at most that much
 * (with fsyncMs 0, before record() resolves). A torn last line left by a crash is closed off
 * with a newline when its file is next opened for appending and skipped when read. A day's
 * file is deleted once the whole day is past retention; nothing else ever shortens or rewrites
 * a file, so a byte offset is a stable cursor.
 */
export class FileUsageLog implements UsageLog, Buckets {
  readonly bucketMs = DAY_MS;
  readonly #dir: string;
  readonly #retentionMs: number;
  readonly #now: () => number;
  /** Days that have a file. */
  readonly #days = new Set<number>();
  /** Append handles of recently written days, and whether each has unsynced writes. */
  readonly #handles = new Map<number, Handle>();
  /** Totals per hour and day of the records in the files (../usage-totals.ts). */
  readonly #totals = new TotalsBook();
  readonly reads = new ReadCount();
  /** Per day, where each account's, key's and model's records are in its file (select()). */
  readonly #postings = new Map<number, DayPostings>();
  /**
   * The days whose files found on open are still to be counted (#countAll, newest first): a
   * totals query waits for the days its range covers, a filtered page scans those days.
   */
  readonly #uncounted = new Map<number, Uncounted>();
  /** The end of the count. */
  #counted: Promise<void> = Promise.resolve();
  readonly #beforeCount: ((day: number) => Promise<void> | void) | undefined;
  /** Lines waiting for the next write (with their records), and the promise of that write. */
  #pending: Array<[number, string, UsageRecord]> | null = null;
  #pendingDone: Promise<void> = Promise.resolve();
  /** Tail of the serialized writes (and prunes). */
  #io: Promise<void> = Promise.resolve();
  #prunedAt = 0;
  #closed = false;
  readonly #syncTimer: NodeJS.Timeout | undefined;

  private constructor(dir: string, retentionDays: number | undefined, fsyncMs: number, now: () => number, beforeCount: FileUsageLogOptions['beforeCount']) {
    this.#dir = dir;
    this.#beforeCount = beforeCount;
    this.#retentionMs = retentionMs(retentionDays);
    this.#now = now;
    if (fsyncMs > 0) {
      this.#syncTimer = setInterval(() => { void this.#sync().catch(() => undefined); }, fsyncMs);
      this.#syncTimer.unref();
    }
  }

  /** Opens the day files under `<storeDir>/usage`, migrating an earlier version's usage.jsonl. */
  static async open(storeDir: string, opts: FileUsageLogOptions = {}): Promise<FileUsageLog> {
    const dir = join(storeDir, USAGE_DIR);
    await migrateLegacy(storeDir, dir, dayName);
    await makeDirs(dir);
    const log = new FileUsageLog(dir, opts.retentionDays, opts.fsyncMs ?? 1000, opts.now ?? Date.now, opts.beforeCount);
    for (const name of await readdir(dir)) {
      const m = DAY_FILE.exec(name);
      if (m !== null) log.#days.add(Math.floor(Date.parse(`${m[1]}T00:00:00Z`) / DAY_MS));
    }
    await log.#prune(log.#now());
    // Counted in the background, newest day first: the store serves at once (records, debits);
    // a totals query waits for the days of its range only, filtered pages scan a day meanwhile.
    // Each day is counted up to its size now: lines written later are counted as written.
    const sizes = new Map<number, number>();
    const cutoff = log.#cutoff();
    for (const day of log.#days) {
      const size = await fileSize(join(dir, dayName(day)));
      if ((day + 1) * DAY_MS <= cutoff || size === 0) continue;
      sizes.set(day, size);
      log.#uncounted.set(day, uncounted());
    }
    log.#counted = log.#countAll(sizes);
    log.#counted.catch(() => undefined);
    return log;
  }

  #cutoff(): number { return this.#now() - this.#retentionMs; }

  record(r: UsageRecord): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('store closed'));
    const day = Math.floor(r.at / DAY_MS);
    if ((day + 1) * DAY_MS <= this.#cutoff()) return Promise.resolve(); // past retention already
    const line = `${JSON.stringify(r)}\n`;
    if (this.#pending === null) {
      const lines: Array<[number, string, UsageRecord]> = [];
      this.#pending = lines;
      this.#pendingDone = this.#io.then(() => this.#write(lines));
      // A failed write rejects its own records only; later ones are tried again.
      this.#io = this.#pendingDone.catch(() => undefined);
    }
    this.#pending.push([day, line, r]);
    return this.#pendingDone;
  }

  async #write(lines: Array<[number, string, UsageRecord]>): Promise<void> {
    if (this.#pending === lines) this.#pending = null;
    const now = this.#now();
    if (now - this.#prunedAt >= PRUNE_EVERY_MS) await this.#prune(now);
    const byDay = new Map<number, Array<[Buffer, UsageRecord]>>();
    for (const [day, line, r] of lines) {
      let l = byDay.get(day);
      if (l === undefined) byDay.set(day, (l = []));
      l.push([Buffer.from(line), r]);
    }
    const landed = new Set<UsageRecord>();
    let day: number | undefined;
    try {
      for (const [d, dayLines] of byDay) {
        day = d;
        const h = await this.#handle(d);
        const buf = Buffer.concat(dayLines.map(([line]) => line));
        let off = 0;
        let whole = 0;
        let end = 0;
        while (off < buf.length) {
          off += (await h.fh.write(buf, off, buf.length - off)).bytesWritten;
          h.dirty = true;
          // Each line now wholly in the file is read by every query: it counts from here on.
          for (; whole < dayLines.length && end + dayLines[whole]![0].length <= off; whole++) {
            const [line, r] = dayLines[whole]!;
            this.#kept(d, r, h.size, h.size + line.length);
            h.size += line.length;
            end += line.length;
            landed.add(r);
          }
        }
        // store.fsync_ms: 0 syncs before acknowledging, as the journal does.
        if (this.#syncTimer === undefined) {
          h.dirty = false;
          await h.fh.datasync();
        }
      }
    } catch (e) {
      // The handle may end in a torn line: closed, the next write reopens it and closes it off.
      const h = day === undefined ? undefined : this.#handles.get(day);
      if (h !== undefined) {
        this.#handles.delete(day!);
        await h.fh.close().catch(() => undefined);
      }
      throw new UsageWriteError(e, landed);
    }
  }

  /** Record `r`, now in day `day`'s file at bytes [start, end): counted in the totals. */
  #kept(day: number, r: UsageRecord, start: number, end: number): void {
    this.#totals.add(r);
    let p = this.#postings.get(day);
    if (p === undefined) this.#postings.set(day, (p = new DayPostings()));
    p.add(r, start, end - start);
  }

  /** The append handle of `day`, opened (and a torn last line closed off) when first needed. */
  async #handle(day: number): Promise<Handle> {
    let h = this.#handles.get(day);
    if (h !== undefined) return h;
    const fh = await open(join(this.#dir, dayName(day)), 'a+');
    let size: number;
    try {
      size = (await fh.stat()).size;
      if (size > 0) {
        const last = Buffer.alloc(1);
        await fh.read(last, 0, 1, size - 1);
        if (last[0] !== 0x0a) size += (await fh.write('\n')).bytesWritten;
      }
    } catch (e) {
      await fh.close();
      throw e;
    }
    h = { fh, dirty: true, size };
    this.#handles.set(day, h);
    this.#days.add(day);
    // Writes go to today (and a late record to yesterday): older handles are closed (never
    // the one just opened, though it be the oldest: a late record into an older day).
    if (this.#handles.size > 3) {
      const oldest = Math.min(...[...this.#handles.keys()].filter((d) => d !== day));
      const o = this.#handles.get(oldest)!;
      this.#handles.delete(oldest);
      await closeHandle(o);
    }
    return h;
  }

  /** Deletes the files of days wholly past retention. */
  async #prune(now: number): Promise<void> {
    this.#prunedAt = now;
    const cutoff = now - this.#retentionMs;
    for (const day of [...this.#days]) {
      if ((day + 1) * DAY_MS > cutoff) continue;
      const h = this.#handles.get(day);
      if (h !== undefined) {
        this.#handles.delete(day);
        await h.fh.close();
      }
      await rm(join(this.#dir, dayName(day)), { force: true });
      this.#days.delete(day);
      this.#postings.delete(day);
    }
    this.#totals.prune(cutoff);
  }

  /**
   * Counts the records the files held on open into the totals and postings (totals live in this
   * process only, and the files, read once, are what they sum), newest day first, each day
   * marked counted as it completes. Each day is read up to its size on open: its later lines
   * were counted as they were written (#kept), so every record counts once. A day's postings
   * from the file go before those of lines written meanwhile, so each list stays in file order.
   */
  async #countAll(sizes: Map<number, number>): Promise<void> {
    try {
      for (const day of [...sizes.keys()].sort((a, b) => b - a)) {
        await this.#beforeCount?.(day);
        if (!(await this.#countDay(day, sizes.get(day)!))) break;
        this.#uncounted.get(day)?.resolve();
        this.#uncounted.delete(day);
      }
    } catch (e) {
      this.#abandonCount(e instanceof Error ? e : new Error(String(e)));
      throw e;
    }
    this.#abandonCount(new Error('store closed'));
  }

  /** Fails whatever waits for a day not counted (the count failed, or the store closed). */
  #abandonCount(e: Error): void {
    for (const u of this.#uncounted.values()) u.reject(e);
    this.#uncounted.clear();
  }

  /** Counts day `day`'s file up to byte `size`; false: the store closed midway. */
  async #countDay(day: number, size: number): Promise<boolean> {
    const found = new DayPostings();
    let pos: string | undefined;
    read: for (;;) {
      if (this.#closed) return false;
      // Small steps, letting requests in between: the count must not stall the gateway.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const { entries, done } = await this.read(day, pos, 2000);
      for (const e of entries) {
        const start = pos === undefined ? 0 : Number(pos);
        if (Number(e.pos) > size) break read;
        pos = e.pos;
        if (e.record === undefined) continue;
        this.#totals.add(e.record);
        found.add(e.record, start, Number(e.pos) - start);
      }
      if (done || entries.length === 0) break;
    }
    if (!this.#days.has(day)) return true; // pruned meanwhile
    const live = this.#postings.get(day);
    if (live !== undefined) found.append(live);
    this.#postings.set(day, found);
    return true;
  }

  /** Waits until the days of hours [since, until) found on open are counted. */
  async #countedFor(since: number, until: number): Promise<void> {
    if (this.#uncounted.size === 0) return;
    const { from, to } = hoursOf(since, until);
    if (from >= to) return;
    const first = Math.floor(from / 24);
    const last = Math.floor((to - 1) / 24);
    const waits: Array<Promise<void>> = [];
    for (const [day, u] of this.#uncounted) if (day >= first && day <= last) waits.push(u.done);
    await Promise.all(waits);
  }

  /** A filtered look through the day's postings: only the lines of the shortest list are read. */
  async select(bucket: number, f: UsageFilter, pos: string | undefined, max: number): Promise<Selection> {
    await this.#io; // every record acknowledged so far is in its file and its postings
    if (this.#uncounted.has(bucket)) {
      // The day's postings are not whole until its file is counted: its lines are read.
      const { entries, done } = await this.read(bucket, pos, max);
      const last = entries[entries.length - 1];
      return { entries: entries.filter((e) => e.record !== undefined && fits(e.record, f)), examined: entries.length, pos: last?.pos ?? pos, done: done || last === undefined };
    }
    const list = this.#postings.get(bucket)?.shortest(f);
    if (list === undefined) return { entries: [], examined: 0, pos, done: true };
    const from = list.after(pos === undefined ? 0 : Number(pos));
    const to = Math.min(list.length, from + Math.min(max, SELECT_READS));
    if (from >= to) return { entries: [], examined: 0, pos, done: true };
    const entries = await readLinesAt(join(this.#dir, dayName(bucket)), Array.from({ length: to - from }, (_, j) => list.at(from + j)));
    if (entries.length === 0) return { entries: [], examined: 0, pos, done: true }; // the file is gone
    this.reads.n += entries.length;
    return { entries, examined: entries.length, pos: entries[entries.length - 1]!.pos, done: to >= list.length };
  }

  async hourly(since: number, until: number, account: string | undefined): Promise<HourTotals[]> {
    await this.#countedFor(since, until);
    await this.#io; // every record acknowledged so far is counted
    this.#totals.prune(this.#cutoff());
    return this.#totals.hourly(since, until, account);
  }

  async top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): Promise<TopRow[]> {
    await this.#countedFor(since, until);
    await this.#io;
    this.#totals.prune(this.#cutoff());
    return this.#totals.top(by, since, until, limit, account);
  }

  async totals(q: TotalsQuery): Promise<TotalsRow[]> {
    await this.#countedFor(q.since, q.until);
    await this.#io;
    this.#totals.prune(this.#cutoff());
    return this.#totals.read(q);
  }

  async #sync(): Promise<void> {
    for (const h of this.#handles.values()) {
      if (!h.dirty) continue;
      h.dirty = false;
      await h.fh.datasync();
    }
  }

  async list(from: number, to: number): Promise<number[]> {
    await this.#io; // every record acknowledged so far is in its file
    return [...this.#days].filter((d) => d >= from && d <= to).sort((a, b) => a - b);
  }

  async read(bucket: number, pos: string | undefined, max: number): Promise<{ entries: Entry[]; done: boolean }> {
    const read = await readLines(join(this.#dir, dayName(bucket)), pos === undefined ? 0 : Number(pos), max);
    this.reads.n += read.entries.length;
    return read;
  }

  report(account: string | undefined, since: number): Promise<UsageReport> {
    const now = this.#now();
    return reportOf(this, account, since, visibleFrom(now - this.#retentionMs, DAY_MS), now);
  }

  page(q: UsageQuery): Promise<UsagePage> {
    return pageOf(this, q, this.#cutoff());
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#counted.catch(() => undefined);
    if (this.#syncTimer !== undefined) clearInterval(this.#syncTimer);
    await this.#io;
    const handles = [...this.#handles.values()];
    this.#handles.clear();
    for (const h of handles) await closeHandle(h);
  }
}

function fits(r: UsageRecord, f: UsageFilter): boolean {
  return (f.account === undefined || r.account === f.account) && (f.keyId === undefined || r.key_id === f.keyId) && (f.model === undefined || r.model === f.model);
}

async function fileSize(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
}

async function closeHandle(h: Handle): Promise<void> {
  try {
    if (h.dirty) await h.fh.datasync();
  } finally {
    await h.fh.close();
  }
}
