// Embedding: the gateway's handler mounted in an Express app, as middleware and under a path.

import t from 'tap';
import express from 'express';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import pino from 'pino';
import { createGateway } from '../../lib/index.js';
import { DEMO_KEY, baseConfig, sseData } from '../helpers/gateway.js';

t.test('mounted in Express: owns /v1 and the ops paths, hands everything else to next()', async (t) => {
  const gateway = createGateway(baseConfig(), { logger: pino({ level: 'silent' }) });
  const { handler, close } = gateway;
  const app = express();
  app.get('/', (_req, res) => { res.send('host app home'); });
  app.use(express.json({ limit: '1mb' })); // a host app's body parser must not break the gateway
  app.use(handler);
  app.get('/after', (_req, res) => { res.json({ from: 'host' }); });
  app.use('/llm', handler);
  const server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t.teardown(async () => { server.closeAllConnections(); server.close(); await close(); });
  await gateway.ready;

  t.equal(await (await fetch(`${base}/`)).text(), 'host app home');
  t.same(await (await fetch(`${base}/after`)).json(), { from: 'host' }, 'next() reaches later routes');
  t.equal((await fetch(`${base}/healthz`)).status, 200);

  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${base}/v1`, maxRetries: 0 });
  const c = await client.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'through express' }] });
  t.equal(c.choices[0]!.message.content, 'through express', 'a body express.json() already read still works');

  const mounted = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${base}/llm/v1`, maxRetries: 0 });
  const stream = await mounted.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'under a prefix' }], stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.delta.content ?? '';
  t.equal(text, 'under a prefix');

  const raw = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo-small', stream: true, messages: [{ role: 'user', content: 'sse' }] }),
  });
  t.ok(sseData(await raw.text()).done);

  const err = await client.chat.completions.create({ model: 'echo-small', messages: [] }).catch((e) => e);
  t.equal(err.status, 400);
  t.equal(err.code, 'invalid_value');
  const unknown = await fetch(`${base}/v1/unknown`);
  t.equal(unknown.status, 404, '/v1 stays the gateway\'s even when nothing matches');
  t.equal(((await unknown.json()) as any).code, 'unknown_url');
});

t.test('as a plain node:http listener: unknown paths are 404 unknown_url', async (t) => {
  const gateway = createGateway(baseConfig(), { logger: pino({ level: 'silent' }) });
  const server = createServer(gateway.handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(async () => { server.close(); await gateway.close(); });
  const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/not-mine`);
  t.equal(res.status, 404);
  const body: any = await res.json();
  t.equal(body.code, 'unknown_url');
  t.equal(body.request_id, res.headers.get('x-request-id'));
});

t.test('mounted in Express: one path, one decision (CONTRACT section 21) before the host app', async (t) => {
  const gateway = createGateway(baseConfig(), { logger: pino({ level: 'silent' }) });
  const app = express();
  const hostSaw: string[] = [];
  app.use(gateway.handler);
  app.use((req, res) => { hostSaw.push(req.url); res.json({ from: 'host', url: req.url }); });
  const server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t.teardown(async () => { server.closeAllConnections(); server.close(); await gateway.close(); });
  await gateway.ready;
  const { rawRequest } = await import('../helpers/raw-request.js');
  const get = async (path: string) => (await rawRequest(base, { method: 'GET', path, headers: [['connection', 'close']], body: Buffer.alloc(0) })).responses[0]!;

  const host = await get('/files/./a//b?q=1');
  t.same(JSON.parse(host.body), { from: 'host', url: '/files/a/b?q=1' }, 'the host app gets the path the gateway decided on');
  const v1 = await get('/files/../v1/models');
  t.equal(v1.status, 401, '/files/../v1/models is the gateway\'s');
  t.equal(JSON.parse(v1.body).code, 'invalid_api_key');
  const refused = await get('/files/%2e%2e/v1/models');
  t.equal(refused.status, 400);
  t.match(JSON.parse(refused.body), { code: 'invalid_value', type: 'invalid_request_error', param: null });
  t.same(hostSaw, ['/files/a/b?q=1'], 'the host app saw only the one request');
});
