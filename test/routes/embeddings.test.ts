// POST /v1/embeddings through the official openai SDK against a real gateway: the echo
// provider's deterministic vectors and an OpenAI-compatible fake upstream, float and base64,
// each answer checked against OpenAI's schema and the wallet to the unit; the wrong route for a
// model's type, upstream failures and the config check for anthropic.

import t from 'tap';
import OpenAI from 'openai';
import { cost } from '../../lib/billing/meter.js';
import { validateConfig } from '../../lib/config/load.js';
import { DEMO_KEY, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'embeddings-admin-token';
const PRICE = { input_per_mtok: 3_000_000, output_per_mtok: 9_000_000 }; // 3 units per input token

let up: FakeUpstream;
let gw: TestGateway;

const vectorAnswer = (n: number, dims: number, prompt = 7) => ({
  object: 'list', model: 'bge-upstream',
  data: Array.from({ length: n }, (_x, index) => ({ object: 'embedding', index, embedding: Array.from({ length: dims }, (_y, j) => (index + 1) * 0.125 + j / 1024) })),
  usage: { prompt_tokens: prompt, total_tokens: prompt },
});

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, vectorAnswer(1, 4)));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 2000, circuit_failures: 1000 };
  c.models.push({ id: 'embed-echo', type: 'embedding', provider: 'echo', context_window: 512, price: PRICE, max_output_tokens: 1 });
  c.models.push({ id: 'embed-oai', type: 'embedding', provider: 'oai', upstream_model: 'bge-upstream', context_window: 512, price: PRICE, max_output_tokens: 1 });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const client = () => new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
const account = async (): Promise<any> => (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const post = async (body: unknown, path = '/v1/embeddings') => {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() as any };
};
const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const fromBase64 = (b: string) => { const buf = Buffer.from(b, 'base64'); return [...new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4)]; };

t.test('echo: deterministic unit vectors, dimensions honoured, float and base64, charged to the unit', async (t) => {
  const before = await account();
  const a = await post({ model: 'embed-echo', input: ['the cat', 'a dog'], encoding_format: 'float', dimensions: 64 });
  t.equal(a.status, 200);
  t.same(schemas.embeddings(a.body), [], 'validates against CreateEmbeddingResponse.json');
  t.equal(a.body.object, 'list');
  t.equal(a.body.model, 'embed-echo');
  t.same(a.body.data.map((d: any) => [d.object, d.index, d.embedding.length]), [['embedding', 0, 64], ['embedding', 1, 64]]);
  for (const d of a.body.data) t.ok(Math.abs(norm(d.embedding) - 1) < 1e-9, 'normalized');
  t.notSame(a.body.data[0].embedding, a.body.data[1].embedding, 'different inputs, different vectors');
  const tokens = a.body.usage.prompt_tokens;
  t.ok(tokens > 0);
  t.same(a.body.usage, { prompt_tokens: tokens, total_tokens: tokens });
  t.equal(a.headers.get('x-tollgate-units-charged'), String(cost(tokens, 0, PRICE)));
  const mid = await account();
  t.equal(before.balance_units - mid.balance_units, Number(cost(tokens, 0, PRICE)), 'charged input_per_mtok x prompt tokens');
  t.equal(mid.held_units, 0);

  const again = await client().embeddings.create({ model: 'embed-echo', input: 'the cat', dimensions: 64, encoding_format: 'float' });
  t.same(again.data[0]!.embedding, a.body.data[0].embedding, 'same input, same vector (SDK, float)');
  const sdkDefault = await client().embeddings.create({ model: 'embed-echo', input: 'the cat', dimensions: 64 });
  t.same(sdkDefault.data[0]!.embedding, a.body.data[0].embedding.map(Math.fround), 'the SDK default (base64 on the wire) decodes to the same vector');
  const b64 = await post({ model: 'embed-echo', input: 'the cat', dimensions: 64, encoding_format: 'base64' });
  // OpenAI's schema types `embedding` as floats only; a base64 answer is that answer encoded.
  t.same(schemas.embeddings({ ...b64.body, data: b64.body.data.map((d: any) => ({ ...d, embedding: fromBase64(d.embedding) })) }), []);
  t.type(b64.body.data[0].embedding, 'string');
  t.same(fromBase64(b64.body.data[0].embedding), a.body.data[0].embedding.map(Math.fround), 'base64 is little-endian float32');
  const long = await client().embeddings.create({ model: 'embed-echo', input: [[1, 2, 3], [4, 5]], encoding_format: 'float' });
  t.same(long.data.map((d) => d.embedding.length), [256, 256], 'token arrays; 256 dimensions by default');
  t.equal(long.usage.prompt_tokens, 5, 'token arrays count their length');
  const after = await account();
  const charged = [again, sdkDefault, long].reduce((s, r) => s + Number(cost(r.usage.prompt_tokens, 0, PRICE)), 0) +
    Number(cost(b64.body.usage.prompt_tokens, 0, PRICE));
  t.equal(mid.balance_units - after.balance_units, charged, 'each request debited exactly once');
});

t.test('openai upstream: POST {base_url}/embeddings, its usage charged, float and base64', async (t) => {
  up.setScript((_req, res) => json(res, 200, vectorAnswer(2, 4, 11)));
  const before = await account();
  const r = await client().embeddings.create({ model: 'embed-oai', input: ['one', 'two'], dimensions: 4, user: 'u1', encoding_format: 'float' });
  const seen = up.requests.at(-1)!;
  t.equal(seen.url, '/v1/embeddings');
  t.same(seen.body, { model: 'bge-upstream', input: ['one', 'two'], encoding_format: 'float', dimensions: 4, user: 'u1' });
  t.equal(r.model, 'embed-oai');
  t.same(r.data[1]!.embedding, vectorAnswer(2, 4).data[1]!.embedding);
  t.same(r.usage, { prompt_tokens: 11, total_tokens: 11 });
  const b = await client().embeddings.create({ model: 'embed-oai', input: ['one', 'two'] });
  t.equal(up.requests.at(-1)!.body.encoding_format, 'float', 'the upstream is always asked for floats');
  t.same(b.data[0]!.embedding, vectorAnswer(2, 4).data[0]!.embedding.map(Math.fround), 'the SDK decodes our base64');
  const after = await account();
  t.equal(before.balance_units - after.balance_units, 2 * Number(cost(11, 0, PRICE)));
});

t.test('failures and refusals charge nothing and leave no hold', async (t) => {
  const before = await account();
  up.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  const err = await client().embeddings.create({ model: 'embed-oai', input: 'x' }).catch((e) => e);
  t.equal(err.status, 502);
  t.equal(err.code, 'provider_error');
  up.setScript((_req, res) => json(res, 200, { object: 'list', data: [{ index: 5, embedding: [1] }] }));
  t.equal((await post({ model: 'embed-oai', input: 'x' })).body.code, 'provider_error', 'an invalid upstream answer');

  const cases: [unknown, string, number, string, string | null][] = [
    [{ model: 'echo-small', input: 'x' }, '/v1/embeddings', 400, 'unsupported_value', 'model'],
    [{ model: 'embed-echo', messages: [{ role: 'user', content: 'x' }] }, '/v1/chat/completions', 400, 'unsupported_value', 'model'],
    [{ model: 'embed-echo', input: 'x' }, '/v1/responses', 400, 'unsupported_value', 'model'],
    [{ model: 'embed-echo' }, '/v1/embeddings', 400, 'missing_required_parameter', 'input'],
    [{ model: 'embed-echo', input: [] }, '/v1/embeddings', 400, 'invalid_value', 'input'],
    [{ model: 'embed-echo', input: ['a', 3] }, '/v1/embeddings', 400, 'invalid_type', 'input[1]'],
    [{ model: 'embed-echo', input: 'x', encoding_format: 'int8' }, '/v1/embeddings', 400, 'unsupported_value', 'encoding_format'],
    [{ model: 'embed-echo', input: 'x', dimensions: 0 }, '/v1/embeddings', 400, 'invalid_value', 'dimensions'],
    [{ model: 'embed-echo', input: 'x', dimensions: 8193 }, '/v1/embeddings', 400, 'invalid_value', 'dimensions'],
    [{ model: 'embed-echo', input: Array(2048).fill('x'), dimensions: 8192 }, '/v1/embeddings', 400, 'invalid_value', 'dimensions'],
    [{ model: 'embed-echo', input: 'x', user: 5 }, '/v1/embeddings', 400, 'invalid_type', 'user'],
    [{ model: 'embed-echo', input: 'word '.repeat(600) }, '/v1/embeddings', 422, 'context_length_exceeded', 'input'],
    [{ model: 'nope', input: 'x' }, '/v1/embeddings', 404, 'model_not_found', 'model'],
  ];
  for (const [body, path, status, code, param] of cases) {
    const r = await post(body, path);
    t.equal(r.status, status, `${path} ${code}`);
    t.same(schemas.error(r.body), []);
    t.equal(r.body.code, code);
    t.equal(r.body.param, param);
  }
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'no hold left');
  up.setScript((_req, res) => json(res, 200, vectorAnswer(1, 4)));
});

t.test('GET /v1/models lists each model with its type', async (t) => {
  const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  const list: any = await res.json();
  t.same(schemas.list(list), []);
  const types = Object.fromEntries(list.data.map((m: any) => [m.id, m.type]));
  t.match(types, { 'echo-small': 'chat', 'embed-echo': 'embedding', 'embed-oai': 'embedding' });
  const chat = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'still fine' }] });
  t.equal(chat.status, 200, 'chat models still chat');
});

t.test('config: an embedding model on anthropic is refused', async (t) => {
  const c = baseConfig();
  c.providers.ant = { kind: 'anthropic', base_url: 'http://127.0.0.1:1' };
  c.models.push({ id: 'e', type: 'embedding', provider: 'ant' });
  t.throws(() => validateConfig(c), /models\[2\]\.provider: provider "ant" is anthropic, which has no embeddings/);
  c.models[2] = { id: 'e', type: 'vector', provider: 'echo' };
  t.throws(() => validateConfig(c), /models\[2\]\.type: must be chat, embedding, rerank or transcription/);
});
