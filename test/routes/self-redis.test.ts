// Self-service (GET /v1/key, GET /v1/usage; CONTRACT section 15) on two gateway instances
// sharing one Redis: requests on both show in the key's budget and usage read on either (the
// rows equal the admin records, kept in Redis's hourly streams, to the unit), and the key's
// requests_per_minute spent by the GETs is one count across the instances.

import t from 'tap';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'self-redis-admin-token';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };

async function call(gw: TestGateway, method: string, path: string, auth: string, body?: unknown): Promise<{ status: number; headers: Record<string, any>; body: any }> {
  const res = await request(`${gw.url}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${auth}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, body: text === '' ? undefined : JSON.parse(text) };
}

t.test('two instances on one Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const config = () => {
    const c = baseConfig();
    c.admin = { token: ADMIN };
    c.store = { kind: 'redis', url: redis.url, prefix: 'self:' };
    c.plans.free = { paid: false, requests_per_minute: 100_000, tokens_per_minute: 100_000_000, max_concurrent: 500 };
    c.models = [
      { id: 'echo-small', provider: 'echo', max_output_tokens: 50, price: PRICE },
      { id: 'echo-large', provider: 'echo', max_output_tokens: 50, price: PRICE },
    ];
    c.routing = { auto: ['echo-small'] };
    return c;
  };
  const a = await startGateway(config());
  const b = await startGateway(config());
  t.teardown(async () => { await a.close(); await b.close(); });

  t.equal((await call(a, 'POST', '/admin/accounts', ADMIN, { id: 'shared', plan: 'free', wallet_units: 100_000 })).status, 201);
  const k = (await call(a, 'POST', '/admin/accounts/shared/keys', ADMIN, { budget: { units: 10_000, period: 'month' }, limits: { requests_per_minute: 12 } })).body;
  const other = (await call(b, 'POST', '/admin/accounts/shared/keys', ADMIN, {})).body;
  let charged = 0;
  const sent: Array<[TestGateway, string, string]> = [[a, k.key, 'echo-small'], [b, k.key, 'echo-large'], [b, k.key, 'echo-small'], [a, other.key, 'echo-small']];
  for (const [gw, key, model] of sent) {
    const r = await call(gw, 'POST', '/v1/chat/completions', key, { model, max_tokens: 5, messages: [{ role: 'user', content: `to ${model}` }] });
    t.equal(r.status, 200);
    if (key === k.key) charged += Number(r.headers['x-tollgate-units-charged']);
  }
  // 3 of the key's 12 requests spent.
  for (const gw of [a, b]) {
    const me = await call(gw, 'GET', '/v1/key', k.key);
    t.equal(me.body.budget.spent_units, charged, 'the spend of both instances, read on either');
    t.equal(me.body.budget.remaining_units, 10_000 - charged);
  }
  let recs: any[] = [];
  for (let i = 0; i < 200 && recs.length < 3; i++) {
    recs = (await call(a, 'GET', `/admin/usage/records?key=${k.id}`, ADMIN)).body.records;
    if (recs.length < 3) await sleep(20);
  }
  t.equal(recs.length, 3);
  const sum = (model: string) => {
    const of = recs.filter((r) => r.model === model);
    return { date: of[0].at.slice(0, 10), model, requests: of.length, prompt_tokens: of.reduce((s, r) => s + r.prompt_tokens, 0), completion_tokens: of.reduce((s, r) => s + r.completion_tokens, 0), units: of.reduce((s, r) => s + r.units, 0) };
  };
  const want = { data: [sum('echo-large'), sum('echo-small')] };
  t.equal(want.data[0]!.units + want.data[1]!.units, charged, 'the records hold every unit charged');
  // 5 spent.
  for (const gw of [a, b]) t.strictSame((await call(gw, 'GET', '/v1/usage', k.key)).body, want, 'the same rows on either instance');
  t.equal((await call(b, 'GET', '/v1/usage', other.key)).body.data.length, 1, 'the other key sees only its own request');
  // 7 spent: 5 more across the two instances reach the key's 12, the next is refused on either.
  const remaining: string[] = [];
  for (const gw of [a, b, a, b, a]) remaining.push((await call(gw, 'GET', '/v1/key', k.key)).headers['x-ratelimit-remaining-requests']);
  t.strictSame(remaining, ['4', '3', '2', '1', '0'], 'one count across the instances');
  for (const gw of [b, a]) {
    const over = await call(gw, 'GET', '/v1/usage', k.key);
    t.equal(over.status, 429);
    t.equal(over.body.code, 'rate_limit_exceeded');
    t.ok(Number(over.headers['retry-after']) >= 1);
  }
});
