// Every admin sub-command as an operator runs it: `tollgate ...` as a child process against a
// real gateway. Exact stdout, stderr and exit code; --json prints the API's answer (nothing for
// a 204). Amounts: cli-amounts.test.ts.

import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { BIN } from '../helpers/child.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'admin-cli-token-0123456789';
const MAX = Number.MAX_SAFE_INTEGER;

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

interface Run { code: number | null; stdout: string; stderr: string }

/** Runs `tollgate ARGS --url <gateway>` with the admin token in the environment. */
function cli(args: string[], opts: { url?: string | null; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  const url = opts.url === undefined ? gw.url : opts.url;
  const argv = url === null ? args : [...args, '--url', url];
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...argv], { env: { PATH: process.env.PATH, TOLLGATE_ADMIN_TOKEN: ADMIN, ...opts.env }, timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

async function api(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${gw.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return res.status === 204 ? null : res.json();
}

function ok(t: any, r: Run, stdout: string | RegExp, what: string): void {
  t.equal(r.code, 0, `${what}: exit 0 (${r.stderr})`);
  if (typeof stdout === 'string') t.equal(r.stdout, stdout, `${what}: stdout`);
  else t.match(r.stdout, stdout, `${what}: stdout`);
  t.equal(r.stderr, '', `${what}: nothing on stderr`);
}

function failed(t: any, r: Run, code: number, stderr: RegExp, what: string): void {
  t.equal(r.code, code, `${what}: exit ${code}`);
  t.match(r.stderr, stderr, `${what}: stderr`);
  t.notMatch(r.stderr, /\n\s+at /, `${what}: no stack trace`);
}

t.test('accounts create / show', async (t) => {
  ok(t, await cli(['accounts', 'create', 'cli-a', '--plan', 'free', '--wallet-units', '250']),
    'created cli-a  plan=free  balance=250  held=0  available=250\n', 'create');
  const created = await cli(['accounts', 'create', 'cli-b', '--plan', 'pro', '--json']);
  ok(t, created, /^\{.*\}\n$/, 'create --json');
  t.strictSame(JSON.parse(created.stdout), await api('GET', '/admin/accounts/cli-b'), '--json prints the API\'s answer');
  ok(t, await cli(['accounts', 'create', 'cli-max', '--plan', 'pro', `--wallet-units=${MAX}`]), new RegExp(`balance=${MAX} `), 'up to 2^53-1');

  ok(t, await cli(['accounts', 'show', 'cli-a']),
    'cli-a  plan=free  balance=250  held=0  available=250\n  today: 0 requests, 0 tokens, 0 units\n  this month: 0 requests, 0 tokens, 0 units\n', 'show');
  const shown = await cli(['accounts', 'show', 'cli-a', '--json']);
  ok(t, shown, /^\{.*\}\n$/, 'show --json');
  t.strictSame(JSON.parse(shown.stdout), await api('GET', '/admin/accounts/cli-a'));

  failed(t, await cli(['accounts', 'create', 'cli-a', '--plan', 'free']), 1, /^error 409 account_exists: /, 'existing id');
  const missing = await cli(['accounts', 'show', 'nobody', '--json']);
  failed(t, missing, 1, /^error 404 account_not_found: /, 'unknown account');
  t.equal(JSON.parse(missing.stdout).code, 'account_not_found', '--json prints the error envelope too');
  failed(t, await cli(['accounts', 'create', 'x', '--plan', 'gold']), 1, /^error 400 unsupported_value: /, 'unknown plan');
  failed(t, await cli(['accounts', 'create', 'x']), 2, /--plan is required/, 'no plan');
  failed(t, await cli(['accounts', 'show']), 2, /^usage: tollgate accounts show ID/, 'no id');
  failed(t, await cli(['accounts', 'show', '']), 2, /^usage: tollgate accounts show ID/, 'empty id');
});

t.test('credits add: top-ups, deductions with -N, idempotency, refusals', async (t) => {
  await api('POST', '/admin/accounts', { id: 'cr', plan: 'free', wallet_units: 100 });
  ok(t, await cli(['credits', 'add', 'cr', '12', '--idempotency-key', 'k1']),
    'applied: cr  plan=free  balance=112  held=0  available=112  idempotency-key=k1\n', 'add');
  ok(t, await cli(['credits', 'add', 'cr', '12', '--idempotency-key', 'k1']),
    'already applied (same idempotency key), nothing changed: cr  plan=free  balance=112  held=0  available=112  idempotency-key=k1\n', 'repeat');
  ok(t, await cli(['credits', 'add', 'cr', '-5', '--idempotency-key', 'k2']), /^applied: cr .*balance=107 /, 'a negative amount deducts');
  ok(t, await cli(['credits', 'add', '--idempotency-key', 'k3', 'cr', '-7']), /^applied: cr .*balance=100 /, 'options first');
  ok(t, await cli(['credits', 'add', 'cr', '--url', gw.url, '--', '-1'], { url: null }), /^applied: cr .*balance=99 .*idempotency-key=[0-9a-f-]{36}\n$/, 'after --, with a generated key');
  const j = await cli(['credits', 'add', 'cr', '1', '--json', '--idempotency-key', 'k4']);
  ok(t, j, /^\{.*\}\n$/, '--json');
  t.strictSame(JSON.parse(j.stdout), { ...(await api('GET', '/admin/accounts/cr')), applied: true });

  failed(t, await cli(['credits', 'add', 'cr', '-101', '--idempotency-key', 'k5']), 1, /^error 400 invalid_value: Invalid value for 'units': .*below zero/, 'no overdraft');
  failed(t, await cli(['credits', 'add', 'cr', String(MAX), '--idempotency-key', 'k6']), 1, /^error 400 invalid_value: .*above 9007199254740991/, 'no overflow');
  t.equal((await api('GET', '/admin/accounts/cr')).balance_units, 100, 'refusals changed nothing');
  ok(t, await cli(['credits', 'add', 'cr', '-100', '--idempotency-key', 'k5']), /balance=0 /, 'the refused key still works');
  failed(t, await cli(['credits', 'add', 'nobody', '5']), 1, /^error 404 account_not_found: /, 'unknown account');
  failed(t, await cli(['credits', 'add', 'cr']), 2, /^usage: tollgate credits add ACCOUNT UNITS/, 'no amount');
});

t.test('keys create / revoke; revoke answers 204, --json prints nothing', async (t) => {
  await api('POST', '/admin/accounts', { id: 'ka', plan: 'pro' });
  const text = await cli(['keys', 'create', 'ka']);
  ok(t, text, /^key key_[0-9a-f]{16} for ka:\ntg_[0-9A-Za-z]{40}\n\(shown once: only its SHA-256 is stored\)\n$/, 'create');
  const j = await cli(['keys', 'create', 'ka', '--json']);
  ok(t, j, /^\{.*\}\n$/, 'create --json');
  const issued = JSON.parse(j.stdout);
  t.strictSame(Object.keys(issued).sort(), ['account', 'id', 'key']);
  t.equal(issued.account, 'ka');

  ok(t, await cli(['keys', 'revoke', issued.id]), `revoked ${issued.id}\n`, 'revoke');
  ok(t, await cli(['keys', 'revoke', issued.id, '--json']), '', 'revoke --json: a 204 has no JSON to print');
  const unknown = await cli(['keys', 'revoke', 'key_0000000000000000', '--json']);
  failed(t, unknown, 1, /^error 404 key_not_found: /, 'unknown key');
  t.equal(JSON.parse(unknown.stdout).code, 'key_not_found');
  failed(t, await cli(['keys', 'create', 'nobody']), 1, /^error 404 account_not_found: /, 'unknown account');
});

t.test('keys create with controls / list / update / rotate (CONTRACT section 8)', async (t) => {
  await api('POST', '/admin/accounts', { id: 'kc', plan: 'free', wallet_units: 1000 });
  const created = await cli(['keys', 'create', 'kc', '--name', 'ci bot', '--models', 'echo-*,other', '--budget-units', '500',
    '--budget-period', 'week', '--expires', '2031-01-01T00:00:00Z', '--rpm', '10', '--max-concurrent', '2',
    '--priority', 'high', '--allow-ips', '10.0.0.0/8,2001:db8::/32', '--metadata', 'team=search', '--metadata', 'env=prod', '--json']);
  ok(t, created, /^\{.*\}\n$/, 'create with controls');
  const issued = JSON.parse(created.stdout);
  const listed = await api('GET', '/admin/accounts/kc/keys');
  t.match(listed.keys[0], {
    id: issued.id, name: 'ci bot', models: ['echo-*', 'other'], budget: { units: 500, period: 'week', spent_units: 0 },
    expires_at: '2031-01-01T00:00:00.000Z', limits: { requests_per_minute: 10, tokens_per_minute: null, max_concurrent: 2 },
    priority: 'high', allowed_ips: ['10.0.0.0/8', '2001:db8::/32'], metadata: { team: 'search', env: 'prod' },
  }, 'the API stored what the options said');

  const list = await cli(['keys', 'list', 'kc']);
  t.equal(list.code, 0);
  t.equal(list.stdout.split('\n')[0], `${issued.id}  tg_…${issued.key.slice(-4)}  "ci bot"`);
  t.match(list.stdout, /models: echo-\*, other\n  budget: 0\/500 per week \(resets \d{4}-\d\d-\d\dT00:00:00.000Z\)\n  limits: rpm=10 concurrent=2\n  priority: high\n/);
  t.notOk(list.stdout.includes(issued.key), 'no plaintext listed');
  const listJson = await cli(['keys', 'list', 'kc', '--json']);
  t.strictSame(JSON.parse(listJson.stdout), await api('GET', '/admin/accounts/kc/keys'), '--json prints the API\'s answer');

  const updated = await cli(['keys', 'update', issued.id, '--models', 'null', '--tpm', '900', '--budget-units', '50', '--budget-period', 'never', '--json']);
  ok(t, updated, /^\{.*\}\n$/, 'update');
  t.match(JSON.parse(updated.stdout), { models: null, budget: { units: 50, period: null }, limits: { requests_per_minute: 10, tokens_per_minute: 900, max_concurrent: 2 } },
    'named controls changed, the other limits kept');
  const lowered = await cli(['keys', 'update', issued.id, '--priority', 'low']);
  t.equal(lowered.code, 0, lowered.stderr);
  t.match(lowered.stdout, /\n  priority: low\n/, 'update prints the key with its new priority');
  const cleared = await cli(['keys', 'update', issued.id, '--priority', 'null', '--json']);
  ok(t, cleared, /^\{.*\}\n$/, 'update --priority null');
  t.equal(JSON.parse(cleared.stdout).priority, null, 'null: the plan\'s priority');
  t.match((await cli(['keys', 'list', 'kc'])).stdout, /\n  priority: the plan's\n/);
  failed(t, await cli(['keys', 'update', issued.id, '--priority', 'urgent']), 1, /^error 400 unsupported_value: Unsupported value for 'priority'/, 'the API judges the priority');
  failed(t, await cli(['keys', 'update', issued.id]), 2, /name at least one control/, 'update with nothing to change');
  failed(t, await cli(['keys', 'update', issued.id, '--budget-period', 'day']), 2, /--budget-period needs --budget-units/, 'a period alone');
  failed(t, await cli(['keys', 'update', issued.id, '--rpm', '0']), 2, /--rpm must be at least 1/, 'a zero limit');
  failed(t, await cli(['keys', 'update', issued.id, '--rpm', '1e3']), 2, /plain decimal integer/, 'an exponent');
  failed(t, await cli(['keys', 'update', issued.id, '--expires', 'soon']), 1, /^error 400 invalid_value: Invalid value for 'expires_at'/, 'the API judges values');
  failed(t, await cli(['keys', 'update', 'key_0000000000000000', '--name', 'x']), 1, /^error 404 key_not_found/, 'unknown key');

  const rotated = await cli(['keys', 'rotate', issued.id, '--grace-seconds', '60']);
  t.equal(rotated.code, 0, rotated.stderr);
  const m = /^key (\S+) for kc rotated; new key:\n(tg_[A-Za-z0-9]{40})\n\(shown once; the old key works until (\S+)\)\n$/.exec(rotated.stdout);
  t.ok(m !== null, rotated.stdout);
  t.equal(m?.[1], issued.id, 'the same key id');
  t.ok(Math.abs(Date.parse(m![3]!) - Date.now() - 60_000) < 5000, 'the grace end');
  for (const key of [issued.key, m![2]!]) {
    const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    t.equal(res.status, 403, 'both plaintexts are this key (its IP allowlist refuses 127.0.0.1)');
    t.equal(((await res.json()) as any).code, 'ip_not_allowed');
  }
  failed(t, await cli(['keys', 'rotate', issued.id, '--grace-seconds', '-5']), 2, /plain decimal integer/, 'a negative grace');
});

t.test('sessions revoke: 204, no body', async (t) => {
  ok(t, await cli(['sessions', 'revoke', 'sid-1']), 'revoked session sid-1\n', 'revoke');
  ok(t, await cli(['sessions', 'revoke', 'sid-1', '--json']), '', 'revoke --json');
  failed(t, await cli(['sessions', 'revoke']), 2, /^usage: tollgate sessions revoke SID/, 'no sid');
});

t.test('usage', async (t) => {
  await api('POST', '/admin/accounts', { id: 'us', plan: 'free' });
  ok(t, await cli(['usage', '--account', 'us', '--since', '2026-01-01']),
    'usage since 2026-01-01T00:00:00.000Z for us: 0 requests, 0 prompt + 0 completion tokens, 0 units\n', 'one account');
  ok(t, await cli(['usage']), /^usage since \d{4}-\d{2}-01T00:00:00\.000Z \(all accounts\): \d+ requests/, 'all accounts');
  const j = await cli(['usage', '--account', 'us', '--since', '2026-01-01', '--json']);
  ok(t, j, /^\{.*\}\n$/, '--json');
  t.strictSame(JSON.parse(j.stdout), { account: 'us', since: '2026-01-01T00:00:00.000Z', requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0, by_model: {}, by_key: {}, by_team: {} });
  failed(t, await cli(['usage', '--since', 'never']), 1, /^error 400 invalid_value: /, 'bad since');
  failed(t, await cli(['usage', '--account', 'nobody']), 1, /^error 404 account_not_found: /, 'unknown account');
  failed(t, await cli(['usage', 'extra']), 2, /^usage: tollgate usage/, 'a stray word');
});

t.test('tokens, URLs and unexpected answers', async (t) => {
  failed(t, await cli(['accounts', 'show', 'cr'], { env: { TOLLGATE_ADMIN_TOKEN: '' } }), 2, /^no admin token/, 'no token');
  failed(t, await cli(['accounts', 'show', 'cr', '--token', 'wrong']), 1, /^error 401 invalid_api_key: /, 'wrong token');
  ok(t, await cli(['accounts', 'show', 'cr', '--token', ADMIN], { env: { TOLLGATE_ADMIN_TOKEN: 'wrong' } }), /^cr /, '--token wins');
  const dead = await new Promise<string>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(`http://127.0.0.1:${port}`));
    });
  });
  failed(t, await cli(['accounts', 'show', 'cr'], { url: dead }), 1, /^cannot reach http:\/\/127\.0\.0\.1:\d+: .*ECONNREFUSED/, 'unreachable');
  failed(t, await cli(['accounts', 'show', 'cr'], { url: 'not a url' }), 1, /^cannot reach not a url: /, 'not a URL');
  // A server that is not Tollgate: a 200 that is not the API's JSON.
  failed(t, await cli(['accounts', 'show', 'cr'], { url: `${gw.url}/healthz?` }), 1, /^unexpected answer from /, 'a foreign 200');
  failed(t, await cli(['accounts', 'frob', 'x']), 2, /unknown command 'accounts frob'/, 'unknown sub-command');
  failed(t, await cli(['accounts', 'show', 'x', '--bogus']), 2, /Unknown option '--bogus'/, 'unknown option');
  failed(t, await cli(['accounts', 'show', 'x', '-z']), 2, /Unknown option '-z'/, 'unknown short option');
});
