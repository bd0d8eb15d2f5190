// The console's server side through real HTTP against `tollgate serve --config FILE` (CONTRACT
// section 12): sign-in by token and by SSO (test/helpers/oidc-provider.ts), the one permission
// table (every write refused to a viewer and to a member of another account, 403 with the exact
// envelope and nothing changed; no session 401; a missing or wrong CSRF token 403), sessions
// ended on the server at sign-out, the audit log, the Config page's masking and check, headers.

import t from 'tap';
import fc from 'fast-check';
import { holds } from '../property/arbitraries.js';
import { ADMIN_TOKEN, WALLET, ssoSignIn, startConsole, tokenSignIn, withSession, type Signed } from '../helpers/console.js';

// A webhook whose token rides in its query, a provider whose key rides in its base URL's query:
// the Config page shows neither (the webhook's port is closed: no alert is expected to go).
const rig = await startConsole(t, {
  providers: { echo: { kind: 'echo' }, keyed: { kind: 'openai', base_url: 'http://127.0.0.1:9/v1?api-version=2024-10&key=QUERYSECRET' } },
  alerts: { webhooks: [{ url: 'http://127.0.0.1:18502/hook?token=SUPERSECRET', secret: 'webhook-hmac-secret', events: ['upstream.ejected'] }] },
});
const { url } = rig;
const admin = (path: string, init: RequestInit = {}) =>
  fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', ...(init.headers as Record<string, string> ?? {}) } });
const balance = async (id: string) => ((await (await admin(`/admin/accounts/${id}`)).json()) as { balance_units: number }).balance_units;
const newKey = async (account: string, name = 'k') =>
  (await (await admin(`/admin/accounts/${account}/keys`, { method: 'POST', body: JSON.stringify({ name }) })).json()) as { id: string; key: string };

const signed = async (claims: Record<string, unknown>): Promise<Signed> => {
  const s = await ssoSignIn(rig, claims);
  if ('refused' in s) throw new Error(`refused: ${s.refused}`);
  return s;
};

const viewer = await signed({ sub: 'v1', email: 'viewer@example.com', roles: ['tg-viewer'] });
const otherMember = await signed({ sub: 'm2', email: 'm@other.example', tenant: 'other-co' });
const acmeMember = await signed({ sub: 'm1', email: 'm@acme.example', tenant: 'acme' });
const ssoAdmin = await signed({ sub: 'a1', email: 'admin@example.com', roles: 'tg-admin' });

t.test('SSO gives each claim set its role; PKCE, state and nonce went through the provider\'s checks', async (t) => {
  t.same([viewer.role, otherMember.role, acmeMember.role, ssoAdmin.role], ['viewer', 'member', 'member', 'admin']);
  t.same([otherMember.account, acmeMember.account, viewer.account], ['other-co', 'acme', null]);
  t.same(rig.op.refusals, [], 'the provider refused nothing: the PKCE verifier matched its challenge');
  t.ok(rig.op.redeemed >= 4);
  const refused = await ssoSignIn(rig, { sub: 'nobody', email: 'x@example.com', roles: ['someone-else'] });
  t.same(refused, { refused: '/console/?sso=refused' }, 'neither role nor account: refused');
});

t.test('a callback with a wrong state, or without the flow cookie, signs nobody in', async (t) => {
  rig.op.user = { sub: 'a1', roles: ['tg-admin'] };
  const start = await fetch(`${url}/console/sso`, { redirect: 'manual' });
  const flow = start.headers.getSetCookie().map((c) => /^(tg_console_flow=[^;]+)/.exec(c)?.[1]).find(Boolean)!;
  t.match(start.headers.getSetCookie().join('\n'), /tg_console_flow=[^;]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=600/);
  const auth = new URL(start.headers.get('location')!);
  t.equal(auth.searchParams.get('code_challenge_method'), 'S256');
  t.ok(auth.searchParams.get('nonce'));
  const back = new URL((await fetch(auth, { redirect: 'manual' })).headers.get('location')!);
  const forged = new URL(back);
  forged.searchParams.set('state', 'forged');
  const r1 = await fetch(forged, { redirect: 'manual', headers: { cookie: flow } });
  t.equal(r1.status, 302);
  t.equal(r1.headers.get('location'), '/console/?sso=failed');
  t.notOk(r1.headers.getSetCookie().some((c) => c.startsWith('tg_console=') && !c.includes('Max-Age=0')));
  const r2 = await fetch(back, { redirect: 'manual' });
  t.equal(r2.headers.get('location'), '/console/?sso=failed', 'no flow cookie');
});

t.test('the session cookie: HttpOnly, SameSite=Strict, Path=/, the TTL; a wrong token is 401 and nothing else', async (t) => {
  const res = await fetch(`${url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: ADMIN_TOKEN }) });
  t.match(res.headers.getSetCookie()[0], /^tg_console=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=28800$/);
  const wrong = await fetch(`${url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: 'nope' }) });
  t.equal(wrong.status, 401);
  t.same(wrong.headers.getSetCookie(), []);
  t.equal(((await wrong.json()) as any).error.code, 'invalid_api_key');
});

t.test('pages send CSP without unsafe-inline/eval, X-Frame-Options DENY, nosniff, no-referrer', async (t) => {
  for (const path of ['/console/', '/console/assets/console.js', '/console/api/info']) {
    const res = await fetch(`${url}${path}`);
    t.equal(res.status, 200, path);
    const csp = res.headers.get('content-security-policy')!;
    t.match(csp, /script-src 'self'/);
    t.notMatch(csp, /unsafe-inline|unsafe-eval/);
    t.match(csp, /frame-ancestors 'none'/);
    t.equal(res.headers.get('x-frame-options'), 'DENY');
    t.equal(res.headers.get('x-content-type-options'), 'nosniff');
    t.equal(res.headers.get('referrer-policy'), 'no-referrer');
  }
  const page = await (await fetch(`${url}/console/`)).text();
  t.notMatch(page, /<script(?![^>]*\bsrc=)/, 'no inline script');
  t.notMatch(page, /https?:\/\//, 'nothing from elsewhere');
});

const forbiddenEnvelope = (body: any) => ({
  error: { message: body?.error?.message, type: 'permission_error', param: null, code: 'forbidden' },
});

t.test('every write route refuses a viewer and a member of another account: 403 forbidden, nothing changed, nothing audited', async (t) => {
  const key = await newKey('acme', 'victim');
  // Each write with a body made from a generated string and amount: the refusal comes first, whatever the body says.
  const writes: Array<{ method: string; path: string; body?: (g: string, n: number) => unknown; memberOnly?: boolean }> = [
    { method: 'POST', path: '/admin/accounts', body: (g) => ({ id: 'evil', plan: 'free', wallet_units: g.length }) },
    { method: 'POST', path: '/admin/accounts/acme/credits', body: (g, n) => ({ units: n, idempotency_key: `k${g}` }) },
    { method: 'POST', path: '/admin/accounts/acme/keys', body: (g) => ({ name: g }) },
    { method: 'PATCH', path: `/admin/keys/${key.id}`, body: (g) => ({ name: g }) },
    { method: 'DELETE', path: `/admin/keys/${key.id}` },
    { method: 'POST', path: `/admin/keys/${key.id}/rotate`, body: (_g, n) => ({ grace_seconds: n }) },
    { method: 'POST', path: '/admin/sessions/some-session/revoke' },
    { method: 'POST', path: '/console/api/reload' },
    { method: 'POST', path: '/console/api/config/check', body: (g) => ({ yaml: g }), memberOnly: true },
  ];
  const auditBefore = ((await (await admin('/admin/audit?limit=1000')).json()) as any).events.length;
  const before = await balance('acme');
  await holds(t, 'writes refused to viewer and other member', fc.asyncProperty(
    fc.constantFrom(...writes), fc.constantFrom(viewer, otherMember), fc.string({ maxLength: 40 }), fc.integer({ min: 1, max: 1_000_000 }),
    async (w, who, g, n) => {
      if (w.memberOnly && who === viewer) return;
      const body = w.body === undefined ? undefined : JSON.stringify(w.body(g, n));
      const res = await fetch(`${url}${w.path}`, { method: w.method, headers: { ...withSession(who, w.method), 'content-type': 'application/json' }, body });
      const got = await res.json() as any;
      if (res.status !== 403) throw new Error(`${who.role} ${w.method} ${w.path}: ${res.status} ${JSON.stringify(got)}`);
      const want = forbiddenEnvelope(got);
      if (JSON.stringify(got.error) !== JSON.stringify(want.error)) throw new Error(`envelope ${JSON.stringify(got)}`);
      if (!/^Forbidden: /.test(got.error.message)) throw new Error(`message ${got.error.message}`);
      if (res.headers.get('x-request-id') !== got.request_id) throw new Error('request id');
    }), 60);
  t.equal(await balance('acme'), before, 'the wallet is unchanged');
  const live = await admin(`/admin/keys/${key.id}`);
  t.equal(live.status, 200, 'the key is still live');
  t.equal(((await live.json()) as any).name, 'victim');
  t.equal((await admin('/admin/accounts/evil')).status, 404);
  const auditAfter = ((await (await admin('/admin/audit?limit=1000')).json()) as any).events.length;
  t.equal(auditAfter, auditBefore, 'refused writes change nothing, so nothing is audited');
});

t.test('no session: 401; a write without or with a wrong CSRF token: 403 csrf_failed', async (t) => {
  const s = await tokenSignIn(url);
  await holds(t, 'session and CSRF checks', fc.asyncProperty(
    fc.constantFrom('/admin/accounts/acme/credits', '/admin/accounts/acme/keys', '/console/api/reload', '/console/api/logout'),
    fc.option(fc.string({ minLength: 0, maxLength: 60 }).filter((c) => c !== s.csrf && /^[\x21-\x7e]*$/.test(c)), { nil: null }),
    fc.boolean(),
    async (path, csrf, withCookie) => {
      const body = path.endsWith('credits') ? JSON.stringify({ units: 7, idempotency_key: 'csrf-test' }) : '{}';
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (withCookie) headers.cookie = s.cookie;
      if (csrf !== null && csrf !== '') headers['x-csrf-token'] = csrf;
      const res = await fetch(`${url}${path}`, { method: 'POST', headers, body });
      const got = await res.json() as any;
      if (!withCookie) {
        const code = path.startsWith('/admin') ? 'invalid_api_key' : 'not_signed_in';
        if (res.status !== 401 || got.error.code !== code || got.error.type !== 'invalid_request_error') throw new Error(`no session: ${res.status} ${JSON.stringify(got)}`);
        return;
      }
      if (res.status !== 403 || got.error.code !== 'csrf_failed' || got.error.type !== 'permission_error' || got.error.param !== null) {
        throw new Error(`csrf ${JSON.stringify(csrf)}: ${res.status} ${JSON.stringify(got)}`);
      }
    }), 40);
  t.equal(await balance('acme') >= WALLET, true);
  const still = await fetch(`${url}/console/api/session`, { headers: { cookie: s.cookie } });
  t.equal(still.status, 200, 'the refused logouts ended nothing');
});

t.test('a tampered or unknown cookie is 401 not_signed_in', async (t) => {
  const s = await tokenSignIn(url);
  const [body, mac] = s.cookie.slice('tg_console='.length).split('.');
  const forged = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(body!, 'base64url').toString()), role: 'admin', actor: 'evil' })).toString('base64url');
  for (const cookie of [`tg_console=${forged}.${mac}`, 'tg_console=garbage', `tg_console=${body}.AAAA`]) {
    const res = await fetch(`${url}/admin/accounts/acme`, { headers: { cookie } });
    t.equal(res.status, 401);
    const got = await res.json() as any;
    t.same(got.error, { message: got.error.message, type: 'invalid_request_error', param: null, code: 'not_signed_in' });
  }
});

t.test('signing out ends the session on the server: the same cookie is refused afterwards', async (t) => {
  const s = await tokenSignIn(url);
  t.equal((await fetch(`${url}/admin/accounts/acme`, { headers: { cookie: s.cookie } })).status, 200);
  const out = await fetch(`${url}/console/api/logout`, { method: 'POST', headers: withSession(s, 'POST') });
  t.equal(out.status, 204);
  t.match(out.headers.getSetCookie()[0], /^tg_console=; Path=\/; HttpOnly; SameSite=Strict; Max-Age=0$/);
  const replay = await fetch(`${url}/admin/accounts/acme`, { headers: { cookie: s.cookie } });
  t.equal(replay.status, 401);
  t.equal(((await replay.json()) as any).error.code, 'not_signed_in');
  const events = ((await (await admin('/admin/audit?limit=2')).json()) as any).events;
  t.same(events.map((e: any) => e.action), ['POST /console/api/logout', 'POST /console/api/login'], 'sign-in and sign-out are audited');
});

t.test('a member sees and manages only their account', async (t) => {
  const m = acmeMember;
  const get = (path: string) => fetch(`${url}${path}`, { headers: withSession(m, 'GET') });
  t.equal((await get('/admin/accounts/acme')).status, 200);
  t.equal((await get('/admin/accounts/acme/keys')).status, 200);
  t.equal((await get('/admin/usage/records?account=acme')).status, 200);
  for (const path of ['/admin/accounts/other-co', '/admin/accounts/other-co/keys', '/admin/usage/records', '/admin/usage/records?account=other-co',
    '/admin/upstreams', '/admin/audit', '/console/api/config', '/admin/accounts', '/console/api/usage/export?account=other-co']) {
    const res = await get(path);
    t.equal(res.status, 403, path);
    t.equal(((await res.json()) as any).error.code, 'forbidden', path);
  }
  const created = await fetch(`${url}/admin/accounts/acme/keys`, { method: 'POST', headers: { ...withSession(m, 'POST'), 'content-type': 'application/json' }, body: '{"name":"mine"}' });
  t.equal(created.status, 201);
  const { id } = await created.json() as { id: string };
  const rotated = await fetch(`${url}/admin/keys/${id}/rotate`, { method: 'POST', headers: withSession(m, 'POST') });
  t.equal(rotated.status, 200);
  const theirs = await newKey('other-co');
  const refused = await fetch(`${url}/admin/keys/${theirs.id}`, { method: 'DELETE', headers: withSession(m, 'DELETE') });
  t.equal(refused.status, 403);
  t.equal((await admin(`/admin/keys/${theirs.id}`)).status, 200, 'their key lives');
  const revoked = await fetch(`${url}/admin/keys/${id}`, { method: 'DELETE', headers: withSession(m, 'DELETE') });
  t.equal(revoked.status, 204);
});

t.test('every write is audited: who, role, action, target, when, address, request id; newest first, paged', async (t) => {
  const since = new Date().toISOString();
  const credit = await admin('/admin/accounts/acme/credits', { method: 'POST', body: JSON.stringify({ units: 3, idempotency_key: 'audit-1' }), headers: { 'x-request-id': 'audit-credit-1' } });
  t.equal(credit.status, 200);
  const k = await fetch(`${url}/admin/accounts/acme/keys`, { method: 'POST', headers: { ...withSession(ssoAdmin, 'POST'), 'content-type': 'application/json', 'x-request-id': 'audit-key-1' }, body: '{}' });
  t.equal(k.status, 201);
  const page = await (await fetch(`${url}/admin/audit?since=${since}&limit=1`, { headers: withSession(viewer, 'GET') })).json() as any;
  t.equal(page.events.length, 1);
  t.same(Object.keys(page.events[0]).sort(), ['action', 'actor', 'at', 'ip', 'request_id', 'role', 'target']);
  t.match(page.events[0], { actor: 'sso:admin@example.com', role: 'admin', action: 'POST /admin/accounts/{id}/keys', target: 'acme', ip: '127.0.0.1', request_id: 'audit-key-1' });
  t.ok(page.next_cursor);
  const next = await (await admin(`/admin/audit?since=${since}&limit=1&cursor=${encodeURIComponent(page.next_cursor)}`)).json() as any;
  t.match(next.events[0], { actor: 'admin-token', role: 'admin', action: 'POST /admin/accounts/{id}/credits', target: 'acme', request_id: 'audit-credit-1' });
  t.equal(next.next_cursor, null);
  t.ok(Date.parse(next.events[0].at) <= Date.parse(page.events[0].at));
  const bad = await admin('/admin/audit?cursor=not-a-cursor');
  t.equal(bad.status, 400);
  t.equal(((await bad.json()) as any).error.param, 'cursor');
  t.equal((await admin('/admin/audit?limit=0')).status, 400);
  t.equal((await admin('/admin/audit', { method: 'POST', body: '{}' })).status, 405);
});

t.test('Config: secrets are ***; the check lists check\'s problems; it never reads the environment', async (t) => {
  const res = await fetch(`${url}/console/api/config`, { headers: withSession(viewer, 'GET') });
  const { yaml } = await res.json() as { yaml: string };
  t.notOk(yaml.includes(ADMIN_TOKEN), 'no admin token');
  t.notOk(yaml.includes('op-client-secret'), 'no client secret');
  t.match(yaml, /token: "\*\*\*"/);
  t.match(yaml, /client_secret: "\*\*\*"/);
  for (const secret of ['SUPERSECRET', 'webhook-hmac-secret', 'QUERYSECRET', '/hook']) t.notOk(yaml.includes(secret), `no ${secret}`);
  t.match(yaml, /url: http:\/\/127\.0\.0\.1:18502\/\*\*\*\n/, 'the webhook: scheme, host and port only');
  t.match(yaml, /base_url: http:\/\/127\.0\.0\.1:9\/v1\?api-version=\*\*\*&key=\*\*\*\n/, 'query values masked, names kept');
  const check = async (text: string) => (await (await fetch(`${url}/console/api/config/check`, {
    method: 'POST', headers: { ...withSession(viewer, 'POST'), 'content-type': 'application/json' }, body: JSON.stringify({ yaml: text }),
  })).json()) as { ok: boolean; problems: string[] };
  const bad = await check('server: { port: "${HOME}" }\nplans: {}\nbogus: 1\n');
  t.equal(bad.ok, false);
  t.ok(bad.problems.includes('bogus: unknown key'), bad.problems.join('; '));
  t.notOk(bad.problems.join('\n').includes(process.env.HOME ?? '/nonexistent-home'), 'the environment is not interpolated');
  t.same((await check('providers: { e: { kind: echo } }\nmodels: [{ id: m, provider: e }]\n')).problems, []);
});

t.test('the usage export is CSV (formula cells neutralised) or JSONL, the member limited to their account', async (t) => {
  const { key } = await newKey('acme', 'export');
  const chat = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': '-1-1.export' }, body: JSON.stringify({ model: 'echo-small', messages: [{ role: 'user', content: 'hi' }] }) });
  t.equal(chat.status, 200);
  await chat.text();
  let csv = '';
  for (let i = 0; i < 50 && !csv.includes('1-1.export'); i++) {
    const res = await fetch(`${url}/console/api/usage/export?format=csv&account=acme`, { headers: withSession(acmeMember, 'GET') });
    t.equal(res.status, 200);
    t.equal(res.headers.get('content-disposition'), 'attachment; filename="usage.csv"');
    csv = await res.text();
    if (!csv.includes('1-1.export')) await new Promise((r) => setTimeout(r, 100));
  }
  t.match(csv, /^request_id,at,account,key_id,team,model,provider,target,route,status,prompt_tokens,cached_tokens,completion_tokens,units,usage_source,duration_ms,ttft_ms,queue_ms,tags,end_user,tool\r\n/);
  t.notMatch(csv, /(^|\n)-1-1\.export,/, 'no cell starts with -');
  t.match(csv, /\n'-1-1\.export,/);
  const jsonl = await (await fetch(`${url}/console/api/usage/export?format=jsonl&account=acme`, { headers: withSession(viewer, 'GET') })).text();
  const lines = jsonl.trim().split('\n').map((l) => JSON.parse(l));
  t.ok(lines.some((r) => r.request_id === '-1-1.export'));
  t.ok(lines.every((r) => r.account === 'acme'));
  const bad = await fetch(`${url}/console/api/usage/export?format=xml&account=acme`, { headers: withSession(viewer, 'GET') });
  t.equal(bad.status, 400);
});
