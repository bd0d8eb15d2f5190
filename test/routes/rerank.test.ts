// POST /v1/rerank and POST /v1/score over raw HTTP against a real gateway: the echo provider's
// deterministic scores, an OpenAI-compatible fake upstream that gets the client's fields as sent
// (model rewritten) on its own /v1/rerank and /v1/score, the charge taken from the upstream's
// usage.total_tokens, else prompt_tokens, else the gateway's count, fallbacks, and every refusal
// with its exact envelope and the wallet untouched.

import t from 'tap';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { cost } from '../../lib/billing/meter.js';
import { validateConfig } from '../../lib/config/load.js';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'rerank-admin-token';
const PRICE = { input_per_mtok: 2_000_000, output_per_mtok: 9_000_000 }; // 2 units per token
const POOR_KEY = 'tg_poor_0000000000000000';

let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 500, {}));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.accounts.push({ id: 'poor', plan: 'free', wallet_units: 3, keys: [POOR_KEY] });
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 2000, circuit_failures: 1000 };
  c.models.push({ id: 'rr-echo', type: 'rerank', provider: 'echo', context_window: 64, price: PRICE, max_output_tokens: 1 });
  c.models.push({ id: 'rr-oai', type: 'rerank', provider: 'oai', upstream_model: 'BAAI/bge-reranker', context_window: 512, price: PRICE, max_output_tokens: 1 });
  c.models.push({
    id: 'rr-fallback', type: 'rerank', provider: 'oai', upstream_model: 'BAAI/bge-reranker', fallbacks: [{ provider: 'echo' }],
    context_window: 512, price: PRICE, max_output_tokens: 1,
  });
  c.models.push({ id: 'embed-echo', type: 'embedding', provider: 'echo', price: PRICE, max_output_tokens: 1 });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const account = async (id = 'demo'): Promise<any> => (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const post = async (path: string, body: unknown, key = DEMO_KEY) => {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: any;
  try { parsed = JSON.parse(text); } catch { parsed = text; }
  return { status: res.status, headers: res.headers, body: parsed };
};
const tok = (s: string) => countTokens(s);

t.test('echo rerank: results by falling score, documents, top_n, usage charged to the unit', async (t) => {
  const before = await account();
  const documents = ['the cat sat on the mat', 'a dog barked', 'cats and a mat'];
  const r = await post('/v1/rerank', { model: 'rr-echo', query: 'the cat on a mat', documents });
  t.equal(r.status, 200);
  t.match(r.body.id, /^rerank-[0-9a-f]{32}$/);
  t.equal(r.body.model, 'rr-echo');
  t.same(Object.keys(r.body), ['id', 'model', 'results', 'usage']);
  t.same(r.body.results.map((x: any) => x.index), [0, 2, 1], 'by falling score');
  const scores = r.body.results.map((x: any) => x.relevance_score);
  t.ok(scores[0] > scores[1] && scores[1] > scores[2]);
  t.same(r.body.results[0], { index: 0, relevance_score: 4 / 6, document: { text: documents[0] } }, 'Jaccard overlap of words: 4 shared of 6');
  const tokens = documents.reduce((s, d) => s + tok('the cat on a mat') + tok(d), 0);
  t.same(r.body.usage, { total_tokens: tokens }, 'each pair: the query and its document');
  t.equal(r.headers.get('x-tollgate-units-charged'), String(cost(tokens, 0, PRICE)));
  const again = await post('/v1/rerank', { model: 'rr-echo', query: 'the cat on a mat', documents, top_n: 1, return_documents: false });
  t.same(again.body.results, [{ index: 0, relevance_score: 4 / 6 }], 'top_n 1, no documents; deterministic');
  const after = await account();
  t.equal(before.balance_units - after.balance_units, 2 * Number(cost(tokens, 0, PRICE)), 'each request debited once');
  t.equal(after.held_units, 0);
  t.equal(after.balance_units, Number(after.balance_units), 'integer units');
  t.equal(r.headers.get('x-tollgate-wallet-balance-units'), String(before.available_units - Number(cost(tokens, 0, PRICE))));
});

t.test('echo score: one text against many, and pairwise lists', async (t) => {
  const one = await post('/v1/score', { model: 'rr-echo', text_1: 'red apple', text_2: ['red apple', 'green pear'] });
  t.equal(one.status, 200);
  t.match(one.body, { object: 'list', model: 'rr-echo', data: [{ index: 0, object: 'score', score: 1 }, { index: 1, object: 'score', score: 0 }] });
  t.match(one.body.id, /^score-/);
  t.type(one.body.created, 'number');
  const tokens = 3 * tok('red apple') + tok('green pear'); // text_1 counted in each of its pairs
  t.same(one.body.usage, { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 });
  const pairwise = await post('/v1/score', { model: 'rr-echo', text_1: ['a b', 'c d'], text_2: ['a x', 'c d'] });
  t.same(pairwise.body.data.map((d: any) => d.score), [1 / 3, 1]);
});

t.test('openai upstream: the fields as sent on /v1/rerank and /v1/score, model rewritten; its usage charged', async (t) => {
  up.setScript((req, res) => {
    if (req.url === '/v1/rerank') {
      // Unsorted, with its own document echo and model name: the gateway answers in its shape.
      json(res, 200, {
        id: 'up-1', model: 'BAAI/bge-reranker', usage: { total_tokens: 40, prompt_tokens: 39 },
        results: [{ index: 1, relevance_score: 0.25, document: { text: 'b' } }, { index: 0, relevance_score: 0.75, document: { text: 'a' } }],
      });
    } else {
      json(res, 200, { id: 'up-2', object: 'list', model: 'BAAI/bge-reranker', data: [{ index: 0, object: 'score', score: 0.5 }], usage: { prompt_tokens: 9 } });
    }
  });
  const before = await account();
  const body = { query: 'q', model: 'rr-oai', documents: ['a', 'b'], top_n: 2, truncate_prompt_tokens: 100, priority: 0 };
  const r = await post('/v1/rerank', body);
  t.equal(r.status, 200);
  const seen = up.requests.at(-1)!;
  t.equal(seen.url, '/v1/rerank');
  t.equal(seen.method, 'POST');
  t.same(seen.body, { ...body, model: 'BAAI/bge-reranker' }, 'every field as sent, only the model rewritten');
  t.same(Object.keys(seen.body), Object.keys(body), 'in their order');
  t.same(r.body.results, [{ index: 0, relevance_score: 0.75, document: { text: 'a' } }, { index: 1, relevance_score: 0.25, document: { text: 'b' } }]);
  t.equal(r.body.model, 'rr-oai', 'the slug, never the upstream name');
  t.same(r.body.usage, { total_tokens: 40 }, 'usage.total_tokens');
  const s = await post('/v1/score', { model: 'rr-oai', text_1: 'x', text_2: 'y' });
  t.equal(up.requests.at(-1)!.url, '/v1/score');
  t.same(up.requests.at(-1)!.body, { model: 'BAAI/bge-reranker', text_1: 'x', text_2: 'y' });
  t.same(s.body.data, [{ index: 0, object: 'score', score: 0.5 }]);
  t.equal(s.body.usage.total_tokens, 9, 'prompt_tokens when total_tokens is absent');
  up.setScript((_req, res) => json(res, 200, { data: [{ index: 0, score: 0.5 }] }));
  const counted = await post('/v1/score', { model: 'rr-oai', text_1: 'x', text_2: 'y' });
  t.equal(counted.body.usage.total_tokens, tok('x') + tok('y'), "the gateway's count when the upstream reports none");
  const after = await account();
  t.equal(before.balance_units - after.balance_units, Number(cost(40, 0, PRICE) + cost(9, 0, PRICE) + cost(tok('x') + tok('y'), 0, PRICE)));
});

t.test('upstream failures: fallback to the next target; with none, 502 and nothing charged', async (t) => {
  up.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  const fb = await post('/v1/rerank', { model: 'rr-fallback', query: 'x y', documents: ['x', 'y z'] });
  t.equal(fb.status, 200, 'the echo fallback answered');
  t.same(fb.body.results.map((r: any) => r.index), [0, 1]);
  const before = await account();
  const bad: [string, (res: any) => void][] = [
    ['500', (res) => json(res, 500, { error: { message: 'boom' } })],
    ['index out of range', (res) => json(res, 200, { results: [{ index: 7, relevance_score: 1 }] })],
    ['a score not a number', (res) => json(res, 200, { results: [{ index: 0, relevance_score: 'high' }] })],
    ['a repeated index', (res) => json(res, 200, { results: [{ index: 0, relevance_score: 1 }, { index: 0, relevance_score: 1 }] })],
    ['fewer results than documents', (res) => json(res, 200, { results: [{ index: 0, relevance_score: 1 }] })],
    ['not JSON', (res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"results": ['); }],
  ];
  for (const [name, script] of bad) {
    up.setScript((_req, res) => script(res));
    const r = await post('/v1/rerank', { model: 'rr-oai', query: 'q', documents: ['a', 'b'] });
    t.equal(r.status, 502, name);
    t.equal(r.body.code, 'provider_error', name);
  }
  up.setScript((_req, res) => json(res, 429, { error: { message: 'slow down' } }, { 'retry-after': '3' }));
  const busy = await post('/v1/rerank', { model: 'rr-oai', query: 'q', documents: ['a'] });
  t.equal(busy.status, 503);
  t.equal(busy.body.code, 'model_unavailable');
  t.equal(busy.headers.get('retry-after'), '3');
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'no hold left');
});

t.test('refusals: exact status, code, param and envelope; the wallet untouched', async (t) => {
  const before = await account();
  const cases: [string, unknown, number, string, string | null][] = [
    ['/v1/rerank', { model: 'echo-small', query: 'q', documents: ['a'] }, 400, 'unsupported_value', 'model'],
    ['/v1/score', { model: 'embed-echo', text_1: 'q', text_2: 'a' }, 400, 'unsupported_value', 'model'],
    ['/v1/chat/completions', { model: 'rr-echo', messages: [{ role: 'user', content: 'x' }] }, 400, 'unsupported_value', 'model'],
    ['/v1/embeddings', { model: 'rr-echo', input: 'x' }, 400, 'unsupported_value', 'model'],
    ['/v1/responses', { model: 'rr-echo', input: 'x' }, 400, 'unsupported_value', 'model'],
    ['/v1/rerank', { query: 'q', documents: ['a'] }, 400, 'missing_required_parameter', 'model'],
    ['/v1/rerank', { model: 'rr-echo', documents: ['a'] }, 400, 'missing_required_parameter', 'query'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q' }, 400, 'missing_required_parameter', 'documents'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: 'a' }, 400, 'invalid_type', 'documents'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: [] }, 400, 'invalid_value', 'documents'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a', 3] }, 400, 'invalid_type', 'documents[1]'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a', ''] }, 400, 'invalid_value', 'documents[1]'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: Array(2049).fill('a') }, 400, 'invalid_value', 'documents'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a'], top_n: -1 }, 400, 'invalid_value', 'top_n'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a'], top_n: 1.5 }, 400, 'invalid_value', 'top_n'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a'], top_n: '2' }, 400, 'invalid_type', 'top_n'],
    ['/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a'], return_documents: 'yes' }, 400, 'invalid_type', 'return_documents'],
    ['/v1/rerank', { model: 'rr-echo', query: 5, documents: ['a'] }, 400, 'invalid_type', 'query'],
    ['/v1/score', { model: 'rr-echo', text_1: ['a', 'b'], text_2: ['a', 'b', 'c'] }, 400, 'invalid_value', 'text_2'],
    ['/v1/score', { model: 'rr-echo', text_2: 'a' }, 400, 'missing_required_parameter', 'text_1'],
    ['/v1/score', { model: 'rr-echo', text_1: {}, text_2: 'a' }, 400, 'invalid_type', 'text_1'],
    ['/v1/score', [1, 2], 400, 'invalid_type', 'body'],
    ['/v1/score', '{"model":', 400, 'invalid_json', null],
    ['/v1/rerank', { model: 'rr-echo', query: 'word '.repeat(40), documents: ['a', 'word '.repeat(30)] }, 422, 'context_length_exceeded', 'documents[1]'],
    ['/v1/rerank', { model: 'nope', query: 'q', documents: ['a'] }, 404, 'model_not_found', 'model'],
  ];
  for (const [path, body, status, code, param] of cases) {
    const r = await post(path, body);
    t.equal(r.status, status, `${path} ${code} ${param}`);
    t.same(schemas.error(r.body), [], 'the envelope');
    const extras = code === 'model_not_found' ? ['suggested_models'] : [];
    t.same(Object.keys(r.body).sort(), ['message', 'type', 'param', 'code', 'request_id', 'error', ...extras].sort());
    const { suggested_models: _s, ...inner } = r.body.error;
    t.same(inner, { message: r.body.message, type: 'invalid_request_error', param, code });
    t.equal(r.body.request_id, r.headers.get('x-request-id'));
    t.equal(r.headers.get('x-tollgate-units-charged'), null);
  }
  const poor = await account('poor');
  const broke = await post('/v1/rerank', { model: 'rr-echo', query: 'q', documents: ['a long enough document'] }, POOR_KEY);
  t.equal(broke.status, 402);
  t.match(broke.body, { code: 'insufficient_credits', type: 'insufficient_credits', wallet_balance_units: 3 });
  t.same(await account('poor'), poor, 'the poor wallet unchanged');
  const get = await fetch(`${gw.url}/v1/score`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST');
  t.equal(((await get.json()) as any).code, 'method_not_allowed');
  const media = await fetch(`${gw.url}/v1/rerank`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'text/plain' }, body: '{}' });
  t.equal(media.status, 415);
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0);
});

t.test('usage records and the model list name the route and the type', async (t) => {
  await post('/v1/score', { model: 'rr-echo', text_1: 'usage', text_2: 'record' });
  const page: any = await (await fetch(`${gw.url}/admin/usage/records?account=demo&model=rr-echo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  const routes = new Set(page.records.map((r: any) => r.route));
  t.ok(routes.has('/v1/rerank') && routes.has('/v1/score'), 'route named');
  const last = page.records.at(-1);
  t.match(last, { route: '/v1/score', model: 'rr-echo', status: 200, prompt_tokens: tok('usage') + tok('record'), completion_tokens: 0, usage_source: 'upstream' });
  const list: any = await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).json();
  t.equal(list.data.find((m: any) => m.id === 'rr-echo').type, 'rerank');
});

t.test('config: a rerank model on anthropic, or in routing.auto, is refused', async (t) => {
  const c = baseConfig();
  c.providers.ant = { kind: 'anthropic', base_url: 'http://127.0.0.1:1' };
  c.models.push({ id: 'r', type: 'rerank', provider: 'ant' });
  t.throws(() => validateConfig(c), /models\[2\]\.provider: provider "ant" is anthropic, which has no rerank or score API/);
  c.models[2] = { id: 'r', type: 'rerank', provider: 'echo' };
  c.routing.auto.push('r');
  t.throws(() => validateConfig(c), /models\[2\]\.type: a rerank model cannot be in routing.auto/);
});
