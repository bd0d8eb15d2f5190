// normalisePath (lib/http/path.ts): one path, one decision (CONTRACT section 21). Dot segments
// and repeated slashes resolved, encoded unreserved characters decoded, an encoded '\' or '.'
// (and a raw '\', '#' or control character) refused 400 invalid_value, an encoded '/' or a
// malformed '%' refused by checkOutbound in a path leaving the gateway; the result is a fixed
// point, of itself and of the WHATWG URL reading the passthrough's proxy does.

import t from 'tap';
import fc from 'fast-check';
import { GatewayError } from '../../lib/errors.js';
import { checkOutbound, normalisePath, normaliseTarget } from '../../lib/http/path.js';
import { holds } from '../property/arbitraries.js';

t.test('normal paths come back as they are (the same string)', async (t) => {
  for (const p of ['/', '/v1', '/v1/', '/v1/chat/completions', '/admin/keys', '/healthz', '/static/app.js', '/a/.../b', '/a/.b/..c/c..',
    '/v1/models/org:model', '/x-y_z~', '/a/b/', '/%20', '/%3F%23', '/%25', '/%E2%82%AC', '/"<>{}|^`', '/é']) {
    t.equal(normalisePath(p), p, p);
  }
});

t.test('dot segments and repeated slashes are resolved (RFC 3986 5.2.4)', async (t) => {
  const cases: Array<[string, string]> = [
    ['/./v1/chat/completions', '/v1/chat/completions'],
    ['/x/../v1/completions', '/v1/completions'],
    ['//v1/chat/completions', '/v1/chat/completions'],
    ['/v1//chat///completions', '/v1/chat/completions'],
    ['/v1/chat/./completions', '/v1/chat/completions'],
    ['/v1/x/../chat/completions', '/v1/chat/completions'],
    ['/../../../v1/chat/completions', '/v1/chat/completions'],
    ['/..', '/'],
    ['/.', '/'],
    ['//', '/'],
    ['/////', '/'],
    ['/v1/..', '/'],
    ['/v1/.', '/v1/'],
    ['/a/b/..', '/a/'],
    ['/a/b/../', '/a/'],
    ['/a/b/.//', '/a/b/'],
    ['/a/./b/../../c', '/c'],
    ['/v1/../admin/keys', '/admin/keys'],
    ['/./././x', '/x'],
  ];
  for (const [raw, want] of cases) t.equal(normalisePath(raw), want, raw);
});

t.test('an encoded unreserved character is decoded (as a model server does before routing)', async (t) => {
  t.equal(normalisePath('/v%31/chat/completions'), '/v1/chat/completions');
  t.equal(normalisePath('/%76%31/%63hat/completions'), '/v1/chat/completions');
  t.equal(normalisePath('/%56%31'), '/V1', 'upper case stays upper case: routes are case-sensitive');
  t.equal(normalisePath('/a%2Db%5Fc%7Ed'), '/a-b_c~d');
  t.equal(normalisePath('/a%20b%3f%23%25'), '/a%20b%3f%23%25', 'reserved and other characters stay encoded');
  t.equal(normalisePath('/%252e%252e/v1'), '/%252e%252e/v1', 'a double encoding is decoded by nobody: %25 stays %25');
  t.equal(normalisePath('/%2532e'), '/%2532e');
  t.equal(normalisePath('/%25%32%65'), '/%252e', 'decoding never makes a new triplet an upstream would read as a dot');
});

function refused(t: any, raw: string, why: RegExp): GatewayError | undefined {
  try {
    normalisePath(raw);
  } catch (err) {
    t.ok(err instanceof GatewayError, `${JSON.stringify(raw)}: a GatewayError`);
    const e = err as GatewayError;
    t.same([e.status, e.code, e.type, e.param], [400, 'invalid_value', 'invalid_request_error', null], `${JSON.stringify(raw)}: 400 invalid_value`);
    t.match(e.message, why, `${JSON.stringify(raw)}: ${e.message}`);
    return e;
  }
  t.fail(`${JSON.stringify(raw)} was not refused`);
  return undefined;
}

t.test('encoded /, \\ and . (either case), raw \\ and #, controls and malformed % are refused 400 invalid_value', async (t) => {
  for (const p of ['/v1/%2e%2e/admin/keys', '/%2E/v1', '/x/%2e./v1', '/x/.%2E/v1', '/a%5Cb', '/a%5cb', '/file%2Ejs', '/%2F%2e']) {
    refused(t, p, /encoded '\.' or '\\' \(%2E, %5C\)/);
  }
  refused(t, '/x\\..\\v1\\chat\\completions', /holds a '\\'/);
  refused(t, '\\v1', /must begin with '\/'/);
  refused(t, '/v1#/chat/completions', /holds a '#'/);
  for (const c of ['\t', '\n', '\r', ' ', '\x00', '\x7f']) refused(t, `/v${c}1/chat`, /control character or space/);
  for (const p of ['', '*', 'v1/chat/completions', 'http://evil/v1/chat/completions', 'https://x/admin']) refused(t, p, /must begin with '\/'/);
  const long = `/${'%2e'.repeat(500)}`;
  const m = refused(t, long, /encoded/)!.message;
  t.ok(m.length < 400 && m.includes(`${long.slice(0, 200)}…"`), 'the message quotes at most 200 characters of the path');
});

t.test("an encoded '/' stays encoded; checkOutbound refuses it in a path that leaves the gateway", async (t) => {
  t.equal(normalisePath('/v1/models/Qwen%2FQwen2.5-7B'), '/v1/models/Qwen%2FQwen2.5-7B', 'an id with a slash, as the openai SDK sends it');
  t.equal(normalisePath('/x/../%2Fv1//chat'), '/%2Fv1/chat', 'resolved around it, never into it');
  t.doesNotThrow(() => checkOutbound('/v1/tokenize'));
  t.doesNotThrow(() => checkOutbound('/a%20b%25'));
  for (const p of ['/%2Fv1/chat/completions', '/%2fv1', '/v1%2Fchat%2Fcompletions', '/x/%2F', '/%', '/%2', '/%zz', '/%2%65', '/%%32e', '/a%g0', '/%76%31/chat/completions/%zz']) {
    try {
      checkOutbound(p);
      t.fail(`${p} was not refused`);
    } catch (err) {
      const e = err as GatewayError;
      t.same([e.status, e.code, e.type, e.param], [400, 'invalid_value', 'invalid_request_error', null], `${p}: 400 invalid_value`);
      t.match(e.message, /%2F/i.test(p) ? /encoded '\/' \(%2F\) is accepted only in the gateway's own paths/ : /a '%' must be followed by two hex digits/);
    }
  }
});

t.test("a '%' that begins no triplet: nothing is decoded, dots still resolved, encoded dots still refused", async (t) => {
  for (const p of ['/%', '/%2', '/%zz', '/%2%65', '/%%32e', '/a%g0', '/admin/accounts/%ZZ']) t.equal(normalisePath(p), p, p);
  t.equal(normalisePath('/x/../%76%31/chat/completions/%zz'), '/%76%31/chat/completions/%zz', 'never decoded: so never made /v1 of');
  t.equal(normalisePath('/v1/./models/%zz'), '/v1/models/%zz');
  refused(t, '/%zz/%2e%2e/v1', /encoded/);
  refused(t, '/%%2e', /encoded/);
});

t.test('normaliseTarget keeps the query as it is', async (t) => {
  t.equal(normaliseTarget('/./v1/models?x=/../y&z=%2e'), '/v1/models?x=/../y&z=%2e');
  const plain = '/v1/models?a=b';
  t.equal(normaliseTarget(plain), plain);
  t.equal(normaliseTarget('/v1/models'), '/v1/models');
  t.throws(() => normaliseTarget('/%2e%2e/v1?x'), GatewayError);
});

/** Segments as a WHATWG URL (http-proxy-3, undici, browsers) reads a path: after its own dot resolution. */
function whatwg(path: string): string {
  return new URL(path, 'http://base.invalid').pathname;
}

/** Hostile paths: segments from dots, encodings (single, double, mixed case), slashes and names. */
const hostile = fc.array(fc.oneof(
  fc.constantFrom('.', '..', '%2e', '%2E', '.%2e', '%2e.', '%2e%2e', '%252e', '%25%32%65', '%2f', '%2F', '%5c', '%5C', '\\', '', '#', '%', '%2', '%zz'),
  fc.constantFrom('v1', 'V1', 'v%31', '%76%31', 'admin', 'console', 'chat', 'completions', 'x', 'healthz', '%41', 'a.b', '...'),
  fc.stringMatching(/^[A-Za-z0-9._~%-]{0,6}$/),
), { maxLength: 8 }).map((segs) => `/${segs.join('/')}`);

t.test('property: a normalised path is a fixed point, of itself and of a WHATWG URL; never another error', async (t) => {
  await holds(t, 'a normalised path is a fixed point', fc.property(hostile, (raw) => {
    let path: string;
    try {
      path = normalisePath(raw);
    } catch (err) {
      return err instanceof GatewayError && err.code === 'invalid_value' && err.status === 400;
    }
    if (normalisePath(path) !== path) return false;
    if (!path.startsWith('/') || path.includes('//') || /(^|\/)\.\.?(\/|$)/.test(path) || /%2[eE]|%5[cC]/.test(path)) return false;
    // A WHATWG URL reads the path as it is (these paths hold no character it would percent-encode).
    return whatwg(path) === path;
  }), 3000);
});
