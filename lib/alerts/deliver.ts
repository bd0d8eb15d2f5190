// The delivery worker: POSTs each event in the outbox (../store/alerts.ts) to its webhooks,
// signed, and retries what fails with exponential backoff and jitter for 24 hours from the
// event, then gives up (`failed`) (./retry.ts).
//
// Webhooks are delivered independently (CONTRACT section 21): one lane per webhook (./lane.ts),
// each with its own queue, pool and loop, so a receiver that hangs delays only its own lane.
// Each delivery holds the lease of its (event, webhook) pair in the store (SET NX PX on Redis),
// held for longer than an attempt can last; an instance that crashed mid-delivery leaves a
// lease that runs out, and whoever finds the delivery due then (another instance, or this one
// restarted) delivers it: at least once, receivers dedupe by id (x-tollgate-event-id).
//
// Beside the lanes, a sweep reads the outbox's due events as a whole: a due delivery to a
// webhook that left the config is marked `failed` (nobody to deliver to), and one to a webhook
// that has a lane is offered to it (a lane reads its webhook's own due set; the sweep also
// finds deliveries no such set lists, e.g. appended by an older build). A reload adds lanes
// for new webhooks and stops those of removed ones (their attempt in flight is let finish).
//
// The clock is injectable (tests simulate hours); the HTTP calls are undici's, one Pool per lane
// (../upstream/undici.ts: without undici's whole index), each attempt bounded by
// alerts.delivery_timeout_ms.

import { randomBytes } from 'node:crypto';
import type { AlertWebhookConfig } from '../config/types.js';
import type { Logger } from '../observe/log.js';
import type { AlertOutbox } from '../store/alerts.js';
import { Lane, safeUrl } from './lane.js';
import type { Clock } from './retry.js';

export { FIRST_DELAY_MS, JITTER, MAX_DELAY_MS, RETRY_WINDOW_MS, afterAttempt, retryDelay, signature, type Clock } from './retry.js';

/** Due events the sweep looks at per pass. */
const SWEEP_PAGE = 100;

export interface WorkerOptions {
  clock?: Clock;
  /** In [0, 1): jitter's source (tests fix it). */
  random?: () => number;
  /** How often each lane (and the sweep) looks at the outbox (real time). Default 1000. */
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
  /** Per webhook URL (its identity across reloads), its lane. */
  readonly #lanes = new Map<string, Lane>();
  /** Lanes of removed webhooks, finishing their attempt in flight. */
  readonly #retiring = new Set<Promise<void>>();
  #timeoutMs = 10_000;
  #timer: NodeJS.Timeout | undefined;
  #sweeping: Promise<void> | undefined;
  #started = false;
  #stopped = false;

  constructor(outbox: AlertOutbox, options: WorkerOptions = {}) {
    this.#outbox = outbox;
    this.#clock = options.clock ?? { now: () => Date.now() };
    this.#random = options.random ?? Math.random;
    this.#pollMs = options.pollMs ?? 1000;
    this.#logger = options.logger;
  }

  /** The webhooks and timeout in force (a reload calls it again): lanes added, updated, stopped. */
  configure(webhooks: readonly AlertWebhookConfig[], timeoutMs: number): void {
    this.#timeoutMs = timeoutMs;
    const urls = new Set(webhooks.map((w) => w.url));
    for (const [url, lane] of this.#lanes) {
      if (urls.has(url)) continue;
      this.#lanes.delete(url);
      const done = lane.stop();
      this.#retiring.add(done);
      void done.finally(() => this.#retiring.delete(done));
    }
    if (this.#stopped) return;
    for (const hook of webhooks) {
      const lane = this.#lanes.get(hook.url);
      if (lane !== undefined) {
        lane.configure(hook, timeoutMs);
        continue;
      }
      const added = new Lane({ outbox: this.#outbox, clock: this.#clock, random: this.#random, logger: this.#logger, owner: this.owner }, hook, timeoutMs);
      this.#lanes.set(hook.url, added);
      if (this.#started) added.start(this.#pollMs);
    }
  }

  /** Starts every lane and the sweep, each looking at the outbox every pollMs, until stop(). */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    for (const lane of this.#lanes.values()) lane.start(this.#pollMs);
    const loop = (): void => {
      this.#timer = setTimeout(() => {
        void this.#sweep().finally(() => { if (!this.#stopped) loop(); });
      }, this.#pollMs);
      this.#timer.unref();
    };
    loop();
  }

  /**
   * Delivers every delivery due now (one pass of the sweep, then one of every lane, the lanes
   * side by side; tests call it with their clock). A lane's passes never overlap.
   */
  async tick(): Promise<void> {
    if (this.#stopped) return;
    await this.#sweep();
    await Promise.all([...this.#lanes.values()].map((l) => l.tick()));
  }

  /** The lane of a webhook URL, if it has one (tests). */
  lane(url: string): Lane | undefined {
    return this.#lanes.get(url);
  }

  #sweep(): Promise<void> {
    this.#sweeping ??= this.#sweepPass().finally(() => { this.#sweeping = undefined; });
    return this.#sweeping;
  }

  async #sweepPass(): Promise<void> {
    const now = this.#clock.now();
    let ids: string[];
    try {
      ids = await this.#outbox.due(now, SWEEP_PAGE);
    } catch (err) {
      this.#logger?.warn({ err: (err as Error).message }, 'alerts: the outbox cannot be read; delivery waits for the store');
      return;
    }
    for (const id of ids) {
      if (this.#stopped) return;
      try {
        const stored = await this.#outbox.get(id);
        for (const d of stored?.deliveries ?? []) {
          if (d.state !== 'pending' || d.next_at > now) continue;
          const lane = this.#lanes.get(d.webhook);
          if (lane !== undefined) lane.offer(id);
          else await this.#orphaned(id, d.webhook);
        }
      } catch (err) {
        this.#logger?.warn({ event_id: id, err: (err as Error).message }, 'alerts: delivery sweep failed; retried at the next pass');
      }
    }
  }

  /** A due delivery to a webhook that left the config: nobody to deliver to, so `failed`. */
  async #orphaned(id: string, webhook: string): Promise<void> {
    const owner = `${this.owner}.sweep`;
    if (this.#stopped || !(await this.#outbox.lease(id, owner, this.#timeoutMs + 5000, this.#clock.now(), webhook))) return;
    try {
      const d = (await this.#outbox.get(id))?.deliveries.find((x) => x.webhook === webhook);
      if (d === undefined || d.state !== 'pending' || this.#lanes.has(webhook)) return;
      await this.#outbox.update(id, { ...d, state: 'failed', next_at: this.#clock.now() });
      this.#logger?.warn({ event_id: id, webhook: safeUrl(webhook) }, 'alerts: webhook no longer configured; its delivery failed');
    } finally {
      await this.#outbox.unlease(id, owner, webhook).catch(() => undefined);
    }
  }

  /**
   * Stops: no new pass or attempt begins; each lane's attempt in flight is let finish (bounded
   * by the delivery timeout) and its outcome recorded; then the pools close. A delivery left
   * pending is picked up after its lease by whichever instance runs next.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    const lanes = [...this.#lanes.values()];
    await Promise.allSettled([this.#sweeping, ...lanes.map((l) => l.stop()), ...this.#retiring]);
    this.#lanes.clear();
  }
}
