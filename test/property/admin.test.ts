// Boundary 6: generated bodies to every /admin POST (accounts, credits, keys), through the
// real socket. Every answer is a contract status with a code of the table (never a 500); a
// created account is what the body said; a rejected body creates or changes nothing; a
// credit is applied exactly once per idempotency key.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { contentType, depthOf, edgeNumber, hasPollutingKey, holds, isJsonMediaType, numberLikeString, oddString, oddValue, RawNumber, serialize } from './arbitraries.js';
import { assertEnvelope, assertNoCredentials, freshAccount, issuedKeys, type Answer } from './invariants.js';

const ADMIN = 'admin-token-admin-props-0123456789';
const PLANS = ['free', 'pro'];

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const JSON_TYPE = 'application/json';

/** `ct` undefined sends no Content-Type at all. */
async function call(method: string, path: string, body: string | Buffer | undefined, ct: string | undefined): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${ADMIN}` };
  if (body !== undefined && ct !== undefined) headers['content-type'] = ct;
  const res = await request(`${gw.url}${path}`, { method: method as 'POST', headers, body, headersTimeout: 10_000, bodyTimeout: 10_000 });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/** The balance as written in the JSON text, exactly (no precision lost to JSON.parse). */
function exactBalance(text: string): bigint {
  const m = /"balance_units":(-?\d+)(?=[,}])/.exec(text);
  assert.ok(m !== null, `balance_units is an integer in ${text.slice(0, 200)}`);
  return BigInt(m[1]!);
}

/** Reads an account; its id percent-encoded as clients encode a path segment (unreserved characters as they are: an encoded '.' is refused, CONTRACT section 21). */
async function account(id: string): Promise<Answer> {
  return call('GET', `/admin/accounts/${[...Buffer.from(id)].map((b) => (/[A-Za-z0-9._~-]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).padStart(2, '0')}`)).join('')}`, undefined, undefined);
}

const tag = (a: Answer) => (a.status < 300 ? String(a.status) : `${assertEnvelope(a).code}:${JSON.parse(a.text).param}`);

/** Values for a field: right type and form mostly, anything at all sometimes. */
const units = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 1e9 }) },
  edgeNumber, numberLikeString, fc.constantFrom(null, true, [], {}, -5),
);

/** The outcome of a body to POST /admin/accounts: '201' or the set of contract errors. */
function createOutcome(text: string, ct: string | undefined): string[] {
  if (!isJsonMediaType(ct)) return ['unsupported_media_type:null'];
  let b: any;
  try { b = JSON.parse(text); } catch { return ['invalid_json:null']; }
  if (depthOf(b) > 64 || hasPollutingKey(b)) return ['invalid_json:null'];
  if (b === null || typeof b !== 'object' || Array.isArray(b)) return ['invalid_type:(body)'];
  const errors: string[] = [];
  const maybe: string[] = [];
  if (b.id === undefined) errors.push('missing_required_parameter:id');
  else if (typeof b.id !== 'string') errors.push('invalid_type:id');
  else if (b.id === '' || b.id.length > 128) errors.push('invalid_value:id');
  // Beyond a plain slug, which ids are accepted is the gateway's choice.
  else if (!/^[A-Za-z0-9][A-Za-z0-9_-]*$/.test(b.id)) maybe.push('invalid_value:id');
  if (b.plan === undefined) errors.push('missing_required_parameter:plan');
  else if (typeof b.plan !== 'string') errors.push('invalid_type:plan');
  else if (!PLANS.includes(b.plan)) errors.push('unsupported_value:plan');
  // A member the route does not take is refused before anything else (CONTRACT section 16).
  const unknown = Object.keys(b).find((k) => !['id', 'plan', 'wallet_units'].includes(k));
  if (unknown !== undefined) return [`unsupported_value:${unknown}`];
  const w = b.wallet_units;
  if (w !== undefined && w !== null) {
    if (typeof w !== 'number') errors.push('invalid_type:wallet_units');
    else if (!Number.isSafeInteger(w) || w < 0) errors.push('invalid_value:wallet_units');
  }
  return errors.length > 0 ? [...errors, ...maybe] : ['201', 'account_exists:id', ...maybe];
}

const createBody = fc.record({
  id: fc.oneof({ weight: 4, arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,20}$/) }, oddString, oddValue, fc.constantFrom(undefined, 'demo', '', 'a'.repeat(129), 'a b', '../x', 'é')),
  plan: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...PLANS) }, fc.constantFrom(undefined, 'platinum', 'Free', '__proto__', 'constructor', 'toString'), oddValue),
  wallet_units: fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, units),
  extra: fc.option(fc.tuple(fc.constantFrom('balance_units', 'keys', 'x', 'held_units'), oddValue), { nil: undefined }),
}).map(({ extra, ...b }) => (extra === undefined ? b : { ...b, [extra[0]]: extra[1] }));

const rawBody = fc.oneof(
  { weight: 8, arbitrary: createBody.map(serialize) },
  fc.constantFrom('', '{', '[]', 'null', '"x"', '{"id":', '{"__proto__":{"plan":"pro"},"id":"p1","plan":"free"}'),
  fc.uint8Array({ maxLength: 24 }).map((a) => Buffer.from(a).toString('latin1')),
);

t.test('POST /admin/accounts: 201 with the account the body describes, or a contract error and nothing created', async (t) => {
  const ct = fc.oneof({ weight: 6, arbitrary: fc.constant(JSON_TYPE) }, contentType);
  await holds(t, 'account bodies', fc.asyncProperty(rawBody, ct, async (text, type) => {
    let parsed: any;
    try { parsed = JSON.parse(text); } catch { /* garbage */ }
    const id = typeof parsed?.id === 'string' && parsed.id !== '' && parsed.id.length <= 128 ? parsed.id as string : undefined;
    const existed = id === undefined ? undefined : (await account(id)).status === 200;
    const res = await call('POST', '/admin/accounts', text, type);
    const got = tag(res);
    const allowed = createOutcome(text, type);
    if (existed === true && allowed.includes('201')) assert.equal(got, 'account_exists:id', 'an existing id is 409');
    else assert.ok(allowed.includes(got) && !(existed === false && got === 'account_exists:id'), `${got}, allowed ${allowed}`);
    if (got === '201') {
      const body = JSON.parse(res.text);
      const wallet = parsed.wallet_units ?? 0;
      assert.deepEqual(Object.keys(body).sort(), ['available_units', 'balance_units', 'held_units', 'id', 'plan', 'usage']);
      assert.deepEqual([body.id, body.plan, body.balance_units, body.held_units, body.available_units], [id, parsed.plan, wallet, 0, wallet]);
      const shown = await account(id!);
      assert.equal(shown.status, 200, 'the account can be read back under its id');
      assert.deepEqual(JSON.parse(shown.text), body);
    } else if (existed === false) {
      assert.equal((await account(id!)).status, 404, 'a rejected body creates nothing');
    }
  }), 150);
});

/** Credits that keep the balance between 0 and 2^53-1 (the other amounts have their own test). */
const creditBody = fc.record({
  units: fc.oneof(
    { weight: 5, arbitrary: fc.integer({ min: -1000, max: 1e12 }) },
    edgeNumber.filter((n) => { const v = JSON.parse(n.text); return !(Number.isSafeInteger(v) && (v < -1000 || v > 2 ** 50)); }),
    numberLikeString, fc.constantFrom(null, true, {}, [1]),
  ),
  idempotency_key: fc.oneof({ weight: 5, arbitrary: fc.stringMatching(/^[\x21-\x7e]{1,40}$/) }, fc.constantFrom(undefined, '', 'has space', 'k'.repeat(201), 'ключ', '\t'), oddValue),
});

function creditOutcome(b: { units: unknown; idempotency_key: unknown }): string[] {
  const errors: string[] = [];
  const maybe: string[] = [];
  const u = b.units instanceof RawNumber ? JSON.parse(b.units.text) : b.units;
  if (u === undefined) errors.push('missing_required_parameter:units');
  else if (typeof u !== 'number') errors.push('invalid_type:units');
  else if (!Number.isSafeInteger(u) || u === 0) errors.push('invalid_value:units');
  // A literal with a fraction or an exponent that parses to an integer (2.0000000000000001)
  // may be refused as not exactly that integer: the admin API reads amounts exactly.
  else if (b.units instanceof RawNumber && /[.eE]/.test(b.units.text)) maybe.push('invalid_value:units');
  const k = b.idempotency_key;
  if (k === undefined) errors.push('missing_required_parameter:idempotency_key');
  else if (typeof k !== 'string') errors.push('invalid_type:idempotency_key');
  else if (!/^[\x21-\x7e]{1,200}$/.test(k)) maybe.push('invalid_value:idempotency_key'); // a key's form is the gateway's choice
  return errors.length > 0 ? [...errors, ...maybe] : ['200', ...maybe];
}

t.test('POST /admin/accounts/{id}/credits: applied exactly once, or rejected with nothing changed', async (t) => {
  const scenario = fc.record({ start: fc.integer({ min: 1000, max: 2 ** 40 }), body: creditBody, repeat: fc.boolean(), unknown: fc.boolean() });
  await holds(t, 'credit bodies', fc.asyncProperty(scenario, async ({ start, body, repeat, unknown }) => {
    const { account: id } = await freshAccount(gw.url, ADMIN, 'free', start);
    const path = `/admin/accounts/${unknown ? `${id}-nobody` : id}/credits`;
    const res = await call('POST', path, serialize(body), JSON_TYPE);
    const got = tag(res);
    const allowed = unknown ? ['account_not_found:null', ...creditOutcome(body).filter((x) => x !== '200')] : creditOutcome(body);
    assert.ok(allowed.includes(got), `${got}, allowed ${allowed}`);
    const units = got === '200' ? BigInt(JSON.parse(serialize(body.units)) as number) : 0n;
    if (got === '200') {
      assert.equal(exactBalance(res.text), BigInt(start) + units, 'the balance moved by exactly the units');
      assert.equal(JSON.parse(res.text).applied, true);
      if (repeat) {
        const again = await call('POST', path, serialize({ ...body, units: 12345 }), JSON_TYPE);
        assert.equal(again.status, 200);
        assert.equal(JSON.parse(again.text).applied, false, 'a repeated idempotency key is not applied again');
      }
    }
    assert.equal(exactBalance((await account(id)).text), BigInt(start) + units, got === '200' ? 'credited once' : 'a rejected credit changes nothing');
  }), 150);
});

/**
 * What a key request's body allows (CONTRACT sections 5 and 8): none or one without controls
 * gets a key; one that is not a JSON object is refused as any admin body is; one carrying
 * per-key controls gets a key that has them, or a 400 naming a bad one (the controls' own
 * property below pins which).
 */
function keyBodyRefusals(body: string | undefined, ct: string | undefined): string[] | undefined {
  if (body === undefined || body === '') return undefined;
  if (!isJsonMediaType(ct)) return ['unsupported_media_type'];
  let b: any;
  try { b = JSON.parse(body); } catch { return ['invalid_json']; }
  if (depthOf(b) > 64 || hasPollutingKey(b)) return ['invalid_json'];
  if (b === null || typeof b !== 'object' || Array.isArray(b)) return ['invalid_type'];
  const controls = ['name', 'models', 'expires_at', 'budget', 'limits', 'priority', 'allowed_ips', 'metadata'];
  if (Object.keys(b).some((k) => !controls.includes(k))) return ['unsupported_value'];
  if (controls.some((k) => b[k] !== undefined && b[k] !== null)) return ['unsupported_value', 'invalid_value', 'invalid_type', 'missing_required_parameter'];
  return undefined;
}

t.test('POST /admin/accounts/{id}/keys: a working key for an account, 404 for none', async (t) => {
  const scenario = fc.record({ body: fc.option(rawBody, { nil: undefined }), ct: contentType, path: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, oddString.filter((s) => s !== '' && s.length < 200 && s !== 'demo' && s !== 'acme' && s !== '.' && s !== '..'), fc.constantFrom('%zz', '%', 'a%2Fb', '..', 'demo%00')) });
  await holds(t, 'key requests', fc.asyncProperty(scenario, async ({ body, ct, path }) => {
    const { account: id } = await freshAccount(gw.url, ADMIN, 'free', 10);
    // Lone surrogates have no UTF-8 form: their bytes are what Buffer makes of them.
    const encode = (x: string) => [...Buffer.from(x)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
    const target = path === undefined ? id : /%/.test(path) ? path : encode(path);
    // An account another case created under this name exists as well.
    const exists = path === undefined || (!/%/.test(path) && (await account(path)).status === 200);
    const res = await call('POST', `/admin/accounts/${target}/keys`, body, ct);
    if (res.status === 201) {
      const issued = JSON.parse(res.text);
      assert.ok(exists, 'a key only for an existing account');
      assert.deepEqual(Object.keys(issued).sort(), ['account', 'id', 'key']);
      assert.match(issued.key, /^tg_/);
      issuedKeys.push(issued.key);
      const models = await request(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${issued.key}` } });
      await models.body.dump();
      assert.equal(models.statusCode, 200, 'the issued key works');
      return;
    }
    const e = assertEnvelope(res);
    const refusals = keyBodyRefusals(body, ct);
    if (refusals !== undefined && refusals.includes(e.code)) return;
    if (exists) assert.fail(`a key request for an existing account got ${e.code}`);
    // An encoded '.' or '\\' in a path is refused 400 invalid_value (CONTRACT section 21), unless undici resolved it as a dot segment.
    const allowed = ['account_not_found', 'unknown_url', ...(/%2e|%5c/i.test(target) ? ['invalid_value'] : [])];
    assert.ok(allowed.includes(e.code), `${e.code} for an account that does not exist`);
  }), 60);
});

// ---- per-key controls (CONTRACT section 8) -------------------------------------------------

/** A control's value with what the gateway must answer for it: ok (and how it is listed) or a refusal. */
type Gen = { value: unknown; bad?: { code: string; param: string }; shown?: unknown };
const ok = (value: unknown, shown: unknown = value): Gen => ({ value, shown });
const bad = (value: unknown, code: string, param: string): Gen => ({ value, bad: { code, param } });
const plain = fc.stringMatching(/^[A-Za-z0-9 _.:-]{1,40}$/);

const nameGen = fc.oneof(
  { weight: 3, arbitrary: plain.map((v) => ok(v)) },
  fc.constant(ok(null)),
  fc.constantFrom(bad('', 'invalid_value', 'name'), bad(7, 'invalid_type', 'name'), bad('x'.repeat(201), 'invalid_value', 'name'), bad('a\u0000b', 'invalid_value', 'name')),
);
const modelsGen = fc.oneof(
  { weight: 3, arbitrary: fc.array(fc.stringMatching(/^[a-z0-9*.-]{1,20}$/), { minLength: 1, maxLength: 5 }).map((v) => ok(v)) },
  fc.constant(ok(null)),
  fc.constantFrom(bad('llama-*', 'invalid_type', 'models'), bad([], 'invalid_value', 'models'), bad([3], 'invalid_type', 'models[0]'), bad(['ok', ''], 'invalid_value', 'models[1]')),
);
const expiresGen = fc.oneof(
  { weight: 3, arbitrary: fc.date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2099-12-31T00:00:00Z'), noInvalidDate: true }).map((d) => ok(d.toISOString())) },
  fc.constant(ok('2031-05-06', '2031-05-06T00:00:00.000Z')),
  fc.constant(ok('2031-05-06T10:00:00+02:00', '2031-05-06T08:00:00.000Z')),
  fc.constant(ok(null)),
  fc.constantFrom(bad('tomorrow', 'invalid_value', 'expires_at'), bad('2027-02-30', 'invalid_value', 'expires_at'), bad('2027-13-01', 'invalid_value', 'expires_at'), bad(1700000000, 'invalid_type', 'expires_at')),
);
const budgetGen = fc.oneof(
  { weight: 3, arbitrary: fc.record({ units: fc.oneof(fc.integer({ min: 0, max: 1e9 }), fc.constantFrom(0, Number.MAX_SAFE_INTEGER)), period: fc.constantFrom('day', 'week', 'month', null, undefined) })
    .map((b) => ok(b.period === undefined ? { units: b.units } : b, { units: b.units, period: b.period ?? null, spent_units: 0 })) },
  fc.constant(ok(null, { units: null, period: null, spent_units: 0 })),
  fc.constantFrom(
    bad({ units: -1 }, 'invalid_value', 'budget.units'), bad({ units: 9007199254740992 }, 'invalid_value', 'budget.units'),
    bad({ units: 2.5, period: 'day' }, 'invalid_value', 'budget.units'), bad({ units: '5' }, 'invalid_type', 'budget.units'),
    bad({ period: 'day' }, 'missing_required_parameter', 'budget.units'), bad({ units: 5, period: 'year' }, 'unsupported_value', 'budget.period'),
    bad(5, 'invalid_type', 'budget'), bad({ units: 1, extra: 1 }, 'unsupported_value', 'budget.extra'),
  ),
);
const limitValue = fc.option(fc.integer({ min: 1, max: 1e9 }), { nil: undefined });
const limitsGen = fc.oneof(
  { weight: 3, arbitrary: fc.record({ requests_per_minute: limitValue, tokens_per_minute: limitValue, max_concurrent: limitValue })
    .map((l) => {
      const v = Object.fromEntries(Object.entries(l).filter(([, x]) => x !== undefined));
      return ok(v, { requests_per_minute: l.requests_per_minute ?? null, tokens_per_minute: l.tokens_per_minute ?? null, max_concurrent: l.max_concurrent ?? null });
    }) },
  fc.constant(ok(null, { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null })),
  fc.constantFrom(bad({ requests_per_minute: 0 }, 'invalid_value', 'limits.requests_per_minute'), bad({ rpm: 1 }, 'unsupported_value', 'limits.rpm'),
    bad({ max_concurrent: '2' }, 'invalid_type', 'limits.max_concurrent'), bad('x', 'invalid_type', 'limits')),
);
const cidr = fc.oneof(
  fc.tuple(fc.ipV4(), fc.integer({ min: 0, max: 32 })).map(([ip, p]) => `${ip}/${p}`),
  fc.tuple(fc.ipV6(), fc.integer({ min: 0, max: 128 })).map(([ip, p]) => `${ip}/${p}`),
  fc.ipV4(),
);
const ipsGen = fc.oneof(
  { weight: 3, arbitrary: fc.array(cidr, { minLength: 1, maxLength: 4 }).map((v) => ok(v)) },
  fc.constant(ok(null)),
  fc.constantFrom(bad(['10.0.0.0/33'], 'invalid_value', 'allowed_ips[0]'), bad(['10.0.0.0/8', 'nope'], 'invalid_value', 'allowed_ips[1]'),
    bad([42], 'invalid_type', 'allowed_ips[0]'), bad([], 'invalid_value', 'allowed_ips'), bad('10.0.0.0/8', 'invalid_type', 'allowed_ips')),
);
const priorityGen = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('high', 'normal', 'low').map((v) => ok(v)) },
  fc.constant(ok(null)),
  fc.constantFrom(bad('urgent', 'unsupported_value', 'priority'), bad('High', 'unsupported_value', 'priority'), bad('', 'unsupported_value', 'priority'),
    bad(2, 'invalid_type', 'priority'), bad(['low'], 'invalid_type', 'priority'), bad({}, 'invalid_type', 'priority')),
);
const metadataGen = fc.oneof(
  { weight: 3, arbitrary: fc.dictionary(fc.stringMatching(/^[a-z_]{1,10}$/), fc.stringMatching(/^[ -~]{0,30}$/), { maxKeys: 5 }).map((v) => ok({ ...v })) },
  fc.constant(ok(null, {})),
  fc.constantFrom(bad({ team: 5 }, 'invalid_type', 'metadata.team'), bad(['x'], 'invalid_type', 'metadata'),
    bad(Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])), 'invalid_value', 'metadata')),
);
const absent = fc.constant(undefined);
const controlsGen = fc.record({
  name: fc.oneof(absent, nameGen), models: fc.oneof(absent, modelsGen), expires_at: fc.oneof(absent, expiresGen), budget: fc.oneof(absent, budgetGen),
  limits: fc.oneof(absent, limitsGen), priority: fc.oneof(absent, priorityGen), allowed_ips: fc.oneof(absent, ipsGen), metadata: fc.oneof(absent, metadataGen),
});
const DEFAULT_SHOWN: Record<string, unknown> = {
  name: null, models: null, expires_at: null, budget: { units: null, period: null, spent_units: 0 },
  limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, priority: null, allowed_ips: null, metadata: {},
};

t.test('generated key controls: a key listed with exactly those controls, or 400 naming a bad one; its requests get contract answers', async (t) => {
  await holds(t, 'key controls', fc.asyncProperty(controlsGen, async (gens) => {
    const { account: acct } = await freshAccount(gw.url, ADMIN, 'free', 1000);
    const listed = async () => JSON.parse((await call('GET', `/admin/accounts/${acct}/keys`, undefined, undefined)).text).keys as any[];
    const body: Record<string, unknown> = {};
    const problems: string[] = [];
    for (const [k, g] of Object.entries(gens) as Array<[string, Gen | undefined]>) {
      if (g === undefined) continue;
      body[k] = g.value;
      if (g.bad !== undefined) problems.push(`${g.bad.code}:${g.bad.param}`);
    }
    const res = await call('POST', `/admin/accounts/${acct}/keys`, JSON.stringify(body), JSON_TYPE);
    if (problems.length > 0) {
      assert.ok(problems.includes(tag(res)), `${tag(res)}, expected one of ${problems}`);
      assert.equal((await listed()).length, 1, 'no key issued (only the case\'s own key is listed)');
      return;
    }
    assert.equal(res.status, 201, res.text);
    const issued = JSON.parse(res.text);
    issuedKeys.push(issued.key);
    const view = (await listed()).find((k) => k.id === issued.id);
    assert.ok(view !== undefined, 'listed');
    for (const [k, shown] of Object.entries(DEFAULT_SHOWN)) {
      const g = (gens as Record<string, Gen | undefined>)[k];
      const want = g === undefined ? shown : g.shown;
      const got = k === 'budget' ? { units: view.budget.units, period: view.budget.period, spent_units: view.budget.spent_units } : view[k];
      assert.deepEqual(got, want, `listed ${k}`);
    }
    assert.ok(!JSON.stringify(view).includes(issued.key), 'no plaintext');
    // Whatever the controls, a request with the key gets a contract answer, never a 500.
    const chat = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${issued.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'echo-small', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const answer = { status: chat.statusCode, headers: chat.headers, text: await chat.body.text() };
    if (answer.status !== 200) {
      const e = assertEnvelope(answer);
      assert.ok(['key_expired', 'ip_not_allowed', 'model_not_allowed', 'budget_exceeded', 'insufficient_credits', 'rate_limit_exceeded', 'too_many_concurrent'].includes(e.code), e.code);
    }
  }), 120);
});

t.test('generated PATCH bodies: the key shows exactly the change, or 400 naming a bad control and nothing changed', async (t) => {
  await holds(t, 'key patches', fc.asyncProperty(controlsGen, async (gens) => {
    const { account: acct } = await freshAccount(gw.url, ADMIN, 'free', 1000);
    const keys = async () => JSON.parse((await call('GET', `/admin/accounts/${acct}/keys`, undefined, undefined)).text).keys as any[];
    const [before] = await keys();
    const body: Record<string, unknown> = {};
    const problems: string[] = [];
    for (const [k, g] of Object.entries(gens) as Array<[string, Gen | undefined]>) {
      if (g === undefined) continue;
      body[k] = g.value;
      if (g.bad !== undefined) problems.push(`${g.bad.code}:${g.bad.param}`);
    }
    const res = await call('PATCH', `/admin/keys/${before.id}`, JSON.stringify(body), JSON_TYPE);
    const [after] = await keys();
    if (problems.length > 0) {
      assert.ok(problems.includes(tag(res)), `${tag(res)}, expected one of ${problems}`);
      assert.deepEqual(after, before, 'a refused PATCH changes nothing');
      return;
    }
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(JSON.parse(res.text), after, 'the answer is the key as listed');
    for (const [k, shown] of Object.entries(DEFAULT_SHOWN)) {
      const g = (gens as Record<string, Gen | undefined>)[k];
      const want = g === undefined ? shown : g.shown;
      const got = k === 'budget' ? { units: after.budget.units, period: after.budget.period, spent_units: after.budget.spent_units } : after[k];
      assert.deepEqual(got, want, `patched ${k}`);
    }
    assert.deepEqual([after.id, after.hint, after.created_at], [before.id, before.hint, before.created_at], 'the same key');
  }), 80);
});

t.test('the logs hold no credential', async (t) => {
  assertNoCredentials(t, gw.logs(), [...issuedKeys, ADMIN]);
});

// Awaits the money fix (CONTRACT section 10: "a negative top-up never takes a balance below
// zero (400 invalid_value, nothing changed)"; section 9: balances exact at any magnitude the
// API accepts). Today a deduction larger than the balance is applied (the balance goes
// negative), and a top-up past 2^53-1 is applied with the balance rounded.
t.test('credits that would leave the balance below zero or past 2^53-1: 400 invalid_value, or exact', async (t) => {
  const scenario = fc.oneof(
    fc.record({ start: fc.integer({ min: 0, max: 1e6 }), over: fc.integer({ min: 1, max: 1e9 }) }).map(({ start, over }) => ({ start, units: -(start + over) })),
    fc.record({ start: fc.integer({ min: 2 ** 50, max: 2 ** 53 - 2 }), units: fc.integer({ min: 1, max: 2 ** 53 - 1 }) }).filter(({ start, units }) => start + units > 2 ** 53 - 1),
  );
  await holds(t, 'balance bounds', fc.asyncProperty(scenario, async ({ start, units }) => {
    const { account: id } = await freshAccount(gw.url, ADMIN, 'free', start);
    const res = await call('POST', `/admin/accounts/${id}/credits`, JSON.stringify({ units, idempotency_key: 'k1' }), JSON_TYPE);
    const now = exactBalance((await account(id)).text);
    if (units < 0) {
      assert.equal(tag(res), 'invalid_value:units', 'a deduction below zero is refused');
      assert.equal(now, BigInt(start), 'nothing changed');
    } else if (res.status === 200) {
      assert.equal(now, BigInt(start) + BigInt(units), 'an accepted top-up is exact');
    } else {
      assert.equal(tag(res), 'invalid_value:units');
      assert.equal(now, BigInt(start), 'nothing changed');
    }
  }), 20);
});

// Any id in an admin path gets a contract answer (an empty one once reached the store: 500),
// and a session revoke is 204 with no body (CONTRACT section 5). '.' and '..' are left out: a
// WHATWG URL client resolves them (even as %2e) before anything is sent.
t.test('ids in admin paths: a contract answer for any id, sessions revoked with 204', async (t) => {
  const id = fc.oneof(fc.constantFrom('', '%20', '%00', '.x', 'a'.repeat(300)), oddString.filter((s) => s.length < 100 && s !== '.' && s !== '..'));
  const encode = (x: string) => (/%/.test(x) ? x : [...Buffer.from(x)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''));
  await holds(t, 'admin path ids', fc.asyncProperty(id, async (raw) => {
    const key = await call('POST', `/admin/accounts/${encode(raw)}/keys`, undefined, undefined);
    // '' makes /admin/accounts//keys: repeated slashes are one (CONTRACT section 21), POST /admin/accounts/keys.
    if (key.status !== 201) assert.ok(['account_not_found', 'unknown_url', 'invalid_value', ...(raw === '' ? ['method_not_allowed'] : [])].includes(assertEnvelope(key).code), `a key for account ${JSON.stringify(raw)}`);
    const revoke = await call('POST', `/admin/sessions/${encode(raw)}/revoke`, undefined, undefined);
    if (revoke.status === 204) assert.equal(revoke.text, '', '204 has no body');
    else assert.ok(['unknown_url', 'invalid_value'].includes(assertEnvelope(revoke).code), `revoke of session ${JSON.stringify(raw)}: ${revoke.status}`);
  }), 30);
});
