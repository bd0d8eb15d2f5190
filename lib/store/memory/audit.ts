// The memory store's audit log (CONTRACT section 12): events in an array, oldest first, and
// with a store path each one appended to <path>/audit.jsonl (one JSON line, written in order,
// before appendAudit resolves), read back when the store opens. Kept whole: the log grows with
// operators' writes, not with traffic. A cursor is the position of the next (older) event.

import { open, readFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { requireAuditEvent, requireAuditQuery, toAuditEvent } from '../rules.js';
import type { AuditEvent, AuditPage, AuditQuery } from '../types.js';

export const AUDIT_FILE = 'audit.jsonl';

export class MemoryAudit {
  readonly #events: AuditEvent[] = [];
  #fh: FileHandle | null = null;
  /** Writes, strictly in order. */
  #writing: Promise<void> = Promise.resolve();

  /** Reads <dir>/audit.jsonl (a torn last line, one without its newline, is cut off the file) and keeps it open for appending. */
  async open(dir: string): Promise<void> {
    const file = join(dir, AUDIT_FILE);
    let buf = Buffer.alloc(0);
    try {
      buf = await readFile(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const end = buf.lastIndexOf(0x0a) + 1;
    for (const line of buf.subarray(0, end).toString('utf8').split('\n')) {
      if (line === '') continue;
      let parsed: unknown;
      try { parsed = JSON.parse(line); } catch { parsed = undefined; }
      const e = toAuditEvent(parsed);
      if (e === undefined) throw new Error(`${file}: a line is not an audit event`);
      this.#events.push(e);
    }
    this.#fh = await open(file, 'a');
    if (end < buf.length) await this.#fh.truncate(end);
  }

  append(e: AuditEvent): Promise<void> {
    const event = requireAuditEvent(e);
    this.#events.push(event);
    const fh = this.#fh;
    if (fh === null) return Promise.resolve();
    const line = `${JSON.stringify(event)}\n`;
    const done = this.#writing.then(async () => { await fh.write(line); });
    this.#writing = done.catch(() => undefined);
    return done;
  }

  list(q: AuditQuery): AuditPage {
    requireAuditQuery(q);
    let from = this.#events.length - 1;
    if (q.cursor !== undefined) {
      if (!/^\d{1,15}$/.test(q.cursor) || Number(q.cursor) > this.#events.length) throw new RangeError('not a cursor of this audit log');
      from = Number(q.cursor) - 1;
    }
    const events: AuditEvent[] = [];
    let i = from;
    for (; i >= 0 && events.length < q.limit; i--) {
      const e = this.#events[i]!;
      // Oldest first by position; an event earlier than since ends the page (clocks that step
      // back may leave a later one, which the next query with a smaller since finds).
      if (e.at < q.since) { i = -1; break; }
      events.push({ ...e });
    }
    const more = i >= 0 && this.#events[i]!.at >= q.since;
    return { events, next_cursor: more ? String(i + 1) : null };
  }

  async close(): Promise<void> {
    await this.#writing;
    await this.#fh?.close();
    this.#fh = null;
  }
}
