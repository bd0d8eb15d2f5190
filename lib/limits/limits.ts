// Rate limits and concurrency caps per account (plan fields requests_per_minute,
// tokens_per_minute, max_concurrent). rate-limiter-flexible counts in memory with the memory
// store and in Redis with the redis store, so every instance shares one view. Tokens are taken
// at admission from the estimate and corrected once the answer's usage is known.
//
// A developer key may add its own limits (CONTRACT section 8): they are counted per key id on
// top of the plan's per-account counts, the answer's x-ratelimit-* headers show whichever is
// tighter, and a request refused by any limit (or later, at the hold) gives back what it took.
// A key's team (CONTRACT section 15) adds its limits the same way, counted per team id over all
// the team's keys, on top of the plan's and the key's.

import type { RedisClient } from '../store/redis/connect.js';
import { INCR_TTL_LUA, RateLimiterMemory, RateLimiterRes, rateLimiterRedis, type RateLimiterAbstract } from './rate-limiters.js';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config/types.js';
import { GatewayError, StoreUnavailableError, retryAfterHeaders } from '../errors.js';
import type { Logger } from '../observe/log.js';
import { RedisSlots, type Release, type Slots } from './slots.js';
import { RedisAdmission } from './admission.js';
import { Admitted, type Riding, givenBack, headersOf, refund, resetText, spentKey, tighter, type Check, type Dimension, type Grant, type Shown } from './grant.js';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lru.js';

const WINDOW_S = 60;
/** How long an ample-room observation is trusted for the next admissions. */
const ROOM_MS = 1000;

const roomKey = (p: Principal): string => (p.key === undefined ? p.accountId : `${p.accountId}\u0000${p.key.id}\u0000${p.key.team?.id ?? ''}`);


export class Limits {
  readonly #limiters = new Map<string, RateLimiterAbstract>();
  readonly #config: Config;
  readonly #redis: RedisClient | null;
  /** Loaded with the Limits of a Redis store (at start or reload), never by a request. */
  readonly #RedisLimiter: ReturnType<typeof rateLimiterRedis> | null;
  readonly #slots: Slots;
  /** On Redis: a request's counters and its account's lease in one script. */
  readonly #admission: RedisAdmission | null;
  /** Each Redis limiter's insurance (store.on_error: open). */
  readonly #insurance = new Map<RateLimiterAbstract, RateLimiterAbstract>();
  /** The store's key prefix (Redis counters' keys begin with it). */
  readonly #prefix: string;
  readonly #open: boolean;
  readonly #logger: Logger;
  #outage = false;
  /** Principals whose limits had ample room at their last admission, until when (ms). */
  readonly #room = new LRUCache<string, number>(entryBound(10_000));
  /**
   * Accounts' and keys' requests_per_minute this instance saw spent (a refusal), until the
   * window turns, with the limit then in force (a key whose limit a PATCH changed is asked again).
   */
  readonly #spent = new LRUCache<string, { until: number; limit: number }>(entryBound(10_000));

  constructor(config: Config, redis: RedisClient | null, slots: Slots, logger: Logger) {
    this.#config = config;
    this.#redis = redis;
    this.#RedisLimiter = redis === null ? null : rateLimiterRedis();
    this.#slots = slots;
    this.#open = config.store.on_error === 'open';
    this.#logger = logger;
    this.#prefix = config.store.prefix;
    this.#admission = redis !== null && slots instanceof RedisSlots ? new RedisAdmission(redis, slots, this.#insuranceOf) : null;
  }

  /**
   * The limiter of a plan's `dim`, or with `planName` null the keys' one: keys' limits differ
   * and change (PATCH), so that one never refuses by itself (its points are unbounded) and the
   * caller compares the points consumed with the key's limit; a PATCH keeps what a key used.
   */
  #limiter(planName: string | null, dim: Dimension, points: number, scope: 'key' | 'team' = 'key'): RateLimiterAbstract {
    const key = planName === null ? `\u0001${scope}\u0000${dim}` : `${planName}\u0000${dim}`;
    if (planName === null) points = Number.MAX_SAFE_INTEGER;
    let l = this.#limiters.get(key);
    if (l === undefined) {
      if (this.#redis === null || this.#RedisLimiter === null) {
        const keyPrefix = planName === null ? `${this.#config.store.prefix}rl:${scope}:${dim}` : `${this.#config.store.prefix}rl:${dim}:${planName}`;
        l = new RateLimiterMemory({ points, duration: WINDOW_S, keyPrefix });
      } else {
        // Counted under whole keys of their own (see #counterKey): no prefix of the limiter's.
        const opts = { points, duration: WINDOW_S, keyPrefix: '' };
        // store.on_error: open keeps serving on per-instance limits while Redis is down.
        const insurance = this.#open ? new RateLimiterMemory(opts) : undefined;
        l = new this.#RedisLimiter({
          ...opts,
          storeClient: this.#redis,
          customIncrTtlLuaScript: INCR_TTL_LUA,
          ...(insurance !== undefined ? { insuranceLimiter: insurance } : {}),
        });
        if (insurance !== undefined) this.#insurance.set(l, insurance);
      }
      this.#limiters.set(key, l);
    }
    return l;
  }

  /** On Redis, what lets a grant's token correction ride in its account lease's release (./grant.ts). */
  #riding(p: Principal): Riding | null {
    return this.#admission === null ? null : { account: p.accountId, insurance: this.#insuranceOf };
  }

  readonly #insuranceOf = (l: RateLimiterAbstract): RateLimiterAbstract | undefined => this.#insurance.get(l);

  /** A store failure: 503 when closed; (open) logged once per outage by the caller's fallback. */
  #storeDown(err: unknown): StoreUnavailableError {
    if (!this.#outage) {
      this.#outage = true;
      this.#logger.error({ err: (err as Error)?.message }, 'rate-limit store unreachable');
    }
    return new StoreUnavailableError(err);
  }

  #recovered(): void {
    if (this.#outage) {
      this.#outage = false;
      this.#logger.warn('rate-limit store reachable again');
    }
  }

  /** One limit of one counter: the plan's (by account) or the key's (by key id). */
  #checks(p: Principal): Check[] {
    const plan = p.plan;
    const checks: Check[] = [];
    const check = (scope: Check['scope'], dim: Dimension, limit: number, id: string): void => {
      checks.push({ scope, dim, limit, id, key: this.#counterKey(p, scope, dim, id) });
    };
    if (plan.requests_per_minute !== null) check('plan', 'requests', plan.requests_per_minute, p.accountId);
    const key = p.key;
    if (key?.limits.requests_per_minute != null) check('key', 'requests', key.limits.requests_per_minute, key.id);
    const team = key?.team;
    if (team?.limits.requests_per_minute != null) check('team', 'requests', team.limits.requests_per_minute, team.id);
    if (plan.tokens_per_minute !== null) check('plan', 'tokens', plan.tokens_per_minute, p.accountId);
    if (key?.limits.tokens_per_minute != null) check('key', 'tokens', key.limits.tokens_per_minute, key.id);
    if (team?.limits.tokens_per_minute != null) check('team', 'tokens', team.limits.tokens_per_minute, team.id);
    return checks;
  }

  /**
   * A counter's key in its limiter. In memory the id (the limiter's prefix names the rest). In
   * Redis a whole key under the account's hash tag, so that a request's counters and its
   * account's lease are one slot and one script (./admission.ts): P{acct:ID}:rl:DIM:PLAN for
   * the plan's, P{acct:ID}:rl:key:DIM:KEY and P{acct:ID}:rl:team:DIM:TEAM for a key's and a
   * team's (keys and teams are their account's). Until 2026-12 they were P rl:DIM:PLAN:ID and
   * P rl:key:DIM:ID (each its own slot): an upgrade starts each window anew once.
   */
  #counterKey(p: Principal, scope: Check['scope'], dim: Dimension, id: string): string {
    if (this.#redis === null) return id;
    const acct = `${this.#prefix}{acct:${p.accountId}}:rl:`;
    return scope === 'plan' ? `${acct}${dim}:${p.planName}` : `${acct}${scope}:${dim}:${id}`;
  }

  #limiterOf(p: Principal, c: Check): RateLimiterAbstract {
    return c.scope === 'plan' ? this.#limiter(p.planName, c.dim, c.limit) : this.#limiter(null, c.dim, c.limit, c.scope);
  }

  /** The 429 for a limit that refused: its message, and the headers of every limit seen. */
  #refusal(c: Check, rejection: RateLimiterRes, shown: Shown): GatewayError {
    const whose = c.scope === 'plan' ? 'this account' : c.scope === 'team' ? "this API key's team" : 'this API key';
    return new GatewayError('rate_limit_exceeded', `Rate limit reached: ${c.limit} ${c.dim} per minute for ${whose}. Retry after ${resetText(rejection.msBeforeNext)}.`, {
      headers: Object.assign(headersOf(shown), retryAfterHeaders(rejection.msBeforeNext)),
    });
  }

  /**
   * Admits a request or throws 429 (rate_limit_exceeded / too_many_concurrent, with
   * Retry-After). The plan's limits and the key's own apply both; the headers show the tighter
   * of the two. A request refused by one limit leaves nothing consumed in the others.
   */
  async admit(p: Principal, estimatedTokens: number): Promise<Grant> {
    const checks = this.#checks(p);
    const n = checks.length;
    // [slot id, cap, whose cap (for the refusal's message)]
    const caps: Array<[string, number, 'account' | 'key' | 'team']> = [];
    if (p.plan.max_concurrent !== null) caps.push([p.accountId, p.plan.max_concurrent, 'account']);
    const keyCap = p.key?.limits.max_concurrent;
    if (keyCap != null) caps.push([`key:${p.key!.id}`, keyCap, 'key']);
    const teamCap = p.key?.team?.limits.max_concurrent;
    if (teamCap != null) caps.push([`team:${p.key!.team!.id}`, teamCap, 'team']);
    // Every limit and every slot at once: on Redis, one round trip, the counters and the
    // account's lease in one script (./admission.ts). What a refused request took from the
    // others is given back (the refusal is the first in check order). One allSettled over all
    // of them: the limiters' and the slots' own promises, nothing wrapped around each (a
    // request's admission is on every request's path).
    const points = new Array<number>(n);
    /** Each check's limiter, looked up once: the refund and the correction use it again. */
    const limiters = new Array<RateLimiterAbstract>(n);
    for (let i = 0; i < n; i++) {
      const c = checks[i]!;
      points[i] = c.dim === 'requests' ? 1 : Math.min(Math.max(1, estimatedTokens), c.limit);
      limiters[i] = this.#limiterOf(p, c);
    }
    let settled: Array<PromiseSettledResult<unknown>>;
    if (this.#admission !== null) {
      settled = await this.#admission.run(checks.map((c) => c.key), points, limiters, caps, p.accountId);
    } else {
      const pending = new Array<Promise<unknown>>(n + caps.length);
      for (let i = 0; i < n; i++) pending[i] = limiters[i]!.consume(checks[i]!.key, points[i]!);
      for (let j = 0; j < caps.length; j++) pending[n + j] = this.#slots.acquire(caps[j]![0], caps[j]![1]);
      settled = await Promise.allSettled(pending);
    }

    const shown: Shown = {};
    /** Per check, the points it took (0: none, refused or failed). */
    const taken = new Array<number>(n).fill(0);
    /** The first limit, in check order, that refused, or the store failure standing for it. */
    let refused: { check: Check; res: RateLimiterRes } | StoreUnavailableError | undefined;
    let reached = false;
    let down: StoreUnavailableError | undefined;
    for (let i = 0; i < n; i++) {
      const c = checks[i]!;
      const r = settled[i]!;
      if (r.status === 'fulfilled') {
        reached = true;
        const res = r.value as RateLimiterRes;
        if (c.scope !== 'plan' && res.consumedPoints > c.limit) {
          // Over the key's (or team's) limit: these points were never granted, so they are given back.
          void limiters[i]!.reward(c.key, points[i]!).catch(() => undefined);
          const rejection = new RateLimiterRes(0, res.msBeforeNext, res.consumedPoints - points[i]!, false);
          tighter(shown, c.dim, c.limit, rejection, i);
          refused ??= { check: c, res: rejection };
          continue;
        }
        taken[i] = points[i]!;
        tighter(shown, c.dim, c.limit, res, i);
      } else if (r.reason instanceof RateLimiterRes) {
        reached = true;
        tighter(shown, c.dim, c.limit, r.reason, i);
        refused ??= { check: c, res: r.reason };
      } else {
        // Said (once per outage) whatever else refused: the store is down either way.
        down = this.#storeDown(r.reason);
        refused ??= down;
      }
    }
    const slots: Release[] = [];
    let slotDown: unknown;
    let full = -1;
    for (let j = 0; j < caps.length; j++) {
      const r = settled[n + j]!;
      if (r.status === 'rejected') slotDown ??= r.reason;
      else if (r.value === undefined) { if (full < 0) full = j; }
      else slots.push(r.value as Release);
    }
    // Said (once per outage) whatever else refused, as for the limits.
    const slotsDown = slotDown === undefined ? undefined : this.#storeDown(slotDown);
    // The store answered every limit and every slot: an outage, if there was one, is over.
    if (down === undefined && slotsDown === undefined && (reached || caps.length > 0)) this.#recovered();
    if (refused !== undefined || slotsDown !== undefined || full >= 0) {
      if (refused !== undefined && !(refused instanceof StoreUnavailableError)) this.#sawSpent(refused.check, refused.res);
      for (const s of slots) s();
      refund(checks, limiters, taken);
      // The refusal's headers show every limit as it stands with the points given back.
      givenBack(shown, taken);
      if (refused instanceof StoreUnavailableError) throw refused;
      if (refused !== undefined) throw this.#refusal(refused.check, refused.res, shown);
      if (slotsDown !== undefined) throw slotsDown;
      const [, cap, whose] = caps[full]!;
      const who = whose === 'account' ? 'this account' : whose === 'team' ? "this API key's team" : 'this API key';
      throw new GatewayError('too_many_concurrent', `Too many requests in flight: ${who} may have ${cap} at once.`, {
        headers: Object.assign(headersOf(shown), retryAfterHeaders(1000)),
      });
    }
    this.#remember(p, checks, shown);
    return new Admitted(checks, limiters, taken, slots, shown, this.#riding(p));
  }

  /**
   * Refuses at once (429 rate_limit_exceeded) a principal whose requests_per_minute this
   * instance saw spent in the current window: what it sends is then neither read, parsed nor
   * counted (CONTRACT section 16). From what the limiters last answered here; no store read.
   */
  gate(p: Principal): void {
    if (this.#spent.size === 0) return;
    for (const c of this.#checks(p)) {
      if (c.dim !== 'requests') continue;
      const seen = this.#spent.get(spentKey(c));
      if (seen === undefined || seen.limit !== c.limit) continue;
      const left = seen.until - Date.now();
      if (left <= 0) continue;
      const shown: Shown = { requests: { limit: c.limit, remaining: 0, resetMs: left, check: -1 } };
      throw this.#refusal(c, new RateLimiterRes(0, left, c.limit, false), shown);
    }
  }

  /**
   * A request refused for its content before admission spends one request of each
   * requests_per_minute all the same, as any request does (CONTRACT section 16). Returns the
   * refusal's x-ratelimit-* headers and, when a limit was already spent, the 429 that answers
   * instead; a store fault spends nothing and refuses nothing (the content error stands).
   */
  async spend(p: Principal): Promise<{ headers: Record<string, string>; refusal?: GatewayError }> {
    const shown: Shown = {};
    let refusal: GatewayError | undefined;
    const checks = this.#checks(p);
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i]!;
      if (c.dim !== 'requests') continue;
      const limiter = this.#limiterOf(p, c);
      let res: RateLimiterRes;
      try {
        res = await limiter.consume(c.key, 1);
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) continue;
        res = err;
        this.#sawSpent(c, res);
        tighter(shown, c.dim, c.limit, res, i);
        refusal ??= this.#refusal(c, res, shown);
        continue;
      }
      if (c.scope !== 'plan' && res.consumedPoints > c.limit) {
        void limiter.reward(c.key, 1).catch(() => undefined);
        const rejection = new RateLimiterRes(0, res.msBeforeNext, res.consumedPoints - 1, false);
        this.#sawSpent(c, rejection);
        tighter(shown, c.dim, c.limit, rejection, i);
        refusal ??= this.#refusal(c, rejection, shown);
        continue;
      }
      tighter(shown, c.dim, c.limit, res, i);
    }
    return refusal === undefined ? { headers: headersOf(shown) } : { headers: headersOf(shown), refusal };
  }

  /** A requests limit refused: later requests of the same account or key are refused at the gate until its window turns. */
  #sawSpent(c: Check, res: RateLimiterRes): void {
    if (c.dim !== 'requests' || res.msBeforeNext <= 0) return;
    this.#spent.set(spentKey(c), { until: Date.now() + res.msBeforeNext, limit: c.limit });
  }

  /**
   * Whether this principal's last admission left ample room in every limit (at least a tenth
   * of each, and more than a few requests' worth): then the hold may go out with the next
   * admission in one round trip, since a refusal is unlikely (and, should one come, the hold is
   * released at once). Per instance, from what the limiters last answered; no store read.
   */
  roomy(p: Principal): boolean {
    if (this.#redis === null) return false; // in memory there is no round trip to save
    const seen = this.#room.get(roomKey(p));
    return seen !== undefined && seen > Date.now();
  }

  #remember(p: Principal, checks: Check[], shown: Shown): void {
    // Only roomy() reads what is remembered, and in memory it never looks.
    if (this.#redis === null) return;
    let ample = true;
    for (const c of checks) {
      const s = c.dim === 'requests' ? shown.requests : shown.tokens;
      if (s === undefined || s.remaining < Math.max(8, c.limit / 10)) { ample = false; break; }
    }
    if (p.plan.max_concurrent !== null && p.plan.max_concurrent < 16) ample = false;
    if (p.key?.limits.max_concurrent != null && p.key.limits.max_concurrent < 16) ample = false;
    if (p.key?.team?.limits.max_concurrent != null && p.key.team.limits.max_concurrent < 16) ample = false;
    const key = roomKey(p);
    if (ample) this.#room.set(key, Date.now() + ROOM_MS);
    else this.#room.delete(key);
  }

  /** The headers for an answer that consumes nothing (GET /v1/models): the tighter of plan and key. */
  async peek(p: Principal): Promise<Record<string, string>> {
    const shown: Shown = {};
    for (const c of this.#checks(p)) {
      let res: RateLimiterRes | null;
      try {
        res = await this.#limiterOf(p, c).get(c.key);
      } catch {
        continue;
      }
      tighter(shown, c.dim, c.limit, res, -1);
    }
    return headersOf(shown);
  }
}
