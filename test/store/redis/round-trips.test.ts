// The Redis store's round trips per request (issue #13: at most 3, pipelined): the limits, the
// concurrency slot and the hold go out together, then the settle, then the slot's release,
// the token correction and the usage record together. Counted with Redis's own
// total_reads_processed over sequential requests on a real gateway and a real redis-server;
// what it counts is round trips, not time. A request near its limits (no ample room) takes
// one more: its hold waits for the limits' answer. Nothing else reaches Redis on its own while
// requests keep coming: a key in use is looked up again with a request's own commands, and its
// last use is recorded by the hold, so over seconds (several key-cache lifetimes, several
// last-use batches) the count is exact.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { DEMO_KEY, authHeaders, baseConfig, postChat, startGateway } from '../../helpers/gateway.js';
import { keyIdOf, sha256Hex } from '../../../lib/store/digest.js';
import { startRedis } from '../../helpers/redis.js';
import { readsAt } from '../../helpers/store-client.js';
import { CACHE_TTL_MS, REFRESH_AHEAD_MS, TOUCH_FLUSH_MS } from '../../../lib/auth/authenticator.js';


/** A redis-server of the test's own (stopped at its end) and a gateway config on it, with its own prefix. */
async function onRedis(t: any, name: string) {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = baseConfig();
  c.admin = { token: 'rt-admin-token-0123' };
  c.store = { kind: 'redis', url: redis.url, prefix: `rt-${name}-${process.pid}:` };
  Object.assign(c, { batch: { concurrency: 0 } }); // no batch runner's look at the store among the commands counted
  return { redis, c };
}

t.test('three round trips per request with ample room in the limits, four near them', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const measure = async (plan: Record<string, unknown>, n: number) => {
    const c = baseConfig();
    c.store = { kind: 'redis', url: redis.url, prefix: `rt-${Object.keys(plan).join('-')}-${process.pid}:` };
    Object.assign(c.plans.free, plan);
    // An instance that runs no batch lines never looks for batches: no command of its own here.
    Object.assign(c, { batch: { concurrency: 0 } });
    const gw = await startGateway(c);
    try {
      const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `question ${i}` }] });
      for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i))).status, 200, 'warm-up');
      await sleep(200);
      const before = await readsAt(client);
      const start = Date.now();
      for (let i = 0; i < n; i++) {
        t.equal((await postChat(gw.url, ask(i))).status, 200);
        await sleep(25);
      }
      t.ok(Date.now() - start > Math.max(CACHE_TTL_MS, TOUCH_FLUSH_MS) * 2, 'over several key-cache lifetimes and last-use batches');
      await sleep(TOUCH_FLUSH_MS + 200); // the writes after each answer land, and any last-use batch
      // One read is this INFO itself.
      return (await readsAt(client) - before - 1) / n;
    } finally {
      await gw.close();
    }
  };
  const ample = await measure({ requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 }, 80);
  t.equal(ample, 3, 'ample room: 3 round trips per request');
  const tight = await measure({ requests_per_minute: 1000, tokens_per_minute: 100_000_000, max_concurrent: 4 }, 80);
  t.equal(tight, 4, 'near a limit (max_concurrent 4): 4 round trips, the hold after the limits');
});

t.test('a request whose key is not cached takes two round trips more, not three', async (t) => {
  const { redis, c } = await onRedis(t, 'miss');
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  Object.assign(c.plans.free, { requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 });
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `miss ${i}` }] });
  for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i))).status, 200, 'warm-up');
  /** Round trips of each of 4 requests, each begun `waitMs` after the one before. */
  const each = async (waitMs: number) => {
    const trips: number[] = [];
    let last = Date.now();
    for (let i = 0; i < 4; i++) {
      await sleep(Math.max(0, last + waitMs - Date.now()));
      last = Date.now();
      const before = await readsAt(client);
      t.equal((await postChat(gw.url, ask(i))).status, 200);
      await sleep(50); // the writes after the answer land
      trips.push(await readsAt(client) - before - 1);
    }
    return trips;
  };
  t.strictSame(await each(0), [3, 3, 3, 3], 'the key cached: three');
  t.strictSame(await each(CACHE_TTL_MS + 100), [5, 5, 5, 5], 'the key looked up again: its index, then the key and its account at once');
  // Each request comes when the entry has less than REFRESH_AHEAD_MS left: it is served from
  // the cache, and the key is looked up again with its own commands, so the entry never runs
  // out (the code before looked the key up on every other request's path: 3, 5, 3, 5).
  const inWindow = CACHE_TTL_MS - REFRESH_AHEAD_MS + 100;
  t.strictSame(await each(inWindow), [3, 3, 3, 3], 'a key in use never waits for its lookup');
  t.ok(inWindow * 2 > CACHE_TTL_MS, 'two waits outlast an entry');
});

t.test('the limits refuse a request whose hold went out with them: 429, the hold released, nothing charged', async (t) => {
  const { c } = await onRedis(t, 'burst');
  Object.assign(c.plans.free, { requests_per_minute: 20, tokens_per_minute: 100_000_000, max_concurrent: 1000 });
  c.models[0].price = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };
  // Two instances share the limits. B's last request left ample room (19 of 20), so its next
  // holds go out with its limits; meanwhile A uses up the minute: B's limits then refuse.
  const a = await startGateway(c);
  const b = await startGateway(c);
  t.teardown(async () => { await a.close(); await b.close(); });
  const account = async () => (await fetch(`${a.url}/admin/accounts/demo`, { headers: { authorization: 'Bearer rt-admin-token-0123' } })).json() as Promise<any>;
  const ask = (i: number) => ({ model: 'echo-small', max_tokens: 20, messages: [{ role: 'user', content: `burst ${i}` }] });
  t.equal((await postChat(b.url, ask(0))).status, 200);
  for (let i = 1; i < 20; i++) t.equal((await postChat(a.url, ask(i))).status, 200);
  const before = await account();
  const refused = await Promise.all(Array.from({ length: 5 }, (_, i) => postChat(b.url, ask(100 + i))));
  for (const r of refused) {
    t.equal(r.status, 429);
    t.equal(r.json().error.code, 'rate_limit_exceeded');
    t.ok(Number(r.headers['retry-after']) >= 1, 'Retry-After');
  }
  await sleep(200); // the releases of the early holds land
  const after = await account();
  t.equal(after.held_units, 0, 'no hold left behind by a refused request');
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
});

t.test("a key's last use is in Redis once its request is answered: written by the hold, not a batch later", async (t) => {
  const { c } = await onRedis(t, 'used');
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const id = keyIdOf(sha256Hex(DEMO_KEY));
  const lastUsed = async () => {
    const res = await fetch(`${gw.url}/admin/keys/${id}`, { headers: { authorization: 'Bearer rt-admin-token-0123' } });
    t.equal(res.status, 200);
    return ((await res.json()) as { last_used_at: string | null }).last_used_at;
  };
  t.equal(await lastUsed(), null, 'never used');
  const start = Date.now();
  t.equal((await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'used' }] })).status, 200);
  const seen = await lastUsed();
  t.ok(seen !== null && Date.parse(seen) >= start - 1 && Date.parse(seen) <= Date.now(), `at once: ${seen}`);
  // A request that holds nothing (a model list) is recorded by the once-a-second batch.
  await sleep(50);
  const listed = Date.now();
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: authHeaders() })).status, 200);
  let after = await lastUsed();
  t.equal(after, seen, 'not yet');
  const deadline = Date.now() + TOUCH_FLUSH_MS + 1000;
  while (after === seen && Date.now() < deadline) {
    await sleep(100);
    after = await lastUsed();
  }
  t.ok(after !== null && Date.parse(after) >= listed - 1, `within a batch: ${after}`);
});
