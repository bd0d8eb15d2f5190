// Where a provider's requests wait while every replica is at max_outstanding (CONTRACT section
// 13): admitted requests, holding their credit hold and concurrency slot, wait here in the
// order ./fair-queue.ts keeps, and each is sent the moment a replica has room, to the replica
// the balancer picks. Work-conserving: a replica's request ending dispatches at once (Fleet.end
// calls drain), and a short poll catches replicas that come back from ejection or report a
// shorter queue. With prefix_affinity, the first in line may let one just behind it take a
// replica that is that one's home and not its own, for a bounded time. A full queue is shared:
// ./shares.ts decides whether a newcomer takes someone's place (a flow under its share of
// max_queued, or a higher priority) or is refused. One queue per provider and gateway, kept
// across config reloads like the replicas themselves.

import type { QueueConfig, QueuePriority } from '../../config/types.js';
import { FairQueue, PRIORITIES, type QueueEntry } from './fair-queue.js';
import type { Replica } from './replica.js';
import { Shares, type Held } from './shares.js';

/** How often waiting requests look for a replica besides the moments one frees up. */
const POLL_MS = 100;
/** How long the first in line keeps a replica for someone whose home it is. */
export const AFFINITY_WAIT_MS = 200;
/** How many just behind the first are looked at for one whose home is free. */
const NEAR = 6;
const noop = (): void => undefined;
/** Bounds of a refusal's Retry-After. */
const MAX_RETRY_MS = 300_000;

/** A replica given to a request: its `begin` token, to go back to Fleet.end. */
export interface Slot { replica: Replica; token: number }

/**
 * How a wait ended: a slot; or a refusal: the queue full (on arrival), its place given to a
 * newcomer of a higher priority or of a flow under its share (./shares.ts), or max_wait_ms
 * passed; or the client gone.
 */
export type WaitResult =
  | { slot: Slot; waitedMs: number }
  | { refused: 'full' | 'displaced' | 'timeout'; retryMs: number; waitedMs: number }
  | { gone: true; waitedMs: number };

export interface WaitRequest {
  flow: string;
  priority: QueuePriority;
  cost: number;
  weight: number;
  /** The replica the request prefers (prefix_affinity), if any. */
  home: Replica | undefined;
  /** The replica the balancer would give it now, or undefined when none may take it. */
  pick: () => Replica | undefined;
  /** At most this long (ms). */
  waitMs: number;
}

/** A request in the queue: how its wait ends, and leave() for a client that goes meanwhile. */
export interface Waiting {
  readonly result: Promise<WaitResult>;
  /** The client left: out of the queue at once ({gone}); nothing once the wait has ended. */
  leave(): void;
}

interface Waiter extends QueueEntry, Held {
  readonly request: WaitRequest;
  readonly since: number;
  timer: NodeJS.Timeout | undefined;
  done: ((result: WaitResult) => void) | undefined;
}

export class ProviderQueue {
  readonly provider: string;
  /** The config in force (a reload may change it). */
  config: QueueConfig = { max_wait_ms: 30000, max_queued: 1000, fairness: 'account' };
  readonly #fair = new FairQueue<Waiter>();
  readonly #shares = new Shares<Waiter>();
  #poll: NodeJS.Timeout | undefined;
  /** performance.now() of the last dispatch, and the mean time between dispatches (ms; 0: none yet). */
  #lastDispatch = 0;
  #interval = 0;
  /** Requests dispatched out of the queue, and refused, since start. */
  dispatched = 0;
  refused = 0;

  constructor(provider: string) {
    this.provider = provider;
  }

  get size(): number {
    return this.#fair.size;
  }

  depth(priority: QueuePriority): number {
    return this.#fair.depth(priority);
  }

  /** Comparisons the order has made (tests of its cost per operation). */
  get compares(): number {
    return this.#fair.compares;
  }

  /**
   * Waits for a replica. Refused at once when max_queued are waiting; after `waitMs`
   * (max_wait_ms, or less when the request's deadline is nearer) with 'timeout'. No
   * AbortSignal: an EventTarget listener per request costs more than the queue itself.
   */
  wait(request: WaitRequest): Waiting {
    if (this.#fair.size >= this.config.max_queued) {
      // Full: a place is given up for this one, or this one is refused (./shares.ts).
      const victim = this.#shares.victim(request.flow, request.priority, request.weight, this.config.max_queued);
      this.refused++;
      if (victim === undefined) return { result: Promise.resolve({ refused: 'full', retryMs: this.retryAfterMs(), waitedMs: 0 }), leave: noop };
      const done = victim.done!;
      this.#leave(victim);
      done({ refused: 'displaced', retryMs: this.retryAfterMs(), waitedMs: performance.now() - victim.since });
    }
    let resolve!: (result: WaitResult) => void;
    const result = new Promise<WaitResult>((r) => { resolve = r; });
    const w: Waiter = {
      flow: request.flow, priority: request.priority, cost: Math.max(1, request.cost), weight: request.weight,
      start: 0, finish: 0, seq: 0, index: -1, arrival: 0, older: undefined, newer: undefined,
      request, since: performance.now(), timer: undefined, done: resolve,
    };
    w.timer = setTimeout(() => {
      this.#leave(w);
      this.refused++;
      resolve({ refused: 'timeout', retryMs: this.retryAfterMs(), waitedMs: performance.now() - w.since });
    }, Math.max(0, request.waitMs));
    this.#fair.push(w);
    this.#shares.add(w);
    if (this.#poll === undefined) {
      this.#poll = setInterval(() => this.drain(), POLL_MS);
      this.#poll.unref();
    }
    this.drain();
    return {
      result,
      leave: () => {
        if (w.done === undefined) return;
        this.#leave(w);
        resolve({ gone: true, waitedMs: performance.now() - w.since });
      },
    };
  }

  /** Sends waiting requests to replicas while some replica may take the next in line. */
  drain(): void {
    for (;;) {
      const first = this.#fair.peek();
      if (first === undefined) break;
      const replica = first.request.pick();
      if (replica === undefined) break;
      let chosen = first;
      const home = first.request.home;
      if (home !== undefined && replica !== home && performance.now() - first.since < AFFINITY_WAIT_MS) {
        for (const w of this.#fair.near(NEAR)) {
          if (w.request.home === replica) { chosen = w; break; }
        }
      }
      this.#fair.take(chosen);
      this.#shares.remove(chosen);
      this.#settle(chosen);
      const now = performance.now();
      if (this.#lastDispatch > 0) {
        const dt = now - this.#lastDispatch;
        this.#interval = this.#interval === 0 ? dt : 0.8 * this.#interval + 0.2 * dt;
      }
      this.#lastDispatch = now;
      this.dispatched++;
      const done = chosen.done!;
      chosen.done = undefined;
      done({ slot: { replica, token: replica.begin() }, waitedMs: now - chosen.since });
    }
    this.#idle();
  }

  /**
   * When a request refused now might be taken: the time for the queue to drain at its recent
   * rate (slower, if nothing has left it for longer than that), or max_wait_ms when none has
   * left it yet.
   */
  retryAfterMs(now = performance.now()): number {
    if (this.#interval === 0) return Math.min(MAX_RETRY_MS, this.config.max_wait_ms);
    const interval = Math.max(this.#interval, now - this.#lastDispatch);
    return Math.min(MAX_RETRY_MS, Math.max(1000, Math.ceil((this.#fair.size + 1) * interval)));
  }

  /** Requests waiting, per band (GET /admin/upstreams and /metrics). */
  view(): { queued: number; by_priority: Record<QueuePriority, number> } {
    const byPriority = {} as Record<QueuePriority, number>;
    for (const p of PRIORITIES) byPriority[p] = this.#fair.depth(p);
    return { queued: this.#fair.size, by_priority: byPriority };
  }

  #leave(w: Waiter): void {
    this.#fair.drop(w);
    this.#shares.remove(w);
    this.#settle(w);
    w.done = undefined;
    this.#idle();
  }

  #settle(w: Waiter): void {
    clearTimeout(w.timer);
  }

  #idle(): void {
    if (this.#fair.size === 0 && this.#poll !== undefined) {
      clearInterval(this.#poll);
      this.#poll = undefined;
    }
  }
}
