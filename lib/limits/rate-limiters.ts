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

/** RateLimiterRedis, loaded on the first call (a Redis store's, when it is built). */
export function rateLimiterRedis(): typeof Rlf.RateLimiterRedis {
  return require('rate-limiter-flexible/lib/RateLimiterRedis.js') as typeof Rlf.RateLimiterRedis;
}
