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
import { COUNT_LUA } from './rate-limiters.js';

/**
 * Token corrections a release may carry (./grant.ts): to add `points[i]` (negative: given
 * back) to counter `keys[i]` (window `durations[i]` s), all under account `account`'s hash tag.
 * `failed`: the script that carried them failed (they go where the limiters' own would).
 */
export interface Rider { account: string; keys: string[]; points: number[]; durations: number[]; failed(err: unknown): void }

/**
 * Frees a slot (called once). Given a rider, a Redis lease of the rider's
 * account sends its corrections in its release's script and answers true; otherwise the caller
 * sends them.
 */
export type Release = (rider?: Rider) => boolean | void;

export interface Slots {
  /** A release function, or undefined when the account already has `max` in flight. */
  acquire(account: string, max: number): Promise<Release | undefined>;
  /** Slots in use (for tests and metrics). */
  inUse(account: string): Promise<number>;
}

export class MemorySlots implements Slots {
  readonly #used = new Map<string, number>();

  async acquire(account: string, max: number): Promise<Release | undefined> {
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
// touches a key it has just emptied (deleted) fails there, its earlier writes applied. The
// function takes the lease set's key and (now, ttl, max, id); the admission's script
// (./admission.ts) runs it too.
export const ACQUIRE_LUA = `
local function acquire(key, now, ttl, max, id)
  if redis.call('ZCOUNT', key, '(' .. now, '+inf') >= tonumber(max) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    return 0
  end
  redis.call('ZADD', key, tonumber(now) + tonumber(ttl), id)
  redis.call('PEXPIRE', key, ttl)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return 1
end`;

const ACQUIRE = `${ACQUIRE_LUA}
return acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])`;

// The counters of a rider (KEYS[2..], each ARGV[2i-2] points, ARGV[2i-1] s: rlflxIncr's steps),
// then the lease (KEYS[1], ARGV[1]) out: as the commands it stands for, in one script.
const RELEASE = `${COUNT_LUA}
for i = 2, #KEYS do count(KEYS[i], ARGV[2 * i - 2], ARGV[2 * i - 1]) end
return redis.call('ZREM', KEYS[1], ARGV[1])`;

/** A release carries at most this many corrections (a plan's, a key's and a team's tokens). */
const MOST_RIDING = 3;

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
  // One definition per key count: a fixed count keeps the script on the client's cheap path.
  for (let k = 2; k <= 1 + MOST_RIDING; k++) redis.defineCommand(`tgSlotRelease${k}`, { numberOfKeys: k, lua: RELEASE });
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

  /** How long a lease lives unless renewed (ms). */
  get leaseMs(): number { return this.#leaseMs; }

  /**
   * A lease to take in a script of the caller's (the admission's, ./admission.ts, which runs
   * ACQUIRE_LUA's steps on it): its sorted set and a fresh id. `leased` then makes of the
   * script's answer what acquire() returns.
   */
  lease(account: string): { key: string; id: string } {
    return { key: this.#key(account), id: randomUUID() };
  }

  acquire(account: string, max: number): Promise<Release | undefined> {
    const key = this.#key(account);
    const id = randomUUID();
    let answer: Promise<number>;
    try {
      answer = this.#redis.tgSlotAcquire(key, Date.now(), this.#leaseMs, max, id);
    } catch (err) {
      answer = Promise.reject(err);
    }
    return this.leased(account, max, key, id, answer);
  }

  /** What acquire() returns, from the answer (1 taken, 0 full) of the script that took lease `id` of `key`. */
  async leased(account: string, max: number, key: string, id: string, answer: Promise<number>): Promise<Release | undefined> {
    let ok: number;
    try {
      ok = await answer;
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
    return (rider?: Rider): boolean => {
      if (released) return false;
      released = true;
      this.#held.delete(id);
      if (rider === undefined || rider.account !== account || rider.keys.length > MOST_RIDING) {
        this.#release(key, id);
        return false;
      }
      this.#releaseWith(key, id, rider);
      return true;
    };
  }

  /**
   * The release and the rider's corrections in one script. Should it fail, the release alone is
   * retried until it lands (as #release's), and the corrections go to `rider.failed`, never sent
   * again: a script that timed out may have been applied.
   */
  #releaseWith(key: string, id: string, rider: Rider): void {
    let first = true;
    const op = (): Promise<unknown> => {
      if (!first) return this.#redis.zrem(key, id);
      first = false;
      const args: string[] = [key, ...rider.keys, id];
      for (let i = 0; i < rider.keys.length; i++) args.push(String(rider.points[i]), String(rider.durations[i]));
      let sent: Promise<unknown>;
      try {
        sent = (this.#redis as unknown as Record<string, (...a: string[]) => Promise<unknown>>)[`tgSlotRelease${1 + rider.keys.length}`]!(...args);
      } catch (err) {
        sent = Promise.reject(err);
      }
      return sent.catch((err: unknown) => {
        rider.failed(err);
        throw err;
      });
    };
    this.#retries.run(`slot\u0000${key}\u0000${id}`, op)
      .catch((err: Error) => this.#logger.error({ err: err.message }, 'slot release failed'));
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
