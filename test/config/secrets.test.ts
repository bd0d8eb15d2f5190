// Secrets are real (CONTRACT section 21; lib/config/secrets.ts), as an operator meets the rules:
// YAML files given to `tollgate check` and `tollgate serve` as child processes. Every refusal is
// the same `path: message` lines from both, exit 1, no stack trace, nothing listening: an empty
// or whitespace secret wherever one is configured (an unset `${VAR}` is empty), an admin token
// or webhook secret under 16 characters, an HS256 JWT secret or console.session_secret under 32
// bytes, edges of whitespace, and an SSO console with no key of its own to sign sessions with.
// The two empties that mean "not set" still serve: the bundled config with
// TOLLGATE_ADMIN_TOKEN unset (/admin off, 404), and `api_key: ${UPSTREAM_KEY:-}` unset (no key
// sent upstream). On the old code every refusal here was accepted.

import t from 'tap';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { BIN, serveChild } from '../helpers/child.js';
import { DEMO_KEY } from '../helpers/gateway.js';
import { completionBody, json, startUpstream } from '../helpers/upstream.js';

const SHIPPED = fileURLToPath(new URL('../../config/tollgate.yaml', import.meta.url));
const dir = await mkdtemp(join(tmpdir(), 'tollgate-secrets-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const NO_STACK = /^\s+at /m;
// About 30 files, each through two Node processes: minutes on a loaded machine.
t.setTimeout(1_200_000);
const HINT = '(a random value, e.g. `openssl rand -hex 32`)';
const EMPTY = 'must not be empty or only whitespace (an unset environment variable?)';
const EDGES = 'must not begin or end with whitespace (a stray space or new line?)';
const SHORT16 = `must be at least 16 characters ${HINT}`;
const SHORT32 = `must be at least 32 bytes ${HINT}`;
const NO_SESSION_KEY = 'console.session_secret: is required with console.oidc and no admin.token: console sessions are signed with it, never with the OIDC client secret';

const TOKEN = 'a-long-admin-token-0123456789';
const KEY32 = 'a-session-secret-of-32-bytes-012';
const OIDC = 'oidc: {issuer: "https://id.example.com", client_id: tollgate-console, redirect_url: "https://gw.example.com/console/callback"';

interface Run { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }

/** Runs the bin with `env` on top of a clean environment (no TOLLGATE_* variables); SIGKILLed after `ms` (a hang). */
function run(args: string[], env: NodeJS.ProcessEnv = {}, cwd = dir, ms = 30_000): Promise<Run> {
  const base: NodeJS.ProcessEnv = { PATH: process.env.PATH, TOLLGATE_LOG_LEVEL: 'warn' };
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [BIN, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...base, ...env } });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => proc.kill('SIGKILL'), ms);
    proc.once('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
  });
}

/** `tollgate serve` in `cwd` (the bundled config's store path is relative), once it listens; killed at teardown. */
async function serveIn(t: any, file: string, env: NodeJS.ProcessEnv, cwd: string): Promise<{ url: string; kill: () => void }> {
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', file], { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH, TOLLGATE_LOG_LEVEL: 'warn', ...env } });
  const kill = () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); };
  t.teardown(kill);
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const m = /listening on (\S+)/.exec(out);
  if (m === null) throw new Error(`the gateway did not start: ${out}`);
  return { url: m[1]!, kill };
}

let n = 0;
/** A config file: `text` after a port, and (unless `bare`) an echo provider and model. */
async function yamlFile(text: string, bare = false): Promise<string> {
  const file = join(dir, `c${n++}.yaml`);
  const base = bare ? '' : 'providers: {echo: {kind: echo}}\nmodels: [{id: m, provider: echo}]\n';
  await writeFile(file, `server: {port: 0, drain_timeout_ms: 1000}\n${base}${text}`);
  return file;
}

/** check and serve both refuse `file` with exactly `lines`, exit 1, no stack trace, serve never listening. */
async function refusedBoth(t: any, name: string, file: string, lines: string[], env: NodeJS.ProcessEnv = {}): Promise<void> {
  const [checked, served] = await Promise.all([run(['check', '--config', file], env), run(['serve', '--config', file], env)]);
  t.equal(checked.code, 1, `${name}: check exits 1`);
  t.strictSame(checked.stderr.trimEnd().split('\n'), lines, `${name}: check prints exactly these lines`);
  t.equal(checked.stdout, '', `${name}: check prints nothing on stdout`);
  t.equal(served.signal, null, `${name}: serve ended by itself`);
  t.equal(served.code, 1, `${name}: serve exits 1`);
  t.equal(served.stderr, checked.stderr, `${name}: serve prints the lines check prints`);
  t.notMatch(served.stdout, /listening on/, `${name}: serve never listened`);
  t.notMatch(checked.stderr + served.stderr + served.stdout, NO_STACK, `${name}: no stack trace`);
}

t.test('every weak secret is refused by check and by serve, with the same lines', async (t) => {
  const cases: Array<[string, string, string[], NodeJS.ProcessEnv?, boolean?]> = [
    ['admin token of spaces', 'admin: {token: "   "}\n', ['admin.token: must not be only whitespace (empty means no admin token)']],
    ['admin token of a tab and a new line', 'admin: {token: "\\t\\n"}\n', ['admin.token: must not be only whitespace (empty means no admin token)']],
    ['admin token x', 'admin: {token: x}\n', [`admin.token: ${SHORT16}`]],
    ['admin token change-me', 'admin: {token: change-me}\n', [`admin.token: ${SHORT16}`]],
    ['admin token of 15 characters', 'admin: {token: "0123456789abcde"}\n', [`admin.token: ${SHORT16}`]],
    ['admin token from the environment, short', 'admin: {token: "${ADMIN_TOKEN}"}\n', [`admin.token: ${SHORT16}`], { ADMIN_TOKEN: 'short' }],
    ['admin token with a trailing new line', 'admin: {token: "a-long-admin-token-0123456789\\n"}\n', [`admin.token: ${EDGES}`]],
    ['admin token padded to 16 with spaces', 'admin: {token: "x               "}\n', [`admin.token: ${EDGES}`]],
    ['webhook secret empty', 'alerts: {webhooks: [{url: "https://ops.example.com/h", secret: ""}]}\n', [`alerts.webhooks[0].secret: ${EMPTY}`]],
    ['webhook secret from an unset variable', 'alerts: {webhooks: [{url: "https://ops.example.com/h", secret: "${ALERTS_SECRET}"}]}\n', [`alerts.webhooks[0].secret: ${EMPTY}`]],
    ['webhook secret of spaces', 'alerts: {webhooks: [{url: "https://ops.example.com/h", secret: "                "}]}\n', [`alerts.webhooks[0].secret: ${EMPTY}`]],
    ['webhook secret x', 'alerts: {webhooks: [{url: "https://ops.example.com/h", secret: x}, {url: "https://ops.example.com/i", secret: "0123456789abcdef"}]}\n', [`alerts.webhooks[0].secret: ${SHORT16}`]],
    ['jwt secret of 31 bytes', 'auth: {jwt: {secret: "0123456789abcdef0123456789abcde"}}\n', [`auth.jwt.secret: ${SHORT32}`]],
    ['jwt secret of 16 characters, 32 bytes', 'auth: {jwt: {secret: "éééééééééééééééé"}}\n', []],
    ['jwt secret of 31 characters, 32 bytes', 'auth: {jwt: {secret: "é0123456789abcdef0123456789abcd"}}\n', []],
    ['webhook secret of 15 emoji (30 UTF-16 units)', `alerts: {webhooks: [{url: "https://ops.example.com/h", secret: "${'🔑'.repeat(15)}"}]}\n`, [`alerts.webhooks[0].secret: ${SHORT16}`]],
    ['jwt secret of spaces beside a jwks_url', 'auth: {jwt: {secret: "  ", jwks_url: "https://id.example.com/jwks"}}\n', ['auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)', `auth.jwt.secret: ${EMPTY}`]],
    ['session secret empty', `admin: {token: ${TOKEN}}\nconsole: {session_secret: ""}\n`, [`console.session_secret: ${EMPTY}`]],
    ['session secret of 31 bytes', `admin: {token: ${TOKEN}}\nconsole: {session_secret: "${KEY32.slice(1)}"}\n`, [`console.session_secret: ${SHORT32}`]],
    ['session secret change-me', `console: {session_secret: change-me, ${OIDC}}}\n`, [`console.session_secret: ${SHORT32}`]],
    ['client secret from an unset variable, session secret set', `console: {session_secret: ${KEY32}, ${OIDC}, client_secret: "\${OIDC_CLIENT_SECRET}"}}\n`, [`console.oidc.client_secret: ${EMPTY}`]],
    ['client secret of spaces', `admin: {token: ${TOKEN}}\nconsole: {${OIDC}, client_secret: "   "}}\n`, [`console.oidc.client_secret: ${EMPTY}`]],
    ['an SSO console with a real client secret and no session key', `console: {${OIDC}, client_secret: idp-client-secret-0123456789}}\n`, [NO_SESSION_KEY]],
    ['an SSO console whose admin token is unset, and no session key', `admin: {token: "\${TOLLGATE_ADMIN_TOKEN:-}"}\nconsole: {${OIDC}}}\n`, [NO_SESSION_KEY]],
    ['a provider api_key of spaces', 'providers: {up: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "  "}}\n', ['providers.up.api_key: must not be only whitespace (empty means no key)'], {}, true],
    ['a Redis password empty', 'store: {kind: redis, cluster: ["127.0.0.1:9"], password: ""}\n', [`store.password: ${EMPTY}`]],
    ['a Sentinel password of spaces', 'store: {kind: redis, sentinel: {name: m, sentinels: ["127.0.0.1:9"], sentinel_password: " "}}\n', [`store.sentinel.sentinel_password: ${EMPTY}`]],
  ];
  for (const [name, text, lines, env, bare] of cases) {
    const file = await yamlFile(text, bare);
    if (lines.length === 0) {
      const checked = await run(['check', '--config', file], env);
      t.equal(checked.code, 0, `${name}: accepted (${checked.stderr.trim()})`);
      continue;
    }
    await refusedBoth(t, name, file, lines, env);
  }
});

t.test('the attack: an SSO-only console whose client secret is unset never starts', async (t) => {
  // As docs/console.md showed it, OIDC_CLIENT_SECRET unset: on the old code this served, signing
  // sessions with HKDF("") (anyone could mint an admin cookie).
  const file = await yamlFile(`console:\n  ${OIDC}, client_secret: "\${OIDC_CLIENT_SECRET}"}\n`);
  await refusedBoth(t, 'SSO-only, client_secret unset', file, [`console.oidc.client_secret: ${EMPTY}`, NO_SESSION_KEY]);
  await refusedBoth(t, 'SSO-only, client_secret set', file, [NO_SESSION_KEY], { OIDC_CLIENT_SECRET: 'the-identity-providers-secret' });
  const withKey = await run(['check', '--config', file], { OIDC_CLIENT_SECRET: 'the-identity-providers-secret', TOLLGATE_SESSION_SECRET: KEY32 });
  t.equal(withKey.code, 1, 'the file names no session secret: still refused');
  const fixed = await yamlFile(`console:\n  session_secret: "\${TOLLGATE_SESSION_SECRET}"\n  ${OIDC}, client_secret: "\${OIDC_CLIENT_SECRET}"}\n`);
  const ok = await run(['check', '--config', fixed], { OIDC_CLIENT_SECRET: 'the-identity-providers-secret', TOLLGATE_SESSION_SECRET: KEY32 });
  t.equal(ok.code, 0, ok.stderr);
  t.equal(ok.stdout, `${fixed}: ok\n`);
});

t.test('the bounds: 16 characters and 32 bytes are enough', async (t) => {
  const file = await yamlFile([
    'admin: {token: "0123456789abcdef"}',
    `console: {session_secret: "${KEY32}"}`,
    'auth: {jwt: {secret: "0123456789abcdef0123456789abcdef"}}',
    'alerts: {webhooks: [{url: "https://ops.example.com/h", secret: "🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑"}]}',
    '',
  ].join('\n'));
  const r = await run(['check', '--config', file]);
  t.equal(r.code, 0, r.stderr);
  const gw = await serveChild(t, file);
  t.equal((await fetch(`${gw.url}/admin/accounts`, { headers: { authorization: 'Bearer 0123456789abcdef' } })).status, 200, 'the 16-character token works');
});

t.test('the bundled config: TOLLGATE_ADMIN_TOKEN unset serves with /admin off; a weak one is refused', async (t) => {
  const home = await mkdtemp(join(tmpdir(), 'tollgate-secrets-shipped-'));
  t.teardown(() => rm(home, { recursive: true, force: true }));
  const file = join(home, 'tollgate.yaml');
  await copyFile(SHIPPED, file);

  const unset = await run(['check', '--config', file], {}, home);
  t.equal(unset.code, 0, unset.stderr);
  const empty = await run(['check', '--config', file], { TOLLGATE_ADMIN_TOKEN: '' }, home);
  t.equal(empty.code, 0, `an empty variable is unset too: ${empty.stderr}`);
  const gw = await serveIn(t, file, { TOLLGATE_PORT: '0', TOLLGATE_ADMIN_TOKEN: '' }, home);
  const admin = await fetch(`${gw.url}/admin/accounts`, { headers: { authorization: 'Bearer ' } });
  t.equal(admin.status, 404, '/admin is off');
  t.equal(((await admin.json()) as any).error.code, 'unknown_url');
  t.equal((await fetch(`${gw.url}/console/`)).status, 404, 'and so is the console');
  const chat = await new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1` }).chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'still serving' }] });
  t.equal(chat.choices[0]!.message.content, 'still serving', 'the gateway serves');
  gw.kill();

  for (const [value, line] of [
    ['   ', 'admin.token: must not be only whitespace (empty means no admin token)'],
    ['change-me', `admin.token: ${SHORT16}`],
    ['demo-admin-token-0123456789\n', `admin.token: ${EDGES}`],
  ] as const) {
    const checked = await run(['check', '--config', file], { TOLLGATE_ADMIN_TOKEN: value }, home);
    const served = await run(['serve', '--config', file], { TOLLGATE_ADMIN_TOKEN: value, TOLLGATE_PORT: '0' }, home);
    t.equal(checked.code, 1, `${JSON.stringify(value)}: check exits 1`);
    t.equal(checked.stderr, `${line}\n`, `${JSON.stringify(value)}: the line`);
    t.equal(served.code, 1, `${JSON.stringify(value)}: serve exits 1`);
    t.equal(served.stderr, checked.stderr, `${JSON.stringify(value)}: the same line`);
  }
});

t.test('api_key: ${UPSTREAM_KEY:-} unset sends no key; set, it is the Bearer token', async (t) => {
  const up = await startUpstream((_req, res) => json(res, 200, completionBody('hi', { usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } })));
  t.teardown(() => up.close());
  const file = await yamlFile([
    'plans: {free: {paid: false}}',
    `accounts: [{id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}]}]`,
    `providers: {up: {kind: openai, base_url: "${up.baseUrl}", api_key: "\${UPSTREAM_KEY:-}"}}`,
    'models: [{id: u, provider: up}]',
    '',
  ].join('\n'), true);
  for (const [env, want] of [[{}, undefined], [{ UPSTREAM_KEY: 'sk-upstream-1' }, 'Bearer sk-upstream-1']] as const) {
    const checked = await run(['check', '--config', file], env);
    t.equal(checked.code, 0, checked.stderr);
    const gw = await serveChild(t, file, env);
    const before = up.requests.length;
    const chat = await new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1` }).chat.completions.create({ model: 'u', messages: [{ role: 'user', content: 'x' }] });
    t.equal(chat.choices[0]!.message.content, 'hi');
    t.equal(up.requests.length, before + 1);
    t.equal(up.requests.at(-1)!.headers.authorization, want, `upstream authorization: ${String(want)}`);
    gw.proc.kill('SIGKILL');
  }
});
