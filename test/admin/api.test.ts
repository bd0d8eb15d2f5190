// The admin API and its CLI through real sockets, on the durable memory store.

import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'admin-secret-token-123';
const bin = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));
const run = promisify(execFile);

let gw: TestGateway;
let dir: string;
t.before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tollgate-admin-'));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'memory', path: dir, fsync_ms: 0 };
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await rm(dir, { recursive: true, force: true }); });

async function adminCall(method: string, path: string, body?: unknown, token = ADMIN) {
  const res = await fetch(`${gw.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) };
}

function expectError(t: any, res: { status: number; headers: Headers; text: string }, status: number, code: string, param: string | null = null) {
  t.equal(res.status, status, `${code}: status ${status}`);
  const body = JSON.parse(res.text);
  t.same(schemas.error(body), []);
  t.equal(body.code, code);
  t.equal(body.param, param);
  t.equal(body.request_id, res.headers.get('x-request-id'));
}

t.test('the admin token is required', async (t) => {
  expectError(t, await adminCall('GET', '/admin/accounts/demo', undefined, 'wrong'), 401, 'invalid_api_key');
  const res = await fetch(`${gw.url}/admin/accounts/demo`);
  expectError(t, { status: res.status, headers: res.headers, text: await res.text() }, 401, 'invalid_api_key');
  expectError(t, await adminCall('GET', '/admin/accounts/demo', undefined, DEMO_KEY), 401, 'invalid_api_key');
});

t.test('accounts: create, show, conflicts and bad bodies', async (t) => {
  const created = await adminCall('POST', '/admin/accounts', { id: 'acme-2', plan: 'pro', wallet_units: 5000 });
  t.equal(created.status, 201);
  t.same(created.json(), {
    id: 'acme-2', plan: 'pro', balance_units: 5000, held_units: 0, available_units: 5000,
    usage: { day: { requests: 0, tokens: 0, units: 0 }, month: { requests: 0, tokens: 0, units: 0 } },
  });
  const shown = await adminCall('GET', '/admin/accounts/acme-2');
  t.equal(shown.status, 200);
  t.same(shown.json(), created.json());
  t.equal((await adminCall('GET', '/admin/accounts/demo')).json().balance_units, 1000000, 'seeded from the config');

  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'acme-2', plan: 'free' }), 409, 'account_exists', 'id');
  expectError(t, await adminCall('GET', '/admin/accounts/nobody'), 404, 'account_not_found');
  expectError(t, await adminCall('POST', '/admin/accounts', { plan: 'free' }), 400, 'missing_required_parameter', 'id');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 7, plan: 'free' }), 400, 'invalid_type', 'id');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'has space', plan: 'free' }), 400, 'invalid_value', 'id');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'x1' }), 400, 'missing_required_parameter', 'plan');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'x1', plan: 'platinum' }), 400, 'unsupported_value', 'plan');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'x1', plan: 'free', wallet_units: -1 }), 400, 'invalid_value', 'wallet_units');
  expectError(t, await adminCall('POST', '/admin/accounts', { id: 'x1', plan: 'free', wallet_units: '5' }), 400, 'invalid_type', 'wallet_units');
  expectError(t, await adminCall('POST', '/admin/accounts', '{"id":'), 400, 'invalid_json');
  expectError(t, await adminCall('POST', '/admin/accounts', '[]'), 400, 'invalid_type', '(body)');
  const noType = await fetch(`${gw.url}/admin/accounts`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` }, body: '{}' });
  expectError(t, { status: noType.status, headers: noType.headers, text: await noType.text() }, 415, 'unsupported_media_type');
  expectError(t, await adminCall('GET', '/admin/nothing'), 404, 'unknown_url');
  const wrong = await adminCall('PUT', '/admin/accounts');
  expectError(t, wrong, 405, 'method_not_allowed');
  t.equal(wrong.headers.get('allow'), 'GET, HEAD, POST');
  t.equal((await adminCall('GET', '/admin/accounts/x1')).status, 404, 'no rejected body created anything');
});

t.test('credits: idempotent top-ups and deductions', async (t) => {
  await adminCall('POST', '/admin/accounts', { id: 'wallet', plan: 'free', wallet_units: 100 });
  let res = await adminCall('POST', '/admin/accounts/wallet/credits', { units: 500, idempotency_key: 'topup-1' });
  t.equal(res.status, 200);
  t.equal(res.json().balance_units, 600);
  t.equal(res.json().applied, true);
  res = await adminCall('POST', '/admin/accounts/wallet/credits', { units: 500, idempotency_key: 'topup-1' });
  t.equal(res.json().balance_units, 600, 'a repeated idempotency key changes nothing');
  t.equal(res.json().applied, false);
  const parallel = await Promise.all(Array.from({ length: 10 }, () => adminCall('POST', '/admin/accounts/wallet/credits', { units: 7, idempotency_key: 'burst' })));
  t.equal(parallel.filter((r) => r.json().applied).length, 1, 'ten concurrent calls with one key apply once');
  res = await adminCall('POST', '/admin/accounts/wallet/credits', { units: -7, idempotency_key: 'refund-1' });
  t.equal(res.json().balance_units, 600);
  expectError(t, await adminCall('POST', '/admin/accounts/nobody/credits', { units: 1, idempotency_key: 'k' }), 404, 'account_not_found');
  expectError(t, await adminCall('POST', '/admin/accounts/wallet/credits', { units: 0, idempotency_key: 'k' }), 400, 'invalid_value', 'units');
  expectError(t, await adminCall('POST', '/admin/accounts/wallet/credits', { units: 1.5, idempotency_key: 'k' }), 400, 'invalid_value', 'units');
  expectError(t, await adminCall('POST', '/admin/accounts/wallet/credits', { units: 1 }), 400, 'missing_required_parameter', 'idempotency_key');
  t.equal((await adminCall('GET', '/admin/accounts/wallet')).json().balance_units, 600);
});

t.test('keys: issued once in plaintext, stored as a digest, revoked at once', async (t) => {
  const res = await adminCall('POST', '/admin/accounts/acme-2/keys');
  t.equal(res.status, 201);
  const issued = res.json();
  t.match(issued, { account: 'acme-2' });
  t.match(issued.key, /^tg_[0-9A-Za-z]{40}$/);
  t.match(issued.id, /^key_[0-9a-f]{16}$/);
  expectError(t, await adminCall('POST', '/admin/accounts/nobody/keys'), 404, 'account_not_found');

  const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${issued.key}` } });
  t.equal(models.status, 200, 'the new key works at once');
  const list: any = await models.json();
  t.ok(list.data.some((m: any) => m.id === 'echo-vision'), 'with its account\'s (pro) plan');

  let persisted = '';
  // Every file the store keeps, its usage day files (usage/) included.
  for (const f of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (f.isFile()) persisted += await readFile(join(f.parentPath ?? f.path, f.name), 'utf8');
  }
  t.notOk(persisted.includes(issued.key), 'the plaintext key is not stored');
  t.notOk(gw.logs().includes(issued.key), 'nor logged');

  const revoked = await adminCall('DELETE', `/admin/keys/${issued.id}`);
  t.equal(revoked.status, 204);
  t.equal(revoked.text, '');
  const after = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${issued.key}` } });
  t.equal(after.status, 401);
  t.equal(((await after.json()) as any).code, 'invalid_api_key');
  expectError(t, await adminCall('DELETE', '/admin/keys/key_0000000000000000'), 404, 'key_not_found');
});

t.test('sessions: revoke answers 204 with no body', async (t) => {
  const res = await adminCall('POST', '/admin/sessions/sess-42/revoke');
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(res.headers.get('content-type'), null);
});

t.test('the CLI calls the same API', async (t) => {
  const env = { ...process.env, TOLLGATE_ADMIN_TOKEN: ADMIN };
  const cli = (...args: string[]) => run(process.execPath, [bin, ...args, '--url', gw.url], { env });
  let out = await cli('accounts', 'create', 'cli-co', '--plan', 'free', '--wallet-units', '250');
  t.match(out.stdout, /^created cli-co {2}plan=free {2}balance=250/);
  out = await cli('credits', 'add', 'cli-co', '50', '--idempotency-key', 'cli-1');
  t.match(out.stdout, /^applied: cli-co .*balance=300/);
  out = await cli('credits', 'add', 'cli-co', '50', '--idempotency-key', 'cli-1');
  t.match(out.stdout, /already applied/);
  out = await cli('accounts', 'show', 'cli-co', '--json');
  t.equal(JSON.parse(out.stdout).balance_units, 300);
  out = await cli('keys', 'create', 'cli-co', '--json');
  const key = JSON.parse(out.stdout);
  t.match(key.key, /^tg_/);
  out = await cli('keys', 'revoke', key.id);
  t.equal(out.stdout, `revoked ${key.id}\n`);
  out = await cli('sessions', 'revoke', 'sid-9');
  t.equal(out.stdout, 'revoked session sid-9\n');

  const failed = await cli('accounts', 'show', 'nobody').then(() => null, (e) => e);
  t.equal(failed.code, 1);
  t.match(failed.stderr, /error 404 account_not_found/);
  const noToken = await run(process.execPath, [bin, 'accounts', 'show', 'x', '--url', gw.url], { env: { ...process.env, TOLLGATE_ADMIN_TOKEN: '' } }).then(() => null, (e) => e);
  t.equal(noToken.code, 2);
  t.match(noToken.stderr, /no admin token/);
  const badToken = await run(process.execPath, [bin, 'accounts', 'show', 'x', '--url', gw.url, '--token', 'nope']).then(() => null, (e) => e);
  t.equal(badToken.code, 1);
  t.match(badToken.stderr, /invalid_api_key/);
});

t.test('the store is authoritative after seeding: a restart keeps admin changes', async (t) => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'memory', path: dir, fsync_ms: 0 };
  await adminCall('POST', '/admin/accounts/demo/credits', { units: -1000, idempotency_key: 'spend' });
  await gw.close();
  gw = await startGateway(c);
  t.equal((await adminCall('GET', '/admin/accounts/demo')).json().balance_units, 999000, 'not re-seeded from wallet_units');
  t.equal((await adminCall('GET', '/admin/accounts/wallet')).json().balance_units, 600);
  const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(models.status, 200);
});
