// Concurrency slots per account, counted from admission to the last byte of the answer.
// In memory: a counter per account. In Redis: leases in a sorted set that expire unless
// renewed, so the slots of a crashed instance come back by themselves; a release that fails
// while Redis is down is retried until it lands (../store/retry.ts), so the account has its
// slots back as soon as Redis is, not a lease lifetime later. The leases an instance holds are
// renewed together by one timer, not one per request (a timer made and cleared per request
// was a cost on every request's path, for a renewal only streams live long enough to need).

import { randomUUID } from 'node:crypto';
import type { RedisClient } from '../store/redis/connect.js';
import type { Logger } from '../observe/log.js';
import { RetryQueue } from '../store/retry.js';

export interface Slots {
  /** A release function, or undefined when the account already has `max` in flight. */
  acquire(account: string, max: number): Promise<(() => void) | undefined>;
  /** Slots in use (for tests and metrics). */
  inUse(account: string): Promise<number>;
}

export class MemorySlots implements Slots {
  readonly #used = new Map<string, number>();

  async acquire(account: string, max: number): Promise<(() => void) | undefined> {
    const n = this.#used.get(account) ?? 0;
    if (n >= max) return undefined;
    this.#used.set(account, n + 1);
    return () => {
      const left = (this.#used.get(account) ?? 1) - 1;
      if (left <= 0) this.#used.delete(account);
      else this.#used.set(account, left);
    };
  }

  async inUse(account: string): Promise<number> {
    return this.#used.get(account) ?? 0;
  }
}

/** A lease lives this long unless renewed; renewals come every third of it. */
export const LEASE_MS = 30_000;

// Expired leases are removed last: on a Redis Cluster, while the slot migrates, a script that
// touches a key it has just emptied (deleted) fails there, its earlier writes applied.
const ACQUIRE = `
if redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf') >= tonumber(ARGV[3]) then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return 1`;

const RENEW = `
if redis.call('ZSCORE', KEYS[1], ARGV[3]) == false then return 0 end
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`;

type LeaseCommands = {
  tgSlotAcquire(key: string, now: number, ttl: number, max: number, id: string): Promise<number>;
  tgSlotRenew(key: string, now: number, ttl: number, id: string): Promise<number>;
};

/** Registers the lease scripts on `redis`. */
export function defineLeaseCommands(redis: RedisClient): void {
  redis.defineCommand('tgSlotAcquire', { numberOfKeys: 1, lua: ACQUIRE });
  redis.defineCommand('tgSlotRenew', { numberOfKeys: 1, lua: RENEW });
}

export class RedisSlots implements Slots {
  readonly #redis: RedisClient & LeaseCommands;
  readonly #prefix: string;
  /** With store.on_error: open, a Redis failure falls back to per-instance counting. */
  readonly #fallback: MemorySlots | null;
  readonly #logger: Logger;
  readonly #leaseMs: number;
  readonly #retries: RetryQueue;
  /** The leases held by this instance: id -> its sorted set and when it was last set (ms). */
  readonly #held = new Map<string, { key: string; at: number }>();
  /** Renews the leases of #held that are due, each quarter of a lease; stops on a tick that finds none. */
  #renewer: NodeJS.Timeout | undefined;

  constructor(redis: RedisClient, prefix: string, open: boolean, logger: Logger, leaseMs = LEASE_MS, retries = new RetryQueue({ log: logger })) {
    defineLeaseCommands(redis);
    this.#redis = redis as RedisClient & LeaseCommands;
    this.#prefix = prefix;
    this.#fallback = open ? new MemorySlots() : null;
    this.#logger = logger;
    this.#leaseMs = leaseMs;
    this.#retries = retries;
  }

  #key(account: string): string {
    return `${this.#prefix}{acct:${account}}:leases`;
  }

  async acquire(account: string, max: number): Promise<(() => void) | undefined> {
    const key = this.#key(account);
    const id = randomUUID();
    let ok: number;
    try {
      ok = await this.#redis.tgSlotAcquire(key, Date.now(), this.#leaseMs, max, id);
    } catch (err) {
      // A Redis that answers late may still add the lease: take it back once it can (unless
      // Redis refused the script outright: nothing was added).
      this.#release(key, id, err);
      if (this.#fallback === null) throw err;
      return this.#fallback.acquire(account, max);
    }
    if (ok !== 1) return undefined;
    // Long requests (streams) renew their lease; a crashed instance's leases simply expire.
    this.#held.set(id, { key, at: Date.now() });
    this.#renewer ??= this.#startRenewer();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#held.delete(id);
      this.#release(key, id);
    };
  }

  /**
   * Every quarter of a lease, the leases set (acquired or renewed) at least a quarter of a lease
   * ago are renewed: each between a quarter and half of its lifetime after it was last set.
   * A request shorter than that (nearly all but streams) is never renewed, as with a timer of
   * its own that it cleared first: the tick sends nothing to Redis on its own for it.
   */
  #startRenewer(): NodeJS.Timeout {
    const every = Math.max(50, Math.floor(this.#leaseMs / 4));
    const timer = setInterval(() => {
      if (this.#held.size === 0) {
        clearInterval(timer);
        this.#renewer = undefined;
        return;
      }
      const now = Date.now();
      for (const [id, lease] of this.#held) {
        if (now - lease.at < every) continue;
        lease.at = now;
        this.#redis.tgSlotRenew(lease.key, now, this.#leaseMs, id).catch((err: Error) => {
          this.#logger.debug({ err: err.message }, 'lease renewal failed');
        });
      }
    }, every);
    timer.unref();
    return timer;
  }

  /** Removes a lease now, or as soon as Redis answers again; `failure`: its acquire's, if it failed. */
  #release(key: string, id: string, failure?: unknown): void {
    this.#retries.undo(failure, `slot\u0000${key}\u0000${id}`, () => this.#redis.zrem(key, id))
      .catch((err: Error) => this.#logger.error({ err: err.message }, 'slot release failed'));
  }

  async inUse(account: string): Promise<number> {
    return this.#redis.zcount(this.#key(account), Date.now(), '+inf');
  }
}
