// Boundary: the request path (CONTRACT section 21, "one path, one decision"; issue #40 finding
// 5). Hostile paths (dot segments, percent encodings single and double and of either case,
// repeated slashes, backslashes, absolute-form targets, fragments) written byte for byte on a
// raw socket to a gateway whose passthrough (without passthrough_auth: the attack's case) goes
// to a fake model server that records every request it gets. Invariants: a path that a model
// server would read as /v1, /admin, /console or an ops path is answered by the gateway (its
// route, which wants a key) or refused 400 invalid_value, and never reaches the model server;
// what the model server gets is exactly the path the gateway decided on, and never one of its
// generation endpoints (refused 404 unknown_url); never a 500.

import t from 'tap';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import { refuseGeneration } from '../../lib/http/generation-paths.js';
import { checkOutbound, normaliseTarget } from '../../lib/http/path.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest } from '../helpers/raw-request.js';
import { holds } from './arbitraries.js';
import { assertEnvelope } from './invariants.js';

const ADMIN = 'admin-token-paths-0123456789';

/**
 * The path a model server routes on, read as loosely as any of them reads it: the fragment and
 * an absolute-form scheme and host dropped, every %XX decoded once, '\' as '/', dot segments
 * and repeated slashes resolved. Stricter than uvicorn, cpp-httplib or a WHATWG URL alone.
 */
function serverView(target: string): string {
  let p = target.split('?')[0]!.split('#')[0]!;
  const abs = /^[a-z][a-z0-9+.-]*:\/\/[^/]*/i.exec(p);
  if (abs !== null) p = p.slice(abs[0].length);
  p = p.replace(/%([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))).replace(/\\/g, '/');
  const out: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') out.pop();
    else out.push(seg);
  }
  return `/${out.join('/')}`;
}

/** The gateway's metered and privileged routes: never the model server's to answer. */
function gatewayRoute(path: string): boolean {
  return /^\/(v1|admin|console)(\/|$)/.test(path);
}

/** A model server's generation endpoint (passthrough refuses it 404 unknown_url). */
function generation(path: string): boolean {
  try {
    refuseGeneration([], path, 'POST');
    return false;
  } catch {
    return true;
  }
}

/** Everything the gateway answers itself: those and the ops paths. */
function owned(path: string): boolean {
  return gatewayRoute(path) || path === '/healthz' || path === '/readyz' || path === '/metrics';
}

const seen: string[] = [];
let gw: TestGateway;
t.before(async () => {
  const upstream = createServer((req, res) => {
    seen.push(req.url!);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'x-fake-model-server': 'yes' });
      res.end(JSON.stringify({ url: req.url }));
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  t.teardown(() => { upstream.closeAllConnections(); upstream.close(); });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.server.passthrough = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

/** A segment of a path: names of the gateway's routes (some in disguise), dots, encodings, nothing. */
const segment = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('v1', 'v1', 'v1', 'V1', 'v%31', '%76%31', '%56%31', 'admin', 'console', 'healthz', 'metrics', 'chat', 'completions', 'keys', 'x', 'tokenize', 'a.b', '...') },
  { weight: 3, arbitrary: fc.constantFrom('.', '..', '', '') },
  { weight: 2, arbitrary: fc.constantFrom('%2e', '%2E', '.%2e', '%2E.', '%2e%2e', '%252e', '%252E%252e', '%25%32%65', '%2%65', '%', '%zz', '#') },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9._~-]{0,5}$/) },
);
/** What goes between segments. */
const separator = fc.oneof(
  { weight: 8, arbitrary: fc.constant('/') },
  { weight: 2, arbitrary: fc.constantFrom('//', '/./', '/../') },
  { weight: 1, arbitrary: fc.constantFrom('\\', '%2f', '%2F', '%5c', '%5C', '%252f') },
);
const lead = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('/', '//', '/./', '/x/../', '/../') },
  { weight: 1, arbitrary: fc.constantFrom('\\', '', 'http://evil/', 'http://evil', '%2F', '/%2e/') },
);
const query = fc.constantFrom('', '', '?a=1', '?p=/../v1/chat/completions', '?x=%2e%2e');
const hostilePath = fc.tuple(lead, fc.array(fc.tuple(segment, separator), { maxLength: 4 }), segment, query)
  .map(([l, parts, last, q]) => `${l}${parts.map(([s, sep]) => s + sep).join('')}${last}${q}`)
  .filter((p) => p.length > 0);

t.test('property: hostile paths never reach the model server as a route of the gateway; never a 500', async (t) => {
  let passed = 0;
  let refused = 0;
  let metered = 0;
  let generated = 0;
  await holds(t, 'one path, one decision', fc.asyncProperty(hostilePath, async (path) => {
    const before = seen.length;
    const { responses } = await rawRequest(gw.url, {
      method: 'POST', path, headers: [['content-type', 'application/json'], ['content-length', '2'], ['connection', 'close']], body: Buffer.from('{}'),
    });
    assert.equal(responses.length, 1, `one answer to ${path}`);
    const res = responses[0]!;
    assert.ok(res.status < 500, `never a 5xx: ${res.status} ${res.body.slice(0, 200)}`);
    // The decision, from lib/http/path.ts: the normalised target, or refused (undefined).
    let decided: string | undefined;
    try {
      decided = normaliseTarget(path);
      if (!owned(decided.split('?')[0]!)) checkOutbound(decided.split('?')[0]!);
    } catch {
      decided = undefined;
    }
    if (res.headers['x-fake-model-server'] === 'yes') {
      passed++;
      assert.equal(seen.length, before + 1, 'the model server got this one request');
      const got = seen.at(-1)!;
      assert.equal(got, decided, 'the model server got the path the gateway decided on');
      assert.ok(!gatewayRoute(serverView(got)), `the model server never gets a path of the gateway's: ${got}`);
      assert.ok(!gatewayRoute(serverView(path)), `a path a model server reads as the gateway's is never passed through: ${path}`);
      assert.ok(!owned(got.split('?')[0]!), `nor one the gateway answers itself: ${got}`);
      assert.ok(!generation(serverView(got)), `nor a generation endpoint of the model server: ${got}`);
      assert.doesNotMatch(got.split('?')[0]!, /%2f|%5c|%2e|\\|\/\/|(^|\/)\.\.?(\/|$)/i, `no encoded '/', '\\' or '.', '\\', '//' or dot segment leaves the gateway: ${got}`);
      return;
    }
    assert.equal(seen.length, before, `the gateway answered ${path}: the model server got nothing`);
    if (decided === undefined) {
      refused++;
      if (res.headers['x-request-id'] === undefined && !path.startsWith('/')) {
        // A target that is no path and no well-formed absolute URL: Node's HTTP parser refuses it (a bare 400) before any handler.
        assert.deepEqual([res.status, res.body], [400, ''], `the HTTP parser refused ${path}`);
        return;
      }
      const e = assertEnvelope({ status: res.status, headers: res.headers, text: res.body });
      assert.deepEqual([res.status, e.code, e.param, e.body.type], [400, 'invalid_value', null, 'invalid_request_error'], `refused: ${path}`);
      return;
    }
    const p = decided.split('?')[0]!;
    if (!owned(p) && generation(p)) {
      generated++;
      const e = assertEnvelope({ status: res.status, headers: res.headers, text: res.body });
      assert.deepEqual([res.status, e.code, e.body.type], [404, 'unknown_url', 'invalid_request_error'], `a generation endpoint is not passed through: ${path} -> ${p}`);
      return;
    }
    assert.ok(owned(p), `only the gateway's own paths are answered by it: ${path} -> ${p} (${res.status})`);
    if (p === '/v1' || p.startsWith('/v1/') || p.startsWith('/admin')) {
      metered++;
      // A /v1 route wants a key (404 for a path it does not know, 405 for a method it does not take); /admin the admin token.
      const e = assertEnvelope({ status: res.status, headers: res.headers, text: res.body });
      assert.ok(['invalid_api_key', 'unknown_url', 'method_not_allowed'].includes(e.code), `${path} -> ${p}: ${res.status} ${e.code}`);
    }
  }), 400);
  t.comment(`passed through ${passed}, refused ${refused}, answered by /v1 or /admin ${metered}, generation refused ${generated}`);
  t.ok(passed > 20 && refused > 20 && metered > 20 && generated > 5, 'the generator reaches every outcome');
});
