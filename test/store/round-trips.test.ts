// The Redis store's round trips per request (issue #13: at most 3, pipelined): the limits, the
// concurrency slot and the hold go out together, then the settle, then the slot's release,
// the token correction and the usage record together. Counted with Redis's own
// total_reads_processed over sequential requests on a real gateway and a real redis-server;
// what it counts is round trips, not time. A request near its limits (no ample room) takes
// one more: its hold waits for the limits' answer.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { baseConfig, postChat, startGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { readsAt } from '../helpers/store-client.js';
import { CACHE_TTL_MS } from '../../lib/auth/authenticator.js';


t.test('three round trips per request with ample room in the limits, four near them', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const measure = async (plan: Record<string, unknown>, n: number) => {
    const c = baseConfig();
    c.store = { kind: 'redis', url: redis.url, prefix: `rt-${Object.keys(plan).join('-')}-${process.pid}:` };
    Object.assign(c.plans.free, plan);
    const gw = await startGateway(c);
    try {
      const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `question ${i}` }] });
      for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i))).status, 200, 'warm-up');
      await sleep(200);
      const before = await readsAt(client);
      for (let i = 0; i < n; i++) t.equal((await postChat(gw.url, ask(i))).status, 200);
      await sleep(200); // the writes after each answer land
      // One read is this INFO itself; background work (key cache refresh, last use) adds a few.
      return (await readsAt(client) - before - 1) / n;
    } finally {
      await gw.close();
    }
  };
  const ample = await measure({ requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 }, 40);
  t.ok(ample <= 3.25, `ample room: ${ample.toFixed(2)} round trips per request (at most 3, plus background work)`);
  const tight = await measure({ requests_per_minute: 1000, tokens_per_minute: 100_000_000, max_concurrent: 4 }, 20);
  t.ok(tight <= 4.25 && tight > ample, `near a limit (max_concurrent 4): ${tight.toFixed(2)} round trips, the hold after the limits`);
});

t.test('a request whose key is not cached takes two round trips more, not three', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const c = baseConfig();
  c.store = { kind: 'redis', url: redis.url, prefix: `rt-miss-${process.pid}:` };
  Object.assign(c.plans.free, { requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 });
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `miss ${i}` }] });
  for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i))).status, 200, 'warm-up');
  /** Round trips of one request (the fewest of 4: the once-a-second last-use write may fall in one). */
  const one = async (waitMs: number) => {
    let fewest = Infinity;
    for (let i = 0; i < 4; i++) {
      await sleep(waitMs);
      const before = await readsAt(client);
      t.equal((await postChat(gw.url, ask(i))).status, 200);
      await sleep(50); // the writes after the answer land
      fewest = Math.min(fewest, await readsAt(client) - before - 1);
    }
    return fewest;
  };
  t.equal(await one(0), 3, 'the key cached: three');
  t.equal(await one(CACHE_TTL_MS + 100), 5, 'the key looked up again: its index, then the key and its account at once');
});

t.test('the limits refuse a request whose hold went out with them: 429, the hold released, nothing charged', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = baseConfig();
  c.admin = { token: 'rt-admin' };
  c.store = { kind: 'redis', url: redis.url, prefix: `rt-burst-${process.pid}:` };
  Object.assign(c.plans.free, { requests_per_minute: 20, tokens_per_minute: 100_000_000, max_concurrent: 1000 });
  c.models[0].price = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };
  // Two instances share the limits. B's last request left ample room (19 of 20), so its next
  // holds go out with its limits; meanwhile A uses up the minute: B's limits then refuse.
  const a = await startGateway(c);
  const b = await startGateway(c);
  t.teardown(async () => { await a.close(); await b.close(); });
  const account = async () => (await fetch(`${a.url}/admin/accounts/demo`, { headers: { authorization: 'Bearer rt-admin' } })).json() as Promise<any>;
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
