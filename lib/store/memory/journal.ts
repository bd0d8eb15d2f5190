// The durable half of the memory store: an append-only journal of JSON lines plus a snapshot,
// kept in one directory. It knows nothing about accounts; it stores numbered entries.
//
// - Every entry gets a sequence number. append() resolves once the entry's line has been
//   written to the kernel (it then survives the process being killed); concurrent appends are
//   grouped into one write, and writes happen strictly in order.
// - fsyncMs bounds what a power loss may take: the file is fdatasync'ed at most every fsyncMs
//   after writes (like redis `appendfsync everysec`); 0 syncs each batch before acknowledging.
// - Compaction writes the whole state to snapshot.json (temp file, fsync, atomic rename, fsync
//   of the directory), then empties the journal. The snapshot records the last sequence number
//   it contains and replay skips entries up to it, so a crash between the rename and the
//   truncation cannot apply anything twice.
// - Recovery ignores a torn last line (one without its newline) and cuts it off the file.

import { open, readFile, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDirs } from './make-dirs.js';

export const JOURNAL_FILE = 'journal.jsonl';
export const SNAPSHOT_FILE = 'snapshot.json';
const SNAPSHOT_FORMAT = 'tollgate-store-snapshot';

export interface JournalOptions {
  dir: string;
  fsyncMs: number;
  /** Compact once the journal passes this many bytes (and the size of the last snapshot). */
  compactBytes: number;
  /** The whole state, as a JSON-serializable value, at the moment of the call. */
  snapshot: () => unknown;
  /** Errors of background work (periodic fsync, compaction); the journal keeps going. */
  onError: (err: Error) => void;
}

export interface Recovered {
  /** The snapshot's state, if there is a snapshot. */
  state: unknown;
  /** Journal entries newer than the snapshot, in order, each with its `seq` field. */
  entries: Record<string, unknown>[];
}

interface Batch { data: string[]; done: Promise<void>; resolve: () => void; reject: (e: Error) => void }

function newBatch(): Batch {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const done = new Promise<void>((res, rej) => { resolve = res; reject = rej; });
  return { data: [], done, resolve, reject };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

async function syncDir(dir: string): Promise<void> {
  let h: FileHandle | undefined;
  try {
    h = await open(dir, 'r');
    await h.sync();
  } catch {
    // Some platforms cannot fsync a directory; the rename is still atomic there.
  } finally {
    await h?.close();
  }
}

async function writeAll(fh: FileHandle, buf: Buffer): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const { bytesWritten } = await fh.write(buf, off, buf.length - off);
    off += bytesWritten;
  }
}

export class Journal {
  readonly #opts: JournalOptions;
  readonly #fh: FileHandle;
  #seq: number;
  #bytes: number;
  #snapshotBytes: number;
  /** Entries waiting for the next write. */
  #batch: Batch | null = null;
  /** The batch being written now. */
  #writing: Batch | null = null;
  /** Tail of the serialized file operations (writes, syncs, compactions). */
  #io: Promise<void> = Promise.resolve();
  #dirty = false;
  #syncTimer: NodeJS.Timeout | null = null;
  #failed: Error | null = null;
  #closed = false;

  private constructor(opts: JournalOptions, fh: FileHandle, seq: number, bytes: number, snapshotBytes: number) {
    this.#opts = opts;
    this.#fh = fh;
    this.#seq = seq;
    this.#bytes = bytes;
    this.#snapshotBytes = snapshotBytes;
  }

  /** Opens (creating) the directory and recovers what it holds. */
  static async open(opts: JournalOptions): Promise<{ journal: Journal; recovered: Recovered }> {
    await makeDirs(opts.dir);
    await rm(join(opts.dir, `${SNAPSHOT_FILE}.tmp`), { force: true });

    let state: unknown;
    let seq = 0;
    let snapshotBytes = 0;
    const snapText = await readFile(join(opts.dir, SNAPSHOT_FILE), 'utf8').catch((e: NodeJS.ErrnoException) => {
      if (e.code === 'ENOENT') return undefined;
      throw e;
    });
    if (snapText !== undefined) {
      const snap: unknown = JSON.parse(snapText);
      if (!isRecord(snap) || snap.format !== SNAPSHOT_FORMAT || snap.version !== 1 || typeof snap.seq !== 'number') {
        throw new Error(`${join(opts.dir, SNAPSHOT_FILE)}: not a store snapshot`);
      }
      state = snap.state;
      seq = snap.seq;
      snapshotBytes = Buffer.byteLength(snapText);
    }

    const path = join(opts.dir, JOURNAL_FILE);
    const fh = await open(path, 'a+');
    try {
      const raw = await fh.readFile();
      // Only whole lines count: a write cut short by a crash has no newline yet.
      const end = raw.lastIndexOf(0x0a) + 1;
      if (end < raw.length) {
        await fh.truncate(end);
        await fh.datasync();
      }
      const entries: Record<string, unknown>[] = [];
      const lines = raw.subarray(0, end).toString('utf8').split('\n');
      lines.pop();
      lines.forEach((line, i) => {
        let v: unknown;
        try { v = JSON.parse(line); } catch { v = undefined; }
        if (!isRecord(v) || typeof v.seq !== 'number') throw new Error(`${path}:${i + 1}: corrupt journal line`);
        if (v.seq <= seq) return; // already in the snapshot
        seq = v.seq;
        entries.push(v);
      });
      await syncDir(opts.dir);
      const journal = new Journal(opts, fh, seq, end, snapshotBytes);
      return { journal, recovered: { state, entries } };
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  /** Compacts now if the journal has grown past its threshold (call once after replaying). */
  compactIfLarge(): Promise<void> {
    this.#io = this.#io.then(() => this.#maybeCompact());
    return this.#io;
  }

  /** Journals one entry; resolves once it is written (and synced when fsyncMs is 0). */
  append(entry: Record<string, unknown>): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    if (this.#closed) return Promise.reject(new Error('store closed'));
    const line = `${JSON.stringify({ seq: ++this.#seq, ...entry })}\n`;
    if (this.#batch === null) {
      const batch = newBatch();
      this.#batch = batch;
      this.#io = this.#io.then(() => this.#flush(batch));
    }
    this.#batch.data.push(line);
    return this.#batch.done;
  }

  /** Resolves once everything appended so far is written: nothing unacknowledged is then visible. */
  barrier(): Promise<void> {
    if (this.#failed !== null) return Promise.reject(this.#failed);
    return (this.#batch ?? this.#writing)?.done ?? Promise.resolve();
  }

  /** The error that stopped the journal, if any: the state in memory is then ahead of the disk. */
  get failed(): Error | null { return this.#failed; }

  async #flush(batch: Batch): Promise<void> {
    if (this.#batch === batch) this.#batch = null;
    this.#writing = batch;
    try {
      if (this.#failed !== null) throw this.#failed;
      const buf = Buffer.from(batch.data.join(''));
      await writeAll(this.#fh, buf);
      this.#bytes += buf.length;
      if (this.#opts.fsyncMs <= 0) await this.#fh.datasync();
      else this.#markDirty();
      batch.resolve();
    } catch (e) {
      this.#failed ??= e instanceof Error ? e : new Error(String(e));
      batch.reject(this.#failed);
      return;
    } finally {
      if (this.#writing === batch) this.#writing = null;
    }
    await this.#maybeCompact();
  }

  #markDirty(): void {
    this.#dirty = true;
    if (this.#syncTimer !== null) return;
    this.#syncTimer = setTimeout(() => {
      this.#syncTimer = null;
      this.#io = this.#io.then(() => this.#sync().catch((e: Error) => this.#opts.onError(e)));
    }, this.#opts.fsyncMs);
    this.#syncTimer.unref();
  }

  async #sync(): Promise<void> {
    if (!this.#dirty) return;
    this.#dirty = false;
    await this.#fh.datasync();
  }

  async #maybeCompact(): Promise<void> {
    if (this.#failed !== null || this.#bytes <= Math.max(this.#opts.compactBytes, this.#snapshotBytes)) return;
    try {
      await this.#compact();
    } catch (e) {
      // The journal is intact, so nothing is lost; try again once it has doubled.
      this.#snapshotBytes = this.#bytes * 2;
      this.#opts.onError(e instanceof Error ? e : new Error(String(e)));
    }
  }

  async #compact(): Promise<void> {
    // Entries appended but not yet written are in the state already and numbered up to #seq;
    // they will still be written to the new journal and skipped at replay.
    const body = JSON.stringify({ format: SNAPSHOT_FORMAT, version: 1, seq: this.#seq, state: this.#opts.snapshot() });
    const tmp = join(this.#opts.dir, `${SNAPSHOT_FILE}.tmp`);
    const h = await open(tmp, 'w');
    try {
      await h.writeFile(body);
      await h.sync();
    } finally {
      await h.close();
    }
    await rename(tmp, join(this.#opts.dir, SNAPSHOT_FILE));
    await syncDir(this.#opts.dir);
    await this.#fh.truncate(0);
    this.#bytes = 0;
    this.#snapshotBytes = Buffer.byteLength(body);
    this.#dirty = true;
    if (this.#opts.fsyncMs <= 0) await this.#sync();
  }

  /** Waits for pending writes, syncs and closes the file. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#syncTimer !== null) clearTimeout(this.#syncTimer);
    this.#syncTimer = null;
    await this.#io;
    try {
      if (this.#failed === null) await this.#sync();
    } finally {
      await this.#fh.close();
    }
  }
}
