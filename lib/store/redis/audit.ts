// The Redis store's audit log (CONTRACT section 12): one stream, P{audit}, one entry per event
// (field "e" = the event's JSON), never trimmed. Entries are Redis's own ids (XADD *), which
// grow with time; a page reads newest first (XREVRANGE) and its cursor is the last id it gave,
// read past exclusively for the next page. The since filter is by the event's time, which the
// entry id's milliseconds follow (both this instant's clock: Redis's and the gateway's may differ
// a little, so the filter also checks `at`).

import type { RedisClient } from './connect.js';
import { requireAuditEvent, requireAuditQuery, toAuditEvent } from '../rules.js';
import type { AuditEvent, AuditPage, AuditQuery } from '../types.js';

const STREAM_ID = /^\d{1,20}-\d{1,20}$/;

export class RedisAudit {
  readonly #redis: RedisClient;
  readonly #key: string;

  constructor(redis: RedisClient, prefix: string) {
    this.#redis = redis;
    this.#key = `${prefix}{audit}`;
  }

  async append(e: AuditEvent): Promise<void> {
    await this.#redis.xadd(this.#key, '*', 'e', JSON.stringify(requireAuditEvent(e)));
  }

  async list(q: AuditQuery): Promise<AuditPage> {
    requireAuditQuery(q);
    if (q.cursor !== undefined && !STREAM_ID.test(q.cursor)) throw new RangeError('not a cursor of this audit log');
    const end = q.cursor === undefined ? '+' : `(${q.cursor}`;
    // A minute of slack for the two clocks; `at` decides.
    const start = String(Math.max(0, q.since - 60_000));
    const events: AuditEvent[] = [];
    let pos = end;
    let last: string | null = null;
    for (;;) {
      const page = await this.#redis.xrevrange(this.#key, pos, start, 'COUNT', q.limit + 1);
      for (const [id, fields] of page) {
        const i = fields.indexOf('e');
        let parsed: unknown;
        try { parsed = i >= 0 ? JSON.parse(fields[i + 1]!) : undefined; } catch { parsed = undefined; }
        const e = toAuditEvent(parsed);
        if (e === undefined || e.at < q.since) continue;
        if (events.length === q.limit) return { events, next_cursor: last };
        events.push(e);
        last = id;
      }
      if (page.length < q.limit + 1) return { events, next_cursor: null };
      pos = `(${page[page.length - 1]![0]}`;
    }
  }
}
