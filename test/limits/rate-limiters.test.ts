// lib/limits/rate-limiters.ts loads rate-limiter-flexible's classes from their own modules, not
// from its index: they must be the very classes the index exports, so that a rejection is a
// RateLimiterRes whichever way it was imported.

import t from 'tap';
import * as rlf from 'rate-limiter-flexible';
import { Redis } from 'ioredis';
import { INCR_TTL_LUA, RateLimiterMemory, RateLimiterRes, rateLimiterRedis } from '../../lib/limits/rate-limiters.js';
import { startRedis } from '../helpers/redis.js';

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

/** The package's own counter script, as its RateLimiterRedis defines it on a client. */
function stockScript(): string {
  let lua = '';
  const client = { defineCommand: (_name: string, def: { lua: string }) => { lua = def.lua; } };
  new (rateLimiterRedis())({ storeClient: client, points: 1, duration: 60 });
  return lua;
}

t.test("the gateway's counter script answers and writes as the package's, with one command fewer", async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const stock = stockScript();
  t.match(stock, /'set', KEYS\[1\], 0, 'EX', ARGV\[2\], 'NX'/, 'the package still makes the key with SET NX first');
  const run = (lua: string, key: string, points: number, duration = 60) =>
    c.eval(lua, 1, key, String(points), String(duration), '100', String(duration)) as Promise<[number, number]>;
  const commands = async () => Number(/total_commands_processed:(\d+)/.exec(await c.info('stats'))![1]);
  // A fresh window, consumes, a reward below zero, a key without expiry, a 20 s window. (Each
  // pair of calls is a few INFOs apart: their ttls agree to within a second on a loaded host.)
  const steps: Array<[string, number, number?]> = [
    ['a', 1], ['a', 5], ['a', -9], ['a', 2], ['fresh-reward', -3], ['fresh-reward', 4], ['short', 2, 20], ['short', 1, 20],
  ];
  await c.set('stock:persisted', '7');
  await c.set('own:persisted', '7');
  steps.push(['persisted', 3], ['persisted', 1]);
  let stockCommands = 0;
  let ownCommands = 0;
  for (const [key, points, duration] of steps) {
    let before = await commands();
    const a = await run(stock, `stock:${key}`, points, duration);
    stockCommands += await commands() - before - 1;
    before = await commands();
    const b = await run(INCR_TTL_LUA, `own:${key}`, points, duration);
    ownCommands += await commands() - before - 1;
    t.equal(b[0], a[0], `${key} ${points}: the same count (${a[0]})`);
    t.ok(Math.abs(b[1] - a[1]) <= 1000, `${key} ${points}: the same ttl (${a[1]}, ${b[1]})`);
    t.equal(await c.get(`own:${key}`), await c.get(`stock:${key}`), `${key}: the same value stored`);
    t.ok(Math.abs(await c.pttl(`own:${key}`) - await c.pttl(`stock:${key}`)) <= 1000, `${key}: the same expiry`);
  }
  const fresh = await run(INCR_TTL_LUA, 'own:new', 1);
  t.strictSame(fresh, [1, 60_000], "a window's first count: its whole duration, as the package's answers");
  // Every step's EVAL counts as a command too: less it, the package's SET NX is the difference
  // on every call but the three that made a key (where both set the expiry once).
  t.equal(stockCommands - ownCommands, steps.length - 3, `one command fewer a call in a running window (${stockCommands} -> ${ownCommands})`);
});

t.test('a RateLimiterRedis on the gateway\'s script: counts, refuses past its points, rewards', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const l = new (rateLimiterRedis())({ storeClient: c, points: 3, duration: 60, keyPrefix: 'rl', customIncrTtlLuaScript: INCR_TTL_LUA });
  const r1 = await l.consume('x', 2);
  t.strictSame([r1.consumedPoints, r1.remainingPoints, r1.msBeforeNext, r1.isFirstInDuration], [2, 1, 60_000, true]);
  const refused = await l.consume('x', 2).catch((e: unknown) => e);
  t.ok(refused instanceof RateLimiterRes, 'past its points: refused');
  t.equal((refused as RateLimiterRes).consumedPoints, 4, 'and counted, as the package counts a refusal');
  t.equal((refused as RateLimiterRes).remainingPoints, 0);
  const back = await l.reward('x', 4);
  t.equal(back.consumedPoints, 0);
  t.ok(back.msBeforeNext > 59_000 && back.msBeforeNext <= 60_000, 'in the same window');
  t.equal(await c.get('rl:x'), '0');
});
