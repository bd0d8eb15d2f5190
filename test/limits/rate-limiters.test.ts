// lib/limits/rate-limiters.ts loads rate-limiter-flexible's classes from their own modules, not
// from its index: they must be the very classes the index exports, so that a rejection is a
// RateLimiterRes whichever way it was imported.

import t from 'tap';
import * as rlf from 'rate-limiter-flexible';
import { RateLimiterMemory, RateLimiterRes, rateLimiterRedis } from '../../lib/limits/rate-limiters.js';

t.test('the same classes as the index', async (t) => {
  t.equal(RateLimiterMemory, rlf.RateLimiterMemory);
  t.equal(RateLimiterRes, rlf.RateLimiterRes);
  t.equal(rateLimiterRedis(), rlf.RateLimiterRedis);
});

t.test('a memory limiter consumes and rejects with a RateLimiterRes', async (t) => {
  const l = new RateLimiterMemory({ points: 2, duration: 60, keyPrefix: 'x' });
  t.equal((await l.consume('a', 2)).remainingPoints, 0);
  const err = await l.consume('a', 1).catch((e: unknown) => e);
  t.ok(err instanceof RateLimiterRes);
  t.ok(err instanceof rlf.RateLimiterRes);
});
