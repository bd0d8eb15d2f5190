// Wrong admin tokens, counted per client address (the address trust_proxy resolves), when
// admin.max_token_failures is set. The admin token opens /admin and the console's token
// sign-in; whoever can try it without limit can guess a weak one. After that many wrong tokens
// from one address within WINDOW_S, every token attempt from that address, the right token
// included, is answered 429 rate_limit_exceeded with Retry-After until the window ends: the
// answer then says nothing about the token tried. A request with no token at all (a browser, a
// scanner) is not counted; a console session is not a token attempt. Counted per instance
// (behind N instances a guesser gets N times the tries); a config reload starts the count
// afresh. Off by default: CONTRACT section 5 answers every wrong token 401, and a client that
// sends many (a monitor with an old token) would otherwise lock its address out.

import type { IncomingMessage } from 'node:http';
import { GatewayError, retryAfterHeaders } from '../errors.js';
import { RateLimiterMemory } from '../limits/rate-limiters.js';
import type { AddressOf } from '../auth/client-address.js';

/** The window, in seconds, counted from the address's first wrong token. */
export const WINDOW_S = 300;

export class TokenGuard {
  /** Null without a limit. */
  readonly #failures: InstanceType<typeof RateLimiterMemory> | null;
  readonly #max: number;
  readonly #address: AddressOf;

  constructor(address: AddressOf, maxFailures: number | null) {
    this.#address = address;
    this.#max = maxFailures ?? Infinity;
    this.#failures = maxFailures === null ? null : new RateLimiterMemory({ points: maxFailures, duration: WINDOW_S });
  }

  /**
   * Whether `given` opens the door (`matches` compares it in constant time): 429 while the
   * address is locked out, false for a wrong token (counted), true for the right one.
   */
  async attempt(req: IncomingMessage, given: string, matches: (given: string) => boolean): Promise<boolean> {
    const failures = this.#failures;
    if (failures === null) return matches(given);
    const address = this.#address(req) ?? '';
    const seen = await failures.get(address);
    if (seen !== null && seen.consumedPoints >= this.#max) {
      throw new GatewayError('rate_limit_exceeded', `Too many wrong admin tokens from this address; retry in ${Math.ceil(seen.msBeforeNext / 1000)} s.`, {
        headers: retryAfterHeaders(seen.msBeforeNext),
      });
    }
    if (matches(given)) return true;
    await failures.penalty(address, 1);
    return false;
  }
}
