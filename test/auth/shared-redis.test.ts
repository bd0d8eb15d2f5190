// Two gateway instances on one Redis see each other's accounts, credits, issued keys and
// revocations: a key or session revoked on one is refused by the other within 1 s.

import t from 'tap';
import { SignJWT } from 'jose';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'shared-admin-token';
const SECRET = 'shared-dashboard-secret-0123456789abcdef';

t.test('revocations on one instance reach the other within 1 s', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const config = () => {
    const c = baseConfig();
    c.admin = { token: ADMIN };
    c.auth = { jwt: { secret: SECRET } };
    c.store = { kind: 'redis', url: redis.url, prefix: `tg-test-${process.pid}:` };
    return c;
  };
  const a = await startGateway(config());
  const b = await startGateway(config());
  t.teardown(async () => { await a.close(); await b.close(); });
  const admin = (gw: typeof a, method: string, path: string, body?: unknown) => fetch(`${gw.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const models = (gw: typeof a, cred: string) => fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${cred}` } }).then((r) => r.status);

  t.equal((await admin(a, 'POST', '/admin/accounts', { id: 'shared', plan: 'free', wallet_units: 10 })).status, 201);
  const shown: any = await (await admin(b, 'GET', '/admin/accounts/shared')).json();
  t.equal(shown.balance_units, 10, 'an account made on A is seen on B');
  await admin(b, 'POST', '/admin/accounts/shared/credits', { units: 5, idempotency_key: 'k1' });
  const again: any = await (await admin(a, 'POST', '/admin/accounts/shared/credits', { units: 5, idempotency_key: 'k1' })).json();
  t.equal(again.applied, false, 'an idempotency key used on B is known on A');
  t.equal(again.balance_units, 15);

  const issued: any = await (await admin(a, 'POST', '/admin/accounts/shared/keys')).json();
  t.equal(await models(b, issued.key), 200, 'a key issued on A works on B');
  t.equal(await models(a, issued.key), 200);
  t.equal((await admin(a, 'DELETE', `/admin/keys/${issued.id}`)).status, 204);
  const revokedAt = Date.now();
  let status = 200;
  while (status === 200 && Date.now() - revokedAt < 1500) { status = await models(b, issued.key); if (status === 200) await sleep(20); }
  t.equal(status, 401, 'B refuses the key revoked on A');
  t.ok(Date.now() - revokedAt < 1000, `within 1 s (${Date.now() - revokedAt} ms)`);

  const tok = await new SignJWT({ type: 'access', sub: 'shared', sid: 'sess-x' }).setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime('10m').sign(new TextEncoder().encode(SECRET));
  t.equal(await models(b, tok), 200);
  t.equal((await admin(a, 'POST', '/admin/sessions/sess-x/revoke')).status, 204);
  const sessionAt = Date.now();
  let body: any = {};
  while (Date.now() - sessionAt < 1500) {
    const res = await fetch(`${b.url}/v1/models`, { headers: { authorization: `Bearer ${tok}` } });
    if (res.status === 401) { body = await res.json(); break; }
    await sleep(20);
  }
  t.equal(body.code, 'session_revoked', 'B refuses the session revoked on A');
  t.ok(Date.now() - sessionAt < 1000, `within 1 s (${Date.now() - sessionAt} ms)`);
});

t.test('Redis down: /v1 answers 503 service_unavailable with Retry-After, /readyz 503; then recovers', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const c = baseConfig();
  c.store = { kind: 'redis', url: redis.url, prefix: 'tg-outage:' };
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const key = 'tg_demo_0000000000000000';
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status, 200);

  await redis.stop();
  await sleep(1100); // past the key cache's TTL
  const started = Date.now();
  const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(res.status, 503);
  const body: any = await res.json();
  t.equal(body.code, 'service_unavailable');
  t.equal(body.type, 'server_error');
  t.ok(Number(res.headers.get('retry-after')) >= 1);
  t.ok(Date.now() - started < 3000, 'no hang');
  t.equal((await fetch(`${gw.url}/readyz`)).status, 503);

  await redis.restart();
  let status = 0;
  for (let i = 0; i < 100 && status !== 200; i++) {
    await sleep(50);
    status = (await fetch(`${gw.url}/readyz`)).status;
  }
  t.equal(status, 200, 'ready again once Redis is back');
  // Redis runs with --save '': the seeded account is gone until the next seed (restart or reload).
  await gw.gateway.reload(c);
  t.equal((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status, 200);
});
