// One webhook's delivery lane (CONTRACT sections 15 and 21): its own queue, its own connection
// pool, its own loop, so that a receiver that hangs or answers slowly delays only its own
// deliveries, never another webhook's. Lanes share nothing but the store.
//
// The queue holds event ids, oldest due first, at most LANE_QUEUE_MAX: the lane fills it from
// the outbox's due set of its webhook, then delivers them one after another (order kept within
// the lane). Nothing is dropped when it is full: the outbox is durable, and what does not fit
// waits there until the lane has room (logged as a backlog, at most once a minute per lane).
//
// Each delivery takes the lease of its (event, webhook) pair, so instances, and lanes of one
// webhook on several instances, deliver each pair once at a time; then one attempt, bounded by
// alerts.delivery_timeout_ms, and its outcome recorded (./deliver.ts: afterAttempt).

import { Pool } from '../upstream/undici.js';
import type { AlertWebhookConfig } from '../config/types.js';
import type { Logger } from '../observe/log.js';
import type { AlertEvent, AlertOutbox } from '../store/alerts.js';
import { afterAttempt, signature, type Clock } from './retry.js';

/** Event ids a lane holds in memory at most; more due ones wait in the outbox. */
export const LANE_QUEUE_MAX = 100;
/** A lane behind by a full queue says so at most this often. */
const BACKLOG_LOG_MS = 60_000;

export interface LaneHost {
  readonly outbox: AlertOutbox;
  readonly clock: Clock;
  readonly random: () => number;
  readonly logger: Logger | undefined;
  /** The instance, as a lease's owner (a lane adds its own suffix). */
  readonly owner: string;
}

let lanes = 0;

export class Lane {
  readonly url: string;
  readonly #host: LaneHost;
  /**
   * This lane, as a lease's owner: its own, so that nothing else of this instance (the sweep, a
   * new lane of a webhook removed and added back) takes over a lease it holds.
   */
  readonly #owner: string;
  #hook: AlertWebhookConfig;
  #timeoutMs: number;
  /** Event ids, in the order they are delivered (a Set keeps insertion order). */
  readonly #queue = new Set<string>();
  #pool: Pool | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  #backlogLoggedAt = -Infinity;

  constructor(host: LaneHost, hook: AlertWebhookConfig, timeoutMs: number) {
    this.#host = host;
    this.#owner = `${host.owner}.${++lanes}`;
    this.url = hook.url;
    this.#hook = hook;
    this.#timeoutMs = timeoutMs;
  }

  /** The webhook's config in force (a reload: its secret or events may change, not its URL). */
  configure(hook: AlertWebhookConfig, timeoutMs: number): void {
    this.#hook = hook;
    if (timeoutMs === this.#timeoutMs) return;
    this.#timeoutMs = timeoutMs;
    // The pool's timeouts are the old ones: the next attempt takes a new pool (close lets an
    // attempt in flight on the old one finish).
    void this.#pool?.close().catch(() => undefined);
    this.#pool = undefined;
  }

  /** Ids queued now (tests, and the worker's sweep). */
  get queued(): number { return this.#queue.size; }

  /** Takes a due event into the queue unless it is there or the queue is full. */
  offer(id: string): void {
    if (!this.#stopped && this.#queue.size < LANE_QUEUE_MAX) this.#queue.add(id);
  }

  /** Runs a pass every pollMs (after the previous one ended) until stop(). */
  start(pollMs: number): void {
    if (this.#timer !== undefined || this.#stopped) return;
    const loop = (): void => {
      this.#timer = setTimeout(() => {
        void this.tick().finally(() => { if (!this.#stopped) loop(); });
      }, pollMs);
      this.#timer.unref();
    };
    loop();
  }

  /** One pass: fills the queue from the outbox, then delivers what it holds. Passes never overlap. */
  async tick(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
    if (this.#stopped) return;
    this.#running = this.#pass().finally(() => { this.#running = undefined; });
    return this.#running;
  }

  async #pass(): Promise<void> {
    await this.#fill();
    for (const id of this.#queue) {
      if (this.#stopped) return;
      this.#queue.delete(id);
      try {
        await this.#deliver(id);
      } catch (err) {
        this.#host.logger?.warn({ event_id: id, webhook: safeUrl(this.url), err: (err as Error).message }, 'alerts: delivery failed; retried at the next pass');
      }
    }
  }

  async #fill(): Promise<void> {
    if (this.#queue.size >= LANE_QUEUE_MAX) return;
    let ids: string[];
    try {
      ids = await this.#host.outbox.due(this.#host.clock.now(), LANE_QUEUE_MAX, this.url);
    } catch (err) {
      this.#host.logger?.warn({ webhook: safeUrl(this.url), err: (err as Error).message }, 'alerts: the outbox cannot be read; delivery waits for the store');
      return;
    }
    for (const id of ids) {
      if (this.#queue.size >= LANE_QUEUE_MAX) break;
      this.#queue.add(id);
    }
    const now = Date.now();
    if (ids.length === LANE_QUEUE_MAX && now - this.#backlogLoggedAt >= BACKLOG_LOG_MS) {
      this.#backlogLoggedAt = now;
      this.#host.logger?.warn({ webhook: safeUrl(this.url), queued: this.#queue.size },
        'alerts: webhook behind; its further due deliveries wait in the outbox (none dropped)');
    }
  }

  async #deliver(id: string): Promise<void> {
    const { outbox, clock } = this.#host;
    const owner = this.#owner;
    // Longer than one attempt can take, so the lease outlives the work it covers.
    if (!(await outbox.lease(id, owner, this.#timeoutMs + 5000, clock.now(), this.url))) return;
    try {
      const stored = await outbox.get(id);
      const d = stored?.deliveries.find((x) => x.webhook === this.url);
      const now = clock.now();
      if (stored === undefined) {
        // Gone (expired) but still listed as due: the update takes it out of the due sets.
        await outbox.update(id, { webhook: this.url, state: 'failed', attempts: 0, last_status: null, next_at: now });
        return;
      }
      if (d === undefined || d.state !== 'pending' || d.next_at > now || this.#stopped) return;
      const body = JSON.stringify(stored.event);
      const status = await this.#post(stored.event, body);
      const next = afterAttempt(d, Date.parse(stored.event.at), status, clock.now(), this.#host.random());
      await outbox.update(id, next);
      if (next.state !== 'delivered') {
        this.#host.logger?.warn({ event_id: id, type: stored.event.type, webhook: safeUrl(this.url), status, attempts: next.attempts, state: next.state },
          'alerts: webhook delivery failed');
      }
    } finally {
      await outbox.unlease(id, owner, this.url).catch(() => undefined);
    }
  }

  /** One POST: the answer's status, or null when none came in time (or no connection). */
  async #post(event: AlertEvent, body: string): Promise<number | null> {
    const url = new URL(this.url);
    const timeout = this.#timeoutMs;
    // One connection: the lane sends one request at a time.
    this.#pool ??= new Pool(url.origin, { connections: 1, connectTimeout: timeout, headersTimeout: timeout, bodyTimeout: timeout });
    const signal = AbortSignal.timeout(timeout);
    try {
      const res = await this.#pool.request({
        method: 'POST', path: `${url.pathname}${url.search}`, body, signal,
        headers: {
          'content-type': 'application/json', 'x-tollgate-event-id': event.id, 'x-tollgate-signature': signature(this.#hook.secret, body),
          'user-agent': 'tollgate-alerts',
        },
      });
      // The body is not used; read to the end so the connection is reused.
      await res.body.dump({ limit: 65536, signal });
      return res.statusCode;
    } catch {
      return null;
    }
  }

  /**
   * Stops (shutdown, or its webhook left the config): no new pass or attempt begins; the
   * attempt in flight is let finish (bounded by the delivery timeout) and its outcome recorded;
   * then its pools close. What it still queued stays due in the outbox.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running?.catch(() => undefined);
    this.#queue.clear();
    const pool = this.#pool;
    this.#pool = undefined;
    await pool?.close().catch(() => undefined);
  }
}

/**
 * A webhook's URL for the log: its origin alone, as the console shows it. A token may ride in
 * the user info, the query or the path itself (Slack's /services/T/B/secret).
 */
export function safeUrl(u: string): string {
  try {
    const url = new URL(u);
    return url.pathname === '/' && url.search === '' ? url.origin : `${url.origin}/***`;
  } catch {
    return '[unparsable]';
  }
}
