// The rate-limiter-flexible classes the gateway uses, from their own modules: the package's
// index also loads its Mongo, MySQL, Postgres, Prisma, Drizzle, DynamoDB, etcd, Memcached,
// Valkey, SQLite and cluster limiters (about 0.9 MB of heap an idle gateway never uses).
// RateLimiterRedis is loaded only by a gateway whose store is Redis. They are the very classes
// the index exports (one module cache): test/limits/rate-limiters.test.ts checks it.

import { createRequire } from 'node:module';
import type * as Rlf from 'rate-limiter-flexible';

const require = createRequire(import.meta.url);

export const RateLimiterMemory = require('rate-limiter-flexible/lib/RateLimiterMemory.js') as typeof Rlf.RateLimiterMemory;
export const RateLimiterRes = require('rate-limiter-flexible/lib/RateLimiterRes.js') as typeof Rlf.RateLimiterRes;
export type RateLimiterRes = Rlf.RateLimiterRes;
export type RateLimiterAbstract = Rlf.RateLimiterAbstract;

/**
 * The counter script every RateLimiterRedis of the gateway runs (its `customIncrTtlLuaScript`,
 * under the package's own name, rlflxIncr): the package's, without its first command. That one
 * (`SET key 0 EX duration NX`) makes the key with its expiry before the INCRBY; here the INCRBY
 * makes it, and the PTTL that follows finds no expiry (-1) and sets it, which the package's
 * script does anyway for a key without one. The same counts, expiries and replies
 * ({consumed, ttl}: a new key's ttl is the whole duration, as the package's PTTL reads it within
 * the script), with two commands a call where the package's takes three on every call but a
 * window's first (issue #46: three a request). test/limits/rate-limiters.test.ts runs both on
 * one Redis, side by side, and compares every reply and key. COUNT_LUA is its steps as a
 * function, count(key, points, duration) -> consumed, ttl: the admission's script runs them too.
 */
export const COUNT_LUA = `
local function count(key, points, duration)
  local consumed = redis.call('incrby', key, points)
  local ttl = redis.call('pttl', key)
  if ttl == -1 then
    redis.call('expire', key, duration)
    ttl = 1000 * duration
  end
  return consumed, ttl
end`;

export const INCR_TTL_LUA = `${COUNT_LUA}
local consumed, ttl = count(KEYS[1], ARGV[1], ARGV[2])
return {consumed, ttl}
`;

/** RateLimiterRedis, loaded on the first call (a Redis store's, when it is built). */
export function rateLimiterRedis(): typeof Rlf.RateLimiterRedis {
  return require('rate-limiter-flexible/lib/RateLimiterRedis.js') as typeof Rlf.RateLimiterRedis;
}
