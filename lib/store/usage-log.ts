// Usage records of the memory store (./memory.ts), for usage reports.
//
// With a directory: one JSON line per record appended to `<dir>/usage.jsonl`, a file of its
// own beside the journal that is never compacted (it grows with traffic; rotate or trim it
// offline while the store is closed). Appends are written in call order, concurrent ones
// grouped into one write; record() resolves once its line is written to the kernel. The file
// is not fsync'ed per write (records are reports, not money), only on close. A torn last line
// left by a crash is closed off with a newline on open and skipped when reading, like any line
// that does not parse. Reports stream the whole file.
//
// Without a directory: the last RING_SIZE records in memory.

import { createReadStream } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { UsageRecord, UsageReport } from './types.js';

export const USAGE_FILE = 'usage.jsonl';
export const RING_SIZE = 100_000;

type Totals = UsageReport['by_model'][string];

const num = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The fields a report needs, checked: a line that lacks them is skipped. */
interface Counted { at: number; account: string; model: string; prompt_tokens: number; completion_tokens: number; units: number }

function counted(v: unknown): Counted | undefined {
  return isRecord(v) && num(v.at) && typeof v.account === 'string' && typeof v.model === 'string'
    && num(v.prompt_tokens) && num(v.completion_tokens) && num(v.units)
    ? { at: v.at, account: v.account, model: v.model, prompt_tokens: v.prompt_tokens, completion_tokens: v.completion_tokens, units: v.units }
    : undefined;
}

export function validateUsageRecord(r: UsageRecord): void {
  if (counted(r) === undefined || typeof r.request_id !== 'string') {
    throw new TypeError('a usage record needs request_id, at, account, model and numeric tokens and units');
  }
}

/** Sums records into a report. */
class Report {
  readonly #byModel = new Map<string, Totals>();
  readonly #total: Totals = { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
  readonly #account: string | undefined;
  readonly #since: number;

  constructor(account: string | undefined, since: number) {
    this.#account = account;
    this.#since = since;
  }

  add(r: Counted): void {
    if (r.at < this.#since || (this.#account !== undefined && r.account !== this.#account)) return;
    let m = this.#byModel.get(r.model);
    if (m === undefined) this.#byModel.set(r.model, (m = { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 }));
    for (const t of [m, this.#total]) {
      t.requests += 1;
      t.prompt_tokens += r.prompt_tokens;
      t.completion_tokens += r.completion_tokens;
      t.units += r.units;
    }
  }

  result(): UsageReport {
    const by_model = Object.fromEntries([...this.#byModel].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    return { ...this.#total, by_model };
  }
}

export interface UsageLog {
  record(r: UsageRecord): Promise<void>;
  report(account: string | undefined, since: number): Promise<UsageReport>;
  close(): Promise<void>;
}

/** The last RING_SIZE records, in memory. */
export class RingUsageLog implements UsageLog {
  readonly #ring: Counted[] = [];
  #next = 0;

  record(r: UsageRecord): Promise<void> {
    const c = counted(r);
    if (c === undefined) return Promise.resolve();
    if (this.#ring.length < RING_SIZE) this.#ring.push(c);
    else this.#ring[this.#next] = c;
    this.#next = (this.#next + 1) % RING_SIZE;
    return Promise.resolve();
  }

  report(account: string | undefined, since: number): Promise<UsageReport> {
    const report = new Report(account, since);
    for (const r of this.#ring) report.add(r);
    return Promise.resolve(report.result());
  }

  close(): Promise<void> { return Promise.resolve(); }
}

/** Records appended to `<dir>/usage.jsonl`. */
export class FileUsageLog implements UsageLog {
  readonly #path: string;
  readonly #fh: FileHandle;
  /** Lines waiting for the next write, and the promise of that write. */
  #pending: string[] | null = null;
  #pendingDone: Promise<void> = Promise.resolve();
  /** Tail of the serialized writes. */
  #io: Promise<void> = Promise.resolve();
  #closed = false;

  private constructor(path: string, fh: FileHandle) {
    this.#path = path;
    this.#fh = fh;
  }

  static async open(dir: string): Promise<FileUsageLog> {
    const path = join(dir, USAGE_FILE);
    const fh = await open(path, 'a+');
    try {
      const { size } = await fh.stat();
      if (size > 0) {
        const last = Buffer.alloc(1);
        await fh.read(last, 0, 1, size - 1);
        if (last[0] !== 0x0a) await fh.write('\n');
      }
    } catch (e) {
      await fh.close();
      throw e;
    }
    return new FileUsageLog(path, fh);
  }

  record(r: UsageRecord): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('store closed'));
    const line = `${JSON.stringify(r)}\n`;
    if (this.#pending === null) {
      const lines: string[] = [];
      this.#pending = lines;
      this.#pendingDone = this.#io.then(() => this.#write(lines));
      // A failed write rejects its own records only; later ones are tried again.
      this.#io = this.#pendingDone.catch(() => undefined);
    }
    this.#pending.push(line);
    return this.#pendingDone;
  }

  async #write(lines: string[]): Promise<void> {
    if (this.#pending === lines) this.#pending = null;
    const buf = Buffer.from(lines.join(''));
    let off = 0;
    while (off < buf.length) off += (await this.#fh.write(buf, off, buf.length - off)).bytesWritten;
  }

  async report(account: string | undefined, since: number): Promise<UsageReport> {
    await this.#io; // every record acknowledged so far is in the file
    const report = new Report(account, since);
    const lines = createInterface({ input: createReadStream(this.#path, { encoding: 'utf8' }), crlfDelay: Infinity });
    for await (const line of lines) {
      if (line === '') continue;
      let v: unknown;
      try { v = JSON.parse(line); } catch { continue; }
      const c = counted(v);
      if (c !== undefined) report.add(c);
    }
    return report.result();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#io;
    try {
      await this.#fh.datasync();
    } finally {
      await this.#fh.close();
    }
  }
}
