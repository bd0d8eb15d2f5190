// Every /admin route against CONTRACT sections 5, 9 and 10, through the real socket: exact
// status, body and error code for each answer, 401/404/405/415 for every route, amounts of at
// most 2^53-1 given exactly, and balances that never leave 0..2^53-1 (nothing changed by a
// refusal). The CLI sub-commands are in cli.test.ts.

import t from 'tap';
import { rawRequest } from '../helpers/raw-request.js';
import { request } from 'undici';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'admin-contract-token-0123456789';
const MAX = Number.MAX_SAFE_INTEGER;

let gw: TestGateway;
let off: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
  off = await startGateway(baseConfig()); // no admin.token: /admin does not exist
});
t.teardown(async () => { await gw.close(); await off.close(); });

interface Res { status: number; headers: Record<string, string | string[] | undefined>; text: string }

async function call(method: string, path: string, opts: { body?: unknown; token?: string | null; type?: string | null; base?: string } = {}): Promise<Res> {
  const headers: Record<string, string> = {};
  const token = opts.token === undefined ? ADMIN : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const type = opts.type === undefined ? (opts.body === undefined ? null : 'application/json') : opts.type;
  if (type !== null) headers['content-type'] = type;
  const res = await request(`${opts.base ?? gw.url}${path}`, {
    method: method as 'GET',
    headers,
    body: opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body),
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

function json(t: any, res: Res, status: number): any {
  t.equal(res.status, status, `status ${status}`);
  t.equal(res.headers['content-type'], 'application/json');
  t.equal(res.headers['content-length'], String(Buffer.byteLength(res.text)));
  t.match(res.headers['x-request-id'], /^[A-Za-z0-9._:-]{1,128}$/);
  return JSON.parse(res.text);
}

function noContent(t: any, res: Res): void {
  t.equal(res.status, 204, 'status 204');
  t.equal(res.text, '', 'no body');
  t.equal(res.headers['content-type'], undefined, 'no content type');
  t.match(res.headers['x-request-id'], /^[A-Za-z0-9._:-]{1,128}$/);
}

/** The whole envelope, exactly (CONTRACT section 4). */
function expectError(t: any, res: Res, status: number, code: string, param: string | null = null): any {
  const body = json(t, res, status);
  t.strictSame(Object.keys(body).sort(), ['code', 'error', 'message', 'param', 'request_id', 'type'], `${code}: the envelope's members`);
  t.equal(body.code, code);
  t.equal(body.param, param, `${code}: param ${param}`);
  t.equal(body.type, status >= 500 ? 'server_error' : 'invalid_request_error');
  t.type(body.message, 'string');
  t.ok(body.message.length > 0 && body.message.length <= 400, 'a short message');
  t.equal(body.request_id, res.headers['x-request-id']);
  t.strictSame(body.error, { message: body.message, type: body.type, param, code });
  return body;
}

const ZERO = { requests: 0, tokens: 0, units: 0 };
const view = (id: string, plan: string, balance: number) => ({
  id, plan, balance_units: balance, held_units: 0, available_units: balance, usage: { day: ZERO, month: ZERO },
});
const balance = async (id: string) => JSON.parse((await call('GET', `/admin/accounts/${id}`)).text).balance_units;

t.test('POST /admin/accounts: 201 with the account; 409, 400s, 415', async (t) => {
  t.strictSame(json(t, await call('POST', '/admin/accounts', { body: { id: 'c1', plan: 'free', wallet_units: 10 } }), 201), view('c1', 'free', 10));
  t.strictSame(json(t, await call('POST', '/admin/accounts', { body: { id: 'c0', plan: 'pro' } }), 201), view('c0', 'pro', 0), 'wallet_units defaults to 0');
  t.strictSame(json(t, await call('POST', '/admin/accounts', { body: { id: 'cmax', plan: 'pro', wallet_units: MAX } }), 201), view('cmax', 'pro', MAX), 'up to 2^53-1');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'c1', plan: 'pro' } }), 409, 'account_exists', 'id');
  t.equal(await balance('c1'), 10, 'the existing account is unchanged');

  expectError(t, await call('POST', '/admin/accounts', { body: { plan: 'free' } }), 400, 'missing_required_parameter', 'id');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 5, plan: 'free' } }), 400, 'invalid_type', 'id');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'a b', plan: 'free' } }), 400, 'invalid_value', 'id');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x' } }), 400, 'missing_required_parameter', 'plan');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 7 } }), 400, 'invalid_type', 'plan');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 'gold' } }), 400, 'unsupported_value', 'plan');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 'toString' } }), 400, 'unsupported_value', 'plan');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 'free', wallet_units: '5' } }), 400, 'invalid_type', 'wallet_units');
  for (const units of ['-1', '1.5', '9007199254740992', '9007199254740993', '1e300', '4503599627370496.5', '9007199254740990.5', '-0.5']) {
    expectError(t, await call('POST', '/admin/accounts', { body: `{"id":"x","plan":"free","wallet_units":${units}}` }), 400, 'invalid_value', 'wallet_units');
  }
  expectError(t, await call('POST', '/admin/accounts', { body: '{"id":' }), 400, 'invalid_json');
  expectError(t, await call('POST', '/admin/accounts', { body: '' }), 400, 'invalid_json');
  expectError(t, await call('POST', '/admin/accounts', { body: '{"__proto__":{"x":1},"id":"x","plan":"free"}' }), 400, 'invalid_json');
  expectError(t, await call('POST', '/admin/accounts', { body: '[1]' }), 400, 'invalid_type', '(body)');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 'free' }, type: null }), 415, 'unsupported_media_type');
  expectError(t, await call('POST', '/admin/accounts', { body: { id: 'x', plan: 'free' }, type: 'text/plain' }), 415, 'unsupported_media_type');
  expectError(t, await call('POST', '/admin/accounts', { body: `{"id":"x","plan":"free","pad":"${'x'.repeat(70_000)}"}` }), 413, 'request_too_large');
  expectError(t, await call('GET', '/admin/accounts/x'), 404, 'account_not_found');

  // Exact literals of integers are fine, however they are spelled in JSON.
  t.strictSame(json(t, await call('POST', '/admin/accounts', { body: '{"id":"c2","plan":"free","wallet_units":1.0e3}' }), 201), view('c2', 'free', 1000));
});

t.test('GET /admin/accounts/{id}: 200 with plan, balance, holds and usage; HEAD too', async (t) => {
  t.strictSame(json(t, await call('GET', '/admin/accounts/demo'), 200), view('demo', 'free', 1000000), 'seeded from the config');
  const head = await call('HEAD', '/admin/accounts/demo');
  t.equal(head.status, 200);
  t.equal(head.text, '');
  expectError(t, await call('GET', '/admin/accounts/nobody'), 404, 'account_not_found');
  expectError(t, await call('GET', '/admin/accounts/%E2%82%AC'), 404, 'account_not_found');
});

t.test('POST /admin/accounts/{id}/credits: 200; refusals change nothing and keep the key', async (t) => {
  await call('POST', '/admin/accounts', { body: { id: 'w', plan: 'free', wallet_units: 100 } });
  const credit = (units: unknown, key = 'k') => call('POST', '/admin/accounts/w/credits', { body: typeof units === 'string' ? `{"units":${units},"idempotency_key":"${key}"}` : { units, idempotency_key: key } });

  t.strictSame(json(t, await credit(50, 'top-1'), 200), { ...view('w', 'free', 150), applied: true });
  t.strictSame(json(t, await credit(50, 'top-1'), 200), { ...view('w', 'free', 150), applied: false }, 'a repeated key changes nothing');
  t.strictSame(json(t, await credit(-150, 'spend-1'), 200), { ...view('w', 'free', 0), applied: true }, 'a deduction down to exactly 0');

  expectError(t, await credit(-1, 'over'), 400, 'invalid_value', 'units');
  t.equal(await balance('w'), 0, 'a deduction below zero changed nothing');
  t.strictSame(json(t, await credit(MAX, 'over'), 200), { ...view('w', 'free', MAX), applied: true }, 'the refused key was not used up');
  expectError(t, await credit(1, 'past-max'), 400, 'invalid_value', 'units');
  t.equal(await balance('w'), MAX, 'a credit past 2^53-1 changed nothing');
  t.strictSame(json(t, await credit(-MAX, 'drain'), 200), { ...view('w', 'free', 0), applied: true }, 'exact at 2^53-1');

  // The finding: 70 + (2^53-1) - (2^53-1) left 69.
  t.strictSame(json(t, await credit(70, 'seventy'), 200).balance_units, 70);
  expectError(t, await credit(MAX, 'huge'), 400, 'invalid_value', 'units');
  expectError(t, await credit(-MAX, 'huge-back'), 400, 'invalid_value', 'units');
  t.equal(await balance('w'), 70, 'still exactly 70');

  for (const units of ['0', '-0', '1.5', '9007199254740992', '-9007199254740992', '9007199254740993', '1e300', '-1e300', '4503599627370496.5', '9007199254740990.5']) {
    expectError(t, await credit(units, `bad-${units}`), 400, 'invalid_value', 'units');
  }
  expectError(t, await credit('"5"', 'str'), 400, 'invalid_type', 'units');
  expectError(t, await credit('null', 'nul'), 400, 'invalid_type', 'units');
  expectError(t, await call('POST', '/admin/accounts/w/credits', { body: { idempotency_key: 'k' } }), 400, 'missing_required_parameter', 'units');
  expectError(t, await call('POST', '/admin/accounts/w/credits', { body: { units: 1 } }), 400, 'missing_required_parameter', 'idempotency_key');
  expectError(t, await call('POST', '/admin/accounts/w/credits', { body: { units: 1, idempotency_key: 7 } }), 400, 'invalid_type', 'idempotency_key');
  expectError(t, await call('POST', '/admin/accounts/w/credits', { body: { units: 1, idempotency_key: '' } }), 400, 'invalid_value', 'idempotency_key');
  expectError(t, await call('POST', '/admin/accounts/w/credits', { body: { units: 1, idempotency_key: 'k' }, type: null }), 415, 'unsupported_media_type');
  expectError(t, await call('POST', '/admin/accounts/nobody/credits', { body: { units: 1, idempotency_key: 'k' } }), 404, 'account_not_found');
  t.equal(await balance('w'), 70, 'no refused call changed the balance');
  t.strictSame(json(t, await credit(1, 'bad-0'), 200).applied, true, 'nor used up its key');
});

t.test('POST /admin/accounts/{id}/keys: 201 with the key once; DELETE /admin/keys/{id}: 204', async (t) => {
  const issued = json(t, await call('POST', '/admin/accounts/c1/keys'), 201);
  t.strictSame(Object.keys(issued).sort(), ['account', 'id', 'key']);
  t.equal(issued.account, 'c1');
  t.match(issued.id, /^key_[0-9a-f]{16}$/);
  t.match(issued.key, /^tg_[0-9A-Za-z]{40}$/);
  expectError(t, await call('POST', '/admin/accounts/nobody/keys'), 404, 'account_not_found');

  const models = await request(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${issued.key}` } });
  t.equal(models.statusCode, 200, 'the key works');
  await models.body.dump();
  noContent(t, await call('DELETE', `/admin/keys/${issued.id}`));
  const after = await request(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${issued.key}` } });
  t.equal(after.statusCode, 401, 'and no longer');
  t.equal(((await after.body.json()) as any).code, 'invalid_api_key');
  noContent(t, await call('DELETE', `/admin/keys/${issued.id}`)); // revoking again: still revoked
  expectError(t, await call('DELETE', '/admin/keys/key_0000000000000000'), 404, 'key_not_found');
});

t.test('POST /admin/sessions/{sid}/revoke: 204, no body, also when repeated', async (t) => {
  noContent(t, await call('POST', '/admin/sessions/sess-1/revoke'));
  noContent(t, await call('POST', '/admin/sessions/sess-1/revoke'));
  noContent(t, await call('POST', '/admin/sessions/s%7Bx%7D/revoke'));
});

t.test('GET /admin/usage: 200 with totals; 404 and 400', async (t) => {
  t.strictSame(json(t, await call('GET', '/admin/usage?account=c1&since=2026-01-01T00:00:00Z'), 200), {
    account: 'c1', since: '2026-01-01T00:00:00.000Z', requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0, by_model: {}, by_key: {}, by_team: {},
  });
  const all = json(t, await call('GET', '/admin/usage'), 200);
  t.equal(all.account, null);
  t.match(all.since, /^\d{4}-\d{2}-01T00:00:00\.000Z$/, 'this UTC month by default');
  expectError(t, await call('GET', '/admin/usage?account=nobody'), 404, 'account_not_found');
  expectError(t, await call('GET', '/admin/usage?since=yesterday'), 400, 'invalid_value', 'since');
});

// Every route, with what it answers to the wrong method.
const ROUTES: Array<[string, string]> = [
  ['/admin/accounts', 'GET, HEAD, POST'],
  ['/admin/accounts/c1', 'GET, HEAD'],
  ['/admin/accounts/c1/credits', 'POST'],
  ['/admin/accounts/c1/keys', 'GET, HEAD, POST'],
  ['/admin/keys/key_0000000000000000', 'GET, HEAD, PATCH, DELETE'],
  ['/admin/keys/key_0000000000000000/rotate', 'POST'],
  ['/admin/sessions/s1/revoke', 'POST'],
  ['/admin/usage', 'GET, HEAD'],
];
const UNKNOWN = [
  '/admin', '/admin/', '/admin/nothing', '/admin/accounts/', '/admin/keys/', '/admin/keys',
  '/admin/sessions/s1', '/admin/sessions/s1/revoke/x', '/admin/accounts/c1/credits/x',
  '/admin/accounts/c1/nothing', '/admin/accounts/%ZZ', '/admin/usage/x',
];

t.test('405 method_not_allowed with Allow on every route, before the body is read', async (t) => {
  for (const [path, allow] of ROUTES) {
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE']) {
      if (allow.split(', ').includes(method)) continue;
      const res = await call(method, path, { body: '{not json', type: 'text/plain' });
      expectError(t, res, 405, 'method_not_allowed');
      t.equal(res.headers.allow, allow, `${method} ${path}: Allow ${allow}`);
    }
  }
});

t.test('401 invalid_api_key for a missing or wrong admin token, on every path', async (t) => {
  for (const path of [...ROUTES.map(([p]) => p), ...UNKNOWN]) {
    for (const token of [null, 'wrong', `${ADMIN}x`, ADMIN.slice(0, -1), DEMO_KEY, '']) {
      expectError(t, await call('POST', path, { token, body: { id: 'intruder', plan: 'free', units: 5, idempotency_key: 'i' } }), 401, 'invalid_api_key');
    }
    const basic = await request(`${gw.url}${path}`, { headers: { authorization: `Basic ${Buffer.from(`admin:${ADMIN}`).toString('base64')}` } });
    expectError(t, { status: basic.statusCode, headers: basic.headers, text: await basic.body.text() }, 401, 'invalid_api_key');
  }
  expectError(t, await call('GET', '/admin/accounts/intruder'), 404, 'account_not_found');
  t.equal(await balance('c1'), 10, 'nothing was changed');
});

t.test('404 unknown_url for paths that name nothing', async (t) => {
  for (const path of UNKNOWN) {
    for (const method of ['GET', 'POST', 'DELETE']) expectError(t, await call(method, path), 404, 'unknown_url');
  }
});

t.test('one path, one decision (CONTRACT section 21): repeated slashes are one, dot segments resolved', async (t) => {
  // On a raw socket: undici, as any WHATWG URL client, resolves dot segments (even %2e) before sending.
  const raw = async (method: string, path: string, token: string | null = ADMIN): Promise<Res> => {
    const headers: Array<[string, string]> = [['connection', 'close'], ['content-length', '0']];
    if (token !== null) headers.push(['authorization', `Bearer ${token}`]);
    const r = (await rawRequest(gw.url, { method, path, headers, body: Buffer.alloc(0) })).responses[0]!;
    return { status: r.status, headers: r.headers, text: r.body };
  };
  for (const [path, same] of [['/admin/accounts//credits', '/admin/accounts/credits'], ['/admin/sessions//revoke', '/admin/sessions/revoke'],
    ['/admin//accounts/c1', '/admin/accounts/c1'], ['/admin/keys/x/../../accounts/c1', '/admin/accounts/c1'], ['/x/../admin/./accounts/c1', '/admin/accounts/c1']]) {
    for (const method of ['GET', 'POST', 'DELETE']) {
      const [a, b] = [await raw(method, path!), await call(method, same!)];
      t.equal(a.status, b.status, `${method} ${path} is ${method} ${same}: ${a.status}`);
      t.equal(a.status < 300 ? a.text : JSON.parse(a.text).code, b.status < 300 ? b.text : JSON.parse(b.text).code);
    }
  }
  // An encoded '.' is refused, before the token is looked at.
  expectError(t, await raw('GET', '/admin/accounts/c1/%2e%2e/c1'), 400, 'invalid_value');
  expectError(t, await raw('GET', '/admin/accounts/c1/%2E%2E/c1', null), 400, 'invalid_value');
  t.equal(await balance('c1'), 10, 'nothing was changed');
});

t.test('with no admin.token every /admin path answers 404 unknown_url, whatever the token', async (t) => {
  for (const path of [...ROUTES.map(([p]) => p), ...UNKNOWN, '/admin?x=1']) {
    for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'DELETE']) {
      for (const token of [null, ADMIN, DEMO_KEY]) {
        const res = await call(method, path, { base: off.url, token, body: method === 'GET' || method === 'HEAD' ? undefined : { id: 'x', plan: 'free' } });
        if (method === 'HEAD') { t.equal(res.status, 404, `HEAD ${path}`); continue; }
        expectError(t, res, 404, 'unknown_url');
      }
    }
  }
  const res = await request(`${off.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(res.statusCode, 200, 'the gateway itself serves');
  await res.body.dump();
});
