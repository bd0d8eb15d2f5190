// Per-key controls through the real gateway (CONTRACT section 8), on the embedded store:
// issuing keys with controls (and refusing bad ones), listing them without plaintext, and each
// control's rejection on the request path with its exact status, code, extra fields and
// headers, with nothing consumed: wallet, budget, holds, concurrency slots and rate limits.
// PATCH, rotation with a grace period, /v1/models filtering, every route through one place,
// and the official OpenAI SDK's view of a rejection.

import t from 'tap';
import OpenAI from 'openai';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'key-controls-admin-token';
/** One unit per token, in and out: holds and charges are token counts. */
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };

function config(over: Record<string, any> = {}): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans.free = { paid: false, requests_per_minute: 1000, tokens_per_minute: 1_000_000, max_concurrent: 50 };
  c.providers.slow = { kind: 'echo', chunk_delay_ms: 150 };
  c.models = [
    { id: 'echo-small', provider: 'echo', max_output_tokens: 50, price: PRICE },
    { id: 'echo-vision', provider: 'echo', supports_vision: true, max_images: 2, paid_only: true, price: PRICE },
    { id: 'llama-a', provider: 'echo', max_output_tokens: 50, price: PRICE },
    { id: 'llama-b', provider: 'echo', max_output_tokens: 50, price: PRICE, paid_only: true },
    { id: 'llama-slow', provider: 'slow', max_output_tokens: 50, price: PRICE },
    { id: 'embed-a', provider: 'echo', type: 'embedding', price: PRICE },
  ];
  c.routing = { auto: ['echo-small', 'llama-a'] };
  c.server = { ...c.server, ...over };
  return c;
}

interface Answer { status: number; headers: Record<string, any>; text: string; body: any }

async function call(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  let parsed: any;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.statusCode, headers: res.headers, text, body: parsed };
}

const admin = (gw: TestGateway, method: string, path: string, body?: unknown) =>
  call(gw.url, method, path, body, { authorization: `Bearer ${ADMIN}` });

const chat = (gw: TestGateway, key: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  call(gw.url, 'POST', '/v1/chat/completions', { model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'hello there' }], ...body },
    { authorization: `Bearer ${key}`, ...headers });

let n = 0;
/** A new account with `wallet` units, on `plan`. */
async function account(gw: TestGateway, wallet = 100_000, plan = 'free'): Promise<string> {
  const id = `acct-${++n}`;
  const r = await admin(gw, 'POST', '/admin/accounts', { id, plan, wallet_units: wallet });
  if (r.status !== 201) throw new Error(`account: ${r.text}`);
  return id;
}

async function issue(gw: TestGateway, acct: string, controls: Record<string, unknown> = {}): Promise<{ id: string; key: string }> {
  const r = await admin(gw, 'POST', `/admin/accounts/${acct}/keys`, controls);
  if (r.status !== 201) throw new Error(`key: ${r.text}`);
  return r.body;
}

/** The account's balance and holds, and the key's view in the list. */
async function ledger(gw: TestGateway, acct: string, keyId?: string): Promise<{ balance: number; held: number; key: any }> {
  const a = (await admin(gw, 'GET', `/admin/accounts/${acct}`)).body;
  const keys = (await admin(gw, 'GET', `/admin/accounts/${acct}/keys`)).body.keys;
  return { balance: a.balance_units, held: a.held_units, key: keys.find((k: any) => k.id === keyId) };
}

/**
 * Everything a request could consume: the wallet and its holds, the key's spend, the account's
 * and the key's concurrency slots, and the plan's rate-limit counters (read through GET
 * /v1/models with `probe`, another key of the account, which consumes nothing).
 */
async function consumed(gw: TestGateway, acct: string, keyId: string, probe: string): Promise<Record<string, unknown>> {
  const l = await ledger(gw, acct, keyId);
  const peek = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${probe}` });
  return {
    balance: l.balance, held: l.held, spent: l.key.budget.spent_units,
    slots: await gw.gateway.slotsInUse(acct), keySlots: await gw.gateway.slotsInUse(`key:${keyId}`),
    requestsLeft: peek.headers['x-ratelimit-remaining-requests'], tokensLeft: peek.headers['x-ratelimit-remaining-tokens'],
  };
}

/** The envelope with its code, param and extras at the top and under `error`. */
function assertEnvelope(t: any, r: Answer, status: number, code: string, type: string, extras: Record<string, unknown> = {}): void {
  t.equal(r.status, status, `${code}: status`);
  t.match(r.body, { code, type, error: { code, type, ...extras }, ...extras }, `${code}: envelope`);
  t.equal(r.body.request_id, r.headers['x-request-id'], 'request_id = x-request-id');
  t.match(r.headers['content-type'], /application\/json/);
}

let gw: TestGateway;
t.before(async () => { gw = await startGateway(config()); });
t.teardown(() => gw.close());

t.test('POST /admin/accounts/{id}/keys: bad controls are 400 naming the field, and no key is issued', async (t) => {
  const acct = await account(gw);
  const cases: Array<[unknown, string, string]> = [
    [{ budget: { units: 9007199254740992, period: 'day' } }, 'invalid_value', 'budget.units'],
    ['{"budget":{"units":4503599627370496.5}}', 'invalid_value', 'budget.units'],
    [{ budget: { units: 1e300 } }, 'invalid_value', 'budget.units'],
    [{ budget: { units: -1 } }, 'invalid_value', 'budget.units'],
    [{ budget: { units: 1.5 } }, 'invalid_value', 'budget.units'],
    [{ budget: { units: '5' } }, 'invalid_type', 'budget.units'],
    [{ budget: { period: 'day' } }, 'missing_required_parameter', 'budget.units'],
    [{ budget: { units: 5, period: 'year' } }, 'unsupported_value', 'budget.period'],
    [{ budget: { units: 5, period: 7 } }, 'invalid_type', 'budget.period'],
    [{ budget: { units: 5, perod: 'day' } }, 'unsupported_value', 'budget.perod'],
    [{ budget: 5 }, 'invalid_type', 'budget'],
    [{ models: 'llama-*' }, 'invalid_type', 'models'],
    [{ models: [] }, 'invalid_value', 'models'],
    [{ models: ['ok', 3] }, 'invalid_type', 'models[1]'],
    [{ models: ['x'.repeat(257)] }, 'invalid_value', 'models[0]'],
    [{ expires_at: 'tomorrow' }, 'invalid_value', 'expires_at'],
    [{ expires_at: '2027-02-30' }, 'invalid_value', 'expires_at'],
    [{ expires_at: 1700000000 }, 'invalid_type', 'expires_at'],
    [{ allowed_ips: ['10.0.0.0/33'] }, 'invalid_value', 'allowed_ips[0]'],
    [{ allowed_ips: ['10.0.0.0/8', 'not-an-ip'] }, 'invalid_value', 'allowed_ips[1]'],
    [{ allowed_ips: ['2001:db8::/129'] }, 'invalid_value', 'allowed_ips[0]'],
    [{ allowed_ips: [42] }, 'invalid_type', 'allowed_ips[0]'],
    [{ limits: { requests_per_minute: 0 } }, 'invalid_value', 'limits.requests_per_minute'],
    [{ limits: { max_concurrent: 2.5 } }, 'invalid_value', 'limits.max_concurrent'],
    [{ limits: { tokens_per_minute: '9' } }, 'invalid_type', 'limits.tokens_per_minute'],
    [{ limits: { rpm: 5 } }, 'unsupported_value', 'limits.rpm'],
    [{ metadata: { team: 5 } }, 'invalid_type', 'metadata.team'],
    [{ metadata: { team: 'x'.repeat(513) } }, 'invalid_value', 'metadata.team'],
    [{ metadata: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) }, 'invalid_value', 'metadata'],
    [{ metadata: ['a'] }, 'invalid_type', 'metadata'],
    [{ name: '' }, 'invalid_value', 'name'],
    [{ name: 7 }, 'invalid_type', 'name'],
    [{ priority: 'urgent' }, 'unsupported_value', 'priority'],
    [{ priority: 'HIGH' }, 'unsupported_value', 'priority'],
    [{ priority: 1 }, 'invalid_type', 'priority'],
    [{ priority: ['high'] }, 'invalid_type', 'priority'],
    [{ priority: { band: 'high' } }, 'invalid_type', 'priority'],
  ];
  for (const [body, code, param] of cases) {
    const r = await admin(gw, 'POST', `/admin/accounts/${acct}/keys`, body);
    t.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: 400`);
    t.match(r.body, { code, param, type: 'invalid_request_error', error: { code, param } }, `${code} ${param}`);
    t.notOk('key' in r.body, 'no plaintext in a refusal');
  }
  t.strictSame((await admin(gw, 'GET', `/admin/accounts/${acct}/keys`)).body, { keys: [] }, 'no key was issued by any of them');
  t.equal((await admin(gw, 'POST', '/admin/accounts/nobody/keys', { name: 'x' })).body.code, 'account_not_found');
  t.equal((await admin(gw, 'GET', '/admin/accounts/nobody/keys')).body.code, 'account_not_found');
});

t.test('a key with controls is issued once in plaintext and listed without it', async (t) => {
  const acct = await account(gw);
  const controls = {
    name: 'search-indexer', models: ['llama-*'], expires_at: '2031-01-31T12:00:00+01:00', budget: { units: 5000, period: 'week' },
    limits: { requests_per_minute: 30, tokens_per_minute: 9000, max_concurrent: 3 }, priority: 'high', allowed_ips: ['10.0.0.0/8', '2001:db8::/32', '127.0.0.1'],
    metadata: { team: 'search', cost_center: 'cc-42' },
  };
  const issued = await admin(gw, 'POST', `/admin/accounts/${acct}/keys`, controls);
  t.equal(issued.status, 201);
  t.strictSame(Object.keys(issued.body).sort(), ['account', 'id', 'key'], 'the contract shape of an issued key');
  t.match(issued.body.key, /^tg_[A-Za-z0-9]{40}$/);
  const plain = await issue(gw, acct);
  const list = await admin(gw, 'GET', `/admin/accounts/${acct}/keys`);
  t.equal(list.status, 200);
  t.notOk(list.text.includes(issued.body.key) || list.text.includes(plain.key), 'no plaintext in the list');
  t.equal(list.body.keys.length, 2);
  const [k, p] = list.body.keys;
  t.strictSame(Object.keys(k).sort(), ['account', 'allowed_ips', 'budget', 'created_at', 'expires_at', 'hint', 'id', 'last_used_at', 'limits', 'mcp_tools', 'metadata', 'models', 'name', 'priority', 'rotated_key_valid_until', 'team', 'tags', 'tags_locked', 'end_user_budget'].sort());
  t.match(k, {
    id: issued.body.id, name: 'search-indexer', hint: `tg_…${issued.body.key.slice(-4)}`, last_used_at: null, models: ['llama-*'],
    expires_at: '2031-01-31T11:00:00.000Z', limits: controls.limits, priority: 'high', allowed_ips: controls.allowed_ips, metadata: controls.metadata,
    budget: { units: 5000, period: 'week', spent_units: 0 },
  });
  t.ok(Date.parse(k.created_at) > Date.now() - 60_000, 'created_at is ISO-8601, now');
  t.match(new Date(k.budget.resets_at).getUTCDay(), 1, 'a weekly budget resets on a Monday');
  t.match(p, { id: plain.id, name: null, models: null, expires_at: null, budget: { units: null, period: null, spent_units: 0 }, priority: null, allowed_ips: null, metadata: {} });
  const one = await admin(gw, 'GET', `/admin/keys/${issued.body.id}`);
  t.strictSame(one.body, k, 'GET /admin/keys/{id} shows the same');
  t.equal((await admin(gw, 'POST', `/admin/accounts/${acct}/keys`, '{"models":null,"budget":null,"limits":null,"metadata":null}')).status, 201, 'nulls mean no restriction');
});

t.test('config keys are listed with their hint and no controls', async (t) => {
  const list = await admin(gw, 'GET', '/admin/accounts/demo/keys');
  t.equal(list.status, 200);
  t.match(list.body.keys, [{ hint: 'tg_…0000', models: null, budget: { units: null, spent_units: 0 } }]);
  t.notOk(list.text.includes('tg_demo_0000000000000000'), 'no plaintext');
});

t.test('key_expired: 401, and nothing consumed', async (t) => {
  const acct = await account(gw);
  const past = await issue(gw, acct, { expires_at: '2020-01-01T00:00:00Z' });
  const probe = await issue(gw, acct);
  const before = await consumed(gw, acct, past.id, probe.key);
  const r = await chat(gw, past.key);
  assertEnvelope(t, r, 401, 'key_expired', 'invalid_request_error');
  t.match(r.body.message, /2020-01-01T00:00:00.000Z/);
  t.strictSame(await consumed(gw, acct, past.id, probe.key), before, 'wallet, holds, spend, slots and limits untouched');
  const models = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${past.key}` });
  assertEnvelope(t, models, 401, 'key_expired', 'invalid_request_error');
  // Expiry is read per request from the cached key: a key that expires while cached stops.
  const soon = await issue(gw, acct, { expires_at: new Date(Date.now() + 1500).toISOString() });
  t.equal((await chat(gw, soon.key)).status, 200, 'before its time');
  await sleep(1600);
  t.equal((await chat(gw, soon.key)).body.code, 'key_expired', 'after it');
});

t.test('ip_not_allowed: the socket address is matched; X-Forwarded-For is ignored without trust_proxy', async (t) => {
  const acct = await account(gw);
  const far = await issue(gw, acct, { allowed_ips: ['10.0.0.0/8', '2001:db8::/32'] });
  const near = await issue(gw, acct, { allowed_ips: ['10.0.0.0/8', '127.0.0.0/8'] });
  const before = await consumed(gw, acct, far.id, near.key);
  const r = await chat(gw, far.key, {}, { 'x-forwarded-for': '10.1.2.3' });
  assertEnvelope(t, r, 403, 'ip_not_allowed', 'permission_error');
  t.notOk(r.body.message.includes('127.0.0.1'), 'the message does not echo addresses');
  t.strictSame(await consumed(gw, acct, far.id, near.key), before, 'nothing held, charged, spent or counted');
  t.equal((await chat(gw, near.key)).status, 200, 'an allowed socket address');
});

t.test('server.trust_proxy: true matches the rightmost X-Forwarded-For entry, the one the proxy appended (IPv4 and IPv6)', async (t) => {
  const proxied = await startGateway(config({ trust_proxy: true }));
  t.teardown(() => proxied.close());
  const acct = await account(proxied);
  const k = await issue(proxied, acct, { allowed_ips: ['203.0.113.0/24', '2001:db8::/32'] });
  t.equal((await chat(proxied, k.key, {}, { 'x-forwarded-for': '10.0.0.1, 203.0.113.9' })).status, 200, 'v4, a client-written entry on its left');
  t.equal((await chat(proxied, k.key, {}, { 'x-forwarded-for': '2001:db8::5' })).status, 200, 'v6');
  t.equal((await chat(proxied, k.key, {}, { 'x-forwarded-for': '[2001:db8::7]:443' })).status, 200, 'bracketed v6 with a port');
  assertEnvelope(t, await chat(proxied, k.key, {}, { 'x-forwarded-for': '203.0.113.9, 10.0.0.1' }), 403, 'ip_not_allowed', 'permission_error');
  assertEnvelope(t, await chat(proxied, k.key, {}, { 'x-forwarded-for': 'garbage' }), 403, 'ip_not_allowed', 'permission_error');
  assertEnvelope(t, await chat(proxied, k.key), 403, 'ip_not_allowed', 'permission_error');
  // The attack the change closes: a client writes an allowed address on the left.
  const internal = await issue(proxied, acct, { allowed_ips: ['10.0.0.0/8'] });
  const probe = await issue(proxied, acct);
  const before = await consumed(proxied, acct, internal.id, probe.key);
  assertEnvelope(t, await chat(proxied, internal.key, {}, { 'x-forwarded-for': '10.1.1.1, 198.51.100.7' }), 403, 'ip_not_allowed', 'permission_error');
  t.strictSame(await consumed(proxied, acct, internal.id, probe.key), before, 'nothing held, charged, spent or counted');
});

t.test('model_not_allowed: 403 with the key\'s models the plan may use; every route; /v1/models filtered', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { models: ['llama-*', 'embed-a'] });
  const probe = await issue(gw, acct);
  const before = await ledger(gw, acct, k.id);
  const untouched = await consumed(gw, acct, k.id, probe.key);
  const r = await chat(gw, k.key, { model: 'echo-small' });
  // Nothing held, charged or counted in tokens; the request itself counts toward requests_per_minute,
  // as any request refused for its content does (CONTRACT section 16).
  t.strictSame(await consumed(gw, acct, k.id, probe.key), { ...untouched, requestsLeft: String(Number(untouched.requestsLeft) - 1) },
    'the refusal spent one request, and nothing else');
  // llama-b is paid_only: the free plan may not use it, so it is not suggested. Nearest first.
  assertEnvelope(t, r, 403, 'model_not_allowed', 'permission_error', { suggested_models: ['llama-a', 'embed-a', 'llama-slow'] });
  t.equal(r.body.param, 'model');
  t.equal((await chat(gw, k.key, { model: 'llama-a' })).status, 200, 'an allowed model');
  const auto = await chat(gw, k.key, { model: 'auto' });
  t.equal(auto.status, 200);
  t.equal(auto.body.model, 'llama-a', "auto skips what the key may not use");
  const none = await issue(gw, acct, { models: ['nothing-*'] });
  assertEnvelope(t, await chat(gw, none.key, { model: 'auto' }), 403, 'model_not_allowed', 'permission_error', { suggested_models: [] });
  assertEnvelope(t, await chat(gw, k.key, { model: 'no-such-model' }), 404, 'model_not_found', 'invalid_request_error');

  // The same check on every route: Messages, Responses, embeddings.
  const messages = await call(gw.url, 'POST', '/v1/messages', { model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] },
    { 'x-api-key': k.key, 'anthropic-version': '2023-06-01' });
  t.equal(messages.status, 403);
  t.match(messages.body, { type: 'error', error: { type: 'permission_error', code: 'model_not_allowed', suggested_models: ['llama-a', 'embed-a', 'llama-slow'] } });
  const responses = await call(gw.url, 'POST', '/v1/responses', { model: 'echo-small', input: 'hi' }, { authorization: `Bearer ${k.key}` });
  t.equal(responses.status, 403);
  t.equal(responses.body.code ?? responses.body.error?.code, 'model_not_allowed');
  const embed = await call(gw.url, 'POST', '/v1/embeddings', { model: 'echo-small', input: 'hi' }, { authorization: `Bearer ${k.key}` });
  assertEnvelope(t, embed, 403, 'model_not_allowed', 'permission_error');
  t.equal((await call(gw.url, 'POST', '/v1/embeddings', { model: 'embed-a', input: 'hi' }, { authorization: `Bearer ${k.key}` })).status, 200);

  const after = await ledger(gw, acct, k.id);
  const spent = (await ledger(gw, acct, k.id)).key.budget.spent_units;
  t.equal(after.held, 0, 'no hold left by any rejection');
  t.equal(before.balance - after.balance, spent, 'only the allowed requests were charged, to wallet and key alike');

  const list = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${k.key}` });
  t.equal(list.status, 200);
  t.strictSame(list.body.data.map((m: any) => m.id), ['llama-a', 'llama-slow', 'embed-a'], 'only what plan and key both allow');
  const pro = await account(gw, 1000, 'pro');
  const pk = await issue(gw, pro, { models: ['llama-*'] });
  const proList = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${pk.key}` });
  t.strictSame(proList.body.data.map((m: any) => m.id), ['llama-a', 'llama-b', 'llama-slow'], 'a paid plan adds its paid models the key allows');
  const unrestricted = await issue(gw, acct);
  const all = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${unrestricted.key}` });
  t.strictSame(all.body.data.map((m: any) => m.id), ['echo-small', 'llama-a', 'llama-slow', 'embed-a'], 'a key without models: the plan\'s list');
  t.equal((await call(gw.url, 'GET', '/v1/models/echo-small', undefined, { authorization: `Bearer ${k.key}` })).status, 200, 'GET /v1/models/{id} shows any catalog model');
});

t.test('budget_exceeded: 402 with what is left and when it resets; wallet and budget untouched', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { budget: { units: 40, period: 'day' } });
  const probe = await issue(gw, acct);
  const ok = await chat(gw, k.key, { max_tokens: 5 });
  t.equal(ok.status, 200);
  const charged = Number(ok.headers['x-tollgate-units-charged']);
  t.ok(charged > 0, 'the first request is charged');
  const before = await ledger(gw, acct, k.id);
  t.equal(before.key.budget.spent_units, charged, 'spent = what was charged');
  const untouched = await consumed(gw, acct, k.id, probe.key);
  const r = await chat(gw, k.key, { max_tokens: 40 });
  t.strictSame(await consumed(gw, acct, k.id, probe.key), untouched, 'nothing consumed: wallet, spend, holds, slots, rate limits');
  const left = 40 - charged;
  const midnight = new Date(); midnight.setUTCHours(24, 0, 0, 0);
  assertEnvelope(t, r, 402, 'budget_exceeded', 'insufficient_credits', { budget_remaining_units: left, budget_resets_at: midnight.toISOString() });
  t.strictSame(await ledger(gw, acct, k.id), before, 'nothing held, charged or spent');
  // A stream is refused before its first byte in the same envelope.
  const s = await chat(gw, k.key, { max_tokens: 40, stream: true });
  assertEnvelope(t, s, 402, 'budget_exceeded', 'insufficient_credits', { budget_remaining_units: left });
  const never = await issue(gw, acct, { budget: { units: 3, period: null } });
  assertEnvelope(t, await chat(gw, never.key), 402, 'budget_exceeded', 'insufficient_credits', { budget_remaining_units: 3, budget_resets_at: null });
  // PATCH raises the budget at once; spent is kept.
  const patched = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { budget: { units: 1000, period: 'day' } });
  t.equal(patched.status, 200);
  t.match(patched.body.budget, { units: 1000, period: 'day', spent_units: charged });
  t.equal((await chat(gw, k.key, { max_tokens: 40 })).status, 200, 'in force at once');
});

t.test('per-key limits on top of the plan\'s: 429 with the tighter headers, nothing consumed by the refusal', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { limits: { requests_per_minute: 2 } });
  const other = await issue(gw, acct);
  const first = await chat(gw, k.key);
  t.equal(first.status, 200);
  t.equal(first.headers['x-ratelimit-limit-requests'], '2', 'the key\'s limit is the tighter');
  t.equal(first.headers['x-ratelimit-remaining-requests'], '1');
  t.equal(first.headers['x-ratelimit-limit-tokens'], '1000000', 'the plan\'s token limit (the key has none)');
  t.equal((await chat(gw, k.key)).headers['x-ratelimit-remaining-requests'], '0');
  const before = await ledger(gw, acct, k.id);
  const untouched = await consumed(gw, acct, k.id, other.key);
  const r = await chat(gw, k.key);
  t.strictSame(await consumed(gw, acct, k.id, other.key), untouched, 'nothing consumed, the plan\'s rate limit included');
  assertEnvelope(t, r, 429, 'rate_limit_exceeded', 'rate_limit_error');
  t.match(r.body.message, /API key/);
  t.ok(Number(r.headers['retry-after']) >= 1 && Number(r.headers['retry-after-ms']) >= 1, 'Retry-After');
  t.equal(r.headers['x-ratelimit-limit-requests'], '2');
  t.equal(r.headers['x-ratelimit-remaining-requests'], '0');
  t.strictSame(await ledger(gw, acct, k.id), before, 'nothing held, charged or spent');
  // The account's own counter saw only the two admitted requests.
  const o = await chat(gw, other.key);
  t.equal(o.headers['x-ratelimit-limit-requests'], '1000');
  t.equal(o.headers['x-ratelimit-remaining-requests'], String(1000 - 3), 'the refused request took nothing from the plan\'s limit');
  const peek = await call(gw.url, 'GET', '/v1/models', undefined, { authorization: `Bearer ${k.key}` });
  t.equal(peek.headers['x-ratelimit-limit-requests'], '2', '/v1/models shows the tighter too');
  t.equal(peek.headers['x-ratelimit-remaining-requests'], '0');

  const tk = await issue(gw, acct, { limits: { tokens_per_minute: 30 } });
  const t1 = await chat(gw, tk.key, { max_tokens: 10 });
  t.equal(t1.status, 200);
  t.equal(t1.headers['x-ratelimit-limit-tokens'], '30');
  const t2 = await chat(gw, tk.key, { max_tokens: 25 });
  assertEnvelope(t, t2, 429, 'rate_limit_exceeded', 'rate_limit_error');
  t.equal(t2.headers['x-ratelimit-limit-tokens'], '30');
});

t.test('too_many_concurrent: a key\'s max_concurrent; its slot and the account\'s are given back', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { limits: { max_concurrent: 1 } });
  const long = chat(gw, k.key, { model: 'llama-slow', stream: true, max_tokens: 20, messages: [{ role: 'user', content: 'one two three four five six' }] });
  const deadline = Date.now() + 3000;
  while (await gw.gateway.slotsInUse(`key:${k.id}`) === 0 && Date.now() < deadline) await sleep(10);
  t.equal(await gw.gateway.slotsInUse(`key:${k.id}`), 1, 'the stream holds the key\'s slot');
  const before = await ledger(gw, acct, k.id);
  const r = await chat(gw, k.key);
  assertEnvelope(t, r, 429, 'too_many_concurrent', 'rate_limit_error');
  t.match(r.body.message, /API key may have 1 at once/);
  t.equal(r.headers['retry-after'], '1');
  const mid = await ledger(gw, acct, k.id);
  t.equal(mid.balance, before.balance, 'the refusal charged nothing');
  t.equal(await gw.gateway.slotsInUse(acct), 1, 'the refusal gave the account\'s slot back');
  t.equal((await long).status, 200);
  t.equal(await gw.gateway.slotsInUse(`key:${k.id}`), 0);
  t.equal(await gw.gateway.slotsInUse(acct), 0);
  t.equal((await chat(gw, k.key)).status, 200, 'served again once the first is done');
});

t.test('rotation: the old plaintext works until the grace ends, then 401 invalid_api_key', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { name: 'rotating', budget: { units: 100000, period: 'month' } });
  t.equal((await chat(gw, k.key)).status, 200);
  const bad = await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: -1 });
  t.match(bad.body, { code: 'invalid_value', param: 'grace_seconds' });
  t.match((await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 1e9 })).body, { code: 'invalid_value', param: 'grace_seconds' });
  t.equal((await admin(gw, 'POST', '/admin/keys/key_nothing/rotate', { grace_seconds: 1 })).body.code, 'key_not_found');
  const r = await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 1 });
  t.equal(r.status, 200);
  t.match(r.body, { id: k.id, account: acct, key: /^tg_[A-Za-z0-9]{40}$/ });
  t.not(r.body.key, k.key);
  t.ok(Math.abs(Date.parse(r.body.previous_key_valid_until) - (Date.now() + 1000)) < 500, 'the grace end');
  t.equal((await chat(gw, k.key)).status, 200, 'the old plaintext during the grace');
  t.equal((await chat(gw, r.body.key)).status, 200, 'the new one');
  const listed = (await ledger(gw, acct, k.id)).key;
  t.match(listed, { id: k.id, name: 'rotating', hint: `tg_…${r.body.key.slice(-4)}` }, 'the same key id, controls and spend');
  t.ok(listed.budget.spent_units > 0);
  await sleep(1100);
  assertEnvelope(t, await chat(gw, k.key), 401, 'invalid_api_key', 'invalid_request_error');
  t.equal((await chat(gw, r.body.key)).status, 200, 'the new one still works');
  const again = await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, {});
  t.equal((await chat(gw, again.body.key)).status, 200);
  t.equal((await chat(gw, r.body.key)).body.code, 'invalid_api_key', 'no grace by default');
  t.equal((await admin(gw, 'DELETE', `/admin/keys/${k.id}`)).status, 204);
  t.equal((await chat(gw, again.body.key)).body.code, 'invalid_api_key', 'revoked');
  t.equal((await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 5 })).body.code, 'key_not_found', 'a revoked key is not rotated');
  t.equal((await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { name: 'x' })).body.code, 'key_not_found', 'nor changed');
});

t.test('PATCH changes controls in force at once; a bad PATCH changes nothing', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { name: 'p', metadata: { a: '1' } });
  t.equal((await chat(gw, k.key)).status, 200);
  const bad = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { models: ['llama-a'], budget: { units: -5 } });
  t.match(bad.body, { code: 'invalid_value', param: 'budget.units' });
  t.equal((await chat(gw, k.key)).status, 200, 'the bad PATCH applied nothing');
  const p = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { models: ['llama-a'] });
  t.match(p.body, { id: k.id, name: 'p', models: ['llama-a'], metadata: { a: '1' } }, 'the other controls are kept');
  t.equal((await chat(gw, k.key)).body.code, 'model_not_allowed', 'in force for the next request');
  const lim = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { limits: { max_concurrent: 4, requests_per_minute: 9 } });
  t.strictSame(lim.body.limits, { requests_per_minute: 9, tokens_per_minute: null, max_concurrent: 4 });
  const lim2 = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { limits: { requests_per_minute: null } });
  t.strictSame(lim2.body.limits, { requests_per_minute: null, tokens_per_minute: null, max_concurrent: 4 }, 'limits change member by member');
  const lim3 = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { limits: null });
  t.strictSame(lim3.body.limits, { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, 'limits: null clears them all');
  t.equal((await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { models: null, expires_at: '2001-01-01' })).status, 200);
  t.equal((await chat(gw, k.key)).body.code, 'key_expired');
  t.equal((await admin(gw, 'PATCH', '/admin/keys/key_nothing', { name: 'x' })).body.code, 'key_not_found');
  const wrong = await admin(gw, 'PUT', `/admin/keys/${k.id}`, { name: 'x' });
  t.equal(wrong.status, 405);
  t.equal(wrong.headers.allow, 'GET, HEAD, PATCH, DELETE');
});

t.test("priority round trip: created with one, listed, changed by PATCH, cleared with null (the plan's), kept by other PATCHes", async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { name: 'bot', priority: 'low' });
  const listed = async () => (await admin(gw, 'GET', `/admin/accounts/${acct}/keys`)).body.keys.find((x: any) => x.id === k.id);
  t.equal((await listed()).priority, 'low', 'listed as created');
  t.equal((await admin(gw, 'GET', `/admin/keys/${k.id}`)).body.priority, 'low', 'GET /admin/keys/{id} too');
  const high = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { priority: 'high' });
  t.equal(high.status, 200);
  t.match(high.body, { id: k.id, name: 'bot', priority: 'high' }, 'the PATCH answers the key');
  const other = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { limits: { max_concurrent: 5 } });
  t.equal(other.body.priority, 'high', 'a PATCH of another control keeps it');
  const bad = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { priority: 'highest', name: 'x' });
  t.equal(bad.status, 400);
  t.match(bad.body, { code: 'unsupported_value', param: 'priority', type: 'invalid_request_error' });
  t.equal(bad.body.message, "Unsupported value for 'priority': \"highest\". Supported values are: 'high', 'normal', 'low', null.");
  t.match(await listed(), { name: 'bot', priority: 'high' }, 'a bad PATCH changed nothing');
  const cleared = await admin(gw, 'PATCH', `/admin/keys/${k.id}`, { priority: null });
  t.equal(cleared.status, 200);
  t.equal(cleared.body.priority, null, 'null: the plan\'s');
  t.equal((await listed()).priority, null, 'listed so');
  t.equal((await chat(gw, k.key)).status, 200, 'the key still works');
  t.equal((await issue(gw, acct, { priority: null })).id.startsWith('key_'), true, 'null at creation is the default');
});

t.test('last_used_at is written, coalesced, after use', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct);
  const start = Date.now();
  for (let i = 0; i < 5; i++) t.equal((await chat(gw, k.key)).status, 200);
  let seen: string | null = null;
  const deadline = Date.now() + 3000;
  while (seen === null && Date.now() < deadline) {
    await sleep(100);
    seen = (await ledger(gw, acct, k.id)).key.last_used_at;
  }
  t.ok(seen !== null && Date.parse(seen) >= start - 5 && Date.parse(seen) <= Date.now(), `last_used_at ${seen}`);
});

t.test('the official OpenAI SDK sees the status, code and extras of a rejection', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { models: ['llama-*'] });
  const client = new OpenAI({ apiKey: k.key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const err: any = await client.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.ok(err instanceof OpenAI.PermissionDeniedError, 'a PermissionDeniedError');
  t.equal(err.status, 403);
  t.equal(err.code, 'model_not_allowed');
  t.equal(err.type, 'permission_error');
  t.strictSame(err.error.suggested_models, ['llama-a', 'llama-slow']);
  const list = await client.models.list();
  t.strictSame(list.data.map((m) => m.id), ['llama-a', 'llama-slow']);
  const b = await issue(gw, acct, { budget: { units: 1, period: 'month' } });
  const budget: any = await new OpenAI({ apiKey: b.key, baseURL: `${gw.url}/v1`, maxRetries: 0 })
    .chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.equal(budget.status, 402);
  t.equal(budget.code, 'budget_exceeded');
  t.equal(budget.error.budget_remaining_units, 1);
  t.match(budget.error.budget_resets_at, /^\d{4}-\d{2}-01T00:00:00.000Z$/);
});

t.test('the logs hold no plaintext key', async (t) => {
  const acct = await account(gw);
  const k = await issue(gw, acct, { name: 'logged' });
  await chat(gw, k.key);
  await admin(gw, 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 0 });
  t.notOk(gw.logs().includes(k.key), 'no plaintext in the logs');
  t.notOk(gw.logs().includes(ADMIN), 'nor the admin token');
});
