// Per-key controls across two gateway instances sharing one real Redis (CONTRACT section 8):
// a key budget raced from both instances is never overspent and agrees with the wallet to the
// unit; a PATCH on one instance is in force on the other within a second; a rotation's grace
// holds on both; a budget period that has ended counts as nothing spent (no job resets it).

import t from 'tap';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { budgetPeriods } from '../../lib/auth/controls.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'key-controls-redis-admin';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };
const PREFIX = `tg-keys-${process.pid}:`;

interface Answer { status: number; headers: Record<string, any>; body: any }

async function call(url: string, method: string, path: string, body: unknown, headers: Record<string, string>): Promise<Answer> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, body: text === '' ? undefined : JSON.parse(text) };
}

const admin = (gw: TestGateway, method: string, path: string, body?: unknown) => call(gw.url, method, path, body, { authorization: `Bearer ${ADMIN}` });
const chat = (gw: TestGateway, key: string, maxTokens = 5, content = 'hello there') =>
  call(gw.url, 'POST', '/v1/chat/completions', { model: 'echo-small', max_tokens: maxTokens, messages: [{ role: 'user', content }] }, { authorization: `Bearer ${key}` });

t.test('per-key controls on two instances sharing Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const config = () => {
    const c = baseConfig();
    c.admin = { token: ADMIN };
    c.store = { kind: 'redis', url: redis.url, prefix: PREFIX };
    c.plans.free = { paid: false, requests_per_minute: 100000, tokens_per_minute: 100000000, max_concurrent: 500 };
    c.models = [{ id: 'echo-small', provider: 'echo', max_output_tokens: 50, price: PRICE }];
    c.routing = { auto: ['echo-small'] };
    return c;
  };
  const a = await startGateway(config());
  const b = await startGateway(config());
  const inspect = new Redis(redis.url);
  t.teardown(async () => { inspect.disconnect(); await a.close(); await b.close(); });

  let n = 0;
  const account = async (wallet: number) => {
    const id = `shared-${++n}`;
    t.equal((await admin(a, 'POST', '/admin/accounts', { id, plan: 'free', wallet_units: wallet })).status, 201);
    return id;
  };
  const issue = async (gw: TestGateway, acct: string, controls: Record<string, unknown>) => {
    const r = await admin(gw, 'POST', `/admin/accounts/${acct}/keys`, controls);
    t.equal(r.status, 201);
    return r.body as { id: string; key: string };
  };
  const keyView = async (gw: TestGateway, acct: string, id: string) =>
    (await admin(gw, 'GET', `/admin/accounts/${acct}/keys`)).body.keys.find((k: any) => k.id === id);

  t.test('a small key budget raced from both instances: never overspent, Σ debits = spent = wallet change', async (t) => {
    const WALLET = 1_000_000;
    const BUDGET = 150;
    const acct = await account(WALLET);
    const k = await issue(a, acct, { budget: { units: BUDGET, period: 'day' } });
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => chat(i % 2 === 0 ? a : b, k.key, 10, `race number ${i}`)));
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    t.ok(ok.length > 0 && refused.length > 0, `some served (${ok.length}), some refused (${refused.length})`);
    for (const r of refused) {
      t.equal(r.status, 402);
      t.equal(r.body.code, 'budget_exceeded');
      t.ok(Number.isSafeInteger(r.body.budget_remaining_units) && r.body.budget_remaining_units >= 0 && r.body.budget_remaining_units < BUDGET);
    }
    const debits = ok.reduce((sum, r) => sum + Number(r.headers['x-tollgate-units-charged']), 0);
    const view = await keyView(b, acct, k.id);
    t.equal(view.budget.spent_units, debits, 'Σ debits = budget spent');
    t.ok(view.budget.spent_units <= BUDGET, `never above the budget (${view.budget.spent_units} <= ${BUDGET})`);
    const account_ = (await admin(b, 'GET', `/admin/accounts/${acct}`)).body;
    t.equal(WALLET - account_.balance_units, debits, 'the wallet paid exactly the same');
    t.equal(account_.held_units, 0, 'no hold left');
    // What is left cannot be exceeded either: one more request that would need more is refused.
    const last = await chat(a, k.key, 50);
    t.equal(last.status, 402);
    t.equal(last.body.budget_remaining_units, BUDGET - debits);
  });

  t.test('a PATCH on one instance is in force on the other within a second', async (t) => {
    const acct = await account(100_000);
    const k = await issue(a, acct, {});
    t.equal((await chat(b, k.key)).status, 200, 'B has the key cached, unrestricted');
    t.equal((await chat(b, k.key)).status, 200);
    const patched = await admin(a, 'PATCH', `/admin/keys/${k.id}`, { models: ['other-*'] });
    t.equal(patched.status, 200);
    const at = Date.now();
    let r = await chat(b, k.key);
    while (r.status === 200 && Date.now() - at < 1500) { await sleep(10); r = await chat(b, k.key); }
    t.equal(r.status, 403);
    t.equal(r.body.code, 'model_not_allowed');
    t.ok(Date.now() - at < 1000, `within 1 s (${Date.now() - at} ms)`);
    // And back: a budget set on B binds requests on A at once (the store holds it).
    await admin(b, 'PATCH', `/admin/keys/${k.id}`, { models: null, budget: { units: 1, period: 'month' } });
    const start = Date.now();
    let s = await chat(a, k.key);
    while (s.status === 200 && Date.now() - start < 1500) { await sleep(10); s = await chat(a, k.key); }
    t.equal(s.body.code, 'budget_exceeded');
    t.ok(Date.now() - start < 1000, `within 1 s (${Date.now() - start} ms)`);
  });

  t.test('rotation on one instance: the old plaintext works on both until the grace ends, then 401', async (t) => {
    const acct = await account(100_000);
    const k = await issue(a, acct, { name: 'rot' });
    t.equal((await chat(b, k.key)).status, 200);
    const r = await admin(a, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 1 });
    t.equal(r.status, 200);
    const until = Date.parse(r.body.previous_key_valid_until);
    t.equal((await chat(b, k.key)).status, 200, 'old key on B during the grace');
    t.equal((await chat(a, k.key)).status, 200, 'old key on A during the grace');
    t.equal((await chat(b, r.body.key)).status, 200, 'new key on B');
    await sleep(Math.max(0, until - Date.now()) + 50);
    for (const gw of [a, b]) {
      const old = await chat(gw, k.key);
      t.equal(old.status, 401);
      t.equal(old.body.code, 'invalid_api_key');
      t.equal((await chat(gw, r.body.key)).status, 200);
    }
    t.match(await keyView(b, acct, k.id), { name: 'rot', hint: `tg_…${r.body.key.slice(-4)}` });
  });

  t.test('a budget period that has ended counts as nothing spent, with no job to reset it', async (t) => {
    const acct = await account(100_000);
    const k = await issue(a, acct, { budget: { units: 30, period: 'day' } });
    const hash = `${PREFIX}{acct:${acct}}:key:${k.id}`;
    const today = budgetPeriods(Date.now()).day;
    // The whole budget spent today: refused.
    await inspect.hset(hash, 'sp', today, 'su', '30');
    t.equal((await keyView(a, acct, k.id)).budget.spent_units, 30);
    const refused = await chat(b, k.key);
    t.equal(refused.body.code, 'budget_exceeded');
    t.equal(refused.body.budget_remaining_units, 0);
    // The same spend, stored as yesterday's: a new day, the whole budget again.
    await inspect.hset(hash, 'sp', 'd:2000-01-01', 'su', '30');
    t.equal((await keyView(a, acct, k.id)).budget.spent_units, 0, 'listed as 0 spent this period');
    const served = await chat(b, k.key);
    t.equal(served.status, 200);
    const charged = Number(served.headers['x-tollgate-units-charged']);
    t.strictSame(await inspect.hmget(hash, 'sp', 'su'), [today, String(charged)], 'the spend restarts in the current period');
    t.equal((await keyView(a, acct, k.id)).budget.spent_units, charged);
  });
});
