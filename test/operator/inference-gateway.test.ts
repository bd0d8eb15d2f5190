// A provider behind an inference gateway (CONTRACT section 19): with `inference_gateway: true`,
// every upstream request carries x-gateway-inference-fairness-id (the key's team, else the
// account) and x-gateway-inference-objective (the key's priority, else the plan's), from what
// Tollgate verified; a client's copies of the two (any spelling) reach no provider: not this
// one, not one without the option, not the model server behind passthrough. Served from a YAML
// file by `tollgate serve`, through the openai SDK (chat, streamed, embeddings) and raw HTTP.

import t from 'tap';
import OpenAI from 'openai';
import { ADMIN, KEY, PRICE, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type SeenRequest } from '../helpers/upstream.js';

const FAIR = 'x-gateway-inference-fairness-id';
const OBJECTIVE = 'x-gateway-inference-objective';

async function recording(): Promise<FakeUpstream> {
  return startUpstream(async (req, res, body) => {
    if (req.method === 'GET') return json(res, 200, { object: 'list', data: [] });
    if (req.url === '/v1/embeddings') return json(res, 200, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }], usage: { prompt_tokens: 3, total_tokens: 3 } });
    if (req.url === '/tokenize' || req.url === '/health') return json(res, 200, { ok: true });
    if (body.stream === true) return writeSse(res, streamFrames(['Hello']));
    json(res, 200, completionBody('Hello'));
  });
}

const igw = await recording();
const plain = await recording();
t.teardown(async () => { await igw.close(); await plain.close(); });

const spoof = { 'X-Gateway-Inference-Fairness-Id': 'victim-co', 'x-gateway-inference-objective': 'critical' };
const gwHeaders = (r: SeenRequest) => [r.headers[FAIR], r.headers[OBJECTIVE]];

t.test('inference_gateway: the verified caller in two headers; a client\'s copies never forwarded', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, drain_timeout_ms: 10_000, passthrough: plain.url },
    plans: { free: { paid: false, requests_per_minute: 1000, priority: 'low' } },
    providers: {
      igw: { kind: 'openai', base_url: igw.baseUrl, inference_gateway: true },
      plain: { kind: 'openai', base_url: plain.baseUrl },
    },
    models: [
      { id: 'm-igw', provider: 'igw', upstream_model: 'upstream-model', price: PRICE },
      { id: 'e-igw', type: 'embedding', provider: 'igw', upstream_model: 'embedder', price: PRICE },
      { id: 'm-plain', provider: 'plain', upstream_model: 'upstream-model', price: PRICE },
    ],
  }));
  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${served.url}${path}`, {
      method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const before = await wallet(served.url);

  // The demo key: no team, no priority of its own: the account, the plan's band (low).
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0, defaultHeaders: spoof });
  const { response } = await client.chat.completions.create({ model: 'm-igw', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  t.equal(response.status, 200);
  let charged = Number(response.headers.get('x-tollgate-units-charged'));
  const stream = await client.chat.completions.create({ model: 'm-igw', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
  for await (const c of stream) if (c.usage) charged += c.usage.prompt_tokens + 2 * c.usage.completion_tokens;
  const emb = await client.embeddings.create({ model: 'e-igw', input: 'hello' }).withResponse();
  charged += Number(emb.response.headers.get('x-tollgate-units-charged'));
  const posts = () => igw.requests.filter((r) => r.method === 'POST');
  t.equal(posts().length, 3, 'chat, streamed chat, embeddings');
  for (const r of posts()) t.strictSame(gwHeaders(r), ['demo', 'low'], `${r.url}: the account and the plan's band, not the client's values`);

  // A key with a team and a priority of its own.
  const team = await admin('POST', '/admin/accounts/demo/teams', { id: 'search-team', name: 'Search' });
  t.equal(team.status, 201, JSON.stringify(team.body));
  const made = await admin('POST', '/admin/accounts/demo/keys', { name: 'bot', team: 'search-team', priority: 'high' });
  t.equal(made.status, 201);
  const teamClient = new OpenAI({ apiKey: made.body.key, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const raw = await fetch(`${served.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${made.body.key}`, 'content-type': 'application/json', 'X-GATEWAY-INFERENCE-FAIRNESS-ID': 'other', 'X-Gateway-Inference-Objective': 'low' },
    body: JSON.stringify({ model: 'm-igw', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(raw.status, 200, 'raw HTTP with spoofed headers in upper case');
  charged += Number(raw.headers.get('x-tollgate-units-charged'));
  t.strictSame(gwHeaders(posts().at(-1)!), ['search-team', 'high'], "the key's team and its own priority");
  const r2 = await teamClient.chat.completions.create({ model: 'm-igw', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  charged += Number(r2.response.headers.get('x-tollgate-units-charged'));
  t.strictSame(gwHeaders(posts().at(-1)!), ['search-team', 'high']);

  // A provider without the option: neither header, whatever the client sent.
  const p = await client.chat.completions.create({ model: 'm-plain', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
  charged += Number(p.response.headers.get('x-tollgate-units-charged'));
  const plainPost = plain.requests.filter((r) => r.method === 'POST').at(-1)!;
  t.strictSame(gwHeaders(plainPost), [undefined, undefined], 'not sent to a provider without inference_gateway, the client\'s not forwarded');

  // Passthrough to the model server: the client's copies are dropped there too.
  const pt = await fetch(`${served.url}/health`, { headers: spoof });
  t.equal(pt.status, 200, 'passthrough answers');
  const seen = plain.requests.find((r) => r.url === '/health')!;
  t.ok(seen, 'the passthrough request reached the model server');
  t.strictSame(gwHeaders(seen), [undefined, undefined], 'passthrough drops the client\'s copies');

  const after = await wallet(served.url);
  t.equal(after.balance_units, before.balance_units - charged, `each request debited once: ${charged} units`);
  t.equal(after.held_units, 0, 'no hold left');
});
