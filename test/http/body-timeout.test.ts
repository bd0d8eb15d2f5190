// Bounded work per connection (CONTRACT sections 10, 11 and 16): a request body not complete
// within server.body_timeout_ms of the request's start (a deadline, not an idle timer) is
// answered 408 request_timeout and its connection closed, on /v1 and /admin, however steadily
// its bytes trickle in; a body complete in time is read whole; and an answer given before the
// body was read (401, 404, 405, 415, or a route that reads none) closes the connection once
// the rest of the body was drained, within body_timeout_ms (and, chunked, max_body_bytes) of
// the answer, so a client trickling an endless body cannot hold it open. Over raw TCP sockets,
// standalone and embedded in a plain node:http server.

import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { setTimeout as sleep } from 'node:timers/promises';
import { createGateway } from '../../lib/index.js';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { rawConnect, type RawResponse } from '../helpers/raw-http.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'body-timeout-admin';
const BODY_TIMEOUT_MS = 1000;

function config(): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.server.body_timeout_ms = BODY_TIMEOUT_MS;
  return c;
}

let gw: TestGateway;
t.before(async () => { gw = await startGateway(config()); });
t.teardown(() => gw.close());

const CHAT = JSON.stringify({ model: 'echo-small', messages: [{ role: 'user', content: 'slow but steady' }] });

function head(method: string, path: string, headers: Record<string, string>): string {
  return `${method} ${path} HTTP/1.1\r\nhost: x\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
}

function expectEnvelope(t: any, res: RawResponse, status: number, code: string, param: string | null = null) {
  t.equal(res.status, status, `status ${status}`);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = res.json();
  t.same(schemas.error(body), [], 'envelope validates');
  t.equal(body.code, code);
  t.equal(body.error.code, code);
  t.equal(body.param, param);
  t.ok(res.headers['x-request-id'], 'x-request-id');
  t.equal(body.request_id, res.headers['x-request-id']);
  return body;
}

async function wallet(url: string): Promise<number> {
  const res = await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).available_units;
}

/** A chat request whose body stops after `sent`: headers by content-length or chunked. */
const STALLS: Array<[string, string]> = [
  ['no body byte at all', head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) })],
  ['half the body', head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) }) + CHAT.slice(0, 20)],
  ['a chunked body', `${head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' })}14\r\n${CHAT.slice(0, 20)}\r\n`],
];

async function expectStalled(t: any, url: string, request: string) {
  const conn = await rawConnect(url);
  conn.write(request);
  const res = await conn.response(BODY_TIMEOUT_MS * 10);
  const body = expectEnvelope(t, res, 408, 'request_timeout');
  t.equal(body.type, 'invalid_request_error');
  t.equal(body.message, `The request body was not complete within ${BODY_TIMEOUT_MS} ms of the request's start.`);
  t.equal(res.headers.connection, 'close', 'Connection: close');
  t.ok(await conn.waitClosed(), 'the server closed the connection');
  conn.close();
}

t.test('a stalled /v1 body: 408 request_timeout in the envelope, the connection closed, nothing held or charged', async (t) => {
  const before = await wallet(gw.url);
  for (const [name, request] of STALLS) await t.test(name, (t) => expectStalled(t, gw.url, request));
  t.equal(await wallet(gw.url), before, 'wallet unchanged');
  t.equal(await gw.gateway.slotsInUse('demo'), 0, 'no concurrency slot left taken');
});

t.test('a stalled /admin body: 408 too, and nothing was created', async (t) => {
  const body = JSON.stringify({ id: 'slowpoke', plan: 'free' });
  await expectStalled(t, gw.url, head('POST', '/admin/accounts', { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', 'content-length': String(body.length) }) + body.slice(0, 10));
  const res = await fetch(`${gw.url}/admin/accounts/slowpoke`, { headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(res.status, 404, 'no account was created');
  t.equal(((await res.json()) as any).code, 'account_not_found');
});

t.test('a body trickled steadily is cut at the deadline: 408, though no gap was ever as long as the timeout', async (t) => {
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  const started = Date.now();
  conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) }));
  // A byte every tenth of the timeout: an idle timer would never fire, and the body would
  // take 20 timeouts to arrive.
  const trickle = conn.trickle(BODY_TIMEOUT_MS / 10, '{');
  t.teardown(trickle.stop);
  const res = await conn.response(BODY_TIMEOUT_MS * 10);
  const answeredAfter = Date.now() - started;
  expectEnvelope(t, res, 408, 'request_timeout');
  t.equal(res.headers.connection, 'close', 'Connection: close');
  t.ok(answeredAfter >= BODY_TIMEOUT_MS * 0.9 && answeredAfter < BODY_TIMEOUT_MS * 4, `answered at the deadline (${answeredAfter} ms)`);
  t.ok(trickle.sent() > 5, 'the client kept sending until then');
  t.ok(await conn.waitClosed(), 'the server closed the connection');
});

t.test('a slow body complete within the deadline is read whole, and the connection kept', async (t) => {
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) }));
  // Five pieces over about half the timeout.
  const step = Math.ceil(CHAT.length / 5);
  for (let i = 0; i < CHAT.length; i += step) {
    conn.write(CHAT.slice(i, i + step));
    await sleep(BODY_TIMEOUT_MS / 10);
  }
  const res = await conn.response();
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.content, 'slow but steady');
  t.not(res.headers.connection, 'close', 'the connection stays open for the next request');
  t.notOk(conn.closed());
});

t.test('the deadline counts from each request of a keep-alive connection, not from the connection', async (t) => {
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  const send = async () => {
    conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) }));
    await sleep(BODY_TIMEOUT_MS * 0.6);
    conn.write(CHAT);
    return conn.response();
  };
  t.equal((await send()).status, 200, 'the first request, its body 0.6 timeouts late');
  t.equal((await send()).status, 200, 'the second one too, 1.2 timeouts after the connection opened');
});

/** Requests the gateway answers without reading their body. */
const UNREAD: Array<[string, string, number, string | null]> = [
  ['/v1 with a wrong key', head('POST', '/v1/chat/completions', { authorization: 'Bearer tg_wrong', 'content-type': 'application/json', 'content-length': '10000000' }), 401, 'invalid_api_key'],
  ['/v1 without credentials', head('POST', '/v1/chat/completions', { 'content-type': 'application/json', 'content-length': '10000000' }), 401, 'invalid_api_key'],
  ['/admin with a wrong token', head('POST', '/admin/accounts', { authorization: 'Bearer nope', 'content-type': 'application/json', 'content-length': '10000000' }), 401, 'invalid_api_key'],
  ['/v1 with a body that is not JSON', head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'text/plain', 'transfer-encoding': 'chunked' }), 415, 'unsupported_media_type'],
  ['an unknown /v1 path', head('POST', '/v1/nope', { 'content-type': 'application/json', 'content-length': '10000000' }), 404, 'unknown_url'],
  ['a wrong method', head('PUT', '/v1/models', { authorization: `Bearer ${DEMO_KEY}`, 'content-length': '10000000' }), 405, 'method_not_allowed'],
  ['a route that reads no body', head('GET', '/v1/models', { authorization: `Bearer ${DEMO_KEY}`, 'content-length': '10000000' }), 200, null],
  ['an admin route that reads no body', head('GET', '/admin/accounts/demo', { authorization: `Bearer ${ADMIN}`, 'content-length': '10000000' }), 200, null],
];

async function expectClosedWhileTrickling(t: any, url: string, request: string, status: number, code: string | null) {
  const conn = await rawConnect(url);
  conn.write(request);
  // Chunked requests send a chunk header first, then trickle its payload.
  if (/transfer-encoding: chunked/.test(request)) conn.write('100000\r\n');
  const trickle = conn.trickle(20);
  t.teardown(() => { trickle.stop(); conn.close(); });
  const res = await conn.response();
  const answered = Date.now();
  if (code === null) t.equal(res.status, status);
  else expectEnvelope(t, res, status, code);
  t.equal(res.headers.connection, 'close', 'Connection: close');
  t.ok(await conn.waitClosed(), 'the server closed the connection while the client kept trickling');
  const lingered = Date.now() - answered;
  // The rest of the body is drained for body_timeout_ms after the answer, then the socket closes.
  t.ok(lingered >= BODY_TIMEOUT_MS * 0.8 && lingered < BODY_TIMEOUT_MS * 4, `closed body_timeout_ms after the answer (${lingered} ms)`);
  t.ok(trickle.sent() > 0, 'the client was still sending');
}

t.test('an answer before the body was read closes the connection: a trickled body cannot hold it', async (t) => {
  for (const [name, request, status, code] of UNREAD) {
    await t.test(name, (t) => expectClosedWhileTrickling(t, gw.url, request, status, code));
  }
});

t.test('an early answer to a body that then arrives whole closes at once, cleanly, once it was read', async (t) => {
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  const size = 2 * 1024 * 1024;
  conn.write(head('POST', '/v1/chat/completions', { authorization: 'Bearer tg_wrong', 'content-type': 'application/json', 'content-length': String(size) }));
  const res = await conn.response();
  expectEnvelope(t, res, 401, 'invalid_api_key');
  t.equal(res.headers.connection, 'close');
  t.notOk(conn.closed(), 'the connection stays open while the body is still to come');
  const sentAt = Date.now();
  conn.write('x'.repeat(size));
  t.ok(await conn.waitClosed(BODY_TIMEOUT_MS * 4), 'closed');
  t.ok(Date.now() - sentAt < BODY_TIMEOUT_MS * 0.8, 'as soon as the body was read, not at the end of the drain window');
});

t.test('a chunked body past the limit that never ends: drained for at most max_body_bytes more, then closed', async (t) => {
  const c = config();
  c.server.max_body_bytes = 64 * 1024;
  c.server.body_timeout_ms = 60_000;
  const small = await startGateway(c);
  t.teardown(() => small.close());
  const conn = await rawConnect(small.url);
  t.teardown(conn.close);
  conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' }));
  const piece = `4000\r\n${'x'.repeat(0x4000)}\r\n`;
  let sent = 0;
  const started = Date.now();
  // As fast as the socket takes it, until the server closes.
  const pump = (async () => {
    while (!conn.closed() && Date.now() - started < 20_000) {
      if (!conn.socket.write(piece)) await new Promise((r) => { conn.socket.once('drain', r); conn.socket.once('close', r); });
      sent += 0x4000;
    }
  })();
  const res = await conn.response(20_000);
  expectEnvelope(t, res, 413, 'request_too_large');
  t.equal(res.headers.connection, 'close');
  t.ok(await conn.waitClosed(20_000), 'closed');
  await pump;
  t.ok(Date.now() - started < 10_000, 'long before body_timeout_ms (60 s): the byte allowance ended the drain');
  t.ok(sent >= 2 * 64 * 1024, `the client got to send the limit and more (${sent} bytes)`);
});

t.test('keep-alive stays when the body was read, and for requests without a body', async (t) => {
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  // Refused after the body was read: nothing is left unread, the connection stays.
  const unknownModel = JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] });
  conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(unknownModel.length) }) + unknownModel);
  const first = await conn.response();
  expectEnvelope(t, first, 404, 'model_not_found', 'model');
  t.not(first.headers.connection, 'close');
  // Refused before any body, but there is none.
  conn.write(head('GET', '/v1/models', { authorization: 'Bearer tg_wrong' }));
  const second = await conn.response();
  expectEnvelope(t, second, 401, 'invalid_api_key');
  t.not(second.headers.connection, 'close');
  conn.write(head('POST', '/v1/chat/completions', { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'content-length': String(CHAT.length) }) + CHAT);
  const third = await conn.response();
  t.equal(third.status, 200, 'the same connection serves the next request');
  t.not(third.headers.connection, 'close');
  t.notOk(conn.closed());
});

t.test('embedded in a plain node:http server with its defaults: the same bounds', async (t) => {
  const gateway = createGateway(config(), { logger: pino({ level: 'silent' }) });
  const server = createServer(gateway.handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(async () => { server.closeAllConnections(); server.close(); await gateway.close(); });
  await gateway.ready;
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  await t.test('a stalled body', (t) => expectStalled(t, url, STALLS[1]![1]));
  await t.test('an unread trickled body', (t) => expectClosedWhileTrickling(t, url, UNREAD[0]![1], 401, 'invalid_api_key'));
});

t.test('body_timeout_ms is validated like every timeout', async (t) => {
  const { validateConfig } = await import('../../lib/config/load.js');
  t.equal(validateConfig({}).server.body_timeout_ms, 30000, 'default 30 s');
  t.throws(() => validateConfig({ server: { body_timeout_ms: 0 } }), /server\.body_timeout_ms: must be a positive integer/);
  t.throws(() => validateConfig({ server: { body_timeout_ms: 'soon' } }), /server\.body_timeout_ms/);
});
