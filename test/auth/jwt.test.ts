// Dashboard JWT verification: every outcome of the contract, with keys generated here and a
// local JWKS server on a real socket.

import t, { type Test } from 'tap';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportPKCS8, exportSPKI, generateKeyPair, importPKCS8, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { JwtVerifier } from '../../lib/auth/jwt.js';
import { looksLikeJwt, TokenShapeError, type JwtIdentity } from '../../lib/auth/jwt-common.js';
import { GatewayError, type ErrorCode } from '../../lib/errors.js';

const SECRET = 'dashboard-secret-0123456789abcdef0123456789';
const now = () => Math.floor(Date.now() / 1000);
const b64u = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

interface SignOpts { alg?: string; kid?: string; exp?: number | null }

/** Signs claims (type access, sub, sid, exp in an hour unless overridden or null). */
async function sign(key: CryptoKey | Uint8Array, claims: JWTPayload = {}, opts: SignOpts = {}): Promise<string> {
  const body: JWTPayload = { type: 'access', sub: 'acme', sid: 'sess_1', ...claims };
  if (opts.exp !== null) body.exp = opts.exp ?? now() + 3600;
  const header = { alg: opts.alg ?? 'HS256', typ: 'JWT', ...(opts.kid ? { kid: opts.kid } : {}) };
  return new SignJWT(body).setProtectedHeader(header).sign(key);
}

const secretKey = new TextEncoder().encode(SECRET);
const hs = new JwtVerifier({ secret: SECRET });

async function caught(p: Promise<unknown>): Promise<unknown> {
  try { await p; } catch (err) { return err; }
  throw new Error('expected a rejection');
}

/** Asserts a 401 GatewayError with `code`; with `token`, that its message does not carry it. */
async function expectCode(t: Test, p: Promise<unknown>, code: ErrorCode, label = '', token?: string) {
  const err = await caught(p);
  t.type(err, GatewayError, `${code}: a GatewayError ${label}`.trim());
  const g = err as GatewayError;
  t.equal(g.code, code);
  t.equal(g.status, 401);
  if (token !== undefined) t.notOk(g.message.includes(token), 'the message does not carry the token');
  return g;
}

/** The jose error code behind a GatewayError (kept as its cause for the log). */
const causeCode = (g: GatewayError) => (g.cause as { code?: string } | undefined)?.code;

async function expectShape(t: Test, p: Promise<unknown>, msg?: RegExp) {
  const err = await caught(p);
  t.type(err, TokenShapeError, 'a TokenShapeError');
  t.notOk(err instanceof GatewayError);
  const e = err as TokenShapeError;
  t.equal(e.status, 422);
  if (msg) t.match(e.message, msg);
}

t.test('looksLikeJwt', async (t) => {
  t.equal(looksLikeJwt('tg_demo_0000000000000000'), false, 'developer keys are not JWT-shaped');
  t.equal(looksLikeJwt('a.b'), false);
  t.equal(looksLikeJwt('a.b.c.d'), false);
  t.equal(looksLikeJwt('a.b.c'), true);
  t.equal(looksLikeJwt('a.b.'), true, 'an empty signature is still three segments');
  t.equal(looksLikeJwt(await sign(secretKey)), true);
});

t.test('HS256 secret', async (t) => {
  const identity: JwtIdentity = await hs.verify(await sign(secretKey));
  t.same(identity, { accountId: 'acme', sessionId: 'sess_1' });
  t.same(await hs.verify(await sign(secretKey, { sid: undefined })), { accountId: 'acme', sessionId: undefined }, 'sid is optional');
  t.same((await hs.verify(await sign(secretKey, {}, { alg: 'HS512' }))).accountId, 'acme', 'HS512 is fine too');
  t.same(hs.algorithms, ['HS256', 'HS384', 'HS512']);

  const other = await sign(new TextEncoder().encode('another-secret-another-secret-xx'));
  await expectCode(t, hs.verify(other), 'invalid_api_key', '', other);
  const good = await sign(secretKey);
  const tampered = good.slice(0, -4) + (good.endsWith('AAAA') ? 'BBBB' : 'AAAA');
  t.equal(causeCode(await expectCode(t, hs.verify(tampered), 'invalid_api_key', 'tampered')), 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED');
  const { privateKey } = await generateKeyPair('RS256');
  await expectCode(t, hs.verify(await sign(privateKey, {}, { alg: 'RS256' })), 'invalid_api_key', 'RS256 is not allowed with a secret');
});

t.test('RS256 and PS256 via public_key', async (t) => {
  const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
  const pem = await exportSPKI(publicKey);
  const v = new JwtVerifier({ public_key: pem });
  t.same(await v.verify(await sign(privateKey, {}, { alg: 'RS256' })), { accountId: 'acme', sessionId: 'sess_1' });
  const pss = await importPKCS8(await exportPKCS8(privateKey), 'PS256');
  t.equal((await v.verify(await sign(pss, {}, { alg: 'PS256' }))).accountId, 'acme', 'the same RSA key may sign PS256');
  t.equal((await v.verify(await sign(privateKey, { sub: 'other' }, { alg: 'RS256' }))).accountId, 'other', 'the cached imported key is reused');

  const stranger = (await generateKeyPair('RS256')).privateKey;
  await expectCode(t, v.verify(await sign(stranger, {}, { alg: 'RS256' })), 'invalid_api_key');

  // Algorithm confusion: HS256 keyed with the PEM text the verifier holds as its public key.
  const confused = await sign(new TextEncoder().encode(pem), {}, { alg: 'HS256' });
  const g = await expectCode(t, v.verify(confused), 'invalid_api_key', '', confused);
  t.equal(causeCode(g), 'ERR_JOSE_ALG_NOT_ALLOWED', 'refused for its algorithm');
});

t.test('ES256 via public_key', async (t) => {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const v = new JwtVerifier({ public_key: await exportSPKI(publicKey) });
  t.same(v.algorithms, ['ES256'], 'only the curve\'s algorithm');
  t.same(await v.verify(await sign(privateKey, {}, { alg: 'ES256' })), { accountId: 'acme', sessionId: 'sess_1' });
  const rsa = (await generateKeyPair('RS256')).privateKey;
  await expectCode(t, v.verify(await sign(rsa, {}, { alg: 'RS256' })), 'invalid_api_key');
});

t.test('a public_key that is not a key fails at construction', async (t) => {
  t.throws(() => new JwtVerifier({ public_key: 'not a pem' }), /public_key is not a PEM public key/);
  t.throws(() => new JwtVerifier({ secret: SECRET, public_key: 'x' }), /exactly one/);
});

t.test('issuer and audience', async (t) => {
  const v = new JwtVerifier({ secret: SECRET, issuer: 'https://dash.example', audience: 'tollgate' });
  t.equal((await v.verify(await sign(secretKey, { iss: 'https://dash.example', aud: 'tollgate' }))).accountId, 'acme');
  t.equal((await v.verify(await sign(secretKey, { iss: 'https://dash.example', aud: ['x', 'tollgate'] }))).accountId, 'acme', 'aud may be an array');
  await expectCode(t, v.verify(await sign(secretKey, { iss: 'https://evil.example', aud: 'tollgate' })), 'invalid_api_key');
  await expectCode(t, v.verify(await sign(secretKey, { iss: 'https://dash.example', aud: 'other' })), 'invalid_api_key');
  await expectCode(t, v.verify(await sign(secretKey, { aud: 'tollgate' })), 'invalid_api_key', 'missing iss');
  await expectCode(t, v.verify(await sign(secretKey, { iss: 'https://dash.example' })), 'invalid_api_key', 'missing aud');
  t.equal((await hs.verify(await sign(secretKey, { iss: 'anyone', aud: 'anything' }))).accountId, 'acme', 'not checked when not configured');
});

t.test('exp and nbf', async (t) => {
  const noExp = await expectCode(t, hs.verify(await sign(secretKey, {}, { exp: null })), 'invalid_api_key', 'no exp');
  t.equal(causeCode(noExp), 'ERR_JWT_CLAIM_VALIDATION_FAILED');
  const expired = await sign(secretKey, {}, { exp: now() - 60 });
  await expectCode(t, hs.verify(expired), 'token_expired', '', expired);
  t.equal((await hs.verify(await sign(secretKey, {}, { exp: now() - 2 }))).accountId, 'acme', 'within the 5 s tolerance');
  await expectCode(t, hs.verify(await sign(secretKey, { exp: 'tomorrow' } as unknown as JWTPayload, { exp: null })), 'invalid_api_key', 'a non-numeric exp');
  await expectCode(t, hs.verify(await sign(secretKey, { nbf: now() + 60 })), 'invalid_api_key');
  const forged = await sign(new TextEncoder().encode('another-secret-another-secret-xx'), {}, { exp: now() - 60 });
  await expectCode(t, hs.verify(forged), 'invalid_api_key', 'an expired token with a bad signature is invalid, not expired');
});

t.test('alg none', async (t) => {
  const payload = { type: 'access', sub: 'acme', exp: now() + 3600 };
  const none = `${b64u({ alg: 'none', typ: 'JWT' })}.${b64u(payload)}.`;
  t.equal(looksLikeJwt(none), true);
  const g = await expectCode(t, hs.verify(none), 'invalid_api_key', '', none);
  t.equal(causeCode(g), 'ERR_JOSE_ALG_NOT_ALLOWED');
  const { publicKey } = await generateKeyPair('RS256');
  await expectCode(t, new JwtVerifier({ public_key: await exportSPKI(publicKey) }).verify(none), 'invalid_api_key');
});

t.test('undecodable tokens and non-access types are 422', async (t) => {
  const payload = b64u({ type: 'access', sub: 'acme', exp: now() + 3600 });
  const header = b64u({ alg: 'HS256', typ: 'JWT' });
  await expectShape(t, hs.verify('a.b.c'), /header/);
  await expectShape(t, hs.verify('!!!.x.y'), /header/);
  await expectShape(t, hs.verify(`${b64u('[1,2]')}.${payload}.sig`), /header/);
  await expectShape(t, hs.verify(`${b64u('"HS256"')}.${payload}.sig`), /header/);
  await expectShape(t, hs.verify(`${header}.${b64u('123')}.sig`), /payload/);
  await expectShape(t, hs.verify(`${header}.${b64u('{not json')}.sig`), /payload/);
  await expectShape(t, hs.verify(`${header}.!!!.sig`), /payload/);
  await expectShape(t, hs.verify(`${header}..sig`), /payload/);

  await expectShape(t, hs.verify(await sign(secretKey, { type: 'refresh' })), /^Token type must be "access"\.$/);
  await expectShape(t, hs.verify(await sign(secretKey, { type: undefined })), /type/);
  await expectShape(t, hs.verify(`${header}.${b64u({ type: 'refresh', sub: 'acme' })}.bogus`), /type/);

  const shaped = await sign(secretKey, { type: 'refresh' });
  const err = await caught(hs.verify(shaped)) as TokenShapeError;
  t.notOk(err.message.includes(shaped), 'the message does not carry the token');
});

t.test('sub names the account', async (t) => {
  await expectCode(t, hs.verify(await sign(secretKey, { sub: undefined })), 'invalid_api_key');
  await expectCode(t, hs.verify(await sign(secretKey, { sub: '' })), 'invalid_api_key');
  await expectCode(t, hs.verify(await sign(secretKey, { sid: 42 } as JWTPayload)), 'invalid_api_key', 'a non-string sid');
});

t.test('a credential that is not JWT-shaped', async (t) => {
  await expectCode(t, hs.verify('tg_demo_0000000000000000'), 'invalid_api_key');
});

interface JwksServer { url: string; hits: () => number; setKeys(keys: JWK[]): void; setStatus(s: number): void; close(): Promise<void> }

async function startJwks(keys: JWK[]): Promise<JwksServer> {
  let current = keys;
  let status = 200;
  let hits = 0;
  const server: Server = createServer((req, res) => {
    hits++;
    if (status !== 200) { res.writeHead(status).end('nope'); return; }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: current }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    hits: () => hits,
    setKeys(k) { current = k; },
    setStatus(s) { status = s; },
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

async function jwkOf(key: CryptoKey, kid: string, alg: string): Promise<JWK> {
  return { ...(await exportJWK(key)), kid, alg, use: 'sig' };
}

t.test('JWKS: cached, refetched on a new kid', async (t) => {
  const a = await generateKeyPair('RS256');
  const srv = await startJwks([await jwkOf(a.publicKey, 'k1', 'RS256')]);
  t.teardown(() => srv.close());
  const v = new JwtVerifier({ jwks_url: srv.url, issuer: 'dash' }, { jwksCooldownMs: 0 });

  t.same(await v.verify(await sign(a.privateKey, { iss: 'dash' }, { alg: 'RS256', kid: 'k1' })), { accountId: 'acme', sessionId: 'sess_1' });
  t.equal(srv.hits(), 1);
  t.equal((await v.verify(await sign(a.privateKey, { iss: 'dash', sub: 'b' }, { alg: 'RS256', kid: 'k1' }))).accountId, 'b');
  t.equal(srv.hits(), 1, 'the second verify does not refetch');

  // Rotate: the server now publishes only an ES256 key under a new kid.
  const b = await generateKeyPair('ES256');
  srv.setKeys([await jwkOf(b.publicKey, 'k2', 'ES256')]);
  t.equal((await v.verify(await sign(b.privateKey, { iss: 'dash', sub: 'c' }, { alg: 'ES256', kid: 'k2' }))).accountId, 'c');
  t.equal(srv.hits(), 2, 'an unknown kid triggered one refetch');
  await expectCode(t, v.verify(await sign(a.privateKey, { iss: 'dash' }, { alg: 'RS256', kid: 'k1' })), 'invalid_api_key', 'the rotated-out key');

  await expectCode(t, v.verify(await sign(b.privateKey, { iss: 'other' }, { alg: 'ES256', kid: 'k2' })), 'invalid_api_key', 'wrong issuer');
  await expectCode(t, v.verify(await sign(secretKey, { iss: 'dash' }, { alg: 'HS256', kid: 'k2' })), 'invalid_api_key', 'HS256 is not allowed with a key set');
  await expectCode(t, v.verify(await sign(b.privateKey, { iss: 'dash' }, { alg: 'ES256', kid: 'k2', exp: now() - 60 })), 'token_expired');
});

t.test('JWKS: the default cooldown holds back refetches on unknown kids', async (t) => {
  const a = await generateKeyPair('ES256');
  const srv = await startJwks([await jwkOf(a.publicKey, 'k1', 'ES256')]);
  t.teardown(() => srv.close());
  const v = new JwtVerifier({ jwks_url: srv.url });
  t.equal((await v.verify(await sign(a.privateKey, {}, { alg: 'ES256', kid: 'k1' }))).accountId, 'acme');
  for (let i = 0; i < 3; i++) {
    await expectCode(t, v.verify(await sign(a.privateKey, {}, { alg: 'ES256', kid: `unknown${i}` })), 'invalid_api_key');
  }
  t.equal(srv.hits(), 1, 'unknown kids within the cooldown do not hammer the server');
});

t.test('JWKS unreachable, failing or slow: invalid_api_key', async (t) => {
  const a = await generateKeyPair('RS256');
  const token = await sign(a.privateKey, {}, { alg: 'RS256', kid: 'k1' });

  const gone = await startJwks([]);
  const goneUrl = gone.url;
  await gone.close();
  const down = await caught(new JwtVerifier({ jwks_url: goneUrl }).verify(token));
  t.type(down, GatewayError);
  t.equal((down as GatewayError).code, 'invalid_api_key');
  t.equal((down as GatewayError).message, 'The access token could not be verified.');
  t.ok((down as GatewayError).cause, 'the cause is kept for the log');

  const failing = await startJwks([await jwkOf(a.publicKey, 'k1', 'RS256')]);
  t.teardown(() => failing.close());
  failing.setStatus(500);
  await expectCode(t, new JwtVerifier({ jwks_url: failing.url }).verify(token), 'invalid_api_key', 'a 500 from the key set', token);

  const hang = createServer(() => { /* never answers */ });
  await new Promise<void>((r) => hang.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => { hang.closeAllConnections(); hang.close(() => r()); }));
  const hangUrl = `http://127.0.0.1:${(hang.address() as AddressInfo).port}/jwks`;
  const started = Date.now();
  await expectCode(t, new JwtVerifier({ jwks_url: hangUrl }, { jwksTimeoutMs: 200 }).verify(token), 'invalid_api_key');
  t.ok(Date.now() - started < 3000, 'the fetch timed out');
});
