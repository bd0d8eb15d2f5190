// Passthrough: the model server's own endpoints stay reachable through the sidecar.

import t from 'tap';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { DEMO_KEY, baseConfig, startGateway } from './helpers/gateway.js';
import { schemas } from './helpers/schemas.js';
import { httpHandler } from './helpers/async-handler.js';

async function modelServer(t: any) {
  const seen: Array<{ method: string; url: string; headers: any; body: string }> = [];
  const server = createServer(httpHandler(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    res.writeHead(200, { 'content-type': 'application/json', 'x-model-server': 'yes' });
    res.end(JSON.stringify({ url: req.url, method: req.method, body }));
  }));
  const upgrades: string[] = [];
  server.on('upgrade', (req, socket) => {
    upgrades.push(req.url!);
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n');
    socket.on('data', (d) => socket.write(Buffer.concat([Buffer.from('echo:'), d])));
    socket.on('end', () => socket.end()); // as a WebSocket server closes when its peer does
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { server.closeAllConnections(); server.close(); });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, upgrades };
}

t.test('paths outside /v1, /admin and ops are proxied; /v1 stays the gateway\'s', async (t) => {
  const ms = await modelServer(t);
  const c = baseConfig();
  c.server.passthrough = ms.url;
  const gw = await startGateway(c);
  t.teardown(() => gw.close());

  let res = await fetch(`${gw.url}/version?x=1`);
  t.equal(res.status, 200);
  t.equal(res.headers.get('x-model-server'), 'yes');
  t.same(await res.json(), { url: '/version?x=1', method: 'GET', body: '' });

  res = await fetch(`${gw.url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer model-server-own-key' }, body: '{"prompt":"hi"}' });
  t.same(await res.json(), { url: '/tokenize', method: 'POST', body: '{"prompt":"hi"}' });
  t.equal(ms.seen.at(-1)!.headers.authorization, 'Bearer model-server-own-key', 'without passthrough_auth the header is the model server\'s');
  t.equal(ms.seen.at(-1)!.headers['x-forwarded-for'], '127.0.0.1');

  t.equal((await fetch(`${gw.url}/healthz`)).status, 200);
  t.equal((await fetch(`${gw.url}/v1/models`)).status, 401, '/v1 is never passed through');
  const admin = await fetch(`${gw.url}/admin/accounts`);
  t.equal(admin.status, 404);
  t.equal(ms.seen.length, 2, 'only the two passthrough requests reached the model server');

  // WebSocket upgrades are tunnelled; the tunnel stays open across the drain below.
  const { port } = new URL(gw.url);
  const sock = connect(Number(port), '127.0.0.1');
  await once(sock, 'connect');
  sock.write('GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
  let got = '';
  sock.on('data', (d) => { got += d; });
  while (!got.includes('\r\n\r\n')) await new Promise((r) => setTimeout(r, 10));
  t.match(got, /^HTTP\/1\.1 101 /);
  sock.write('ping');
  while (!got.includes('echo:ping')) await new Promise((r) => setTimeout(r, 10));
  t.match(got, /echo:ping$/);
  const closed = once(sock, 'close');
  await gw.close();
  await closed;
  t.ok(sock.destroyed, 'the drain closed the open tunnel');
});

t.test('passthrough_auth: a Tollgate key is required and not forwarded', async (t) => {
  const ms = await modelServer(t);
  const c = baseConfig();
  c.server.passthrough = ms.url;
  c.server.passthrough_auth = true;
  const gw = await startGateway(c);
  t.teardown(() => gw.close());

  const denied = await fetch(`${gw.url}/metrics-of-model`);
  t.equal(denied.status, 401);
  const body: any = await denied.json();
  t.equal(body.code, 'invalid_api_key');
  t.same(schemas.error(body), []);
  t.equal(ms.seen.length, 0);

  const ok = await fetch(`${gw.url}/metrics-of-model`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(ok.status, 200);
  t.equal(ms.seen.length, 1);
  t.notOk('authorization' in ms.seen[0]!.headers, 'the Tollgate key never reaches the model server');

  const { port } = new URL(gw.url);
  const sock = connect(Number(port), '127.0.0.1');
  await once(sock, 'connect');
  sock.write('GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n');
  let got = '';
  sock.on('data', (d) => { got += d; });
  await once(sock, 'close');
  t.match(got, /^HTTP\/1\.1 401 /, 'an unauthenticated upgrade is refused');
});

t.test('a model server that is down gives 502 provider_error', async (t) => {
  const ms = await modelServer(t);
  const c = baseConfig();
  c.server.passthrough = 'http://127.0.0.1:1';
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const res = await fetch(`${gw.url}/anything`);
  t.equal(res.status, 502);
  const body: any = await res.json();
  t.equal(body.code, 'provider_error');
  t.equal(body.request_id, res.headers.get('x-request-id'));
  t.equal(ms.seen.length, 0);
});

t.test('without passthrough, other paths are 404 unknown_url', async (t) => {
  const gw = await startGateway(baseConfig());
  t.teardown(() => gw.close());
  const res = await fetch(`${gw.url}/version`);
  t.equal(res.status, 404);
  t.equal(((await res.json()) as any).code, 'unknown_url');
});

/** Sends a WebSocket upgrade for `path` on a raw socket; the status line and the request the model server got, if any. */
async function upgrade(gwUrl: string, path: string): Promise<string> {
  const { port } = new URL(gwUrl);
  const sock = connect(Number(port), '127.0.0.1');
  await once(sock, 'connect');
  sock.write(`GET ${path} HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
  let got = '';
  sock.on('data', (d) => { got += d; });
  while (!got.includes('\r\n\r\n') && !sock.destroyed) await new Promise((r) => setTimeout(r, 10));
  sock.destroy();
  return got.split('\r\n')[0]!;
}

t.test('one path, one decision (CONTRACT section 21): the normalised path is judged and sent on', async (t) => {
  const ms = await modelServer(t);
  const c = baseConfig();
  c.admin = { token: 'admin-token-passthrough-paths-0123' };
  c.server.passthrough = ms.url;
  const gw = await startGateway(c);
  t.teardown(() => gw.close());

  // A path outside the gateway's is proxied as normalised, its query untouched.
  const { rawRequest } = await import('./helpers/raw-request.js');
  const res = await rawRequest(gw.url, { method: 'GET', path: '/a/./b//../tokenize?x=/../v1', headers: [['connection', 'close']], body: Buffer.alloc(0) });
  t.equal(res.responses[0]!.status, 200);
  t.same(JSON.parse(res.responses[0]!.body), { url: '/a/tokenize?x=/../v1', method: 'GET', body: '' });
  t.equal(ms.seen.at(-1)!.url, '/a/tokenize?x=/../v1');

  // The gateway's own paths in disguise are the gateway's; encoded dots and slashes are refused.
  for (const [path, status, code] of [['/./v1/models', 401, 'invalid_api_key'], ['/x/../admin/accounts', 401, 'invalid_api_key'], ['//healthz', 200, undefined],
    ['/v%31/models', 401, 'invalid_api_key'], ['/%2e%2e/v1/models', 400, 'invalid_value'], ['/%2Fv1/models', 400, 'invalid_value'], ['/v1\\models', 400, 'invalid_value'],
    ['/console/../v1/models', 401, 'invalid_api_key'], ['http://evil/v1/models', 400, 'invalid_value']] as const) {
    const r = (await rawRequest(gw.url, { method: 'GET', path, headers: [['connection', 'close'], ['x-request-id', 'paths-1']], body: Buffer.alloc(0) })).responses[0]!;
    t.equal(r.status, status, `${path}: ${status}`);
    if (code !== undefined) {
      const body = JSON.parse(r.body);
      t.equal(body.code, code, `${path}: ${code}`);
      t.same(schemas.error(body), [], `${path}: the envelope`);
      t.equal(r.headers['x-request-id'], 'paths-1');
      if (status === 400) t.same([body.type, body.param, body.error.code], ['invalid_request_error', null, 'invalid_value']);
    }
  }
  t.equal(ms.seen.length, 1, 'the model server got only the one passthrough request');

  // WebSocket upgrades take the same decision.
  t.match(await upgrade(gw.url, '/x/../ws'), /^HTTP\/1\.1 101 /, 'an upgrade outside the gateway\'s paths is tunnelled');
  t.same(ms.upgrades, ['/ws'], 'the model server got the normalised path');
  t.match(await upgrade(gw.url, '/./v1/realtime'), /^HTTP\/1\.1 404 /, '/./v1/... is the gateway\'s: never tunnelled');
  t.match(await upgrade(gw.url, '//admin'), /^HTTP\/1\.1 404 /);
  t.match(await upgrade(gw.url, '/console/ws'), /^HTTP\/1\.1 404 /, 'the console\'s paths are the gateway\'s too');
  t.match(await upgrade(gw.url, '/%2e%2e/v1/realtime'), /^HTTP\/1\.1 400 /, 'an encoded dot: 400');
  t.same(ms.upgrades, ['/ws'], 'and none of those reached the model server');
});
