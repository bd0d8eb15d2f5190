// Rate limits and concurrency caps per account (plan fields requests_per_minute,
// tokens_per_minute, max_concurrent). rate-limiter-flexible counts in memory with the memory
// store and in Redis with the redis store, so every instance shares one view. Tokens are taken
// at admission from the estimate and corrected once the answer's usage is known.
//
// A developer key may add its own limits (CONTRACT section 8): they are counted per key id on
// top of the plan's per-account counts, the answer's x-ratelimit-* headers show whichever is
// tighter, and a request refused by any limit (or later, at the hold) gives back what it took.

import type { RedisClient } from '../store/redis-connect.js';
import { RateLimiterMemory, RateLimiterRes, rateLimiterRedis, type RateLimiterAbstract } from './rate-limiters.js';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config/types.js';
import { GatewayError, StoreUnavailableError, retryAfterHeaders } from '../errors.js';
import type { Logger } from '../observe/log.js';
import type { Slots } from './slots.js';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lru.js';

const WINDOW_S = 60;
/** How long an ample-room observation is trusted for the next admissions. */
const ROOM_MS = 1000;

const roomKey = (p: Principal): string => (p.key === undefined ? p.accountId : `${p.accountId}\u0000${p.key.id}`);

/** OpenAI-style reset durations: "450ms", "12s", "1m30s". */
export function resetText(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}

/** What an admitted request holds: its headers, a token correction, its concurrency slot. */
export interface Grant {
  headers: Record<string, string>;
  /** Tells the token limiter the request's actual tokens (0 when nothing was used). */
  correct(actualTokens: number): void;
  /** Frees the concurrency slot; safe to call more than once. */
  release(): void;
  /**
   * The request was refused after admission (credits, budget, quota): gives back every point it
   * took and its slots, as if it had never been admitted. Safe to call more than once.
   */
  cancel(): void;
}

type Dimension = 'requests' | 'tokens';

export class Limits {
  readonly #limiters = new Map<string, RateLimiterAbstract>();
  readonly #config: Config;
  readonly #redis: RedisClient | null;
  /** Loaded with the Limits of a Redis store (at start or reload), never by a request. */
  readonly #RedisLimiter: ReturnType<typeof rateLimiterRedis> | null;
  readonly #slots: Slots;
  readonly #open: boolean;
  readonly #logger: Logger;
  #outage = false;
  /** Principals whose limits had ample room at their last admission, until when (ms). */
  readonly #room = new LRUCache<string, number>(entryBound(10_000));

  constructor(config: Config, redis: RedisClient | null, slots: Slots, logger: Logger) {
    this.#config = config;
    this.#redis = redis;
    this.#RedisLimiter = redis === null ? null : rateLimiterRedis();
    this.#slots = slots;
    this.#open = config.store.on_error === 'open';
    this.#logger = logger;
  }

  /**
   * The limiter of a plan's `dim`, or with `planName` null the keys' one: keys' limits differ
   * and change (PATCH), so that one never refuses by itself (its points are unbounded) and the
   * caller compares the points consumed with the key's limit; a PATCH keeps what a key used.
   */
  #limiter(planName: string | null, dim: Dimension, points: number): RateLimiterAbstract {
    const key = planName === null ? `\u0001key\u0000${dim}` : `${planName}\u0000${dim}`;
    if (planName === null) points = Number.MAX_SAFE_INTEGER;
    let l = this.#limiters.get(key);
    if (l === undefined) {
      const keyPrefix = planName === null ? `${this.#config.store.prefix}rl:key:${dim}` : `${this.#config.store.prefix}rl:${dim}:${planName}`;
      const opts = { points, duration: WINDOW_S, keyPrefix };
      l = this.#redis === null || this.#RedisLimiter === null
        ? new RateLimiterMemory(opts)
        : new this.#RedisLimiter({
          ...opts,
          storeClient: this.#redis,
          // store.on_error: open keeps serving on per-instance limits while Redis is down.
          ...(this.#open ? { insuranceLimiter: new RateLimiterMemory(opts) } : {}),
        });
      this.#limiters.set(key, l);
    }
    return l;
  }

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
    if (plan.requests_per_minute !== null) checks.push({ scope: 'plan', dim: 'requests', limit: plan.requests_per_minute, id: p.accountId });
    const key = p.key;
    if (key?.limits.requests_per_minute != null) checks.push({ scope: 'key', dim: 'requests', limit: key.limits.requests_per_minute, id: key.id });
    if (plan.tokens_per_minute !== null) checks.push({ scope: 'plan', dim: 'tokens', limit: plan.tokens_per_minute, id: p.accountId });
    if (key?.limits.tokens_per_minute != null) checks.push({ scope: 'key', dim: 'tokens', limit: key.limits.tokens_per_minute, id: key.id });
    return checks;
  }

  #limiterOf(p: Principal, c: Check): RateLimiterAbstract {
    return this.#limiter(c.scope === 'plan' ? p.planName : null, c.dim, c.limit);
  }

  async #consume(p: Principal, c: Check, points: number, shown: Shown): Promise<void> {
    let res: RateLimiterRes;
    try {
      res = await this.#limiterOf(p, c).consume(c.id, points);
      this.#recovered();
      if (c.scope === 'key' && res.consumedPoints > c.limit) {
        // Over the key's limit: these points were never granted, so they are given back.
        void this.#limiterOf(p, c).reward(c.id, points).catch(() => undefined);
        throw new RateLimiterRes(0, res.msBeforeNext, res.consumedPoints - points, false);
      }
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw this.#storeDown(rejection);
      this.#recovered();
      tighter(shown, c.dim, c.limit, rejection);
      const whose = c.scope === 'plan' ? 'this account' : 'this API key';
      throw new GatewayError('rate_limit_exceeded', `Rate limit reached: ${c.limit} ${c.dim} per minute for ${whose}. Retry after ${resetText(rejection.msBeforeNext)}.`, {
        headers: Object.assign(headersOf(shown), retryAfterHeaders(rejection.msBeforeNext)),
      });
    }
    tighter(shown, c.dim, c.limit, res);
  }

  /**
   * Admits a request or throws 429 (rate_limit_exceeded / too_many_concurrent, with
   * Retry-After). The plan's limits and the key's own apply both; the headers show the tighter
   * of the two. A request refused by one limit leaves nothing consumed in the others.
   */
  async admit(p: Principal, estimatedTokens: number): Promise<Grant> {
    const shown: Shown = {};
    const checks = this.#checks(p);
    // [slot id, cap, whose cap (for the refusal's message)]
    const caps: Array<[string, number, 'account' | 'key']> = [];
    if (p.plan.max_concurrent !== null) caps.push([p.accountId, p.plan.max_concurrent, 'account']);
    const keyCap = p.key?.limits.max_concurrent;
    if (keyCap != null) caps.push([`key:${p.key!.id}`, keyCap, 'key']);
    // Every limit and every slot at once: on Redis, one pipelined round trip. What a refused
    // request took from the others is given back (the refusal is the first in check order).
    const points = checks.map((c) => (c.dim === 'requests' ? 1 : Math.min(Math.max(1, estimatedTokens), c.limit)));
    const [consumed, acquired] = await Promise.all([
      Promise.allSettled(checks.map((c, i) => this.#consume(p, c, points[i]!, shown))),
      Promise.allSettled(caps.map(([id, max]) => this.#slots.acquire(id, max))),
    ]);
    const taken = new Map<Check, number>();
    consumed.forEach((r, i) => { if (r.status === 'fulfilled') taken.set(checks[i]!, points[i]!); });
    const slots: Array<() => void> = [];
    for (const r of acquired) if (r.status === 'fulfilled' && r.value !== undefined) slots.push(r.value);
    const refund = () => {
      for (const [c, n] of taken) void this.#limiterOf(p, c).reward(c.id, n).catch(() => undefined);
    };
    const refused = consumed.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const slotDown = acquired.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const full = acquired.findIndex((r) => r.status === 'fulfilled' && r.value === undefined);
    if (refused !== undefined || slotDown !== undefined || full >= 0) {
      for (const s of slots) s();
      refund();
      if (refused !== undefined) throw refused.reason;
      if (slotDown !== undefined) throw this.#storeDown(slotDown.reason);
      const [, cap, whose] = caps[full]!;
      throw new GatewayError('too_many_concurrent', `Too many requests in flight: ${whose === 'account' ? 'this account' : 'this API key'} may have ${cap} at once.`, {
        headers: Object.assign(headersOf(shown), retryAfterHeaders(1000)),
      });
    }
    const headers = headersOf(shown);
    this.#remember(p, checks, shown);
    let corrected = false;
    let released = false;
    /** The token correction, sent with the slots' release: one round trip after the answer. */
    let correction: (() => void) | undefined;
    const release = () => {
      if (released) return;
      released = true;
      for (const s of slots) s();
      correction?.();
    };
    return {
      headers,
      cancel: () => {
        release();
        if (corrected) return;
        corrected = true;
        refund();
        // The refusal's answer shows the points given back: as if the request had not come.
        for (const dim of ['requests', 'tokens'] as const) {
          const s = shown[dim];
          const c = s === undefined ? undefined : checks.find((x) => x.dim === dim && x.limit === s.limit);
          if (s === undefined || c === undefined) continue;
          headers[`x-ratelimit-remaining-${dim}`] = String(Math.min(s.limit, s.remaining + (taken.get(c) ?? 0)));
        }
      },
      correct: (actual) => {
        if (corrected) return;
        corrected = true;
        correction = () => {
          for (const [c, n] of taken) {
            if (c.dim !== 'tokens') continue;
            const diff = actual - n;
            const l = this.#limiterOf(p, c);
            if (diff > 0) void l.penalty(c.id, diff).catch(() => undefined);
            else if (diff < 0) void l.reward(c.id, -diff).catch(() => undefined);
          }
        };
        if (released) correction();
      },
      release,
    };
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
        res = await this.#limiterOf(p, c).get(c.id);
      } catch {
        continue;
      }
      tighter(shown, c.dim, c.limit, res);
    }
    return headersOf(shown);
  }
}

interface Check { scope: 'plan' | 'key'; dim: Dimension; limit: number; id: string }

/** Per dimension, the limit with the fewest points left (ties: the smaller limit). */
type Shown = Partial<Record<Dimension, { limit: number; remaining: number; resetMs: number }>>;

function tighter(shown: Shown, dim: Dimension, limit: number, res: RateLimiterRes | null): void {
  // Keys' limiters count without a bound of their own: what is left is the limit minus the count.
  const remaining = res === null ? limit : Math.max(0, Math.min(limit, res.remainingPoints, limit - res.consumedPoints));
  const resetMs = res === null ? 0 : res.msBeforeNext;
  const cur = shown[dim];
  if (cur === undefined || remaining < cur.remaining || (remaining === cur.remaining && limit < cur.limit)) {
    shown[dim] = { limit, remaining, resetMs };
  }
}

/** Each dimension's header names, built once rather than per request. */
const HEADER_NAMES = (['requests', 'tokens'] as const).map((dim) =>
  ({ dim, limit: `x-ratelimit-limit-${dim}`, remaining: `x-ratelimit-remaining-${dim}`, reset: `x-ratelimit-reset-${dim}` }));

function headersOf(shown: Shown): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const h of HEADER_NAMES) {
    const s = shown[h.dim];
    if (s === undefined) continue;
    headers[h.limit] = String(s.limit);
    headers[h.remaining] = String(s.remaining);
    headers[h.reset] = resetText(s.resetMs);
  }
  return headers;
}
