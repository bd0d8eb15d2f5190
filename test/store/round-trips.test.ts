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

async function reads(client: Redis): Promise<number> {
  return Number(/total_reads_processed:(\d+)/.exec(await client.info('stats'))![1]);
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
    const gw = await startGateway(c);
    try {
      const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `question ${i}` }] });
      for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i))).status, 200, 'warm-up');
      await sleep(200);
      const before = await reads(client);
      for (let i = 0; i < n; i++) t.equal((await postChat(gw.url, ask(i))).status, 200);
      await sleep(200); // the writes after each answer land
      // One read is this INFO itself; background work (key cache refresh, last use) adds a few.
      return (await reads(client) - before - 1) / n;
    } finally {
      await gw.close();
    }
  };
  const ample = await measure({ requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 }, 40);
  t.ok(ample <= 3.25, `ample room: ${ample.toFixed(2)} round trips per request (at most 3, plus background work)`);
  const tight = await measure({ requests_per_minute: 1000, tokens_per_minute: 100_000_000, max_concurrent: 4 }, 20);
  t.ok(tight <= 4.25 && tight > ample, `near a limit (max_concurrent 4): ${tight.toFixed(2)} round trips, the hold after the limits`);
});
