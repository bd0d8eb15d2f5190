// Fallbacks, circuit breaking, health-aware auto and model discovery, against fake upstreams.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ok = (text: string) => (_req: any, res: any) => json(res, 200, completionBody(text));
const fail500 = (_req: any, res: any) => json(res, 500, { error: { message: 'down' } });
const ask = (model: string, extra: Record<string, any> = {}) => ({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });

async function pair(t: any, over: { primary?: Record<string, any>; model?: Record<string, any> } = {}) {
  const a = await startUpstream(ok('from primary'));
  const b = await startUpstream(ok('from fallback'));
  const c = baseConfig();
  c.providers.a = { kind: 'openai', base_url: a.baseUrl, timeout_ms: 800, circuit_failures: 2, circuit_cooldown_ms: 400, ...over.primary };
  c.providers.b = { kind: 'openai', base_url: b.baseUrl, timeout_ms: 800 };
  c.models.push({ id: 'm', provider: 'a', upstream_model: 'prim-7b', fallbacks: [{ provider: 'b', upstream_model: 'fb-8b' }], ...over.model });
  c.models.push({ id: 'solo', provider: 'a', upstream_model: 'solo-7b' });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await a.close(); await b.close(); });
  return { a, b, gw };
}

t.test('non-streaming: each fallback-worthy failure moves on to the next target', async (t) => {
  const { a, b, gw } = await pair(t, { primary: { circuit_failures: 100 } });
  const failures: Array<[string, (req: any, res: any) => any]> = [
    ['5xx', fail500],
    ['429', (_req, res) => json(res, 429, { error: { message: 'slow' } })],
    ['reset', (req) => req.socket.destroy()],
    ['invalid JSON', (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{'); }],
    ['timeout', async (_req, res) => { await sleep(2000); if (!res.destroyed) json(res, 200, completionBody('late')); }],
  ];
  for (const [name, script] of failures) {
    a.setScript(script);
    const before = { a: a.requests.length, b: b.requests.length };
    const res = await postChat(gw.url, ask('m'));
    t.equal(res.status, 200, name);
    const body = res.json();
    t.equal(body.choices[0].message.content, 'from fallback', name);
    t.equal(body.model, 'm', 'the answer names the slug, not the fallback');
    t.equal(a.requests.length, before.a + 1);
    t.equal(b.requests.length, before.b + 1);
    t.equal(b.requests.at(-1)!.body.model, 'fb-8b', 'the fallback gets its own upstream model name');
  }
});

t.test('client errors and context errors are not retried on a fallback', async (t) => {
  const { a, b, gw } = await pair(t);
  a.setScript((_req, res) => json(res, 400, { error: { message: 'bad tool schema' } }));
  let res = await postChat(gw.url, ask('m'));
  t.equal(res.status, 400);
  t.equal(res.json().code, 'invalid_value');
  a.setScript((_req, res) => json(res, 400, { error: { message: 'maximum context length is 10 tokens' } }));
  res = await postChat(gw.url, ask('m'));
  t.equal(res.status, 422);
  t.equal(b.requests.length, 0, 'the fallback was never called');
});

t.test('when every target fails, the last failure is the answer', async (t) => {
  const { a, b, gw } = await pair(t, { primary: { circuit_failures: 100 } });
  a.setScript(fail500);
  b.setScript((_req, res) => json(res, 503, { error: { message: 'busy' } }, { 'retry-after': '4' }));
  const res = await postChat(gw.url, ask('m'));
  t.equal(res.status, 503);
  t.equal(res.json().code, 'model_unavailable');
  t.equal(res.headers['retry-after'], '4');
});

t.test('streaming: fallback before the first byte, never after', async (t) => {
  const { a, b, gw } = await pair(t, { primary: { circuit_failures: 100 } });
  b.setScript((_req, res) => writeSse(res, streamFrames(['fall', 'back'])));

  a.setScript(fail500);
  let res = await postChat(gw.url, ask('m', { stream: true }));
  let parsed = sseData(res.text);
  t.equal(res.status, 200);
  t.ok(parsed.done);
  t.equal(parsed.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'fallback');
  t.equal(parsed.events[0].choices[0].delta.role, 'assistant');
  for (const e of parsed.events) t.same(schemas.chunk(e), []);

  // The first event is an error; only a role chunk had arrived: still before the first byte.
  a.setScript((_req, res) => writeSse(res, [streamFrames([])[0]!, `data: ${JSON.stringify({ error: { message: 'oom', code: 500 } })}\n\n`]));
  parsed = sseData((await postChat(gw.url, ask('m', { stream: true }))).text);
  t.equal(parsed.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'fallback');
  t.equal(parsed.events.filter((e) => e.choices[0]?.delta.role === 'assistant').length, 1, 'one role chunk in all');

  // After real content reached the client, a failure is in-stream and the fallback is not tried.
  const bBefore = b.requests.length;
  a.setScript(async (_req, res) => { await writeSse(res, streamFrames(['partial']).slice(0, 2), { end: false }); await sleep(30); res.socket?.destroy(); });
  res = await postChat(gw.url, ask('m', { stream: true }));
  parsed = sseData(res.text);
  t.notOk(parsed.done);
  t.equal(parsed.events.at(-1).code, 'provider_error');
  t.equal(b.requests.length, bBefore, 'no fallback after the first byte');
});

t.test('a keep-alive comment counts as the first byte: no fallback after it', async (t) => {
  const a = await startUpstream(async (_req, res) => { await sleep(300); json(res, 500, { error: { message: 'late failure' } }); });
  const b = await startUpstream((_req, res) => writeSse(res, streamFrames(['never'])));
  const c = baseConfig();
  c.server.sse_keepalive_ms = 100;
  c.providers.a = { kind: 'openai', base_url: a.baseUrl };
  c.providers.b = { kind: 'openai', base_url: b.baseUrl };
  c.models.push({ id: 'm', provider: 'a', fallbacks: [{ provider: 'b' }] });
  const gw: TestGateway = await startGateway(c);
  t.teardown(async () => { await gw.close(); await a.close(); await b.close(); });
  const res = await postChat(gw.url, ask('m', { stream: true }));
  const parsed = sseData(res.text);
  t.equal(res.status, 200);
  t.ok(parsed.comments >= 1);
  t.notOk(parsed.done);
  t.equal(parsed.events.at(-1).code, 'provider_error');
  t.equal(b.requests.length, 0);
});

t.test('circuit breaking: open after N failures, skip while open, one probe after the cooldown', async (t) => {
  const { a, gw } = await pair(t);
  a.setScript(fail500);
  for (let i = 0; i < 2; i++) t.equal((await postChat(gw.url, ask('m'))).json().choices[0].message.content, 'from fallback');
  t.equal(a.requests.length, 2);

  let res = await postChat(gw.url, ask('m'));
  t.equal(res.json().choices[0].message.content, 'from fallback');
  t.equal(a.requests.length, 2, 'the open target was skipped');
  let metrics = await fetch(`${gw.url}/metrics`).then((r) => r.text());
  t.match(metrics, /tollgate_upstream_healthy\{provider="a",upstream_model="prim-7b"\} 0/);
  t.match(metrics, /tollgate_upstream_healthy\{provider="b",upstream_model="fb-8b"\} 1/);

  // A model whose only target shares the open circuit? No: circuits are per provider+model.
  res = await postChat(gw.url, ask('solo'));
  t.equal(res.status, 502, 'solo-7b has its own circuit, still closed');

  await sleep(450);
  a.setScript(ok('primary is back'));
  res = await postChat(gw.url, ask('m'));
  t.equal(res.json().choices[0].message.content, 'primary is back', 'the probe went to the primary');
  metrics = await fetch(`${gw.url}/metrics`).then((r) => r.text());
  t.match(metrics, /tollgate_upstream_healthy\{provider="a",upstream_model="prim-7b"\} 1/);
});

t.test('every target open: 503 model_unavailable with Retry-After until the next probe', async (t) => {
  const { a, gw } = await pair(t, { primary: { circuit_cooldown_ms: 3000 } });
  a.setScript(fail500);
  for (let i = 0; i < 2; i++) t.equal((await postChat(gw.url, ask('solo'))).status, 502);
  const res = await postChat(gw.url, ask('solo'));
  t.equal(res.status, 503);
  const body = res.json();
  t.equal(body.code, 'model_unavailable');
  t.same(schemas.error(body), []);
  t.equal(res.headers['retry-after'], '3');
  const ms = Number(res.headers['retry-after-ms']);
  t.ok(ms > 2000 && ms <= 3000, `retry-after-ms ${ms}`);
  t.equal(a.requests.length, 2, 'no request reached the open target');
});

t.test('a failed probe opens the circuit again', async (t) => {
  const { a, gw } = await pair(t);
  a.setScript(fail500);
  for (let i = 0; i < 2; i++) await postChat(gw.url, ask('solo'));
  await sleep(450);
  t.equal((await postChat(gw.url, ask('solo'))).status, 502, 'the probe failed');
  t.equal(a.requests.length, 3);
  t.equal((await postChat(gw.url, ask('solo'))).status, 503, 'open again at once');
  t.equal(a.requests.length, 3);
});

t.test('auto skips a model whose targets are all open, and one whose context is too small', async (t) => {
  const a = await startUpstream(fail500);
  const b = await startUpstream(ok('from healthy'));
  const c = baseConfig();
  c.providers.a = { kind: 'openai', base_url: a.baseUrl, circuit_failures: 1, circuit_cooldown_ms: 60000 };
  c.providers.b = { kind: 'openai', base_url: b.baseUrl };
  c.models = [
    { id: 'sick', provider: 'a' },
    { id: 'small', provider: 'b', context_window: 64, max_output_tokens: 16 },
    { id: 'big', provider: 'b', context_window: 100000 },
  ];
  c.routing = { auto: ['sick', 'small', 'big'] };
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await a.close(); await b.close(); });

  t.equal((await postChat(gw.url, ask('auto'))).status, 502, 'sick is tried while healthy');
  let res = await postChat(gw.url, ask('auto'));
  t.equal(res.json().model, 'small', 'sick is skipped once its circuit opened');
  res = await postChat(gw.url, { model: 'auto', messages: [{ role: 'user', content: 'many words '.repeat(100) }] });
  t.equal(res.json().model, 'big', 'small is skipped when the prompt does not fit');
});

t.test('discovery: models from GET /models, YAML wins, readiness follows the catalog', async (t) => {
  let listing: any = { error: 'not yet' };
  const up: FakeUpstream = await startUpstream((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      if (listing.error) json(res, 500, listing);
      else json(res, 200, listing);
      return;
    }
    json(res, 200, completionBody('discovered answer'));
  });
  const c = baseConfig();
  c.providers = {
    vllm: {
      kind: 'openai', base_url: up.baseUrl, discover_models: true, discover_interval_ms: 200,
      model_defaults: { paid_only: false, price: { input_per_mtok: 5, output_per_mtok: 7 }, max_output_tokens: 512 },
    },
  };
  c.models = [{ id: 'pinned', provider: 'vllm', context_window: 1234, max_output_tokens: 256 }];
  c.routing = { auto: ['Qwen/Qwen2.5-7B'] };
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  const headers = { authorization: 'Bearer tg_demo_0000000000000000' };

  let models: any = await fetch(`${gw.url}/v1/models`, { headers }).then((r) => r.json());
  t.same(models.data.map((m: any) => m.id), ['pinned'], 'only the YAML model before discovery succeeds');

  listing = { object: 'list', data: [{ id: 'Qwen/Qwen2.5-7B', object: 'model', max_model_len: 32768 }, { id: 'pinned', max_model_len: 99 }, { id: 'bad id with spaces' }] };
  for (let i = 0; i < 100 && models.data.length < 2; i++) {
    await sleep(50);
    models = await fetch(`${gw.url}/v1/models`, { headers }).then((r) => r.json());
  }
  t.same(models.data.map((m: any) => m.id), ['pinned', 'Qwen/Qwen2.5-7B']);
  t.equal(models.data[0].context_window, 1234, 'YAML wins');
  t.equal(models.data[1].context_window, 32768, "context_window from the upstream's max_model_len");
  t.equal(models.data[1].max_output_tokens, 512, 'model_defaults apply');
  const one: any = await fetch(`${gw.url}/v1/models/Qwen%2FQwen2.5-7B`, { headers }).then((r) => r.json());
  t.equal(one.owned_by, 'tollgate');

  const res = await postChat(gw.url, ask('auto'));
  t.equal(res.status, 200);
  t.equal(res.json().model, 'Qwen/Qwen2.5-7B', 'auto may name a discovered model');
  t.equal(up.requests.at(-1)!.body.model, 'Qwen/Qwen2.5-7B', 'slug and upstream model are the id');
  t.equal(up.requests.at(-1)!.url, '/v1/chat/completions');
  t.equal(up.requests.find((r) => r.method === 'GET')!.url, '/v1/models');

  // A failing refresh keeps the last good list.
  listing = { error: 'flapping' };
  await sleep(500);
  models = await fetch(`${gw.url}/v1/models`, { headers }).then((r) => r.json());
  t.equal(models.data.length, 2);
});

t.test('discovery with no models yet: /v1/models 503 service_unavailable, /readyz 503, then ready', async (t) => {
  let up = false;
  const server = await startUpstream((req, res) => {
    if (!up) { req.socket.destroy(); return; }
    json(res, 200, { object: 'list', data: [{ id: 'late-model' }] });
  });
  const c = baseConfig();
  c.providers = { vllm: { kind: 'openai', base_url: server.baseUrl, discover_models: true, discover_interval_ms: 100 } };
  c.models = [];
  c.routing = { auto: [] };
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await server.close(); });
  const headers = { authorization: 'Bearer tg_demo_0000000000000000' };

  const res = await fetch(`${gw.url}/v1/models`, { headers });
  t.equal(res.status, 503);
  const body: any = await res.json();
  t.equal(body.code, 'service_unavailable');
  t.same(schemas.error(body), []);
  t.ok(Number(res.headers.get('retry-after')) >= 1);
  t.ok(res.headers.get('retry-after-ms'));
  t.equal((await fetch(`${gw.url}/readyz`)).status, 503);

  up = true;
  let ready = 503;
  for (let i = 0; i < 100 && ready !== 200; i++) { await sleep(50); ready = (await fetch(`${gw.url}/readyz`)).status; }
  t.equal(ready, 200);
  t.equal((await fetch(`${gw.url}/v1/models`, { headers })).status, 200);
});
