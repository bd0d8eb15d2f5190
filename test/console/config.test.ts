// The console's config (CONTRACT section 12) as an operator writes it: YAML files served by
// `tollgate serve --config FILE` and checked by `tollgate check`: on by default with admin.token,
// off (404) with console.enabled false or with no way in, Secure cookies behind TLS, the
// cross-checks on console.enabled and console.oidc.redirect_url, session_ttl_s as the cookie's age.

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { BIN, serveChild } from '../helpers/child.js';
import { json, startUpstream } from '../helpers/upstream.js';

const dir = await mkdtemp(join(tmpdir(), 'tollgate-console-config-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const base = (extra: Record<string, unknown>) => ({
  server: { host: '127.0.0.1', port: 0 },
  providers: { echo: { kind: 'echo' } },
  models: [{ id: 'echo-small', provider: 'echo' }],
  ...extra,
});

let n = 0;
async function file(config: Record<string, unknown>): Promise<string> {
  const f = join(dir, `c${n++}.yaml`);
  await writeFile(f, YAML.stringify(config));
  return f;
}

t.test('on by default with admin.token; session_ttl_s is the cookie\'s Max-Age', async (t) => {
  const gw = await serveChild(t, await file(base({ admin: { token: 'tok-123456-console' }, console: { session_ttl_s: 600 } })));
  const page = await fetch(`${gw.url}/console/`);
  t.equal(page.status, 200);
  t.match(await page.text(), /<script type="module" src="\/console\/assets\/console\.js"><\/script>/);
  t.same(await (await fetch(`${gw.url}/console/api/info`)).json(), { sso: false, token: true });
  const login = await fetch(`${gw.url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"token":"tok-123456-console"}' });
  t.match(login.headers.getSetCookie()[0], /Max-Age=600(;|$)/);
  t.notMatch(login.headers.getSetCookie()[0], /Secure/, 'plain http: not Secure');
  const redirect = await fetch(`${gw.url}/console`, { redirect: 'manual' });
  t.equal(redirect.status, 302);
  t.equal(redirect.headers.get('location'), '/console/');
  const js = await fetch(`${gw.url}/console/assets/console.js`);
  t.equal(js.status, 200);
  t.equal(js.headers.get('content-type'), 'text/javascript; charset=utf-8');
  const missing = await fetch(`${gw.url}/console/assets/nope.js`);
  t.equal(missing.status, 404);
  t.equal(((await missing.json()) as any).error.code, 'unknown_url');
  t.equal((await fetch(`${gw.url}/console/api/info`, { method: 'DELETE' })).status, 405);
});

t.test('console.enabled: false, or neither admin.token nor console.oidc: 404 everywhere under /console', async (t) => {
  for (const config of [base({ admin: { token: 'tok-123456-console' }, console: { enabled: false } }), base({})]) {
    const gw = await serveChild(t, await file(config));
    for (const path of ['/console', '/console/', '/console/api/info', '/console/assets/console.js']) {
      const res = await fetch(`${gw.url}${path}`);
      t.equal(res.status, 404, path);
      t.equal(((await res.json()) as any).error.code, 'unknown_url', path);
    }
    const login = await fetch(`${gw.url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"token":"tok-123456-console"}' });
    t.equal(login.status, 404);
    t.same(login.headers.getSetCookie(), []);
  }
});

t.test('behind TLS (a trusted proxy says https) the cookie is Secure', async (t) => {
  const gw = await serveChild(t, await file(base({ admin: { token: 'tok-123456-console' }, server: { host: '127.0.0.1', port: 0, trust_proxy: true } })));
  const login = await fetch(`${gw.url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-proto': 'https' }, body: '{"token":"tok-123456-console"}' });
  t.match(login.headers.getSetCookie()[0], /; Secure$/);
});

t.test('tollgate check: console problems are named', async (t) => {
  const check = async (config: Record<string, unknown>) => {
    const r = spawnSync(process.execPath, [BIN, 'check', '--config', await file(config)], { encoding: 'utf8' });
    return { status: r.status, err: r.stderr };
  };
  const noWay = await check(base({ console: { enabled: true } }));
  t.equal(noWay.status, 1);
  t.match(noWay.err, /console\.enabled: the console needs admin\.token or console\.oidc to sign anyone in/);
  const owned = await check(base({ console: { oidc: { issuer: 'https://id.example.com', client_id: 'c', redirect_url: 'https://gw.example.com/v1/callback' } } }));
  t.equal(owned.status, 1);
  t.match(owned.err, /console\.oidc\.redirect_url: its path "\/v1\/callback" is one the gateway answers itself/);
  const missing = await check(base({ console: { oidc: { issuer: 'https://id.example.com' } } }));
  t.equal(missing.status, 1);
  t.match(missing.err, /console\.oidc/);
  const ttl = await check(base({ admin: { token: 'console-config-admin-token' }, console: { session_ttl_s: 0 } }));
  t.match(ttl.err, /console\.session_ttl_s: must be a positive integer/);
  const ok = await check(base({ admin: { token: 'console-config-admin-token' }, console: { oidc: { issuer: 'https://id.example.com', client_id: 'c', redirect_url: 'https://gw.example.com/console/callback' } } }));
  t.equal(ok.status, 0, ok.err);
});

t.test('the console\'s cookies are never passed through to a model server', async (t) => {
  const up = await startUpstream((req, res) => json(res, 200, { cookie: req.headers.cookie ?? null }));
  t.teardown(() => up.close());
  const gw = await serveChild(t, await file(base({ admin: { token: 'tok-123456-console' }, server: { host: '127.0.0.1', port: 0, passthrough: up.baseUrl.replace(/\/v1$/, '') } })));
  const seen = async (cookie: string) => ((await (await fetch(`${gw.url}/health`, { headers: { cookie } })).json()) as { cookie: string | null }).cookie;
  t.equal(await seen('tg_console=abc.def; theirs=1; tg_console_flow=x'), 'theirs=1');
  t.equal(await seen('tg_console=abc.def'), null);
  t.equal(await seen('theirs=1; other=2'), 'theirs=1; other=2');
});
