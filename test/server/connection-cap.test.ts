// At most server.max_connections_per_ip open connections per client address (CONTRACT section
// 16): beyond it a connection's first request is answered 429 too_many_connections, with
// Retry-After and retry-after-ms, then the connection closed (its body read first, as any early
// answer); closing a connection frees its slot. Peers inside a trust_proxy CIDR list are not
// capped; embedded in a host app's server the cap is the host's (not applied). Over raw
// sockets from 127.0.0.1, in process and through `tollgate serve` with the default (256).

import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { createGateway } from '../../lib/index.js';
import { validateConfig } from '../../lib/config/load.js';
import { DEMO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { serveChild } from '../helpers/child.js';
import { rawConnect, type RawConnection, type RawResponse } from '../helpers/raw-http.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'cap-admin-token-0123';

function config(server: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.server = { ...c.server, ...server };
  return c;
}

const GET = (path: string, headers: Record<string, string> = {}) =>
  `GET ${path} HTTP/1.1\r\nhost: x\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
const MODELS = GET('/v1/models', { authorization: `Bearer ${DEMO_KEY}` });

/** Opens `n` connections and asks each for /v1/models; the connections and their first answers. */
async function open(url: string, n: number): Promise<Array<{ conn: RawConnection; res: RawResponse }>> {
  return Promise.all(Array.from({ length: n }, async () => {
    const conn = await rawConnect(url);
    conn.write(MODELS);
    return { conn, res: await conn.response(20_000) };
  }));
}

function expectRefused(t: any, res: RawResponse, limit: number): void {
  t.equal(res.status, 429);
  const body = res.json();
  t.same(schemas.error(body), [], 'the envelope');
  t.equal(body.code, 'too_many_connections');
  t.equal(body.error.code, 'too_many_connections');
  t.equal(body.type, 'rate_limit_error');
  t.equal(body.param, null);
  t.match(body.message, new RegExp(`at most ${limit}\\b`));
  t.equal(body.request_id, res.headers['x-request-id']);
  t.equal(res.headers['retry-after'], '1');
  t.equal(res.headers['retry-after-ms'], '1000');
  t.equal(res.headers.connection, 'close');
}

t.test('a cap of 8: 8 connections served, every further one 429 then closed; closing one frees a slot', async (t) => {
  const gw = await startGateway(config({ max_connections_per_ip: 8 }));
  t.teardown(() => gw.close());
  const first = await open(gw.url, 8);
  t.teardown(() => first.forEach((c) => c.conn.close()));
  t.same(first.map((c) => c.res.status), Array(8).fill(200), 'the first 8 are served');

  const more = await open(gw.url, 48);
  t.teardown(() => more.forEach((c) => c.conn.close()));
  let refused = 0;
  for (const { res } of more) if (res.status === 429) refused++;
  t.equal(refused, 48, 'every connection beyond the cap gets 429');
  expectRefused(t, more[0]!.res, 8);
  const closed = await Promise.all(more.map((c) => c.conn.waitClosed(5000)));
  t.ok(closed.every(Boolean), 'and is closed by the server');

  // The 8 stay open and serve more requests (keep-alive).
  for (const { conn } of first) conn.write(MODELS);
  const again = await Promise.all(first.map((c) => c.conn.response()));
  t.same(again.map((r) => r.status), Array(8).fill(200), 'the 8 keep serving');
  t.ok(first.every((c) => !c.conn.closed()));

  first[0]!.conn.close();
  await sleep(100);
  const [freed] = await open(gw.url, 1);
  t.teardown(() => freed!.conn.close());
  t.equal(freed!.res.status, 200, 'a closed connection frees its slot');
  const [full] = await open(gw.url, 1);
  t.teardown(() => full!.conn.close());
  t.equal(full!.res.status, 429, 'and the cap holds again');

  // Over a connection that holds a slot.
  first[1]!.conn.write(GET('/metrics'));
  const metrics = await first[1]!.conn.response();
  t.match(metrics.body, /tollgate_requests_total\{[^}]*code="too_many_connections"[^}]*\} 49/, 'the refusals are counted');
});

t.test('a refused connection that sends a body: the 429 is read, the body drained, then a clean close', async (t) => {
  const gw = await startGateway(config({ max_connections_per_ip: 1 }));
  t.teardown(() => gw.close());
  const [held] = await open(gw.url, 1);
  t.teardown(() => held!.conn.close());
  const conn = await rawConnect(gw.url);
  t.teardown(conn.close);
  const size = 4 * 1024 * 1024;
  conn.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${DEMO_KEY}\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n`);
  const res = await conn.response();
  expectRefused(t, res, 1);
  t.notOk(conn.closed(), 'still open while the body is due');
  let error: string | undefined;
  conn.socket.on('error', (e: NodeJS.ErrnoException) => { error = e.code; });
  conn.write('x'.repeat(size));
  t.ok(await conn.waitClosed(5000), 'closed once the body was read');
  t.equal(error, undefined, 'no reset');
  t.equal(res.headers['x-request-id'] !== undefined, true);
});

t.test('peers inside a trust_proxy CIDR list are proxies: not capped', async (t) => {
  const gw = await startGateway(config({ max_connections_per_ip: 2, trust_proxy: ['127.0.0.0/8'] }));
  t.teardown(() => gw.close());
  const conns = await open(gw.url, 6);
  t.teardown(() => conns.forEach((c) => c.conn.close()));
  t.same(conns.map((c) => c.res.status), Array(6).fill(200));
  const other = await startGateway(config({ max_connections_per_ip: 2, trust_proxy: ['10.0.0.0/8'] }));
  t.teardown(() => other.close());
  const capped = await open(other.url, 3);
  t.teardown(() => capped.forEach((c) => c.conn.close()));
  t.same(capped.map((c) => c.res.status).sort(), [200, 200, 429], 'a peer outside the list is capped');
});

t.test('null: no cap', async (t) => {
  const gw = await startGateway(config({ max_connections_per_ip: null }));
  t.teardown(() => gw.close());
  const conns = await open(gw.url, 20);
  t.teardown(() => conns.forEach((c) => c.conn.close()));
  t.same(conns.map((c) => c.res.status), Array(20).fill(200));
});

t.test('embedded in a host app\'s server: the host owns its connections, the cap is not applied', async (t) => {
  const gateway = createGateway(config({ max_connections_per_ip: 1 }), { logger: pino({ level: 'silent' }) });
  const server = createServer(gateway.handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(async () => { server.closeAllConnections(); server.close(); await gateway.close(); });
  await gateway.ready;
  const conns = await open(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, 3);
  t.teardown(() => conns.forEach((c) => c.conn.close()));
  t.same(conns.map((c) => c.res.status), [200, 200, 200]);
});

t.test('max_connections_per_ip is validated', async (t) => {
  t.equal(validateConfig({}).server.max_connections_per_ip, 256, 'default 256');
  t.equal(validateConfig({ server: { max_connections_per_ip: null } }).server.max_connections_per_ip, null);
  t.throws(() => validateConfig({ server: { max_connections_per_ip: 0 } }), /server\.max_connections_per_ip: must be a positive integer, or null for no cap/);
  t.throws(() => validateConfig({ server: { max_connections_per_ip: 1.5 } }), /server\.max_connections_per_ip: must be a positive integer/);
  t.throws(() => validateConfig({ server: { max_connections_per_ip: 'many' } }), /server\.max_connections_per_ip/);
});

t.test('tollgate serve with the default cap: 256 idle keep-alive connections, the 257th refused', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-cap-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server:
  port: 0
accounts:
  - { id: demo, plan: free, keys: [${DEMO_KEY}] }
plans:
  free: {}
providers:
  echo: { kind: echo }
models:
  - { id: echo-small, provider: echo }
`);
  const { url } = await serveChild(t, file);
  const conns: Array<{ conn: RawConnection; res: RawResponse }> = [];
  t.teardown(() => conns.forEach((c) => c.conn.close()));
  // In batches, so as not to flood the accept queue of a loaded machine.
  for (let i = 0; i < 256; i += 32) conns.push(...(await open(url, 32)));
  t.equal(conns.filter((c) => c.res.status === 200).length, 256, '256 connections served and kept open');
  const [extra] = await open(url, 1);
  conns.push(extra!);
  expectRefused(t, extra!.res, 256);
  t.ok(await extra!.conn.waitClosed(5000), 'the 257th is closed');
  conns[0]!.conn.close();
  await sleep(200);
  const [freed] = await open(url, 1);
  conns.push(freed!);
  t.equal(freed!.res.status, 200, 'closing one frees a slot');
});
