// Fleets (CONTRACT section 7) under every dialect and provider kind: one balancer for all.
// A replica that fails before any byte reached the client is retried on another replica for
// /v1/chat/completions, /v1/messages, /v1/responses and /v1/embeddings alike, on an
// OpenAI-compatible fleet and on an Anthropic fleet (native Messages pass-through included);
// the client sees one answer and the wallet is charged once, exactly what the headers say.

import t from 'tap';
import { request } from 'undici';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type Script } from '../helpers/upstream.js';

const ADMIN = 'fleet-dialects-admin';

/** An OpenAI-compatible replica: chat answers (JSON or SSE) and embeddings. */
const openaiReplica = (name: string): Script => async (req, res, body) => {
  if (req.method === 'GET') { json(res, 200, { object: 'list', data: [] }); return; }
  if (req.url?.endsWith('/embeddings')) {
    const inputs = Array.isArray(body.input) ? body.input : [body.input];
    json(res, 200, { object: 'list', model: body.model, data: inputs.map((_: unknown, index: number) => ({ object: 'embedding', index, embedding: [0.5, -0.25] })), usage: { prompt_tokens: 3, total_tokens: 3 } });
    return;
  }
  if (body?.stream === true) await writeSse(res, streamFrames([name]), { split: 7 });
  else json(res, 200, completionBody(name));
};

/** An Anthropic replica: Messages answers, JSON or named SSE events. */
const anthropicReplica = (name: string): Script => async (req, res, body) => {
  if (req.method === 'GET') { json(res, 200, { data: [] }); return; }
  const usage = { input_tokens: 9, output_tokens: 2 };
  if (body?.stream !== true) {
    json(res, 200, { id: 'msg_up', type: 'message', role: 'assistant', model: body.model, content: [{ type: 'text', text: name }], stop_reason: 'end_turn', stop_sequence: null, usage });
    return;
  }
  const ev = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(ev('message_start', { type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model: body.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, output_tokens: 0 } } }));
  res.write(ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }));
  res.write(ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: name } }));
  res.write(ev('content_block_stop', { type: 'content_block_stop', index: 0 }));
  res.write(ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } }));
  res.end(ev('message_stop', { type: 'message_stop' }));
};

/** Fails every generation with a 500 (its own fault); health checks pass. */
const failing: Script = (req, res) => json(res, req.method === 'GET' ? 200 : 500, { error: { message: 'CUDA error: out of memory' } });

interface Setup { gw: TestGateway; replicas: FakeUpstream[] }

async function setup(t: any, kind: 'openai' | 'anthropic'): Promise<Setup> {
  const replica = kind === 'openai' ? openaiReplica : anthropicReplica;
  const replicas = [await startUpstream(failing), await startUpstream(replica('r1'))];
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.fleet = {
    kind, api_key: 'sk-fleet-secret', timeout_ms: 3000, balance: 'round_robin',
    // The failing replica stays in rotation: every request has a fair chance to meet it first.
    outlier: { consecutive_failures: 1000, eject_ms: 1000 }, circuit_failures: 1000,
    targets: replicas.map((r) => ({ url: kind === 'openai' ? r.baseUrl : r.url })),
  };
  const price = { input_per_mtok: 1_000_000, output_per_mtok: 3_000_000 };
  c.models.push({ id: 'm', provider: 'fleet', upstream_model: 'fleet-7b', context_window: 8192, max_output_tokens: 64, price });
  if (kind === 'openai') c.models.push({ id: 'e', type: 'embedding', provider: 'fleet', upstream_model: 'embed-1', context_window: 8192, price });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); for (const r of replicas) await r.close(); });
  return { gw, replicas };
}

async function available(gw: TestGateway): Promise<number> {
  const res = await request(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  const a: any = await res.body.json();
  return a.balance_units - a.held_units;
}

async function post(gw: TestGateway, path: string, body: unknown) {
  const headers = path.startsWith('/v1/messages')
    ? { 'x-api-key': DEMO_KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }
    : { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' };
  const res = await request(`${gw.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

const msgs = [{ role: 'user', content: 'Hello there' }];
const routes: Array<{ name: string; path: string; body: Record<string, unknown>; answered: (text: string) => boolean; embed?: true }> = [
  { name: 'chat', path: '/v1/chat/completions', body: { model: 'm', messages: msgs }, answered: (s) => JSON.parse(s).choices[0].message.content === 'r1' },
  { name: 'chat stream', path: '/v1/chat/completions', body: { model: 'm', messages: msgs, stream: true }, answered: (s) => s.includes('"content":"r1"') && s.endsWith('data: [DONE]\n\n') },
  { name: 'messages', path: '/v1/messages', body: { model: 'm', max_tokens: 32, messages: msgs }, answered: (s) => JSON.parse(s).content[0].text === 'r1' },
  { name: 'messages stream', path: '/v1/messages', body: { model: 'm', max_tokens: 32, messages: msgs, stream: true }, answered: (s) => s.includes('"text":"r1"') && s.includes('event: message_stop') },
  { name: 'responses', path: '/v1/responses', body: { model: 'm', input: 'Hello there', store: false }, answered: (s) => JSON.parse(s).output_text === 'r1' || JSON.stringify(JSON.parse(s).output).includes('"text":"r1"') },
  { name: 'responses stream', path: '/v1/responses', body: { model: 'm', input: 'Hello there', stream: true, store: false }, answered: (s) => s.includes('event: response.completed') && s.includes('"delta":"r1"') },
  { name: 'embeddings', path: '/v1/embeddings', body: { model: 'e', input: ['a', 'b'] }, answered: (s) => JSON.parse(s).data.length === 2, embed: true },
];

for (const kind of ['openai', 'anthropic'] as const) {
  t.test(`${kind} fleet: a failing replica is retried on another, for every dialect, charged once`, async (t) => {
    const { gw, replicas } = await setup(t, kind);
    for (const route of routes) {
      if (route.embed && kind === 'anthropic') continue;
      // Two requests in a row under round robin: at least one meets the failing replica first.
      const posts = () => replicas[0]!.requests.filter((r) => r.method === 'POST').length;
      const triedBefore = posts();
      for (let i = 0; i < 2; i++) {
        const before = await available(gw);
        const res = await post(gw, route.path, route.body);
        t.equal(res.status, 200, `${route.name} #${i}: the client sees no error`);
        t.ok(route.answered(res.text), `${route.name} #${i}: answered by the healthy replica`);
        const charged = Number(res.headers['x-tollgate-units-charged'] ?? NaN);
        const after = await available(gw);
        if (Number.isSafeInteger(charged)) t.equal(before - after, charged, `${route.name} #${i}: charged once, what the header says`);
        else t.ok(before - after > 0, `${route.name} #${i}: charged (stream: no header)`);
      }
      t.ok(posts() > triedBefore, `${route.name}: the failing replica was tried first at least once (${posts() - triedBefore} of 2)`);
    }
    const view: any = await (await request(`${gw.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } })).body.json();
    const [r0, r1] = view.providers.fleet.replicas;
    t.ok(r0.failures > 0 && r1.failures === 0, '/admin/upstreams: the failures are the failing replica\'s');
    t.equal(r0.outstanding + r1.outstanding, 0, 'nothing left in flight');
    // Each metered request's usage record names the replica that answered it.
    const page: any = await (await request(`${gw.url}/admin/usage/records?account=demo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } })).body.json();
    const served = kind === 'openai' ? replicas[1]!.baseUrl : replicas[1]!.url;
    t.equal(page.records.length, (kind === 'openai' ? routes.length : routes.length - 1) * 2, 'one record per request');
    t.ok(page.records.every((r: any) => r.target === served && r.provider === 'fleet'), 'every record\'s target is the replica that answered');
    if (kind === 'anthropic') {
      const native = replicas[1]!.requests.filter((r) => r.method === 'POST' && r.url === '/v1/messages');
      t.ok(native.length > 0, 'Anthropic replicas get /v1/messages');
      t.ok(native.every((r) => r.headers['x-api-key'] === 'sk-fleet-secret' && r.body.model === 'fleet-7b'), 'each with the provider\'s key and the upstream model');
    }
  });
}

t.test('every replica failing: 502 provider_error in the dialect\'s shape, nothing charged', async (t) => {
  const { gw, replicas } = await setup(t, 'openai');
  replicas[1]!.setScript(failing);
  const before = await available(gw);
  const chat = await post(gw, '/v1/chat/completions', { model: 'm', messages: msgs });
  t.equal(chat.status, 502);
  t.equal(JSON.parse(chat.text).error.code, 'provider_error');
  const messages = await post(gw, '/v1/messages', { model: 'm', max_tokens: 32, messages: msgs });
  t.equal(messages.status, 502);
  t.match(JSON.parse(messages.text), { type: 'error', error: { code: 'provider_error' } });
  const emb = await post(gw, '/v1/embeddings', { model: 'e', input: 'a' });
  t.equal(emb.status, 502);
  t.equal(JSON.parse(emb.text).error.code, 'provider_error');
  t.equal(await available(gw), before, 'wallet unchanged, holds released');
  t.ok(replicas.every((r) => r.requests.filter((s) => s.method === 'POST').length >= 3), 'both replicas were tried for each request');
});
