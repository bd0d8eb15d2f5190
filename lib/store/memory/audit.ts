// The memory store's audit log (CONTRACT sections 12 and 21): events in an array, oldest first,
// each recorded in the SAME journal entry as the write it describes (the entry's `audit` member,
// or an entry of its own for a write that changed nothing, e.g. a repeated credit), so that a
// crash or a failing disk leaves both or neither. The log is part of the store's state: it is
// rebuilt from the snapshot and the journal like accounts are, and each snapshot holds it whole
// (it grows with operators' writes, not with traffic). Stores written before this kept the log
// in <path>/audit.jsonl; such a file is read while no snapshot holds the log, and removed once
// one does. A cursor is the position of the next (older) event.

import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { isRecord } from '../rules.js';
import { requireAuditEvent, requireAuditQuery, toAuditEvent } from '../audit-rules.js';
import type { AuditEvent, AuditPage, AuditQuery } from '../types.js';

/** Where stores of earlier versions kept the log. */
export const LEGACY_AUDIT_FILE = 'audit.jsonl';

export class MemoryAudit {
  #events: AuditEvent[] = [];

  /** Keeps an event (live or replayed); a bad one is a RangeError of the caller. */
  add(e: AuditEvent): void {
    this.#events.push(requireAuditEvent(e));
  }

  /** The log as a snapshot holds it. */
  snapshot(): AuditEvent[] {
    return this.#events;
  }

  /** The log a snapshot held (checked as it is read back). */
  restore(v: unknown): void {
    if (!Array.isArray(v)) throw new Error('store snapshot: the audit log is not a list');
    this.#events = v.map((e) => toAuditEvent(e) ?? badEvent());
  }

  /**
   * The log of a store from before the log was journaled: <dir>/audit.jsonl (a torn last line,
   * one without its newline, is left out), when there is one.
   */
  async restoreLegacy(dir: string): Promise<void> {
    let buf: Buffer;
    try {
      buf = await readFile(join(dir, LEGACY_AUDIT_FILE));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    const end = buf.lastIndexOf(0x0a) + 1;
    for (const line of buf.subarray(0, end).toString('utf8').split('\n')) {
      if (line === '') continue;
      let parsed: unknown;
      try { parsed = JSON.parse(line); } catch { parsed = undefined; }
      const e = toAuditEvent(parsed);
      if (e === undefined) throw new Error(`${join(dir, LEGACY_AUDIT_FILE)}: a line is not an audit event`);
      this.#events.push(e);
    }
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
}

/** Removes the legacy file once a snapshot holds what it held. */
export async function removeLegacyAudit(dir: string): Promise<void> {
  await rm(join(dir, LEGACY_AUDIT_FILE), { force: true });
}

/** Whether a snapshot's state holds the audit log (snapshots from before it do not). */
export function holdsAudit(state: unknown): boolean {
  return isRecord(state) && state.audit !== undefined;
}

function badEvent(): never {
  throw new Error('store snapshot: an audit event is malformed');
}
