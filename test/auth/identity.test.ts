// Every authentication outcome of CONTRACT section 4, through a real socket: developer keys,
// dashboard JWTs (422 {"msg"}, 401 codes, session revocation) and plans.

import t from 'tap';
import { SignJWT } from 'jose';
import { DEMO_KEY, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';
import { rawRequest } from '../helpers/raw-request.js';

const SECRET = 'a-dashboard-secret-of-enough-length-0123456789';
const ADMIN = 'admin-token-for-identity';
const key = new TextEncoder().encode(SECRET);

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.auth = { jwt: { secret: SECRET, issuer: 'dash', audience: 'tollgate' } };
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

async function token(claims: Record<string, unknown>, opts: { exp?: number | null; iss?: string; aud?: string; secret?: Uint8Array } = {}) {
  const jwt = new SignJWT({ type: 'access', ...claims }).setProtectedHeader({ alg: 'HS256' }).setIssuer(opts.iss ?? 'dash').setAudience(opts.aud ?? 'tollgate').setIssuedAt();
  if (opts.exp !== null) jwt.setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + 600);
  return jwt.sign(opts.secret ?? key);
}

const ask = { model: 'echo-small', messages: [{ role: 'user', content: 'hello' }] };
const withToken = (tok: string) => ({ authorization: `Bearer ${tok}`, 'content-type': 'application/json' });

async function expect401(t: any, tok: string, code: string) {
  const res = await postChat(gw.url, ask, withToken(tok));
  t.equal(res.status, 401, `${code}: 401`);
  const body = res.json();
  t.same(schemas.error(body), []);
  t.equal(body.code, code);
  t.equal(body.type, 'invalid_request_error');
  t.equal(body.request_id, res.headers['x-request-id']);
}

async function expect422(t: any, tok: string) {
  const res = await postChat(gw.url, ask, withToken(tok));
  t.equal(res.status, 422);
  const body = res.json();
  t.same(Object.keys(body), ['msg'], 'the {"msg"} body, not the envelope');
  t.type(body.msg, 'string');
  t.ok(res.headers['x-request-id'], 'still with x-request-id');
  t.notMatch(body.msg, new RegExp(tok.slice(0, 20)), 'the token is not echoed');
}

t.test('a valid dashboard JWT authenticates as its sub on every /v1 route', async (t) => {
  const tok = await token({ sub: 'acme', sid: 'sess-1' });
  const res = await postChat(gw.url, ask, withToken(tok));
  t.equal(res.status, 200);
  const models: any = await fetch(`${gw.url}/v1/models`, { headers: withToken(tok) }).then((r) => r.json());
  t.ok(models.data.some((m: any) => m.id === 'echo-vision'), 'acme is on the pro plan');
  const logs = gw.logs();
  t.match(logs, /"credential":"session_sess-1"/);
  t.notOk(logs.includes(tok), 'the token is not logged');
});

t.test('401 outcomes', async (t) => {
  await expect401(t, await token({ sub: 'acme' }, { secret: new TextEncoder().encode('another-secret-of-enough-length-98765') }), 'invalid_api_key');
  await expect401(t, await token({ sub: 'acme' }, { iss: 'elsewhere' }), 'invalid_api_key');
  await expect401(t, await token({ sub: 'acme' }, { aud: 'someone-else' }), 'invalid_api_key');
  await expect401(t, await token({ sub: 'acme' }, { exp: null }), 'invalid_api_key');
  await expect401(t, await token({ sub: 'acme' }, { exp: Math.floor(Date.now() / 1000) - 120 }), 'token_expired');
  await expect401(t, await token({ sub: 'nobody' }), 'invalid_api_key');
  const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${Buffer.from(JSON.stringify({ sub: 'acme', type: 'access', exp: Math.floor(Date.now() / 1000) + 60, iss: 'dash', aud: 'tollgate' })).toString('base64url')}.`;
  await expect401(t, none, 'invalid_api_key');
  await expect401(t, 'not-a-key-at-all', 'invalid_api_key');
  await expect401(t, 'tg_unknown_1234567890', 'invalid_api_key');
});

t.test('422 {"msg"} for an undecodable token or a type other than access', async (t) => {
  await expect422(t, 'aaa.bbb.ccc');
  await expect422(t, await token({ sub: 'acme', type: 'refresh' }));
  const models = await fetch(`${gw.url}/v1/models`, { headers: withToken('x.y.z') });
  t.equal(models.status, 422);
});

t.test('a revoked session is 401 session_revoked from then on', async (t) => {
  const tok = await token({ sub: 'acme', sid: 'sess-to-revoke' });
  t.equal((await postChat(gw.url, ask, withToken(tok))).status, 200);
  const revoke = await fetch(`${gw.url}/admin/sessions/sess-to-revoke/revoke`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(revoke.status, 204, 'revoked: 204, no body');
  t.equal(await revoke.text(), '');
  await expect401(t, tok, 'session_revoked');
  t.equal((await postChat(gw.url, ask, withToken(await token({ sub: 'acme', sid: 'another-session' })))).status, 200, 'other sessions are unaffected');
});

t.test('developer keys still work beside JWTs; a JWT is never taken for a key', async (t) => {
  t.equal((await postChat(gw.url, ask, withToken(DEMO_KEY))).status, 200);
  await expect401(t, 'tg_a.b.c', 'invalid_api_key');
});

t.test('without auth.jwt, a JWT-shaped credential is 401 invalid_api_key', async (t) => {
  const g = await startGateway(baseConfig());
  t.teardown(() => g.close());
  const res = await postChat(g.url, ask, withToken(await token({ sub: 'acme' })));
  t.equal(res.status, 401);
  t.equal(res.json().code, 'invalid_api_key');
});

// Found by test/property/headers: String#trim stripped NBSP around the credential, so
// "Bearer \xa0<key>" authenticated as <key>.
t.test('only SP and HTAB surround a credential: a key wrapped in NBSP is not the key', async (t) => {
  const body = Buffer.from(JSON.stringify(ask));
  const send = (auth: string) => rawRequest(gw.url, {
    method: 'POST', path: '/v1/chat/completions', body,
    headers: [['connection', 'close'], ['content-type', 'application/json'], ['content-length', String(body.length)], ['authorization', auth]],
  });
  for (const auth of [`Bearer \xa0${DEMO_KEY}`, `Bearer ${DEMO_KEY}\xa0`]) {
    const res = (await send(auth)).responses[0]!;
    t.equal(res.status, 401);
    t.equal(JSON.parse(res.body).code, 'invalid_api_key');
  }
  t.equal((await send(`Bearer  \t${DEMO_KEY}`)).responses[0]!.status, 200, 'SP and HTAB are optional whitespace');
});
