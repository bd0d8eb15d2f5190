// store.on_error: open, through real gateways and a real redis-server: while the store is down a
// gateway serves the config's keys (unmetered) even if it never saw them, but not one the store
// had revoked before that gateway started. Each gateway checks the config's keys against the
// store after its seed (a black-box attack found a revoked config key served by an instance
// started after the revocation, for as long as an outage lasted).

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { DEMO_KEY, PRO_KEY, authHeaders, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'outage-fallback-admin';
const ask = { model: 'echo-small', messages: [{ role: 'user', content: 'hello' }] };

async function ready(gw: TestGateway): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await fetch(`${gw.url}/readyz`)).status === 200) return;
    await sleep(50);
  }
  throw new Error('gateway not ready');
}

t.test("a config key revoked before a gateway started is not served by it in an outage; the others are", async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'redis', url: redis.url, prefix: `fallback-${process.pid}:`, on_error: 'open' };
  const a = await startGateway(c);
  t.teardown(() => a.close());
  await ready(a);
  const revoked = await fetch(`${a.url}/admin/keys/${keyIdOf(sha256Hex(DEMO_KEY))}`, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(revoked.status, 204, 'the demo key revoked through the admin API');
  t.equal((await postChat(a.url, ask)).status, 401, 'and refused');

  const b = await startGateway(c); // started after the revocation: it never hears of it
  t.teardown(() => b.close());
  await ready(b);
  await redis.halt();
  const demo = await postChat(b.url, ask);
  t.equal(demo.status, 503, 'the revoked config key: 503 in the outage, not served unmetered');
  t.equal(demo.json().code, 'service_unavailable');
  const pro = await postChat(b.url, ask, authHeaders(PRO_KEY));
  t.equal(pro.status, 200, 'a config key the store still has, never used on this gateway: served (unmetered) in the outage');
});

t.test('a revocation announced while a gateway\'s subscription was cut is not served by it in a later outage', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'redis', url: redis.url, prefix: `fallback-cut-${process.pid}:`, on_error: 'open' };
  const a = await startGateway(c);
  t.teardown(() => a.close());
  await ready(a);
  const b = await startGateway(c);
  t.teardown(() => b.close());
  await ready(b);
  t.equal((await postChat(b.url, ask, authHeaders(PRO_KEY))).status, 200, 'the key used on B: B would serve it in an outage');
  const { Redis } = await import('ioredis');
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  // Every subscription cut; the revocation made before the subscribers are back is lost to them.
  await client.client('KILL', 'TYPE', 'pubsub');
  const revoked = await fetch(`${a.url}/admin/keys/${keyIdOf(sha256Hex(PRO_KEY))}`, { method: 'DELETE', headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(revoked.status, 204, 'revoked through A');
  await sleep(300); // B's subscription is back
  await redis.halt();
  const during = await postChat(b.url, ask, authHeaders(PRO_KEY));
  t.equal(during.status, 503, 'B, in the outage: 503, not the revoked key served unmetered');
});
