// The Redis store's audit log (CONTRACT sections 12 and 21). The log is one stream, P{audit},
// one entry per event (field "e" = the event's JSON), never trimmed; a page reads newest first
// (XREVRANGE) and its cursor is the last id it gave, read past exclusively for the next page.
//
// A write through the admin API or the console must be recorded in the same step as the write:
// one script. But every script touches keys of one hash tag (one Cluster slot: ./store.ts's
// header), and a write lives in its account's slot (P{acct:A}), or a session's (P{sess:S}),
// never in {audit}. So the write's script also appends its event to an OUTBOX in its own slot
// (the stream `<key>:audit` beside the script's key, e.g. P{acct:A}:audit): the write and its
// event land together or not at all, whatever the fault (a Redis paused past the timeout runs
// both when it resumes). The events are then moved from the outbox to P{audit}:
//   1. before the write, its outbox is named in P{audit}:outboxes (a zset, the time it was last
//      named): should the move below fail, the outbox is still found;
//   2. after the write, its outbox is read and each event moved to P{audit} by a script that
//      remembers what it moved (P{audit}:moved, a zset of "<outbox> <entry id>" for a day), so
//      a move repeated after a fault adds nothing, then the entry is deleted from the outbox;
//   3. every listing first moves what the named outboxes still hold (a fault in step 2 leaves
//      events there), and forgets an outbox found empty that was last named OUTBOX_KEEP_MS ago.
// An outbox is named again by every write into it, so it is forgotten only once empty and idle;
// a write whose script ran more than OUTBOX_KEEP_MS after it named its outbox (a Redis paused
// that long with the script unread in its socket) would leave its event in the outbox until the
// next write there moves it. A moved event's entry id is the time of its move: the log's order
// is the order events reached it, almost always the order of their writes; `at` is the write's.
// The since filter is by the event's time, which the entry id's milliseconds follow (both this
// instant's clock: Redis's and the gateway's may differ a little, so the filter also checks `at`).
//
// With store.wait_replicas, a move is confirmed by the replicas before its entry leaves the
// outbox (the two keys may be on two primaries of a Cluster: a failover of the log's must not
// lose an event whose outbox entry is gone). Events without a write of their own (sign-ins,
// config checks and reloads) go to P{audit} directly (append).

import type { RedisClient } from './connect.js';
import type { ReplicaWait } from './wait.js';
import { requireAuditEvent, requireAuditQuery, toAuditEvent } from '../audit-rules.js';
import type { AuditEvent, AuditPage, AuditQuery } from '../types.js';

const STREAM_ID = /^\d{1,20}-\d{1,20}$/;

/** An outbox found empty is forgotten once it was last named this long ago. */
export const OUTBOX_KEEP_MS = 10 * 60_000;
/** How long a moved event is remembered (a move repeated after a fault within it adds nothing). */
const MOVED_KEEP_MS = 86_400_000;
/** Events moved per read of an outbox. */
const MOVE_BATCH = 100;

/**
 * The start of every script that records an audit event: its last key is the outbox, its first
 * argument the event's JSON ('' for none), both taken off KEYS and ARGV so that the script's
 * own keys and arguments keep their positions. The script calls audited() where it has done
 * what its caller will answer as done.
 */
const PRELUDE = `local audit_outbox, audit_event = table.remove(KEYS), table.remove(ARGV, 1)
local function audited() if audit_event ~= '' then redis.call('XADD', audit_outbox, '*', 'e', audit_event) end end
`;

/** A script that records an audit event (see PRELUDE); `keys` counts its own keys, not the outbox. */
export function audited(s: { keys: number; lua: string }): { keys: number; lua: string } {
  return { keys: s.keys + 1, lua: PRELUDE + s.lua };
}

/** The outbox of a script whose keys begin with `tagged` (e.g. P{acct:A}): in the same slot. */
export function outboxOf(tagged: string): string {
  return `${tagged}:audit`;
}

export interface AuditScripts {
  tgAuditName(outboxes: string, outbox: string, now: string): Promise<unknown>;
  tgAuditMove(log: string, moved: string, member: string, event: string, now: string, forgetBefore: string): Promise<unknown>;
  tgAuditForget(outboxes: string, outbox: string, before: string): Promise<unknown>;
}

export const AUDIT_SCRIPTS: Record<keyof AuditScripts, { keys: number; lua: string }> = {
  // Names an outbox (step 1), with the later of the two times.
  tgAuditName: { keys: 1, lua: `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s == false or tonumber(s) < tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) end
return 1` },
  // Moves one event (step 2) unless moved before: 1 moved, 0 moved before.
  tgAuditMove: { keys: 2, lua: `
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('XADD', KEYS[1], '*', 'e', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
return 1` },
  // Forgets an outbox last named before ARGV[2] (step 3).
  tgAuditForget: { keys: 1, lua: `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) < tonumber(ARGV[2]) then redis.call('ZREM', KEYS[1], ARGV[1]) return 1 end
return 0` },
};

export class RedisAudit {
  readonly #redis: RedisClient & AuditScripts;
  readonly #key: string;
  readonly #outboxes: string;
  readonly #moved: string;
  readonly #wait: ReplicaWait | null;

  constructor(redis: RedisClient & AuditScripts, prefix: string, wait: ReplicaWait | null = null) {
    this.#redis = redis;
    this.#wait = wait;
    this.#key = `${prefix}{audit}`;
    this.#outboxes = `${prefix}{audit}:outboxes`;
    this.#moved = `${prefix}{audit}:moved`;
  }

  /** An event with no write of its own: straight to the log. */
  async append(e: AuditEvent): Promise<void> {
    await this.#redis.xadd(this.#key, '*', 'e', JSON.stringify(requireAuditEvent(e)));
  }

  /**
   * Runs a write whose script records `e` in `outbox` (see the header): `write` gets the
   * event's JSON ('' without one) as its script's argument. The outbox is named first; once the
   * write is done its events are moved to the log, and a failure to move them is left to the
   * next listing (the event is in the store: the write is answered as done).
   */
  async around<T>(outbox: string, e: AuditEvent | undefined, write: (event: string) => Promise<T>): Promise<T> {
    if (e === undefined) return write('');
    const event = JSON.stringify(requireAuditEvent(e));
    await this.#redis.tgAuditName(this.#outboxes, outbox, String(Date.now()));
    const result = await write(event);
    await this.#move(outbox).catch(() => undefined);
    return result;
  }

  /** Moves every event of `outbox` to the log. */
  async #move(outbox: string): Promise<void> {
    for (;;) {
      const entries = await this.#redis.xrange(outbox, '-', '+', 'COUNT', MOVE_BATCH);
      for (const [id, fields] of entries) {
        const i = fields.indexOf('e');
        const now = Date.now();
        const args = [`${outbox} ${id}`, fields[i + 1]!, String(now), String(now - MOVED_KEEP_MS)] as const;
        if (i >= 0) {
          if (this.#wait !== null) await this.#wait.eval(AUDIT_SCRIPTS.tgAuditMove.lua, [this.#key, this.#moved], [...args]);
          else await this.#redis.tgAuditMove(this.#key, this.#moved, ...args);
        }
        await this.#redis.xdel(outbox, id);
      }
      if (entries.length < MOVE_BATCH) return;
    }
  }

  /**
   * Step 3: the events every named outbox still holds are moved; idle empty outboxes are
   * forgotten. An outbox that cannot be moved now (its node down, a WAIT unconfirmed) keeps its
   * events for the next listing: the log is read as it stands.
   */
  async #sweep(): Promise<void> {
    const named = await this.#redis.zrange(this.#outboxes, 0, -1, 'WITHSCORES');
    const idle = Date.now() - OUTBOX_KEEP_MS;
    const outboxes: Array<[string, number]> = [];
    for (let i = 0; i + 1 < named.length; i += 2) outboxes.push([named[i]!, Number(named[i + 1])]);
    await Promise.all(outboxes.map(async ([outbox, at]) => {
      try {
        await this.#move(outbox);
        if (at < idle) await this.#redis.tgAuditForget(this.#outboxes, outbox, String(idle));
      } catch {
        // Moved by a later listing.
      }
    }));
  }

  async list(q: AuditQuery): Promise<AuditPage> {
    requireAuditQuery(q);
    if (q.cursor !== undefined && !STREAM_ID.test(q.cursor)) throw new RangeError('not a cursor of this audit log');
    // A later page's events are older than its cursor: what a sweep moves now goes above it.
    if (q.cursor === undefined) await this.#sweep();
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
