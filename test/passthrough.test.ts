// Passthrough: the model server's own endpoints stay reachable through the sidecar.

import t from 'tap';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { DEMO_KEY, baseConfig, startGateway } from './helpers/gateway.js';
import { schemas } from './helpers/schemas.js';

async function modelServer(t: any) {
  const seen: Array<{ method: string; url: string; headers: any; body: string }> = [];
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
    res.writeHead(200, { 'content-type': 'application/json', 'x-model-server': 'yes' });
    res.end(JSON.stringify({ url: req.url, method: req.method, body }));
  });
  server.on('upgrade', (_req, socket) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n');
    socket.on('data', (d) => socket.write(Buffer.concat([Buffer.from('echo:'), d])));
    socket.on('end', () => socket.end()); // as a WebSocket server closes when its peer does
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { server.closeAllConnections(); server.close(); });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
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
