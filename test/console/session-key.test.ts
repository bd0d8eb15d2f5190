// Console sessions are signed with a key of the gateway's own (CONTRACT section 21; issue #40
// finding 1): console.session_secret, else admin.token, never the OIDC client secret. The
// attack, as it ran: an SSO-only console with `client_secret: ${OIDC_CLIENT_SECRET}` unset
// signed sessions with HKDF(""), and a cookie forged with it read every account and topped one
// up. Here, through `tollgate serve` from YAML files: that config no longer starts; with a
// session_secret, cookies forged (by this test's own HMAC, as an attacker would) from the client
// secret, from "" or from the admin token are 401 on the console API and on /admin, nothing read
// and nothing written (the balance checked through a real SSO admin's session); the same forgery
// with the real session_secret is accepted, so the refusals are the key's doing.

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHmac, hkdfSync, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { BIN, serveChild } from '../helpers/child.js';
import { WALLET, consoleConfig, freePort, ssoSignIn, withSession, type ConsoleRig, type Signed } from '../helpers/console.js';
import { startProvider } from '../helpers/oidc-provider.js';

const SESSION_SECRET = 'console-session-secret-0123456789abcdef';
const CLIENT_SECRET = 'op-client-secret';
const ADMIN_TOKEN = 'session-key-admin-token-0123';

const dir = await mkdtemp(join(tmpdir(), 'tollgate-session-key-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

/** A session cookie and its CSRF token as lib/console/session.ts makes them, keyed from `secret`: written from the docs, not imported. */
function forge(secret: string, role = 'admin'): Signed {
  const key = Buffer.from(hkdfSync('sha256', Buffer.from(secret, 'utf8'), 'tollgate-console', 'session-signing', 32));
  const mac = (label: string, data: string) => createHmac('sha256', key).update(`${label}\n${data}`).digest('base64url');
  const sid = `console:${randomUUID()}`;
  const body = Buffer.from(JSON.stringify({ sid, actor: 'sso:attacker@example.com', role, account: null, expires: Date.now() + 3_600_000 })).toString('base64url');
  return { cookie: `tg_console=${body}.${mac('session', body)}`, csrf: mac('csrf', sid), role, account: null };
}

/** The provider, then the gateway serving `shape(config)` on a port chosen first. */
async function start(t: any, shape: (c: Record<string, any>) => void): Promise<ConsoleRig> {
  const port = await freePort();
  const op = await startProvider(`http://127.0.0.1:${port}/console/callback`, { clientSecret: CLIENT_SECRET });
  t.teardown(() => op.close());
  const config = consoleConfig(port, op.issuer);
  shape(config);
  const file = join(dir, `gw-${port}.yaml`);
  await writeFile(file, YAML.stringify(config));
  const gw = await serveChild(t, file);
  return { gw, url: gw.url, op, file, config };
}

async function balance(rig: ConsoleRig, admin: Signed): Promise<number> {
  const res = await fetch(`${rig.url}/admin/accounts/acme`, { headers: withSession(admin, 'GET') });
  if (res.status !== 200) throw new Error(`balance: ${res.status}`);
  return ((await res.json()) as { balance_units: number }).balance_units;
}

/** Every way in with `s` refused 401: the console API, an /admin read, a top-up (with the forged CSRF token); no account in any body. */
async function refused(t: any, rig: ConsoleRig, s: Signed, name: string): Promise<void> {
  const session = await fetch(`${rig.url}/console/api/session`, { headers: withSession(s, 'GET') });
  t.equal(session.status, 401, `${name}: /console/api/session 401`);
  t.equal(((await session.json()) as any).error.code, 'not_signed_in', name);
  const read = await fetch(`${rig.url}/admin/accounts`, { headers: withSession(s, 'GET') });
  t.equal(read.status, 401, `${name}: /admin/accounts 401`);
  const text = await read.text();
  t.notMatch(text, /acme|other-co|balance/, `${name}: nothing read`);
  t.equal(JSON.parse(text).error.code, 'not_signed_in', name);
  const topUp = await fetch(`${rig.url}/admin/accounts/acme/credits`, {
    method: 'POST', headers: { ...withSession(s, 'POST'), 'content-type': 'application/json' },
    body: JSON.stringify({ units: 1_000_000, idempotency_key: `forged-${name}` }),
  });
  t.equal(topUp.status, 401, `${name}: a top-up 401`);
  const audit = await fetch(`${rig.url}/admin/audit?limit=5`, { headers: withSession(s, 'GET') });
  t.equal(audit.status, 401, `${name}: the audit log 401`);
}

t.test('the attack\'s config: an SSO-only console whose client secret is unset does not start', async (t) => {
  const port = await freePort();
  const config = consoleConfig(port, 'http://127.0.0.1:9');
  delete config.admin;
  config.console.oidc.client_secret = '${OIDC_CLIENT_SECRET}';
  const file = join(dir, 'attack.yaml');
  await writeFile(file, YAML.stringify(config));
  const env = { PATH: process.env.PATH, TOLLGATE_LOG_LEVEL: 'warn' };
  const served = spawnSync(process.execPath, [BIN, 'serve', '--config', file], { encoding: 'utf8', env, timeout: 30_000 });
  t.equal(served.status, 1, 'serve exits 1');
  t.equal(served.stderr, [
    'console.oidc.client_secret: must not be empty or only whitespace (an unset environment variable?)',
    'console.session_secret: is required with console.oidc and no admin.token: console sessions are signed with it, never with the OIDC client secret',
    '',
  ].join('\n'));
  t.notMatch(served.stdout, /listening/);
});

t.test('SSO only, with a session_secret: cookies forged from the client secret or from "" are refused', async (t) => {
  const rig = await start(t, (c) => {
    delete c.admin;
    c.console.session_secret = SESSION_SECRET;
  });
  const admin = await ssoSignIn(rig, { sub: 'a1', email: 'admin@example.com', roles: ['tg-admin'] });
  if ('refused' in admin) throw new Error(admin.refused);
  t.equal(admin.role, 'admin', 'a real SSO admin signs in');
  t.equal(await balance(rig, admin), WALLET);

  await refused(t, rig, forge(CLIENT_SECRET), 'forged with the client secret');
  await refused(t, rig, forge(''), 'forged with HKDF("")');
  t.equal(await balance(rig, admin), WALLET, 'nothing was credited');

  // The same forgery with the gateway's real key is accepted: the refusals above are the key's.
  const genuine = forge(SESSION_SECRET);
  const session = await fetch(`${rig.url}/console/api/session`, { headers: withSession(genuine, 'GET') });
  t.equal(session.status, 200, 'the forge is faithful: with the session secret it signs in');
  t.equal(((await session.json()) as any).csrf, genuine.csrf);
});

t.test('with admin.token and a session_secret, sessions are the session_secret\'s', async (t) => {
  const rig = await start(t, (c) => {
    c.admin = { token: ADMIN_TOKEN };
    c.console.session_secret = SESSION_SECRET;
  });
  await refused(t, rig, forge(CLIENT_SECRET), 'forged with the client secret');
  await refused(t, rig, forge(ADMIN_TOKEN), 'forged with the admin token');
  const login = await fetch(`${rig.url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: ADMIN_TOKEN }) });
  t.equal(login.status, 200, 'the admin token still signs in');
  const cookie = /^(tg_console=[^;]+)/.exec(login.headers.getSetCookie()[0]!)![1]!;
  t.equal((await fetch(`${rig.url}/console/api/session`, { headers: { cookie } })).status, 200, 'and its session holds');
});

t.test('with admin.token alone, the client secret signs nothing', async (t) => {
  const rig = await start(t, () => {});
  await refused(t, rig, forge(CLIENT_SECRET), 'forged with the client secret');
  await refused(t, rig, forge(''), 'forged with HKDF("")');
  const genuine = forge(rig.config.admin.token);
  t.equal((await fetch(`${rig.url}/console/api/session`, { headers: withSession(genuine, 'GET') })).status, 200, 'keyed from admin.token');
});
