// Every admin body refuses unknown members at every depth (CONTRACT section 16): 400
// unsupported_value, param the member's path, a message naming it, and nothing changed.
// Regression: a top-level member the route does not take (`allowed_ip`, `expires`, `Models` in
// a key request or PATCH) was ignored, and the key came out without the restriction meant.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SignJWT } from 'jose';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { clip } from '../../lib/errors.js';
import { hasPollutingKey, holds } from '../property/arbitraries.js';
import { assertEnvelope, type Answer } from '../property/invariants.js';

const ADMIN = 'body-shape-admin-token-0123456789';
const SECRET = 'a-dashboard-secret-for-body-shapes-0123456789';

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.auth = { jwt: { secret: SECRET, issuer: 'dash', audience: 'tollgate' } };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = { authorization: `Bearer ${ADMIN}` }): Promise<Answer & { json: any }> {
  const res = await request(`${gw.url}${path}`, {
    method: method as 'GET',
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: text === '' ? undefined : JSON.parse(text) };
}

const chat = (credential: string) => call('POST', '/v1/chat/completions', { model: 'echo-small', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] },
  { authorization: `Bearer ${credential}` });

async function session(sid: string): Promise<string> {
  return new SignJWT({ type: 'access', sub: 'demo', sid }).setProtectedHeader({ alg: 'HS256' }).setIssuer('dash').setAudience('tollgate')
    .setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(new TextEncoder().encode(SECRET));
}

let n = 0;
async function fixture(): Promise<{ account: string; id: string; key: string; sid: string }> {
  const account = `shape-${++n}`;
  assert.equal((await call('POST', '/admin/accounts', { id: account, plan: 'free', wallet_units: 1000 })).status, 201);
  const issued = await call('POST', `/admin/accounts/${account}/keys`, { name: 'fixture', limits: { max_concurrent: 5 } });
  assert.equal(issued.status, 201);
  return { account, id: issued.json.id, key: issued.json.key, sid: `sid-shape-${n}` };
}

/** Asserts the refusal: 400 unsupported_value in the envelope, naming `param`. */
function assertUnknown(a: Answer, param: string): void {
  assert.equal(a.status, 400, a.text);
  const e = assertEnvelope(a);
  assert.equal(e.code, 'unsupported_value');
  assert.equal(e.param, param);
  assert.ok(e.message.includes(`'${param}'`), `the message names '${param}': ${e.message}`);
}

// ---- the three examples of the issue, and the shapes' edges --------------------------------

t.test('allowed_ip, expires and Models are refused, not ignored', async (t) => {
  const f = await fixture();
  const listed = async () => (await call('GET', `/admin/accounts/${f.account}/keys`)).json.keys;
  const before = await listed();

  const create = await call('POST', `/admin/accounts/${f.account}/keys`, { name: 'office only', allowed_ip: ['10.0.0.0/8'] });
  assertUnknown(create, 'allowed_ip');
  t.equal(create.json.message, "Unsupported parameter: 'allowed_ip'; this body takes name, models, expires_at, budget, limits, priority, allowed_ips, metadata, team, mcp_tools, tags, tags_locked, end_user_budget.");
  t.strictSame(await listed(), before, 'no key issued');

  const expires = await call('PATCH', `/admin/keys/${f.id}`, { expires: '2020-01-01T00:00:00Z' });
  assertUnknown(expires, 'expires');
  const models = await call('PATCH', `/admin/keys/${f.id}`, { Models: ['none-*'], name: 'renamed' });
  assertUnknown(models, 'Models');
  t.strictSame(await listed(), before, 'the key is unchanged (name included)');
  t.equal((await chat(f.key)).status, 200, 'and still unrestricted only because nothing was asked of it');

  const nested = await call('PATCH', `/admin/keys/${f.id}`, { budget: { unit: 5, period: 'day' } });
  assertUnknown(nested, 'budget.unit');
  t.equal(nested.json.message, "Unsupported parameter: 'budget.unit'; 'budget' takes units, period.");
  assertUnknown(await call('PATCH', `/admin/keys/${f.id}`, { limits: { rpm: 5 } }), 'limits.rpm');
  t.strictSame(await listed(), before);
});

t.test('a member the prototype has is no member; metadata takes any name; a long name is clipped', async (t) => {
  const f = await fixture();
  for (const name of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
    assertUnknown(await call('POST', '/admin/accounts', { id: `proto-${name}`, plan: 'free', [name]: 1 }), name);
    assertUnknown(await call('PATCH', `/admin/keys/${f.id}`, { budget: { units: 1, [name]: 'x' } }), `budget.${name}`);
  }
  t.equal((await call('GET', '/admin/accounts/proto-constructor')).status, 404, 'no account created');
  const patched = await call('PATCH', `/admin/keys/${f.id}`, { metadata: { constructor: 'c', Models: 'm', 'a.b': 'x' } });
  t.equal(patched.status, 200, 'metadata member names are the operator\'s own');
  t.strictSame(patched.json.metadata, { constructor: 'c', Models: 'm', 'a.b': 'x' });
  const long = 'x'.repeat(300);
  const refused = await call('POST', `/admin/accounts/${f.account}/credits`, { units: 5, idempotency_key: 'k', [long]: 1 });
  assertUnknown(refused, `${'x'.repeat(64)}…`);
  t.ok(refused.text.length < 1000, 'the name is not echoed whole');
});

t.test('a body with no members is still taken where a route takes one', async (t) => {
  const f = await fixture();
  t.equal((await call('POST', `/admin/sessions/${f.sid}/revoke`, {})).status, 204);
  t.equal((await call('POST', `/admin/keys/${f.id}/rotate`, {})).status, 200);
  t.equal((await call('PATCH', `/admin/keys/${f.id}`, {})).status, 200);
  t.equal((await call('POST', `/admin/accounts/${f.account}/keys`, {})).status, 201);
});

// ---- every write route, unknown members at every depth (property) ---------------------------

/** A route, a valid body for it, the objects inside that body a member may be put in, and what it changes. */
interface Route {
  name: string;
  method: string;
  path: (f: Awaited<ReturnType<typeof fixture>>) => string;
  body: (f: Awaited<ReturnType<typeof fixture>>) => Record<string, unknown>;
  /** The objects inside the body that have a fixed set of members, by path ('' is the body), each with its members. */
  shape: Record<string, string[]>;
  /** What the route would change, read back. */
  state: (f: Awaited<ReturnType<typeof fixture>>) => Promise<unknown>;
}

const CONTROLS: Record<string, string[]> = {
  '': ['name', 'models', 'expires_at', 'budget', 'limits', 'priority', 'allowed_ips', 'metadata'],
  budget: ['units', 'period'],
  limits: ['requests_per_minute', 'tokens_per_minute', 'max_concurrent'],
};
const keyState = async (f: { account: string }) => (await call('GET', `/admin/accounts/${f.account}/keys`)).json;
const controls = () => ({ name: 'n', models: ['echo-*'], budget: { units: 50, period: 'day' }, limits: { max_concurrent: 2, requests_per_minute: 9 }, metadata: { team: 'a', Models: 'b' } });

const ROUTES: Route[] = [
  {
    name: 'POST /admin/accounts', method: 'POST', path: () => '/admin/accounts',
    body: (f) => ({ id: `${f.account}-new`, plan: 'pro', wallet_units: 5 }), shape: { '': ['id', 'plan', 'wallet_units'] },
    state: async (f) => (await call('GET', `/admin/accounts/${f.account}-new`)).status,
  },
  {
    name: 'POST /admin/accounts/{id}/credits', method: 'POST', path: (f) => `/admin/accounts/${f.account}/credits`,
    body: () => ({ units: 7, idempotency_key: 'once' }), shape: { '': ['units', 'idempotency_key'] },
    state: async (f) => (await call('GET', `/admin/accounts/${f.account}`)).json.balance_units,
  },
  {
    name: 'POST /admin/accounts/{id}/keys', method: 'POST', path: (f) => `/admin/accounts/${f.account}/keys`,
    body: controls, shape: CONTROLS, state: keyState,
  },
  {
    name: 'PATCH /admin/keys/{id}', method: 'PATCH', path: (f) => `/admin/keys/${f.id}`,
    body: controls, shape: CONTROLS, state: keyState,
  },
  {
    name: 'POST /admin/keys/{id}/rotate', method: 'POST', path: (f) => `/admin/keys/${f.id}/rotate`,
    body: () => ({ grace_seconds: 5 }), shape: { '': ['grace_seconds'] },
    state: async (f) => [await keyState(f), (await chat(f.key)).status],
  },
  {
    name: 'POST /admin/sessions/{sid}/revoke', method: 'POST', path: (f) => `/admin/sessions/${f.sid}/revoke`,
    body: () => ({}), shape: { '': [] },
    state: async (f) => (await chat(await session(f.sid))).status,
  },
];


const memberName = fc.oneof(
  fc.string({ minLength: 0, maxLength: 24 }),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 12 }),
  fc.constantFrom('allowed_ip', 'expires', 'Models', 'Name', 'constructor', 'toString', 'units ', ' id', 'idempotencyKey', 'grace', 'team', 'budget.units', 'a.b', '0', '1e3'),
);
const value = fc.jsonValue({ maxDepth: 3 }).filter((v) => !hasPollutingKey(v));

/** `obj` with `name: v` put at position `at` among its members. */
function withMember(obj: Record<string, unknown>, name: string, v: unknown, at: number): Record<string, unknown> {
  const entries = Object.entries(obj);
  entries.splice(at % (entries.length + 1), 0, [name, v]);
  return Object.fromEntries(entries);
}

t.test('every admin write route: an unknown member at any depth is 400 unsupported_value naming it, and nothing changes', async (t) => {
  const scenario = fc.record({
    route: fc.constantFrom(...ROUTES), depth: fc.nat(), name: memberName, value, at: fc.nat(),
    // An unknown member may itself hold objects; it is the one named.
    wrap: fc.nat({ max: 2 }),
  }).filter(({ route, depth, name }) => {
    const objects = Object.keys(route.shape);
    return name !== '__proto__' && !route.shape[objects[depth % objects.length]!]!.includes(name);
  });
  await holds(t, 'unknown admin members', fc.asyncProperty(scenario, async ({ route, depth, name, value: v, at, wrap }) => {
    const f = await fixture();
    const objects = Object.keys(route.shape);
    const at0 = objects[depth % objects.length]!;
    const where = at0 === '' ? [] : [at0];
    let held: unknown = v;
    for (let i = 0; i < wrap; i++) held = { inner: held };
    const body = route.body(f);
    const sent = where.length === 0 ? withMember(route.body(f), name, held, at)
      : { ...body, [where[0]!]: withMember(body[where[0]!] as Record<string, unknown>, name, held, at) };
    const before = await route.state(f);
    const res = await call(route.method, route.path(f), JSON.stringify(sent));
    assertUnknown(res, [...where, clip(name, 64)].join('.'));
    assert.deepEqual(await route.state(f), before, `${route.name}: nothing changed`);
  }), 90);
});

t.test('the same bodies without the unknown member are taken (the property\'s bodies are otherwise valid)', async (t) => {
  for (const route of ROUTES) {
    const f = await fixture();
    const res = await call(route.method, route.path(f), route.body(f));
    t.ok(res.status >= 200 && res.status < 300, `${route.name}: ${res.status} ${res.text.slice(0, 200)}`);
  }
  const f = await fixture();
  assertUnknown(await call('POST', `/admin/accounts/${f.account}/credits`, { units: 7, idempotency_key: 'once', unit: 7 }), 'unit');
  t.equal((await call('POST', `/admin/accounts/${f.account}/credits`, { units: 7, idempotency_key: 'once' })).json.applied, true, 'an idempotency key a refused credit named is still unused');
});
