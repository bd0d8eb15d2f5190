// Boundary 7: dashboard JWTs, generated: random segments, well-formed tokens with odd headers
// and claims (alg none, crit, oversized claims, every kind of exp), signed with the right
// secret, a wrong one, a mismatched algorithm or not at all. CONTRACT section 4 decides each:
// exactly one of 200, 422 {"msg"}, or 401 invalid_api_key / token_expired / session_revoked.

import t from 'tap';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { holds } from './arbitraries.js';
import { assertEnvelope, assertNoCredentials } from './invariants.js';

const SECRET = 'jwt-secret-for-property-tests-0123456789';
const WRONG = 'jwt-secret-for-property-tests-0123456780';
const ADMIN = 'admin-token-jwt-0123456789';
const REVOKED = 'sid-revoked-1';
const NOW = Math.floor(Date.now() / 1000);

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.auth = { jwt: { secret: SECRET } };
  gw = await startGateway(c);
  const res = await request(`${gw.url}/admin/sessions/${REVOKED}/revoke`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
  await res.body.dump();
  assert.ok(res.statusCode < 300, 'session revoked');
});
t.teardown(() => gw.close());

const b64u = (v: string | Buffer) => Buffer.from(v).toString('base64url');
const HASH: Record<string, string> = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' };

const absent = fc.constant(undefined);
const opt = <T>(a: fc.Arbitrary<T>, weight = 3) => fc.oneof({ weight, arbitrary: a }, absent);

/** exp: future, past (well outside the 5 s leeway), and the odd ones. */
const exp = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 60, max: 1e7 }).map((d) => NOW + d) },
  { weight: 2, arbitrary: fc.integer({ min: 60, max: 1e9 }).map((d) => NOW - d) },
  fc.constantFrom(undefined, null, 0, -1, 1.5, NOW + 3600.5, 1e308, 2 ** 53, '9999999999', true, [NOW + 3600]),
);

const header = fc.record({
  alg: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('HS256', 'HS384', 'HS512') }, fc.constantFrom('none', 'None', 'RS256', 'ES256', 'PS256', 'EdDSA', '', 'hs256', undefined, 7, null)),
  typ: opt(fc.constantFrom('JWT', 'at+jwt', 'jwt', 5)),
  kid: opt(fc.string({ maxLength: 8 }), 1),
  crit: fc.oneof({ weight: 8, arbitrary: absent }, fc.constantFrom(['exp'], ['x'], [])),
  x5u: opt(fc.constant('https://example.com/x'), 1),
});

const claims = fc.record({
  sub: fc.oneof({ weight: 12, arbitrary: fc.constantFrom('demo', 'acme') }, fc.constantFrom('nobody', '', 5, null, undefined, 'demo ', 'DEMO')),
  type: fc.oneof({ weight: 12, arbitrary: fc.constant('access') }, fc.constantFrom('refresh', '', 'Access', 1, null, undefined)),
  exp,
  nbf: opt(fc.oneof(fc.integer({ min: 60, max: 1e6 }).map((d) => NOW - d), fc.integer({ min: 3600, max: 1e6 }).map((d) => NOW + d), fc.constant('soon')), 1),
  iat: opt(fc.oneof(fc.integer({ min: 0, max: 1e6 }).map((d) => NOW - d), fc.constant('x')), 2),
  sid: opt(fc.constantFrom('sid-ok-1', REVOKED, '', 5, null), 2),
  iss: opt(fc.string({ maxLength: 6 }), 1),
  aud: opt(fc.oneof(fc.string({ maxLength: 6 }), fc.array(fc.string({ maxLength: 4 }), { maxLength: 2 })), 1),
  pad: opt(fc.integer({ min: 1000, max: 6000 }).map((n) => 'x'.repeat(n)), 1),
});

const signing = fc.oneof({ weight: 10, arbitrary: fc.constant('right') }, fc.constantFrom('wrong', 'empty', 'garbage', 'other-alg'));

const segment = fc.array(fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_*'.split('')), { maxLength: 40 }).map((a) => a.join(''));

/** Segments that break decoding, or decode to something that is not a JSON object. */
const brokenSegment = fc.oneof(
  segment,
  fc.constantFrom('', '*', 'e30', 'W10', 'bnVsbA', 'Ig', 'eyJ9', b64u('[1]'), b64u('"x"'), b64u('{"a":1'), b64u(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]))),
);

const token = fc.oneof(
  { weight: 8, arbitrary: fc.record({ header, claims, signing, mangle: fc.oneof({ weight: 10, arbitrary: fc.constant(undefined) }, fc.record({ part: fc.constantFrom(0, 1), seg: brokenSegment })) }) },
  { weight: 1, arbitrary: fc.tuple(segment, segment, segment).map(([a, b, c]) => ({ raw: `${a}.${b}.${c}` })) },
);

function build(spec: any): string {
  if (spec.raw !== undefined) return spec.raw;
  const h = b64u(JSON.stringify(spec.header));
  const p = b64u(JSON.stringify(spec.claims));
  const parts = [h, p];
  if (spec.mangle !== undefined) parts[spec.mangle.part] = spec.mangle.seg;
  const input = `${parts[0]}.${parts[1]}`;
  const alg = HASH[spec.header.alg] ?? 'sha256';
  let sig: string;
  switch (spec.signing) {
    case 'right': sig = createHmac(alg, SECRET).update(input).digest('base64url'); break;
    case 'wrong': sig = createHmac(alg, WRONG).update(input).digest('base64url'); break;
    case 'other-alg': sig = createHmac(alg === 'sha256' ? 'sha512' : 'sha256', SECRET).update(input).digest('base64url'); break;
    case 'empty': sig = ''; break;
    default: sig = 'c2lnbmF0dXJl';
  }
  return `${input}.${sig}`;
}

/** A segment as jose reads it (base64url, strict UTF-8, JSON), or undefined if it cannot be. */
function decode(seg: string): Record<string, unknown> | undefined {
  if (seg === '' || !/^[A-Za-z0-9_-]+$/.test(seg) || seg.length % 4 === 1) return undefined;
  try {
    const v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(seg, 'base64url')));
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** CONTRACT section 4, Authentication, for a JWT-shaped credential: the allowed outcomes. */
function outcome(tok: string): string[] {
  const [h, p, s] = tok.split('.') as [string, string, string];
  const head = decode(h);
  const claims = decode(p);
  if (head === undefined || claims === undefined || claims.type !== 'access') return ['422'];
  const alg = head.alg;
  const signed = typeof alg === 'string' && HASH[alg] !== undefined && s === createHmac(HASH[alg]!, SECRET).update(`${h}.${p}`).digest('base64url');
  if (!signed || head.crit !== undefined) return ['invalid_api_key'];
  // Claims: exp required and a number; nbf and iat numbers when present; any failing claim
  // is a 401, and an expired exp is token_expired (which one wins when several fail is open).
  const failures: string[] = [];
  if (claims.exp === undefined || claims.exp === null || typeof claims.exp !== 'number') failures.push('invalid_api_key');
  else if (claims.exp <= NOW) failures.push('token_expired');
  if (claims.nbf !== undefined && (typeof claims.nbf !== 'number' || claims.nbf > NOW + 60)) failures.push('invalid_api_key');
  if (claims.iat !== undefined && typeof claims.iat !== 'number') failures.push('invalid_api_key');
  if (failures.length > 0) return failures;
  if (typeof claims.sub !== 'string' || claims.sub === '') return ['invalid_api_key'];
  if (claims.sid !== undefined && (typeof claims.sid !== 'string' || claims.sid === '')) return ['invalid_api_key'];
  if (claims.sid === REVOKED) return ['session_revoked'];
  if (claims.sub !== 'demo' && claims.sub !== 'acme') return ['invalid_api_key'];
  return ['200'];
}

/** Every generated token long enough to be told apart: none may reach the logs. */
const sent: string[] = [];

t.test('generated JWTs: exactly the contract outcome', async (t) => {
  await holds(t, 'jwt outcomes', fc.asyncProperty(token, fc.boolean(), async (spec, chat) => {
    const tok = build(spec);
    if (tok.length >= 24) sent.push(tok);
    const res = chat
      ? await request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json' }, body: '{"model":"echo-small","messages":[{"role":"user","content":"hi"}]}' })
      : await request(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${tok}` } });
    const text = await res.body.text();
    const allowed = outcome(tok);
    const rid = res.headers['x-request-id'];
    if (res.statusCode === 200) {
      assert.ok(allowed.includes('200'), `served, but the contract says ${allowed}`);
    } else if (res.statusCode === 422) {
      assert.ok(allowed.includes('422'), `422, but the contract says ${allowed}: ${text}`);
      const body = JSON.parse(text);
      assert.deepEqual(Object.keys(body), ['msg'], 'the bare {"msg"} body');
      assert.equal(typeof body.msg, 'string');
      assert.ok(typeof rid === 'string' && rid !== '', 'x-request-id on a 422');
    } else {
      const e = assertEnvelope({ status: res.statusCode, headers: res.headers, text });
      assert.ok(allowed.includes(e.code), `${e.code}, but the contract says ${allowed}`);
    }
    assert.ok(!text.includes(tok.split('.')[2]!) || tok.split('.')[2]!.length < 8, 'the token is not echoed');
  }), 400);
});

t.test('the logs hold no credential', async (t) => {
  assertNoCredentials(t, gw.logs(), [...sent, SECRET, ADMIN, 'tg_demo_0000000000000000']);
});
