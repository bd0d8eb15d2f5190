// A key of a team costs a request no Redis round trip more than a key without one (CONTRACT
// section 15, docs/performance.md): the team is read with its key in the key lookup, its budget
// is held, settled and released in the key's own scripts, and its limits and concurrency slot go
// out with the plan's and the key's. Counted as test/store/redis/round-trips.test.ts counts them:
// Redis's own total_reads_processed over sequential requests on a real gateway and redis-server.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { baseConfig, postChat, startGateway } from '../../helpers/gateway.js';
import { startRedis } from '../../helpers/redis.js';
import { readsAt } from '../../helpers/store-client.js';
import { CACHE_TTL_MS, TOUCH_FLUSH_MS } from '../../../lib/auth/authenticator.js';

const ADMIN = 'teams-rt-admin-token-0123';

t.test('three round trips per request for a key of a team with a budget and limits, as for a key without one', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'redis', url: redis.url, prefix: `rt-teams-${process.pid}:` };
  Object.assign(c, { batch: { concurrency: 0 } }); // no batch runner's look at the store among the commands counted
  Object.assign(c.plans.free, { requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 });
  // Priced, so that the team's budget is held and charged on every request.
  c.models = [{ id: 'echo-small', provider: 'echo', price: { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } }];
  c.routing = { auto: ['echo-small'] };
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const admin = async (path: string, body: unknown) => {
    const res = await fetch(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    t.equal(res.status, 201);
    return res.json() as Promise<any>;
  };
  await admin('/admin/accounts', { id: 'rt', plan: 'free', wallet_units: 100_000_000 });
  await admin('/admin/accounts/rt/teams', {
    id: 'rt-team', budget: { units: 100_000_000, period: 'month' }, limits: { requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 1000 },
  });
  const measure = async (key: string, n: number) => {
    const ask = (i: number) => ({ model: 'echo-small', messages: [{ role: 'user', content: `question ${i}` }] });
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    for (let i = 0; i < 3; i++) t.equal((await postChat(gw.url, ask(i), headers)).status, 200, 'warm-up');
    await sleep(200);
    const before = await readsAt(client);
    const start = Date.now();
    for (let i = 0; i < n; i++) {
      t.equal((await postChat(gw.url, ask(i), headers)).status, 200);
      await sleep(25);
    }
    t.ok(Date.now() - start > Math.max(CACHE_TTL_MS, TOUCH_FLUSH_MS) * 2, 'over several key-cache lifetimes and last-use batches');
    await sleep(TOUCH_FLUSH_MS + 200);
    return (await readsAt(client) - before - 1) / n;
  };
  const member = await admin('/admin/accounts/rt/keys', { team: 'rt-team', budget: { units: 100_000_000, period: 'day' } });
  // At most 3: one more round trip in 80 requests reads 3.0125. Under 3 only when Redis took two
  // of the client's batches in one read (seen on a loaded host: 2.9875), never a missing trip.
  const three = (x: number, what: string) => t.ok(x <= 3 && x >= 2.95, `${what}: 3 round trips per request (${x})`);
  three(await measure(member.key, 80), 'a key of a team');
  const plain = await admin('/admin/accounts/rt/keys', {});
  three(await measure(plain.key, 80), 'a key without a team');
  const team = await (await fetch(`${gw.url}/admin/teams/rt-team`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as any;
  t.ok(team.budget.spent_units > 0, "the team's requests were charged to it");
});
