// A console session's requests per minute (CONTRACT section 21: a console member's reads and
// exports count toward a per-session requests_per_minute, as an admin's do). Every request a
// session makes (to the console's API, or to /admin with its cookie) spends one, signing out
// aside; an export spends one more for each page after its first, and waits for the next
// minute when the session has none left (the download slows down; it is never cut off). Over
// console.requests_per_minute (default 600) in a minute: 429 rate_limit_exceeded with
// Retry-After. Counted per instance, as the loop each instance runs is what the limit keeps
// bounded (behind N instances a session gets N times the limit); a reload starts the count
// afresh. null: no limit.

import { GatewayError, retryAfterHeaders } from '../errors.js';
import { RateLimiterMemory, RateLimiterRes } from '../limits/rate-limiters.js';

const WINDOW_S = 60;

export class SessionLimit {
  /** Null without a limit. */
  readonly #limiter: InstanceType<typeof RateLimiterMemory> | null;
  readonly #perMinute: number;

  constructor(perMinute: number | null) {
    this.#perMinute = perMinute ?? Infinity;
    this.#limiter = perMinute === null ? null : new RateLimiterMemory({ points: perMinute, duration: WINDOW_S });
  }

  /** Spends one request of session `sid`; 429 rate_limit_exceeded when its minute has none left. */
  async spend(sid: string): Promise<void> {
    const wait = await this.#take(sid);
    if (wait === 0) return;
    throw new GatewayError('rate_limit_exceeded',
      `This console session made more than ${this.#perMinute} requests this minute (console.requests_per_minute); retry in ${Math.ceil(wait / 1000)} s.`,
      { headers: retryAfterHeaders(wait) });
  }

  /**
   * Spends one request of session `sid` for an export's next page, waiting for the session's
   * next minute when it has none left; false when `gone` (the client left) ends the wait first.
   */
  async awaitPage(sid: string, gone: { readonly destroyed: boolean; once(event: 'close', f: () => void): unknown; off(event: 'close', f: () => void): unknown }): Promise<boolean> {
    for (;;) {
      if (gone.destroyed) return false;
      const wait = await this.#take(sid);
      if (wait === 0) return true;
      let onClose = (): void => {};
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        onClose = resolve;
        timer = setTimeout(resolve, wait);
        gone.once('close', onClose);
      });
      clearTimeout(timer);
      gone.off('close', onClose);
    }
  }

  /** Takes one point: 0 when taken, else the ms until the session's minute ends. */
  async #take(sid: string): Promise<number> {
    if (this.#limiter === null) return 0;
    try {
      await this.#limiter.consume(sid, 1);
      return 0;
    } catch (res) {
      if (res instanceof RateLimiterRes) return Math.max(1, res.msBeforeNext);
      throw res;
    }
  }
}
