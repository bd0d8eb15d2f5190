// The delivery worker: POSTs each event in the outbox (../store/alerts.ts) to its webhooks,
// signed, and retries what fails with exponential backoff and jitter for 24 hours from the
// event, then gives up (`failed`). One instance delivers an event at a time: it takes the
// event's lease in the store first (SET NX PX on Redis), held for longer than an attempt can
// last; an instance that crashed mid-delivery leaves a lease that runs out, and whoever finds
// the event due then (another instance, or this one restarted) delivers it: at least once,
// receivers dedupe by id (x-tollgate-event-id).
//
// The clock is injectable (tests simulate hours); the HTTP calls are undici's, one Pool per
// webhook origin (../upstream/undici.ts: without undici's whole index), each attempt bounded by
// alerts.delivery_timeout_ms.

import { createHmac, randomBytes } from 'node:crypto';
import { Pool } from '../upstream/undici.js';
import type { AlertWebhookConfig } from '../config/types.js';
import type { Logger } from '../observe/log.js';
import type { AlertDelivery, AlertEvent, AlertOutbox } from '../store/alerts.js';

/** Events are retried this long after they happened; then their pending deliveries fail. */
export const RETRY_WINDOW_MS = 24 * 3600_000;
/** The first retry's delay; each next one doubles, up to MAX_DELAY_MS. */
export const FIRST_DELAY_MS = 30_000;
export const MAX_DELAY_MS = 3600_000;
/** Jitter: a delay is scaled by 1 + JITTER x (2 x random - 1). */
export const JITTER = 0.2;

export interface Clock { now(): number }

/** `x-tollgate-signature` of a body: sha256= and the hex HMAC-SHA256 of its exact bytes. */
export function signature(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** The delay before attempt `attempts + 1`, after `attempts` failed ones (>= 1); `random` in [0, 1). */
export function retryDelay(attempts: number, random: number): number {
  const base = Math.min(FIRST_DELAY_MS * 2 ** Math.min(attempts - 1, 30), MAX_DELAY_MS);
  return Math.round(base * (1 + JITTER * (2 * random - 1)));
}

/** The delivery after an attempt that ended with `status` (null: no answer) at `now`. */
export function afterAttempt(d: AlertDelivery, eventAt: number, status: number | null, now: number, random: number): AlertDelivery {
  const attempts = d.attempts + 1;
  if (status !== null && status >= 200 && status < 300) return { ...d, state: 'delivered', attempts, last_status: status, next_at: now };
  const next = now + retryDelay(attempts, random);
  if (next > eventAt + RETRY_WINDOW_MS) return { ...d, state: 'failed', attempts, last_status: status, next_at: now };
  return { ...d, state: 'pending', attempts, last_status: status, next_at: next };
}

export interface WorkerOptions {
  clock?: Clock;
  /** In [0, 1): jitter's source (tests fix it). */
  random?: () => number;
  /** How often the outbox is looked at (real time). Default 1000. */
  pollMs?: number;
  logger?: Logger;
}

export class DeliveryWorker {
  readonly #outbox: AlertOutbox;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #pollMs: number;
  readonly #logger: Logger | undefined;
  /** This instance, as a lease's owner. */
  readonly owner = randomBytes(9).toString('base64url');
  readonly #pools = new Map<string, Pool>();
  #webhooks: readonly AlertWebhookConfig[] = [];
  #timeoutMs = 10_000;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  readonly #abort = new AbortController();

  constructor(outbox: AlertOutbox, options: WorkerOptions = {}) {
    this.#outbox = outbox;
    this.#clock = options.clock ?? { now: () => Date.now() };
    this.#random = options.random ?? Math.random;
    this.#pollMs = options.pollMs ?? 1000;
    this.#logger = options.logger;
  }

  /** The webhooks and timeout in force (a reload calls it again). */
  configure(webhooks: readonly AlertWebhookConfig[], timeoutMs: number): void {
    this.#webhooks = webhooks;
    this.#timeoutMs = timeoutMs;
  }

  /** Looks at the outbox every pollMs until stop(). */
  start(): void {
    if (this.#timer !== undefined || this.#stopped) return;
    const loop = (): void => {
      this.#timer = setTimeout(() => {
        void this.tick().finally(() => { if (!this.#stopped) loop(); });
      }, this.#pollMs);
      this.#timer.unref();
    };
    loop();
  }

  /**
   * Delivers every delivery due now (one pass; tests call it with their clock). Passes never
   * overlap: a call during one waits for it.
   */
  async tick(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
    if (this.#stopped) return;
    this.#running = this.#pass().finally(() => { this.#running = undefined; });
    return this.#running;
  }

  async #pass(): Promise<void> {
    let ids: string[];
    try {
      ids = await this.#outbox.due(this.#clock.now(), 100);
    } catch (err) {
      this.#logger?.warn({ err: (err as Error).message }, 'alerts: the outbox cannot be read; delivery waits for the store');
      return;
    }
    for (const id of ids) {
      if (this.#stopped) return;
      try {
        await this.#deliverEvent(id);
      } catch (err) {
        this.#logger?.warn({ event_id: id, err: (err as Error).message }, 'alerts: delivery pass failed; retried at the next pass');
      }
    }
  }

  async #deliverEvent(id: string): Promise<void> {
    // Longer than one attempt per webhook can take, so the lease outlives the work it covers.
    const leaseMs = this.#timeoutMs * Math.max(1, this.#webhooks.length) + 5000;
    if (!(await this.#outbox.lease(id, this.owner, leaseMs, this.#clock.now()))) return;
    try {
      const stored = await this.#outbox.get(id);
      if (stored === undefined) return;
      const eventAt = Date.parse(stored.event.at);
      const body = JSON.stringify(stored.event);
      for (const d of stored.deliveries) {
        const now = this.#clock.now();
        if (d.state !== 'pending' || d.next_at > now || this.#stopped) continue;
        const hook = this.#webhooks.find((w) => w.url === d.webhook);
        if (hook === undefined) {
          // The webhook left the config: nobody to deliver to.
          await this.#outbox.update(id, { ...d, state: 'failed', next_at: now });
          continue;
        }
        const status = await this.#post(hook, stored.event, body);
        const next = afterAttempt(d, eventAt, status, this.#clock.now(), this.#random());
        await this.#outbox.update(id, next);
        if (next.state !== 'delivered') {
          this.#logger?.warn({ event_id: id, type: stored.event.type, webhook: safeUrl(hook.url), status, attempts: next.attempts, state: next.state }, 'alerts: webhook delivery failed');
        }
      }
    } finally {
      await this.#outbox.unlease(id, this.owner).catch(() => undefined);
    }
  }

  /** One POST: the answer's status, or null when none came in time (or no connection). */
  async #post(hook: AlertWebhookConfig, event: AlertEvent, body: string): Promise<number | null> {
    const url = new URL(hook.url);
    let pool = this.#pools.get(url.origin);
    if (pool === undefined) {
      pool = new Pool(url.origin, { connections: 4, connectTimeout: this.#timeoutMs, headersTimeout: this.#timeoutMs, bodyTimeout: this.#timeoutMs });
      this.#pools.set(url.origin, pool);
    }
    const signal = AbortSignal.any([AbortSignal.timeout(this.#timeoutMs), this.#abort.signal]);
    try {
      const res = await pool.request({
        method: 'POST', path: `${url.pathname}${url.search}`, body, signal,
        headers: {
          'content-type': 'application/json', 'x-tollgate-event-id': event.id, 'x-tollgate-signature': signature(hook.secret, body),
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
   * Stops: no new pass or attempt begins; an attempt in flight is let finish (bounded by the
   * delivery timeout) and its outcome recorded; then the pools close. A delivery left pending
   * is picked up after its lease by whichever instance runs next.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running?.catch(() => undefined);
    this.#abort.abort();
    await Promise.allSettled([...this.#pools.values()].map((p) => p.close()));
    this.#pools.clear();
  }
}

/** A webhook's URL for the log: no user info, no query (a token may ride there). */
function safeUrl(u: string): string {
  try {
    const url = new URL(u);
    return `${url.origin}${url.pathname}`;
  } catch {
    return '[unparsable]';
  }
}
