// Store writes that must land even when the store is down at that moment: releases of credit
// holds and of concurrency slots. Their TTLs would free them eventually (a minute or more), but
// until then an account would be short of credits or slots after every outage. A write that
// fails is kept and retried in the background, with backoff, until it succeeds.
//
// Each write is idempotent (HDEL, ZREM), so a retry of one that did land after all changes
// nothing. Memory is bounded: past `max` pending writes the oldest is dropped (its TTL still
// frees it), and that is logged. While the store is down a retry pass costs one failing call:
// it stops at the first failure and backs off.

export interface RetryLog {
  warn(fields: Record<string, unknown>, msg: string): void;
  info(fields: Record<string, unknown>, msg: string): void;
}

export interface RetryQueueOptions {
  /** Most writes kept for retry; default 10,000. */
  max?: number;
  /** First and longest pause between retry passes; default 50 and 1000 ms. */
  minDelayMs?: number;
  maxDelayMs?: number;
  log?: RetryLog;
}

type Op = () => Promise<unknown>;

/** Errors a retry cannot cure: a bad argument is a bug, not an outage. */
function permanent(err: unknown): boolean {
  return err instanceof TypeError || err instanceof RangeError;
}

/**
 * Refusals that prove a command was not applied: Redis turned it down before it wrote anything
 * (a demoted primary, too few replicas for min-replicas-to-write, a dataset loading, a cluster
 * moving, a script running, no memory: for a script, at its first write), or ioredis never sent
 * it (no connection, and no offline queue). A timeout or a connection lost in flight proves
 * nothing: the command may still have been applied. Errors are read down their causes, so a
 * StoreUnavailableError wrapping a refusal is one. A write refused so needs no undoing.
 */
const REFUSED = /^(?:NOREPLICAS|READONLY|MASTERDOWN|LOADING|CLUSTERDOWN|TRYAGAIN|MOVED|ASK|BUSY|OOM|NOSCRIPT) |^Stream isn't writeable/;

export function notApplied(err: unknown): boolean {
  let e = err;
  for (let depth = 0; e instanceof Error && depth < 4; depth++, e = e.cause) {
    if (REFUSED.test(e.message)) return true;
  }
  return false;
}

export class RetryQueue {
  /** Pending writes by key, oldest first (a Map keeps insertion order). */
  readonly #pending = new Map<string, Op>();
  readonly #max: number;
  readonly #minDelay: number;
  readonly #maxDelay: number;
  readonly #log: RetryLog | undefined;
  #delay: number;
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> | undefined;
  /** Since the queue was last empty: whether that was logged, and how many writes were dropped. */
  #announced = false;
  #dropped = 0;
  #closed = false;

  constructor(options: RetryQueueOptions = {}) {
    this.#max = options.max ?? 10_000;
    this.#minDelay = options.minDelayMs ?? 50;
    this.#maxDelay = options.maxDelayMs ?? 1000;
    this.#log = options.log;
    this.#delay = this.#minDelay;
  }

  /** Writes waiting for the store. */
  get size(): number {
    return this.#pending.size;
  }

  /**
   * Runs `op` now. If it fails, keeps it under `key` and retries it until it succeeds; resolves
   * either way. Rejects only for a bad argument (TypeError, RangeError), which no retry cures.
   */
  async run(key: string, op: Op): Promise<void> {
    try {
      await op();
    } catch (err) {
      if (permanent(err)) throw err;
      this.#defer(key, op, err);
    }
  }

  /**
   * Undoes a write that failed with `failure` (a hold, a slot lease): runs `op` as run() does,
   * unless the failure proves the write was not applied (notApplied), when there is nothing to
   * undo. A store that refuses every write during an outage would otherwise queue one undo per
   * request and push the ones that matter out of the queue.
   */
  undo(failure: unknown, key: string, op: Op): Promise<void> {
    return notApplied(failure) ? Promise.resolve() : this.run(key, op);
  }

  #defer(key: string, op: Op, err: unknown): void {
    if (this.#closed) return;
    this.#pending.delete(key);
    this.#pending.set(key, op);
    if (this.#pending.size > this.#max) {
      const oldest = this.#pending.keys().next().value as string;
      this.#pending.delete(oldest);
      if (this.#dropped++ === 0) this.#log?.warn({ max: this.#max }, 'too many store writes waiting for the store; the oldest are dropped (their TTLs free them)');
    }
    if (!this.#announced) {
      this.#announced = true;
      this.#log?.warn({ err: (err as Error)?.message }, 'store unreachable: releases of holds and slots are retried until they land');
    }
    this.#schedule();
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#flushing !== undefined || this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.flush();
    }, this.#delay);
    this.#timer.unref();
  }

  /** One pass over the pending writes, oldest first; stops at the first that still fails. */
  flush(): Promise<void> {
    this.#flushing ??= this.#pass().finally(() => {
      this.#flushing = undefined;
      if (this.#pending.size > 0) this.#schedule();
    });
    return this.#flushing;
  }

  async #pass(): Promise<void> {
    for (const [key, op] of this.#pending) {
      try {
        await op();
      } catch (err) {
        if (!permanent(err)) {
          this.#delay = Math.min(this.#delay * 2, this.#maxDelay);
          return;
        }
      }
      // Deferred again meanwhile (same key) means a newer write: keep that one.
      if (this.#pending.get(key) === op) this.#pending.delete(key);
    }
    this.#delay = this.#minDelay;
    if (this.#announced) {
      this.#log?.info({ dropped: this.#dropped }, 'store reachable again: every deferred release landed');
      this.#announced = false;
      this.#dropped = 0;
    }
  }

  /** A last pass (bounded by the store's own timeouts), then nothing more is retried. */
  async close(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.size > 0) await this.flush();
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#pending.clear();
  }
}
