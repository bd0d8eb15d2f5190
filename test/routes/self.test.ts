// Self-service for the holder of a key (CONTRACT section 15) through the real gateway on the
// embedded store: GET /v1/key (the key as its holder sees it, its budget to the unit after
// charged requests) and GET /v1/usage (its records summed by UTC day and model, equal to the
// admin API's records to the unit), over raw HTTP and the openai SDK's generic `client.get`.
// No other key's data is ever visible; revoked and expired keys and dashboard sessions are
// refused; bad dates are 400 naming the parameter; neither route holds or charges anything,
// and each spends a request of requests_per_minute (429 with the usual headers past it).

import t from 'tap';
import OpenAI from 'openai';
import { SignJWT } from 'jose';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { usageRange } from '../../lib/routes/self.js';

const ADMIN = 'self-service-admin-token';
const SECRET = 'a-dashboard-secret-of-enough-length-0123456789';
/** One unit per prompt token, two per completion token. */
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };

interface Answer { status: number; headers: Record<string, any>; text: string; body: any }

async function call(url: string, method: string, path: string, headers: Record<string, string> = {}, body?: unknown): Promise<Answer> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  let parsed: any;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.statusCode, headers: res.headers, text, body: parsed };
}

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.auth = { jwt: { secret: SECRET } };
  c.plans.free = { paid: false, requests_per_minute: 1000, tokens_per_minute: 10_000_000, max_concurrent: 50 };
  c.models = [
    { id: 'echo-small', provider: 'echo', max_output_tokens: 20, price: PRICE },
    { id: 'echo-large', provider: 'echo', max_output_tokens: 20, price: PRICE },
  ];
  c.routing = { auto: ['echo-small'] };
  c.usage = { retention_days: 90 };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const admin = (method: string, path: string, body?: unknown) => call(gw.url, method, path, { authorization: `Bearer ${ADMIN}` }, body);
const get = (key: string, path: string) => call(gw.url, 'GET', path, { authorization: `Bearer ${key}` });
const chat = (key: string, model: string, content: string) =>
  call(gw.url, 'POST', '/v1/chat/completions', { authorization: `Bearer ${key}` }, { model, max_tokens: 5, messages: [{ role: 'user', content }] });

let n = 0;
async function account(wallet = 1_000_000): Promise<string> {
  const id = `self-${++n}`;
  const r = await admin('POST', '/admin/accounts', { id, plan: 'free', wallet_units: wallet });
  if (r.status !== 201) throw new Error(r.text);
  return id;
}

async function issue(acct: string, controls: Record<string, unknown> = {}): Promise<{ id: string; key: string }> {
  const r = await admin('POST', `/admin/accounts/${acct}/keys`, controls);
  if (r.status !== 201) throw new Error(r.text);
  return r.body;
}

async function ledger(acct: string): Promise<{ balance: number; held: number }> {
  const a = (await admin('GET', `/admin/accounts/${acct}`)).body;
  return { balance: a.balance_units, held: a.held_units };
}

/** The key's records through the admin API, once `count` of them have landed (they are written once each answer has closed). */
async function records(acct: string, keyId: string, count: number): Promise<any[]> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const r = await admin('GET', `/admin/usage/records?account=${acct}&key=${keyId}&limit=1000`);
    if (r.body.records.length >= count || Date.now() > deadline) return r.body.records;
    await sleep(20);
  }
}

/** Records summed by UTC day and model, sorted as /v1/usage sorts its rows: the oracle. */
function byDayAndModel(recs: any[]): any[] {
  const m = new Map<string, any>();
  for (const r of recs) {
    const date = r.at.slice(0, 10);
    const k = `${date} ${r.model}`;
    const row = m.get(k) ?? { date, model: r.model, requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
    row.requests++;
    row.prompt_tokens += r.prompt_tokens;
    row.completion_tokens += r.completion_tokens;
    row.units += r.units;
    m.set(k, row);
  }
  return [...m.values()].sort((a, b) => (a.date + a.model < b.date + b.model ? -1 : 1));
}

const today = () => new Date().toISOString().slice(0, 10);
const dayOffset = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const tomorrowMidnight = () => `${dayOffset(1)}T00:00:00.000Z`;

function assertEnvelope(t: any, r: Answer, status: number, code: string, param: string | null = null, message?: string): void {
  t.equal(r.status, status, `${code}: status`);
  const type = status === 429 ? 'rate_limit_error' : status === 403 ? 'permission_error' : 'invalid_request_error';
  t.match(r.body, { code, type, param, error: { code, type, param } }, `${code}: envelope`);
  if (message !== undefined) t.equal(r.body.message, message, `${code}: message`);
  t.equal(r.body.request_id, r.headers['x-request-id'], 'request_id = x-request-id');
  t.match(r.headers['content-type'], /application\/json/);
}

t.test('GET /v1/key: the calling key, its budget to the unit after charged requests; nothing held or charged', async (t) => {
  const acct = await account();
  const k = await issue(acct, {
    name: 'search-indexer', models: ['echo-*'], expires_at: '2099-01-31T00:00:00Z',
    budget: { units: 5000, period: 'day' }, limits: { requests_per_minute: 50, tokens_per_minute: null, max_concurrent: 3 },
    allowed_ips: ['127.0.0.0/8', '::1/128'], metadata: { team: 'search' },
  });
  const fresh = await get(k.key, '/v1/key');
  t.equal(fresh.status, 200);
  t.strictSame(fresh.body, {
    id: k.id, name: 'search-indexer', account: acct, team: null, models: ['echo-*'], expires_at: '2099-01-31T00:00:00.000Z',
    budget: { units: 5000, period: 'day', spent_units: 0, remaining_units: 5000, resets_at: tomorrowMidnight() },
    limits: { requests_per_minute: 50, tokens_per_minute: null, max_concurrent: 3 },
  }, 'exactly these members: no plaintext, digest, hint, addresses or metadata');
  t.notOk(fresh.text.includes(k.key), 'the plaintext is never in the answer');
  t.equal(fresh.headers['x-ratelimit-limit-requests'], '50', 'the tighter of plan and key');
  t.equal(fresh.headers['x-tollgate-units-charged'], undefined, 'not metered');
  t.equal(fresh.headers['x-tollgate-wallet-balance-units'], undefined);
  t.match(fresh.headers['x-request-id'], /.+/);

  const before = await ledger(acct);
  let charged = 0;
  for (const [model, text] of [['echo-small', 'hello there'], ['echo-large', 'one two three four'], ['echo-small', 'x']] as const) {
    const r = await chat(k.key, model, text);
    t.equal(r.status, 200, r.text);
    charged += Number(r.headers['x-tollgate-units-charged']);
  }
  t.ok(charged > 0);
  const after = await get(k.key, '/v1/key');
  t.strictSame(after.body.budget, { units: 5000, period: 'day', spent_units: charged, remaining_units: 5000 - charged, resets_at: tomorrowMidnight() });
  const list = (await admin('GET', `/admin/accounts/${acct}/keys`)).body.keys.find((x: any) => x.id === k.id);
  t.equal(list.budget.spent_units, charged, 'the admin list says the same');
  const l = await ledger(acct);
  t.equal(before.balance - l.balance, charged, 'the wallet paid exactly the charges, and nothing for the GETs');
  t.equal(l.held, 0, 'no hold left');
  const recs = await records(acct, k.id, 3);
  t.equal(recs.length, 3);
  for (let i = 0; i < 3; i++) await get(k.key, '/v1/key');
  await get(k.key, '/v1/usage');
  t.strictSame(await ledger(acct), l, 'GET /v1/key and /v1/usage hold and charge nothing');
  await sleep(100);
  const all = (await admin('GET', `/admin/usage/records?account=${acct}`)).body.records;
  t.equal(all.length, 3, 'and leave no usage record');
});

t.test('GET /v1/key: a key without a budget says budget null; a spent budget says 0 remaining', async (t) => {
  const acct = await account();
  const plain = await issue(acct);
  const r = await get(plain.key, '/v1/key');
  t.strictSame(r.body, {
    id: plain.id, name: null, account: acct, team: null, models: null, expires_at: null, budget: null,
    limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null },
  });
  const tight = await issue(acct, { budget: { units: 30, period: null } });
  let spent = 0;
  for (;;) {
    const c = await chat(tight.key, 'echo-small', 'hi');
    if (c.status !== 200) { t.equal(c.body.code, 'budget_exceeded'); break; }
    spent += Number(c.headers['x-tollgate-units-charged']);
  }
  const v = await get(tight.key, '/v1/key');
  t.strictSame(v.body.budget, { units: 30, period: null, spent_units: spent, remaining_units: 30 - spent, resets_at: null }, 'never resets');
  t.ok(30 - spent >= 0);
});

t.test('GET /v1/usage: rows by day and model equal the admin records to the unit; only the calling key\'s', async (t) => {
  const acct = await account();
  const other = await account();
  const a = await issue(acct);
  const b = await issue(acct);
  const c = await issue(other);
  const sent: Array<[string, string, string]> = [
    [a.key, 'echo-small', 'alpha beta'], [a.key, 'echo-large', 'gamma'], [a.key, 'echo-small', 'delta epsilon zeta'],
    [b.key, 'echo-small', 'only b'], [c.key, 'echo-large', 'only c'], [c.key, 'echo-large', 'again c'],
  ];
  for (const [key, model, text] of sent) t.equal((await chat(key, model, text)).status, 200);
  const recA = await records(acct, a.id, 3);
  const recB = await records(acct, b.id, 1);
  const recC = await records(other, c.id, 2);
  t.equal(recA.length, 3);

  const ua = await get(a.key, '/v1/usage');
  t.equal(ua.status, 200);
  t.strictSame(ua.body, { data: byDayAndModel(recA) }, 'key a: its own records, summed');
  t.strictSame(ua.body.data.map((r: any) => [r.date, r.model, r.requests]), [[today(), 'echo-large', 1], [today(), 'echo-small', 2]]);
  t.strictSame((await get(b.key, '/v1/usage')).body, { data: byDayAndModel(recB) }, 'key b of the same account sees only b');
  t.strictSame((await get(c.key, '/v1/usage')).body, { data: byDayAndModel(recC) }, 'key c of another account sees only c');
  t.equal(ua.body.data.reduce((s: number, r: any) => s + r.units, 0), recA.reduce((s, r) => s + r.units, 0));

  const explicit = await get(a.key, `/v1/usage?since=${dayOffset(-1)}&until=${today()}&unknown=1`);
  t.strictSame(explicit.body, ua.body, 'an explicit range with today; unknown parameters are ignored');
  t.strictSame((await get(a.key, `/v1/usage?since=${today()}`)).body, ua.body, 'since today, until defaults to today');
  t.strictSame((await get(a.key, `/v1/usage?until=${dayOffset(-1)}`)).body, { data: [] }, 'the 30 days ending yesterday: nothing');
  t.strictSame((await get(a.key, `/v1/usage?since=${dayOffset(1)}&until=${dayOffset(3)}`)).body, { data: [] }, 'a future range: nothing');
  const key = (await get(a.key, '/v1/key')).body;
  t.equal(key.id, a.id, 'each holder sees its own key');
  t.equal((await get(c.key, '/v1/key')).body.id, c.id);
});

t.test('the openai SDK: client.get(\'/key\') and client.get(\'/usage\', {query}) on its baseURL /v1', async (t) => {
  const acct = await account();
  const k = await issue(acct, { name: 'sdk', budget: { units: 100_000, period: 'month' } });
  const client = new OpenAI({ apiKey: k.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const done = await client.chat.completions.create({ model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'from the sdk' }] });
  const charged = (done.usage!.prompt_tokens) + 2 * done.usage!.completion_tokens;
  const me: any = await client.get('/key');
  t.equal(me.id, k.id);
  t.equal(me.name, 'sdk');
  t.equal(me.budget.spent_units, charged);
  t.equal(me.budget.remaining_units, 100_000 - charged);
  t.equal(me.budget.resets_at, new Date(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth() + 1, 1)).toISOString());
  await records(acct, k.id, 1);
  const usage: any = await client.get('/usage', { query: { since: today(), until: today() } });
  t.strictSame(usage, { data: [{ date: today(), model: 'echo-small', requests: 1, prompt_tokens: done.usage!.prompt_tokens, completion_tokens: done.usage!.completion_tokens, units: charged }] });
  const bad: any = await client.get('/usage', { query: { since: '2026-02-30' } }).catch((e) => e);
  t.equal(bad.status, 400);
  t.equal(bad.code, 'invalid_value');
  t.equal(bad.param, 'since');
  t.type(bad, OpenAI.BadRequestError);
});

t.test('bad parameters: 400 invalid_value naming the parameter, with exact envelopes', async (t) => {
  const acct = await account();
  const k = await issue(acct);
  const date = 'a UTC date YYYY-MM-DD, e.g. 2026-11-01';
  const cases: Array<[string, string, string]> = [
    ['since=2026-02-30', 'since', `Invalid value for 'since': ${date}.`],
    ['since=2026-13-01', 'since', `Invalid value for 'since': ${date}.`],
    ['since=yesterday', 'since', `Invalid value for 'since': ${date}.`],
    ['since=', 'since', `Invalid value for 'since': ${date}.`],
    ['since=2026-11-01T00:00:00Z', 'since', `Invalid value for 'since': ${date}.`],
    ['until=2026-1-01', 'until', `Invalid value for 'until': ${date}.`],
    ['until=%E0%A4%A', 'until', `Invalid value for 'until': ${date}.`],
    ['since=2026-11-01&since=2026-11-02', 'since', "Invalid value for 'since': give it at most once."],
    ['since=2026-11-05&until=2026-11-04', 'until', "Invalid value for 'until': must not be before 'since'."],
    [`since=${dayOffset(2)}`, 'since', "Invalid value for 'since': must not be after 'until' (today, UTC, when not given)."],
    ['since=2026-01-01&until=2026-04-01', 'since', "Invalid value for 'since': the range covers at most 90 days (usage.retention_days), this one 91."],
  ];
  for (const [query, param, message] of cases) {
    const r = await get(k.key, `/v1/usage?${query}`);
    assertEnvelope(t, r, 400, 'invalid_value', param, message);
    t.ok(r.headers['x-ratelimit-remaining-requests'] !== undefined, `${query}: a refused request spent a request (its headers say so)`);
  }
  const ok = await get(k.key, '/v1/usage?since=2026-01-01&until=2026-03-31');
  t.equal(ok.status, 200, '90 days exactly is allowed');
  const post = await call(gw.url, 'POST', '/v1/key', { authorization: `Bearer ${k.key}` }, {});
  assertEnvelope(t, post, 405, 'method_not_allowed');
  t.equal(post.headers.allow, 'GET');
  const head = await call(gw.url, 'DELETE', '/v1/usage', { authorization: `Bearer ${k.key}` });
  assertEnvelope(t, head, 405, 'method_not_allowed');
  t.equal(head.headers.allow, 'GET');
  assertEnvelope(t, await call(gw.url, 'GET', '/v1/key/x', { authorization: `Bearer ${k.key}` }), 404, 'unknown_url');
});

t.test('revoked and expired keys, a key outside its allowed_ips, no credential and dashboard sessions are refused', async (t) => {
  const acct = await account();
  const revoked = await issue(acct);
  t.equal((await get(revoked.key, '/v1/key')).status, 200);
  t.equal((await admin('DELETE', `/admin/keys/${revoked.id}`)).status, 204);
  for (const path of ['/v1/key', '/v1/usage']) {
    assertEnvelope(t, await get(revoked.key, path), 401, 'invalid_api_key');
    assertEnvelope(t, await call(gw.url, 'GET', path), 401, 'invalid_api_key');
  }
  const expired = await issue(acct, { expires_at: '2020-01-01T00:00:00Z' });
  for (const path of ['/v1/key', '/v1/usage']) {
    assertEnvelope(t, await get(expired.key, path), 401, 'key_expired', null, 'This API key expired at 2020-01-01T00:00:00.000Z.');
  }
  const elsewhere = await issue(acct, { allowed_ips: ['10.0.0.0/8'] });
  for (const path of ['/v1/key', '/v1/usage']) {
    assertEnvelope(t, await get(elsewhere.key, path), 403, 'ip_not_allowed', null, 'This API key may not be used from this address.');
  }
  const jwt = await new SignJWT({ type: 'access', sub: acct, sid: 'sess-self-1' }).setProtectedHeader({ alg: 'HS256' })
    .setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(new TextEncoder().encode(SECRET));
  for (const path of ['/v1/key', '/v1/usage']) {
    assertEnvelope(t, await get(jwt, path), 404, 'key_not_found', null,
      'This credential is a dashboard session, not an API key: GET /v1/key and GET /v1/usage describe the API key that calls them.');
  }
});

t.test('requests_per_minute: each GET spends a request of the key and of the plan; past it, 429 with the usual headers', async (t) => {
  const acct = await account();
  const k = await issue(acct, { limits: { requests_per_minute: 4 } });
  const probe = await issue(acct);
  const planLeft = async () => Number((await get(probe.key, '/v1/models')).headers['x-ratelimit-remaining-requests']);
  const plan0 = await planLeft();
  const seen: string[] = [];
  for (const path of ['/v1/key', '/v1/usage', '/v1/key', '/v1/usage?since=bad']) {
    const r = await get(k.key, path);
    seen.push(`${r.status}:${r.headers['x-ratelimit-remaining-requests']}`);
  }
  t.strictSame(seen, ['200:3', '200:2', '200:1', '400:0'], 'the key\'s limit counts down, a refused query too');
  t.equal(plan0 - (await planLeft()), 4, 'the plan\'s per-account count spent the same 4');
  for (const path of ['/v1/key', '/v1/usage']) {
    const r = await get(k.key, path);
    assertEnvelope(t, r, 429, 'rate_limit_exceeded');
    t.match(r.body.message, /4 requests per minute for this API key/);
    t.match(r.headers['retry-after'], /^\d+$/);
    t.ok(Number(r.headers['retry-after']) >= 1);
    t.match(r.headers['retry-after-ms'], /^\d+$/);
    t.equal(r.headers['x-ratelimit-limit-requests'], '4');
    t.equal(r.headers['x-ratelimit-remaining-requests'], '0');
  }
  const c = await chat(k.key, 'echo-small', 'hi');
  assertEnvelope(t, c, 429, 'rate_limit_exceeded');
  t.equal(c.headers['x-ratelimit-limit-requests'], '4', 'chat shares the same count');
});

t.test('GET /v1/usage covers at most 366 days, however long the retention', async (t) => {
  const now = Date.UTC(2026, 11, 6, 12);
  t.strictSame(usageRange('since=2025-12-06&until=2026-12-06', 400, now), { since: Date.UTC(2025, 11, 6), until: Date.UTC(2026, 11, 7) }, '366 days');
  const refused = (() => { try { usageRange('since=2025-12-05&until=2026-12-06', 400, now); } catch (e) { return e as any; } return undefined; })();
  t.match(refused, { code: 'invalid_value', param: 'since', message: "Invalid value for 'since': the range covers at most 366 days, this one 367." });
  const shorter = (() => { try { usageRange('since=2026-11-01&until=2026-12-06', 30, now); } catch (e) { return e as any; } return undefined; })();
  t.match(shorter, { param: 'since', message: "Invalid value for 'since': the range covers at most 30 days (usage.retention_days), this one 36." }, 'a shorter retention is named');
});
