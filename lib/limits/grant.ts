// What the limits give an admitted request (a Grant: its x-ratelimit-* headers, a token
// correction, its concurrency slots) and the arithmetic of its checks: giving back what a refused
// request took, correcting the token estimate, and showing the tighter limit in the headers.

import { RateLimiterRes, type RateLimiterAbstract } from './rate-limiters.js';
import type { Release, Rider } from './slots.js';

/** OpenAI-style reset durations: "450ms", "12s", "1m30s". */
export function resetText(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}

/**
 * What an admitted request holds: its headers, a token correction, its concurrency slot.
 * `release` may be handed on as a function (queueMicrotask(grant.release)); `correct` and
 * `cancel` are methods, called on the grant.
 */
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

export type Dimension = 'requests' | 'tokens';

/** One limit of one counter: whose (scope, id), its limit, and the counter's key in its limiter. */
export interface Check { scope: 'plan' | 'key' | 'team'; dim: Dimension; limit: number; id: string; key: string }

export const spentKey = (c: Check): string => `${c.scope}\u0000${c.id}`;

/** See Admitted's #riding. */
export interface Riding { account: string; insurance: (limiter: RateLimiterAbstract) => RateLimiterAbstract | undefined }

/**
 * An admitted request's grant: one object rather than a closure per operation. `release` is a
 * bound function (it is handed to queueMicrotask as is); the rest are methods.
 */
export class Admitted implements Grant {
  readonly headers: Record<string, string>;
  readonly #checks: readonly Check[];
  readonly #limiters: readonly RateLimiterAbstract[];
  readonly #taken: number[];
  readonly #slots: Release[];
  readonly #shown: Shown;
  /**
   * On Redis: the account whose lease may carry the token correction in its release's script
   * (./slots.ts), and each limiter's insurance should that script fail; null in memory.
   */
  readonly #riding: Riding | null;
  #corrected = false;
  #released = false;
  /** The actual tokens, once known; sent with the slots' release (one round trip after the answer). */
  #actual = -1;

  constructor(checks: readonly Check[], limiters: readonly RateLimiterAbstract[], taken: number[], slots: Release[], shown: Shown,
    riding: Riding | null = null) {
    this.#checks = checks;
    this.#riding = riding;
    this.#limiters = limiters;
    this.#taken = taken;
    this.#slots = slots;
    this.#shown = shown;
    this.headers = headersOf(shown);
  }

  readonly release = (): void => {
    if (this.#released) return;
    this.#released = true;
    // With the actual tokens known, the correction rides in the account lease's release (one
    // script) where there is one; otherwise the limiters send it.
    let rider = this.#actual >= 0 && this.#riding !== null ? this.#rider(this.#riding) : undefined;
    for (const s of this.#slots) {
      // Each release called once: a memory slot's counts down on every call.
      if (rider === undefined) s();
      else if (s(rider) === true) rider = undefined;
    }
    if (this.#actual >= 0 && (this.#riding === null || rider !== undefined)) correctTokens(this.#checks, this.#limiters, this.#taken, this.#actual);
  };

  /**
   * The token correction as a release's rider (undefined when nothing is to be corrected): the
   * same points the limiters' penalty and reward would add, to the same keys; should its
   * script fail, each goes to its limiter's insurance as theirs would (store.on_error: open).
   */
  #rider({ account, insurance }: Riding): Rider | undefined {
    let rider: Rider | undefined;
    const limiters: RateLimiterAbstract[] = [];
    for (let i = 0; i < this.#checks.length; i++) {
      const c = this.#checks[i]!;
      if (c.dim !== 'tokens' || this.#taken[i] === 0) continue;
      const diff = this.#actual - this.#taken[i]!;
      if (diff === 0) continue;
      rider ??= { account, keys: [], points: [], durations: [], failed: (err) => failed(rider!, limiters, insurance, err) };
      rider.keys.push(c.key);
      rider.points.push(diff);
      rider.durations.push(this.#limiters[i]!.duration);
      limiters.push(this.#limiters[i]!);
    }
    return rider;
  }

  correct(actualTokens: number): void {
    if (this.#corrected) return;
    this.#corrected = true;
    if (this.#released) correctTokens(this.#checks, this.#limiters, this.#taken, actualTokens);
    else this.#actual = actualTokens;
  }

  cancel(): void {
    this.release();
    if (this.#corrected) return;
    this.#corrected = true;
    refund(this.#checks, this.#limiters, this.#taken);
    // The refusal's answer shows the points given back: as if the request had not come.
    givenBack(this.#shown, this.#taken);
    Object.assign(this.headers, headersOf(this.#shown));
  }
}

/** A rider's corrections, its script failed: to each limiter's insurance, as the limiter's own penalty or reward does. */
function failed(rider: Rider, limiters: readonly RateLimiterAbstract[], insurance: (limiter: RateLimiterAbstract) => RateLimiterAbstract | undefined, err: unknown): void {
  void err;
  for (let i = 0; i < rider.keys.length; i++) {
    const l = insurance(limiters[i]!);
    if (l === undefined) continue;
    const points = rider.points[i]!;
    void (points > 0 ? l.penalty(rider.keys[i]!, points) : l.reward(rider.keys[i]!, -points)).catch(() => undefined);
  }
}

/** Gives back what each check took (a refused request, or one cancelled after admission). */
export function refund(checks: readonly Check[], limiters: readonly RateLimiterAbstract[], taken: readonly number[]): void {
  for (let i = 0; i < checks.length; i++) {
    if (taken[i]! > 0) void limiters[i]!.reward(checks[i]!.key, taken[i]!).catch(() => undefined);
  }
}

/** Brings the token limiters from the estimate taken to the actual tokens. */
export function correctTokens(checks: readonly Check[], limiters: readonly RateLimiterAbstract[], taken: readonly number[], actual: number): void {
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i]!;
    if (c.dim !== 'tokens' || taken[i] === 0) continue;
    const diff = actual - taken[i]!;
    if (diff > 0) void limiters[i]!.penalty(c.key, diff).catch(() => undefined);
    else if (diff < 0) void limiters[i]!.reward(c.key, -diff).catch(() => undefined);
  }
}

/** Per dimension, the limit with the fewest points left (ties: the smaller limit). */
export type Shown = Partial<Record<Dimension, { limit: number; remaining: number; resetMs: number; check: number }>>;

/** Keeps in `shown` the tighter of what it has for `dim` and check number `check`'s result. */
export function tighter(shown: Shown, dim: Dimension, limit: number, res: RateLimiterRes | null, check: number): void {
  // Keys' limiters count without a bound of their own: what is left is the limit minus the count.
  const remaining = res === null ? limit : Math.max(0, Math.min(limit, res.remainingPoints, limit - res.consumedPoints));
  const resetMs = res === null ? 0 : res.msBeforeNext;
  const cur = shown[dim];
  if (cur === undefined || remaining < cur.remaining || (remaining === cur.remaining && limit < cur.limit)) {
    shown[dim] = { limit, remaining, resetMs, check };
  }
}

/**
 * What `shown` says once each check's points are given back: the remaining of the limit shown
 * for a dimension grows by what that very check took (a plan's and a key's limit may be equal
 * and have taken differently).
 */
export function givenBack(shown: Shown, taken: readonly number[]): void {
  for (const dim of DIMENSIONS) {
    const s = shown[dim];
    if (s !== undefined && s.check >= 0) s.remaining = Math.min(s.limit, s.remaining + taken[s.check]!);
  }
}

const DIMENSIONS = ['requests', 'tokens'] as const;

/** Each dimension's header names, built once rather than per request. */
const HEADER_NAMES = DIMENSIONS.map((dim) =>
  ({ dim, limit: `x-ratelimit-limit-${dim}`, remaining: `x-ratelimit-remaining-${dim}`, reset: `x-ratelimit-reset-${dim}` }));

export function headersOf(shown: Shown): Record<string, string> {
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
