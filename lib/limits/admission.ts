// A request's admission on the Redis store in one script (issue #46): every rate-limit counter
// it consumes and its account's concurrency lease. All of them are keyed under the account's
// hash tag (P{acct:ID}:rl:... and P{acct:ID}:leases), so on a Redis Cluster they are one slot
// and one script; a key's or a team's own max_concurrent keeps its lease set of its own
// (P{acct:key:ID}:leases), acquired beside the script as before, in the same round trip.
//
// What the script does to each counter is rlflxIncr's steps (COUNT_LUA, the script every
// RateLimiterRedis of the gateway runs), and to the lease the slots' own ACQUIRE_LUA: the same
// writes as the commands it stands for, in the same order, now in one step. What it answers
// becomes what those commands' callers made of their answers: per counter the RateLimiterRes
// that rate-limiter-flexible's RateLimiterRedis builds (_getRateLimiterRes) and resolves with,
// or rejects with once the points consumed pass the limiter's (_afterConsume, for limiters made
// as Limits makes them: no block, no execEvenly, no in-memory block); per lease what
// RedisSlots.acquire answers. When the script fails, each counter goes to its limiter's
// insurance (store.on_error: open), as RateLimiterRedis's consume does, or fails with the
// error; the lease is taken back once Redis answers and falls back as acquire's does.

import type { RedisClient } from '../store/redis/connect.js';
import { COUNT_LUA, RateLimiterRes, type RateLimiterAbstract } from './rate-limiters.js';
import { ACQUIRE_LUA, type RedisSlots } from './slots.js';

/** At most this many keys: six counters (plan, key and team; requests and tokens) and a lease. */
const MOST_KEYS = 7;

// KEYS: the counters, then the lease set when one is taken. ARGV[1]: the number of counters;
// then each counter's points and duration (s); then the lease's now, ttl, max and id. Answers
// {consumed, ttl} per counter, then 1 (taken) or 0 (full) for the lease.
const ADMIT = `${COUNT_LUA}
${ACQUIRE_LUA}
local n = tonumber(ARGV[1])
local out = {}
for i = 1, n do
  out[2 * i - 1], out[2 * i] = count(KEYS[i], ARGV[2 * i], ARGV[2 * i + 1])
end
if #KEYS > n then
  local a = 2 * n + 2
  out[2 * n + 1] = acquire(KEYS[n + 1], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
end
return out`;

type Admit = (...args: string[]) => Promise<unknown>;

export class RedisAdmission {
  readonly #redis: RedisClient;
  readonly #slots: RedisSlots;
  /** A limiter's insurance (store.on_error: open), or undefined (closed). */
  readonly #insurance: (limiter: RateLimiterAbstract) => RateLimiterAbstract | undefined;

  constructor(redis: RedisClient, slots: RedisSlots, insurance: (limiter: RateLimiterAbstract) => RateLimiterAbstract | undefined) {
    // One definition per key count: a fixed count keeps the script on the client's cheap path
    // (../store/redis/connect.ts, directScripts).
    for (let k = 1; k <= MOST_KEYS; k++) redis.defineCommand(`tgAdmit${k}`, { numberOfKeys: k, lua: ADMIT });
    this.#redis = redis;
    this.#slots = slots;
    this.#insurance = insurance;
  }

  /**
   * Consumes `points[i]` of counter `keys[i]` with `limiters[i]`, and takes a lease of each cap
   * ([slot id, max]; the first in the script when it is the account's own, `account`), in one
   * round trip: as Promise.allSettled over the limiters' consume() and the slots' acquire()
   * answers, in that order.
   */
  async run(keys: readonly string[], points: readonly number[], limiters: readonly RateLimiterAbstract[],
    caps: ReadonlyArray<readonly [string, number, string]>, account: string): Promise<Array<PromiseSettledResult<unknown>>> {
    const n = keys.length;
    const own = caps.length > 0 && caps[0]![2] === 'account' && n > 0;
    const args: string[] = [...keys];
    const lease = own ? this.#slots.lease(account) : undefined;
    if (lease !== undefined) args.push(lease.key);
    args.push(String(n));
    for (let i = 0; i < n; i++) args.push(String(points[i]), String(limiters[i]!.duration));
    if (lease !== undefined) args.push(String(Date.now()), String(this.#slots.leaseMs), String(caps[0]![1]), lease.id);
    let reply: Promise<unknown>;
    try {
      reply = (this.#redis as unknown as Record<string, Admit>)[`tgAdmit${n + (lease === undefined ? 0 : 1)}`]!(...args);
    } catch (err) {
      reply = Promise.reject(err);
    }
    const slots: Array<Promise<unknown>> = [];
    if (lease !== undefined) {
      const taken = reply.then((r) => {
        const ok = Array.isArray(r) ? r[2 * n] : undefined;
        if (ok !== 0 && ok !== 1) throw new Error(`unexpected reply from Redis: ${JSON.stringify(r)}`);
        return ok;
      });
      slots.push(this.#slots.leased(account, caps[0]![1], lease.key, lease.id, taken));
    }
    for (let j = own ? 1 : 0; j < caps.length; j++) slots.push(this.#slots.acquire(caps[j]![0], caps[j]![1]));
    let counted: Array<PromiseSettledResult<unknown>>;
    try {
      const r = await reply;
      if (!Array.isArray(r) || r.length !== 2 * n + (lease === undefined ? 0 : 1)) throw new Error(`unexpected reply from Redis: ${JSON.stringify(r)}`);
      counted = new Array<PromiseSettledResult<unknown>>(n);
      for (let i = 0; i < n; i++) counted[i] = outcome(limiters[i]!, points[i]!, r[2 * i] as number, r[2 * i + 1] as number);
    } catch (err) {
      counted = await Promise.allSettled(keys.map((key, i) => {
        const insurance = this.#insurance(limiters[i]!);
        return insurance === undefined ? Promise.reject(err) : insurance.consume(key, points[i]);
      }));
    }
    return counted.concat(await Promise.allSettled(slots));
  }
}

/**
 * What RateLimiterRedis's consume answers for a counter at `consumed` after taking `points`,
 * `ttl` ms before its window turns (_getRateLimiterRes, then _afterConsume: refused past the
 * limiter's points; the limiters Limits makes neither block nor delay).
 */
function outcome(limiter: RateLimiterAbstract, points: number, consumed: number, ttl: number): PromiseSettledResult<RateLimiterRes> {
  const res = new RateLimiterRes(Math.max(limiter.points - consumed, 0), ttl, consumed, consumed === points);
  return consumed > limiter.points ? { status: 'rejected', reason: res } : { status: 'fulfilled', value: res };
}
