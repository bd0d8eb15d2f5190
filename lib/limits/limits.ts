// Rate limits and concurrency caps per account (plan fields requests_per_minute,
// tokens_per_minute, max_concurrent). rate-limiter-flexible counts in memory with the memory
// store and in Redis with the redis store, so every instance shares one view. Tokens are taken
// at admission from the estimate and corrected once the answer's usage is known.

import type { RedisClient } from '../store/redis-connect.js';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Principal } from '../auth/principal.js';
import type { Config } from '../config/types.js';
import { GatewayError, StoreUnavailableError, retryAfterHeaders } from '../errors.js';
import type { Logger } from '../observe/log.js';
import type { Slots } from './slots.js';

const WINDOW_S = 60;

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
}

type Dimension = 'requests' | 'tokens';

export class Limits {
  readonly #limiters = new Map<string, RateLimiterAbstract>();
  readonly #config: Config;
  readonly #redis: RedisClient | null;
  readonly #slots: Slots;
  readonly #open: boolean;
  readonly #logger: Logger;
  #outage = false;

  constructor(config: Config, redis: RedisClient | null, slots: Slots, logger: Logger) {
    this.#config = config;
    this.#redis = redis;
    this.#slots = slots;
    this.#open = config.store.on_error === 'open';
    this.#logger = logger;
  }

  #limiter(planName: string, dim: Dimension, points: number): RateLimiterAbstract {
    const key = `${planName}\u0000${dim}`;
    let l = this.#limiters.get(key);
    if (l === undefined) {
      const opts = { points, duration: WINDOW_S, keyPrefix: `${this.#config.store.prefix}rl:${dim}:${planName}` };
      l = this.#redis === null
        ? new RateLimiterMemory(opts)
        : new RateLimiterRedis({
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

  async #consume(p: Principal, dim: Dimension, limit: number, points: number, headers: Record<string, string>): Promise<void> {
    let res: RateLimiterRes;
    try {
      res = await this.#limiter(p.planName, dim, limit).consume(p.accountId, points);
      this.#recovered();
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw this.#storeDown(rejection);
      this.#recovered();
      Object.assign(headers, this.#headers(dim, limit, rejection));
      throw new GatewayError('rate_limit_exceeded', `Rate limit reached: ${limit} ${dim} per minute for this account. Retry after ${resetText(rejection.msBeforeNext)}.`, {
        headers: { ...headers, ...retryAfterHeaders(rejection.msBeforeNext) },
      });
    }
    Object.assign(headers, this.#headers(dim, limit, res));
  }

  #headers(dim: Dimension, limit: number, res: RateLimiterRes): Record<string, string> {
    return {
      [`x-ratelimit-limit-${dim}`]: String(limit),
      [`x-ratelimit-remaining-${dim}`]: String(Math.max(0, res.remainingPoints)),
      [`x-ratelimit-reset-${dim}`]: resetText(res.msBeforeNext),
    };
  }

  /**
   * Admits a request or throws 429 (rate_limit_exceeded / too_many_concurrent, with
   * Retry-After). A request refused by one limit leaves nothing consumed in the others.
   */
  async admit(p: Principal, estimatedTokens: number): Promise<Grant> {
    const plan = p.plan;
    const headers: Record<string, string> = {};
    const rpm = plan.requests_per_minute;
    const tpm = plan.tokens_per_minute;
    // A request larger than the whole budget is taken as the whole budget, not refused forever.
    const taken = tpm === null ? 0 : Math.min(Math.max(1, estimatedTokens), tpm);
    if (rpm !== null) await this.#consume(p, 'requests', rpm, 1, headers);
    try {
      if (tpm !== null) await this.#consume(p, 'tokens', tpm, taken, headers);
    } catch (err) {
      if (rpm !== null) void this.#limiter(p.planName, 'requests', rpm).reward(p.accountId, 1).catch(() => undefined);
      throw err;
    }
    let slot: (() => void) | undefined;
    if (plan.max_concurrent !== null) {
      try {
        slot = await this.#slots.acquire(p.accountId, plan.max_concurrent);
      } catch (err) {
        this.#refund(p, rpm, tpm, taken);
        throw this.#storeDown(err);
      }
      if (slot === undefined) {
        this.#refund(p, rpm, tpm, taken);
        throw new GatewayError('too_many_concurrent', `Too many requests in flight: this account may have ${plan.max_concurrent} at once.`, {
          headers: { ...headers, ...retryAfterHeaders(1000) },
        });
      }
    }
    let corrected = false;
    let released = false;
    return {
      headers,
      correct: (actual) => {
        if (corrected || tpm === null) return;
        corrected = true;
        const diff = actual - taken;
        const l = this.#limiter(p.planName, 'tokens', tpm);
        if (diff > 0) void l.penalty(p.accountId, diff).catch(() => undefined);
        else if (diff < 0) void l.reward(p.accountId, -diff).catch(() => undefined);
      },
      release: () => {
        if (released) return;
        released = true;
        slot?.();
      },
    };
  }

  #refund(p: Principal, rpm: number | null, tpm: number | null, taken: number): void {
    if (rpm !== null) void this.#limiter(p.planName, 'requests', rpm).reward(p.accountId, 1).catch(() => undefined);
    if (tpm !== null) void this.#limiter(p.planName, 'tokens', tpm).reward(p.accountId, taken).catch(() => undefined);
  }

  /** The headers for an answer that consumes nothing (GET /v1/models). */
  async peek(p: Principal): Promise<Record<string, string>> {
    const headers: Record<string, string> = {};
    for (const [dim, limit] of [['requests', p.plan.requests_per_minute], ['tokens', p.plan.tokens_per_minute]] as const) {
      if (limit === null) continue;
      let res: RateLimiterRes | null;
      try {
        res = await this.#limiter(p.planName, dim, limit).get(p.accountId);
      } catch {
        continue;
      }
      Object.assign(headers, res === null
        ? { [`x-ratelimit-limit-${dim}`]: String(limit), [`x-ratelimit-remaining-${dim}`]: String(limit), [`x-ratelimit-reset-${dim}`]: '0ms' }
        : this.#headers(dim, limit, res));
    }
    return headers;
  }
}
