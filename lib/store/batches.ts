// Where files and batches are kept (CONTRACT section 18): the records, each line's outcome and a
// lease per batch. The memory store keeps them in the process, and on disk under
// `store.path`/batches when the store has a path (each record written whole to a new file then
// renamed over the old; each line's outcome appended to its batch's log), so a restarted gateway
// finds them; the Redis store shares them between instances (./redis-store.ts).

import { appendFile, mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GatewayError } from '../errors.js';

/** A file as the API shows it, and its owner. */
export interface FileRecord {
  id: string;
  object: 'file';
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
  /** Unix seconds after which it is gone (batch.retention_days). */
  expires_at: number;
  account: string;
}

export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/** Statuses of a batch a runner still has work on. */
export const ACTIVE_STATUSES: ReadonlySet<BatchStatus> = new Set(['validating', 'in_progress', 'cancelling', 'finalizing']);

export interface BatchError { code: string; line: number | null; message: string; param: string | null }

/** A batch as the API shows it, with its owner and the credential its lines run as. */
export interface BatchRecord {
  id: string;
  object: 'batch';
  endpoint: string;
  errors: { object: 'list'; data: BatchError[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
  account: string;
  /** The developer key that made it: its lines run as that key. */
  key_id: string;
}

/** When a finished batch ended (Unix seconds); undefined while it runs. */
export function endedAt(b: BatchRecord): number | undefined {
  if (ACTIVE_STATUSES.has(b.status)) return undefined;
  return b.completed_at ?? b.failed_at ?? b.expired_at ?? b.cancelled_at ?? b.created_at;
}

/**
 * Marks `b` cancelling (validating or in_progress; its runner stops starting lines): true when
 * it changed, false when it is cancelling or cancelled already; throws for a finished batch.
 */
export function markCancelling(b: BatchRecord, now: number): boolean {
  if (b.status === 'validating' || b.status === 'in_progress') {
    b.status = 'cancelling';
    b.cancelling_at = now;
    return true;
  }
  if (b.status === 'cancelling' || b.status === 'cancelled') return false;
  throw new GatewayError('invalid_value', `A batch that is ${b.status} cannot be cancelled.`);
}

/** One line's outcome: its output (or error) file line. */
export interface LineOutcome { line: number; ok: boolean; text: string }

export interface BatchStore {
  putFile(f: FileRecord, content: Buffer): Promise<void>;
  getFile(id: string): Promise<FileRecord | undefined>;
  fileContent(id: string): Promise<Buffer | undefined>;
  listFiles(account: string): Promise<FileRecord[]>;
  deleteFile(id: string): Promise<boolean>;
  /** The ids of up to `limit` files whose expires_at (Unix seconds) is at or before `now`. */
  expiredFiles(now: number, limit: number): Promise<string[]>;
  putBatch(b: BatchRecord): Promise<void>;
  getBatch(id: string): Promise<BatchRecord | undefined>;
  /** The batches not finished yet (validating, in_progress, cancelling, finalizing). */
  activeBatches(): Promise<BatchRecord[]>;
  /** Every batch (of `account`, when given), in no set order. */
  listBatches(account?: string): Promise<BatchRecord[]>;
  /** The ids of up to `limit` finished batches that ended (endedAt) at or before `before` (Unix seconds). */
  endedBatches(before: number, limit: number): Promise<string[]>;
  /** Removes a batch's record, its lines' outcomes and its lease (not its files: they expire on their own). */
  deleteBatch(id: string): Promise<void>;
  /** Adds a line's outcome; false when that line had one already (the first stands). */
  addOutcome(batch: string, o: LineOutcome): Promise<boolean>;
  outcomes(batch: string): Promise<LineOutcome[]>;
  /** How many of its lines succeeded and failed so far. */
  counts(batch: string): Promise<{ completed: number; failed: number }>;
  /** Takes or renews the lease on `batch` for `owner` for `ttlMs`; false when another holds it. */
  lease(batch: string, owner: string, ttlMs: number): Promise<boolean>;
  close(): Promise<void>;
}

const SAFE_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** The memory store's: in the process, and on disk under `dir` when given. */
export class MemoryBatchStore implements BatchStore {
  readonly #files = new Map<string, { f: FileRecord; content: Buffer }>();
  readonly #batches = new Map<string, BatchRecord>();
  readonly #outcomes = new Map<string, Map<number, LineOutcome>>();
  readonly #dir: string | null;
  /** Writes of one record, in order: a later write never lands before an earlier one. */
  readonly #writes = new Map<string, Promise<void>>();

  private constructor(dir: string | null) {
    this.#dir = dir;
  }

  static async open(path: string | null): Promise<MemoryBatchStore> {
    const store = new MemoryBatchStore(path === null ? null : join(path, 'batches'));
    if (store.#dir !== null) await store.#load(store.#dir);
    return store;
  }

  async #load(dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    for (const name of await readdir(dir)) {
      const full = join(dir, name);
      if (name.endsWith('.file.json')) {
        const f = JSON.parse(await readFile(full, 'utf8')) as FileRecord;
        const content = await readFile(join(dir, `${f.id}.data`)).catch(() => undefined);
        if (content !== undefined) this.#files.set(f.id, { f, content });
      } else if (name.endsWith('.batch.json')) {
        const b = JSON.parse(await readFile(full, 'utf8')) as BatchRecord;
        this.#batches.set(b.id, b);
      } else if (name.endsWith('.lines')) {
        const id = name.slice(0, -'.lines'.length);
        const map = new Map<number, LineOutcome>();
        // A crash mid-append leaves at most a last line cut short: it is skipped (the line is
        // run again), and ended, so the next outcome starts a line of its own.
        const text = await readFile(full, 'utf8');
        if (text !== '' && !text.endsWith('\n')) await appendFile(full, '\n');
        for (const line of text.split('\n')) {
          try {
            const o = JSON.parse(line) as LineOutcome;
            if (!map.has(o.line)) map.set(o.line, o);
          } catch { /* the cut line */ }
        }
        this.#outcomes.set(id, map);
      }
    }
  }

  #write(name: string, data: string | Buffer): Promise<void> {
    const dir = this.#dir;
    if (dir === null) return Promise.resolve();
    const prev = this.#writes.get(name) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(async () => {
      const tmp = join(dir, `${name}.tmp`);
      await writeFile(tmp, data);
      await rename(tmp, join(dir, name));
    });
    this.#writes.set(name, next);
    return next;
  }

  async putFile(f: FileRecord, content: Buffer): Promise<void> {
    if (!SAFE_ID.test(f.id)) throw new Error('bad file id');
    await this.#write(`${f.id}.data`, content);
    await this.#write(`${f.id}.file.json`, JSON.stringify(f));
    this.#files.set(f.id, { f, content });
  }

  async getFile(id: string): Promise<FileRecord | undefined> {
    return this.#files.get(id)?.f;
  }

  async fileContent(id: string): Promise<Buffer | undefined> {
    return this.#files.get(id)?.content;
  }

  async listFiles(account: string): Promise<FileRecord[]> {
    return [...this.#files.values()].map((e) => e.f).filter((f) => f.account === account);
  }

  async deleteFile(id: string): Promise<boolean> {
    if (!this.#files.delete(id)) return false;
    await this.#remove(`${id}.file.json`);
    await this.#remove(`${id}.data`);
    return true;
  }

  /** Removes a record's file, after any write of it still under way. */
  #remove(name: string): Promise<void> {
    const dir = this.#dir;
    if (dir === null) return Promise.resolve();
    const prev = this.#writes.get(name) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => rm(join(dir, name), { force: true }));
    this.#writes.set(name, next);
    return next.finally(() => { if (this.#writes.get(name) === next) this.#writes.delete(name); });
  }

  async expiredFiles(now: number, limit: number): Promise<string[]> {
    const ids: string[] = [];
    for (const { f } of this.#files.values()) {
      if (ids.length >= limit) break;
      if (f.expires_at <= now) ids.push(f.id);
    }
    return ids;
  }

  async endedBatches(before: number, limit: number): Promise<string[]> {
    const ids: string[] = [];
    for (const b of this.#batches.values()) {
      if (ids.length >= limit) break;
      const ended = endedAt(b);
      if (ended !== undefined && ended <= before) ids.push(b.id);
    }
    return ids;
  }

  async deleteBatch(id: string): Promise<void> {
    this.#batches.delete(id);
    this.#outcomes.delete(id);
    await this.#remove(`${id}.batch.json`);
    await this.#remove(`${id}.lines`);
  }

  async putBatch(b: BatchRecord): Promise<void> {
    if (!SAFE_ID.test(b.id)) throw new Error('bad batch id');
    this.#batches.set(b.id, structuredClone(b));
    await this.#write(`${b.id}.batch.json`, JSON.stringify(b));
  }

  async getBatch(id: string): Promise<BatchRecord | undefined> {
    const b = this.#batches.get(id);
    return b === undefined ? undefined : structuredClone(b);
  }

  async activeBatches(): Promise<BatchRecord[]> {
    return [...this.#batches.values()].filter((b) => ACTIVE_STATUSES.has(b.status)).map((b) => structuredClone(b));
  }

  async listBatches(account?: string): Promise<BatchRecord[]> {
    const all = [...this.#batches.values()];
    return (account === undefined ? all : all.filter((b) => b.account === account)).map((b) => structuredClone(b));
  }

  async addOutcome(batch: string, o: LineOutcome): Promise<boolean> {
    let map = this.#outcomes.get(batch);
    if (map === undefined) this.#outcomes.set(batch, map = new Map());
    if (map.has(o.line)) return false;
    map.set(o.line, o);
    if (this.#dir !== null) await appendFile(join(this.#dir, `${batch}.lines`), JSON.stringify(o) + '\n');
    return true;
  }

  async outcomes(batch: string): Promise<LineOutcome[]> {
    return [...(this.#outcomes.get(batch)?.values() ?? [])];
  }

  async counts(batch: string): Promise<{ completed: number; failed: number }> {
    let completed = 0;
    let failed = 0;
    for (const o of this.#outcomes.get(batch)?.values() ?? []) {
      if (o.ok) completed++;
      else failed++;
    }
    return { completed, failed };
  }

  /** One process owns the memory store: its lease is always its own. */
  async lease(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.#writes.values()]);
  }
}
