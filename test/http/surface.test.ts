// The HTTP surface through a real socket: routing, request ids, auth, media type, body
// limits, hostile JSON, and the ops endpoints.

import t from 'tap';
import { connect } from 'node:net';
import { once } from 'node:events';
import { request } from 'undici';
import { DEMO_KEY, authHeaders, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.server.max_body_bytes = 4096;
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const ask = { model: 'echo-small', messages: [{ role: 'user', content: 'hi' }] };

async function call(method: string, path: string, opts: { headers?: Record<string, string>; body?: string } = {}) {
  const res = await request(`${gw.url}${path}`, { method: method as any, headers: opts.headers, body: opts.body });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

function expectEnvelope(t: any, res: { status: number; headers: any; text: string }, status: number, code: string, param: string | null = null) {
  t.equal(res.status, status, `status ${status} for ${code}`);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = JSON.parse(res.text);
  t.same(schemas.error(body), [], 'envelope validates');
  t.same(schemas.openaiError(body), [], 'and as an OpenAI error');
  t.equal(body.code, code);
  t.equal(body.param, param, 'param');
  t.equal(body.error.code, code);
  t.equal(body.error.type, body.type);
  t.ok(res.headers['x-request-id'], 'x-request-id header');
  t.equal(body.request_id, res.headers['x-request-id']);
  t.notMatch(res.text, /\n\s+at /, 'no stack trace');
  return body;
}

t.test('ops endpoints', async (t) => {
  const h = await call('GET', '/healthz');
  t.equal(h.status, 200);
  t.same(h.json(), { status: 'ok' });
  const r = await call('GET', '/readyz');
  t.equal(r.status, 200);
  const m = await call('GET', '/metrics');
  t.equal(m.status, 200);
  t.match(m.headers['content-type'], /^text\/plain/);
  for (const name of ['tollgate_requests_total', 'tollgate_upstream_duration_seconds', 'tollgate_time_to_first_chunk_seconds', 'tollgate_open_streams', 'tollgate_tokens_total', 'tollgate_units_charged_total']) {
    t.match(m.text, new RegExp(`^# TYPE ${name} `, 'm'), name);
  }
  expectEnvelope(t, await call('POST', '/healthz'), 405, 'method_not_allowed');
});

t.test('metrics count requests by route, status and code, and tokens by kind', async (t) => {
  await postChat(gw.url, ask);
  await postChat(gw.url, { ...ask, model: 'nope' });
  const text = (await call('GET', '/metrics')).text;
  t.match(text, /tollgate_requests_total\{route="chat",status="200",code=""\} \d+/);
  t.match(text, /tollgate_requests_total\{route="chat",status="404",code="model_not_found"\} 1/);
  t.match(text, /tollgate_tokens_total\{kind="completion"\} [1-9]/);
  t.match(text, /tollgate_upstream_duration_seconds_count\{provider="echo"\} [1-9]/);
});

t.test('x-request-id: a safe incoming id is kept, anything else replaced', async (t) => {
  let res = await postChat(gw.url, ask, { ...authHeaders(), 'x-request-id': 'client-abc_1.2:3' });
  t.equal(res.headers['x-request-id'], 'client-abc_1.2:3');
  for (const bad of ['has space', 'a'.repeat(129), 'semi;colon', '']) {
    res = await postChat(gw.url, ask, { ...authHeaders(), 'x-request-id': bad });
    t.not(res.headers['x-request-id'], bad);
    t.match(res.headers['x-request-id'], /^req_[0-9a-z]+$/);
  }
  res = await postChat(gw.url, { ...ask, model: 'nope' }, { ...authHeaders(), 'x-request-id': 'keep-me' });
  t.equal(res.json().request_id, 'keep-me');
});

t.test('unknown paths 404, wrong methods 405 with Allow', async (t) => {
  expectEnvelope(t, await call('GET', '/v1/nope'), 404, 'unknown_url');
  expectEnvelope(t, await call('GET', '/v1'), 404, 'unknown_url');
  expectEnvelope(t, await call('GET', '/elsewhere'), 404, 'unknown_url');
  expectEnvelope(t, await call('POST', '/admin/accounts', { body: '{}' }), 404, 'unknown_url');
  let res = await call('GET', '/v1/chat/completions');
  expectEnvelope(t, res, 405, 'method_not_allowed');
  t.equal(res.headers.allow, 'POST');
  res = await call('DELETE', '/v1/models', { headers: authHeaders() });
  expectEnvelope(t, res, 405, 'method_not_allowed');
  t.equal(res.headers.allow, 'GET, HEAD');
  res = await call('POST', '/v1/models/echo-small');
  t.equal(res.status, 405);
});

t.test('authentication: every /v1 route needs a valid developer key', async (t) => {
  const cases: Array<[string, Record<string, string>]> = [
    ['no header', { 'content-type': 'application/json' }],
    ['unknown key', authHeaders('tg_unknown_key_1234567890')],
    ['wrong prefix', authHeaders('sk_demo_0000000000000000')],
    ['basic scheme', { authorization: `Basic ${DEMO_KEY}`, 'content-type': 'application/json' }],
    ['empty bearer', { authorization: 'Bearer ', 'content-type': 'application/json' }],
  ];
  for (const [name, headers] of cases) {
    const body = expectEnvelope(t, await postChat(gw.url, ask, headers), 401, 'invalid_api_key');
    t.equal(body.type, 'invalid_request_error', name);
    expectEnvelope(t, await call('GET', '/v1/models', { headers }), 401, 'invalid_api_key');
    expectEnvelope(t, await call('GET', '/v1/models/echo-small', { headers }), 401, 'invalid_api_key');
  }
  t.equal((await postChat(gw.url, ask, { authorization: `bearer ${DEMO_KEY}`, 'content-type': 'application/json' })).status, 200, 'scheme is case-insensitive');
});

t.test('authentication comes before the body is read', async (t) => {
  const res = await postChat(gw.url, 'x'.repeat(10000), { 'content-type': 'application/json' });
  expectEnvelope(t, res, 401, 'invalid_api_key');
});

t.test('415 for anything but JSON', async (t) => {
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    expectEnvelope(t, await postChat(gw.url, JSON.stringify(ask), { authorization: `Bearer ${DEMO_KEY}`, 'content-type': ct }), 415, 'unsupported_media_type');
  }
  expectEnvelope(t, await postChat(gw.url, JSON.stringify(ask), { authorization: `Bearer ${DEMO_KEY}` }), 415, 'unsupported_media_type');
  t.equal((await postChat(gw.url, ask, { ...authHeaders(), 'content-type': 'application/json; charset=utf-8' })).status, 200);
});

t.test('413 when Content-Length already says too big: answered before the body is sent', async (t) => {
  const { port } = new URL(gw.url);
  const sock = connect(Number(port), '127.0.0.1');
  await once(sock, 'connect');
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${DEMO_KEY}\r\ncontent-type: application/json\r\ncontent-length: 100000000\r\n\r\n`);
  let text = '';
  sock.on('data', (d) => { text += d; });
  await once(sock, 'close');
  t.match(text, /^HTTP\/1\.1 413 /);
  t.match(text, /"code":"request_too_large"/);
  t.match(text, /x-request-id: /i);
});

t.test('413 for a chunked body as soon as the cap is passed, never buffering it whole', async (t) => {
  const { port } = new URL(gw.url);
  const sock = connect(Number(port), '127.0.0.1');
  await once(sock, 'connect');
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${DEMO_KEY}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`);
  let text = '';
  let closed = false;
  sock.on('data', (d) => { text += d; });
  sock.on('close', () => { closed = true; });
  sock.on('error', () => {});
  const piece = 'a'.repeat(1000);
  let sent = 0;
  while (!text.includes('\r\n\r\n') && !closed && sent < 100) {
    sock.write(`${piece.length.toString(16)}\r\n${piece}\r\n`);
    sent++;
    await new Promise((r) => setTimeout(r, 5));
  }
  t.match(text, /^HTTP\/1\.1 413 /);
  t.ok(sent <= 6, `answered after ${sent} KB of a 4 KB cap`);
  sock.destroy();
});

t.test('invalid JSON and hostile bodies are a clear 400 invalid_json', async (t) => {
  const nest = (depth: number) => '['.repeat(depth - 1) + ']'.repeat(depth - 1);
  const bodies: Array<[string, string]> = [
    ['malformed', '{"model": "echo-small", '],
    ['empty', ''],
    ['__proto__', '{"model":"echo-small","messages":[{"role":"user","content":"x"}],"__proto__":{"admin":true}}'],
    ['nested __proto__', '{"model":"echo-small","messages":[{"role":"user","content":"x","__proto__":{}}]}'],
    ['constructor.prototype', '{"model":"echo-small","messages":[{"role":"user","content":"x"}],"x":{"constructor":{"prototype":{"polluted":1}}}}'],
    ['65 levels', `{"model":"echo-small","messages":[{"role":"user","content":"x"}],"deep":${nest(65)}}`],
  ];
  for (const [name, body] of bodies) {
    const res = await postChat(gw.url, body);
    t.equal(res.status, 400, name);
    expectEnvelope(t, res, 400, 'invalid_json');
  }
  t.equal(({} as any).admin, undefined, 'no prototype was polluted');
  const ok = await postChat(gw.url, `{"model":"echo-small","messages":[{"role":"user","content":"x"}],"deep":${nest(64)}}`);
  t.equal(ok.status, 200, '64 levels (the top-level object is 1) is fine');
  const ctor = await postChat(gw.url, '{"model":"echo-small","messages":[{"role":"user","content":"x"}],"constructor":"fine"}');
  t.equal(ctor.status, 200, 'a constructor key that is not an object with prototype is fine');
  t.equal((await call('GET', '/healthz')).status, 200, 'process unharmed');
});
