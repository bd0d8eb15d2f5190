// POST /v1/completions through the official openai SDK (completions.create, plain and streamed)
// and raw HTTP against a real gateway: the echo provider's deterministic answers (suffix, echo,
// n, prompt arrays), an OpenAI-compatible fake upstream answering natively at its own
// /v1/completions, each answer and chunk checked against OpenAI's schema, the wallet to the unit
// and the usage record's route; fallback, a client that leaves mid-stream, the hold sized by n.

import t from 'tap';
import OpenAI from 'openai';
import { cost } from '../../lib/billing/meter.js';
import { DEMO_KEY, baseConfig, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'completions-admin-token';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 }; // 1 unit per prompt token, 2 per completion token

let up: FakeUpstream;
let spare: FakeUpstream;
let gw: TestGateway;

const textAnswer = (texts: string[], usage = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }) => ({
  id: 'cmpl-upstream-1', object: 'text_completion', created: 1700000000, model: 'internal/coder-7b', system_fingerprint: 'fp_up',
  choices: texts.map((text, index) => ({ index, text, logprobs: null, finish_reason: 'stop', stop_reason: null })),
  usage,
});
const textChunk = (text: string, finish: string | null = null, index = 0) => ({
  id: 'cmpl-upstream-2', object: 'text_completion', created: 1700000000, model: 'internal/coder-7b',
  choices: [{ index, text, logprobs: null, finish_reason: finish }],
});
const textFrames = (words: string[], usage = { prompt_tokens: 6, completion_tokens: words.length, total_tokens: 6 + words.length }) => [
  ...words.map((w) => `data: ${JSON.stringify(textChunk(w))}\n\n`),
  `data: ${JSON.stringify(textChunk('', 'length'))}\n\n`,
  `data: ${JSON.stringify({ ...textChunk(''), choices: [], usage })}\n\n`,
  'data: [DONE]\n\n',
];

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, textAnswer(['  return a + b'])));
  spare = await startUpstream((_req, res) => json(res, 200, textAnswer(['from the spare'])));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.accounts.push({ id: 'poor', plan: 'free', wallet_units: 100, keys: ['tg_poor_0000000000000000'] });
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.providers.spare = { kind: 'openai', base_url: spare.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.providers.ant = { kind: 'anthropic', base_url: 'http://127.0.0.1:1' };
  c.models.push({ id: 'code-echo', provider: 'echo', context_window: 256, max_output_tokens: 64, price: PRICE });
  c.models.push({ id: 'coder', provider: 'oai', upstream_model: 'internal/coder-7b', context_window: 4096, max_output_tokens: 256, price: PRICE });
  c.models.push({
    id: 'coder-fb', provider: 'oai', upstream_model: 'internal/coder-7b', context_window: 4096, max_output_tokens: 256, price: PRICE,
    fallbacks: [{ provider: 'ant', upstream_model: 'claude' }, { provider: 'spare', upstream_model: 'spare/coder' }],
  });
  c.models.push({ id: 'claude-x', provider: 'ant', upstream_model: 'claude', price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); await spare.close(); });

const client = (key = DEMO_KEY) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
const account = async (id = 'demo'): Promise<any> => (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const post = async (body: unknown, key = DEMO_KEY) => {
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
};
const records = async (): Promise<any[]> => {
  const res = await fetch(`${gw.url}/admin/usage/records?account=demo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).records;
};
/** Waits for the hold to be gone (a stream's settle lands after its last byte is read). */
const settled = async (id = 'demo'): Promise<any> => {
  for (let i = 0; i < 100; i++) {
    const a = await account(id);
    if (a.held_units === 0) return a;
    await new Promise((r) => setTimeout(r, 20));
  }
  return account(id);
};

t.test('echo through the SDK: the prompt and suffix echoed, text_completion shape, charged to the unit', async (t) => {
  const before = await account();
  const r = await client().completions.create({ model: 'code-echo', prompt: 'def add(a, b):', suffix: 'print(add(1, 2))', max_tokens: 32 });
  t.same(schemas.textCompletion(r), [], 'validates against CreateCompletionResponse');
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/);
  t.equal(r.object, 'text_completion');
  t.equal(r.model, 'code-echo');
  t.equal(r.choices.length, 1);
  t.equal(r.choices[0]!.text, 'def add(a, b): print(add(1, 2))', 'prompt words, then the suffix words');
  t.equal(r.choices[0]!.finish_reason, 'stop');
  t.equal(r.choices[0]!.logprobs, null);
  const u = r.usage!;
  t.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  const after = await account();
  t.equal(before.balance_units - after.balance_units, Number(cost(u.prompt_tokens, u.completion_tokens, PRICE)), 'debited exactly its usage');
  t.equal(after.held_units, 0);
  const rec = (await records()).at(-1);
  t.match(rec, { route: '/v1/completions', model: 'code-echo', provider: 'echo', status: 200, prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
});

t.test('echo: n, prompt arrays and echo: true; max_tokens defaults to 16', async (t) => {
  const r = await client().completions.create({ model: 'code-echo', prompt: ['alpha beta', 'gamma'], n: 2, echo: true, max_tokens: 8 });
  t.same(schemas.textCompletion(r), []);
  t.same(r.choices.map((c) => [c.index, c.text]), [[0, 'alpha betaalpha beta'], [1, 'alpha betaalpha beta'], [2, 'gammagamma'], [3, 'gammagamma']],
    'prompts x n choices, indexed prompt-major; echo puts the prompt first');
  const long = await client().completions.create({ model: 'code-echo', prompt: 'w '.repeat(40) });
  t.equal(long.choices[0]!.finish_reason, 'length', 'OpenAI\'s default max_tokens (16) bounds the answer');
  t.equal(long.usage!.completion_tokens, 16);
});

t.test('echo streamed through the SDK, with include_usage: chunks of the same object, the usage chunk, then [DONE]', async (t) => {
  const before = await account();
  const stream = await client().completions.create({ model: 'code-echo', prompt: 'one two three', stream: true, stream_options: { include_usage: true } });
  let text = '';
  const ids = new Set<string>();
  let usage: any;
  for await (const c of stream) {
    t.same(schemas.textCompletion(c), [], 'each chunk validates');
    ids.add(c.id);
    t.equal(c.model, 'code-echo');
    for (const ch of c.choices) text += ch.text;
    if (c.usage) usage = c.usage; else t.equal(c.usage, null, 'usage: null until the last chunk');
  }
  t.equal(text, 'one two three');
  t.equal(ids.size, 1, 'one id for the whole stream');
  t.ok(usage && usage.completion_tokens > 0);
  const after = await settled();
  t.equal(before.balance_units - after.balance_units, Number(cost(usage.prompt_tokens, usage.completion_tokens, PRICE)));

  const raw = await post({ model: 'code-echo', prompt: 'a b', stream: true });
  t.equal(raw.status, 200);
  t.match(raw.headers.get('content-type'), /^text\/event-stream/);
  const { events, done } = sseData(raw.text);
  t.ok(done, 'ends with data: [DONE]');
  t.ok(events.every((e) => !('usage' in e)), 'without include_usage no chunk has a usage member');
  t.equal(events.map((e) => e.choices.map((c: any) => c.text).join('')).join(''), 'a b');
});

t.test('openai upstream: the body natively at /v1/completions, model rewritten, the answer as it came', async (t) => {
  const before = await account();
  const r = await client().completions.create({
    model: 'coder', prompt: 'def add(a, b):\n', suffix: '\n\nprint(add(1, 2))', max_tokens: 20, temperature: 0.2, stop: ['\n\n'], logprobs: 2, seed: 7, user: 'u1',
  });
  const seen = up.requests.at(-1)!;
  t.equal(seen.url, '/v1/completions');
  t.same(seen.body, {
    model: 'internal/coder-7b', prompt: 'def add(a, b):\n', suffix: '\n\nprint(add(1, 2))', max_tokens: 20, temperature: 0.2, stop: ['\n\n'], logprobs: 2, seed: 7, user: 'u1',
  }, 'fields passed as sent');
  t.same(schemas.textCompletion(r), []);
  t.equal(r.model, 'coder', 'the slug, never the upstream name');
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/, 'Tollgate\'s id, not the upstream\'s');
  t.equal((r as any).system_fingerprint, 'fp_up', 'the upstream\'s own members pass');
  t.equal(r.choices[0]!.text, '  return a + b');
  t.same(r.usage, { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
  await client().completions.create({ model: 'coder', prompt: 'x' });
  t.equal(up.requests.at(-1)!.body.max_tokens, 16, 'no max_tokens: the held default is sent (llama.cpp would not stop)');
  const after = await account();
  t.equal(before.balance_units - after.balance_units, 2 * Number(cost(5, 3, PRICE)), 'charged the upstream\'s usage');
});

t.test('openai upstream streamed: usage asked upstream, chunks passed natively, model rewritten', async (t) => {
  up.setScript(async (_req, res) => writeSse(res, textFrames(['  return', ' a', ' + b']), { split: 7 }));
  const before = await account();
  const stream = await client().completions.create({ model: 'coder', prompt: 'def add(a, b):', stream: true, max_tokens: 10 });
  let text = '';
  for await (const c of stream) {
    t.same(schemas.textCompletion(c), []);
    t.equal(c.model, 'coder');
    t.notOk('usage' in c, 'the client asked no usage: none in its chunks');
    for (const ch of c.choices) text += ch.text;
  }
  t.equal(text, '  return a + b');
  const seen = up.requests.at(-1)!;
  t.equal(seen.url, '/v1/completions');
  t.same(seen.body.stream_options, { include_usage: true }, 'usage asked for, for metering');
  t.equal(seen.body.stream, true);
  const after = await settled();
  t.equal(before.balance_units - after.balance_units, Number(cost(6, 3, PRICE)), 'charged the upstream\'s stream usage');

  const withUsage = await post({ model: 'coder', prompt: 'p', stream: true, stream_options: { include_usage: true } });
  const { events, done } = sseData(withUsage.text);
  t.ok(done);
  t.same(events.at(-1).usage, { prompt_tokens: 6, completion_tokens: 3, total_tokens: 9 }, 'the final usage chunk');
  t.same(events.at(-1).choices, []);
  t.ok(events.slice(0, -1).every((e) => e.usage === null), 'usage: null on every other chunk');
  const ids = new Set(events.map((e) => e.id));
  t.equal(ids.size, 1, 'one id on every chunk, the usage chunk too');
  t.match([...ids][0], /^cmpl-[0-9a-f]{32}$/, 'Tollgate\'s, never the upstream\'s');
  up.setScript((_req, res) => json(res, 200, textAnswer(['  return a + b'])));
});

t.test('an anthropic model: 400 unsupported_value param model, before anything is held', async (t) => {
  const before = await account();
  const err = await client().completions.create({ model: 'claude-x', prompt: 'hi' }).catch((e) => e);
  t.equal(err.status, 400);
  t.equal(err.code, 'unsupported_value');
  t.equal(err.param, 'model');
  const raw = await post({ model: 'claude-x', prompt: 'hi', stream: true });
  t.equal(raw.status, 400);
  const body = JSON.parse(raw.text);
  t.same(schemas.error(body), []);
  t.match(body, { code: 'unsupported_value', param: 'model', type: 'invalid_request_error', error: { code: 'unsupported_value', param: 'model' } });
  t.equal(body.request_id, raw.headers.get('x-request-id'));
  const after = await account();
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
});

t.test('bad bodies: exact status, code, param and envelope; nothing charged, nothing held', async (t) => {
  const before = await account();
  const cases: [unknown, number, string, string | null][] = [
    [{ model: 'code-echo' }, 400, 'missing_required_parameter', 'prompt'],
    [{ prompt: 'x' }, 400, 'missing_required_parameter', 'model'],
    [{ model: 'code-echo', prompt: 5 }, 400, 'invalid_type', 'prompt'],
    [{ model: 'code-echo', prompt: [] }, 400, 'invalid_value', 'prompt'],
    [{ model: 'code-echo', prompt: [1, 2, 3] }, 400, 'invalid_type', 'prompt'],
    [{ model: 'code-echo', prompt: [[1, 2], [3]] }, 400, 'invalid_type', 'prompt'],
    [{ model: 'code-echo', prompt: ['a', { x: 1 }] }, 400, 'invalid_type', 'prompt[1]'],
    [{ model: 'code-echo', prompt: 'x', suffix: 3 }, 400, 'invalid_type', 'suffix'],
    [{ model: 'code-echo', prompt: 'x', max_tokens: 0 }, 400, 'invalid_value', 'max_tokens'],
    [{ model: 'code-echo', prompt: 'x', max_tokens: '5' }, 400, 'invalid_type', 'max_tokens'],
    [{ model: 'code-echo', prompt: 'x', n: 0 }, 400, 'invalid_value', 'n'],
    [{ model: 'code-echo', prompt: 'x', n: 129 }, 400, 'invalid_value', 'n'],
    [{ model: 'code-echo', prompt: Array(100).fill('x'), n: 21 }, 400, 'invalid_value', 'n'],
    [{ model: 'code-echo', prompt: 'x', echo: 'yes' }, 400, 'invalid_type', 'echo'],
    [{ model: 'code-echo', prompt: 'x', logprobs: true }, 400, 'invalid_type', 'logprobs'],
    [{ model: 'code-echo', prompt: 'x', logprobs: -1 }, 400, 'invalid_value', 'logprobs'],
    [{ model: 'code-echo', prompt: 'x', temperature: 3 }, 400, 'invalid_value', 'temperature'],
    [{ model: 'code-echo', prompt: 'x', stop: [1] }, 400, 'invalid_type', 'stop[0]'],
    [{ model: 'code-echo', prompt: 'x', stream_options: { include_usage: 1 } }, 400, 'invalid_type', 'stream_options.include_usage'],
    [{ model: 'code-echo', prompt: 'word '.repeat(300) }, 422, 'context_length_exceeded', 'prompt'],
    [{ model: 'code-echo', prompt: 'x', max_tokens: 300 }, 422, 'context_length_exceeded', 'prompt'],
    [{ model: 'code-echo', prompt: 'x', suffix: 'word '.repeat(300) }, 422, 'context_length_exceeded', 'prompt'],
    [{ model: 'nope', prompt: 'x' }, 404, 'model_not_found', 'model'],
    ['{"model":', 400, 'invalid_json', null],
  ];
  for (const [body, status, code, param] of cases) {
    const r = await post(body);
    const e = JSON.parse(r.text);
    t.equal(r.status, status, `${JSON.stringify(body).slice(0, 60)} -> ${status}`);
    t.same(schemas.error(e), []);
    t.equal(e.code, code);
    t.equal(e.param, param);
    t.equal(e.error.code, code);
    t.ok(r.headers.get('x-request-id'));
  }
  const get = await fetch(`${gw.url}/v1/completions`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST');
  t.equal(((await get.json()) as any).code, 'method_not_allowed');
  const anon = await fetch(`${gw.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  t.equal(anon.status, 401);
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'no hold left');
});

t.test('n multiplies the held output: a wallet that pays for one answer is refused four', async (t) => {
  // code-echo: 1 unit per prompt token, 2 per completion token; 10 output tokens x 2 = 20 units per answer.
  const one = await client('tg_poor_0000000000000000').completions.create({ model: 'code-echo', prompt: 'hi', max_tokens: 10 });
  t.equal(one.choices.length, 1);
  const before = await account('poor');
  const err = await client('tg_poor_0000000000000000').completions.create({ model: 'code-echo', prompt: 'hi', max_tokens: 10, n: 5 }).catch((e) => e);
  t.equal(err.status, 402);
  t.equal(err.code, 'insufficient_credits');
  const arrays = await post({ model: 'code-echo', prompt: ['hi', 'hi', 'hi', 'hi', 'hi'], max_tokens: 10 }, 'tg_poor_0000000000000000');
  t.equal(arrays.status, 402, 'so does a prompt array');
  const after = await account('poor');
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
});

t.test('fallbacks: a failing upstream moves on (the anthropic target skipped), the spare answers natively', async (t) => {
  up.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  const before = spare.requests.length;
  const r = await client().completions.create({ model: 'coder-fb', prompt: 'x' });
  t.equal(r.choices[0]!.text, 'from the spare');
  t.equal(r.model, 'coder-fb');
  t.equal(spare.requests.length, before + 1);
  t.equal(spare.requests.at(-1)!.url, '/v1/completions');
  t.equal(spare.requests.at(-1)!.body.model, 'spare/coder');
  const rec = (await records()).at(-1);
  t.match(rec, { route: '/v1/completions', model: 'coder-fb', provider: 'spare', status: 200 });

  spare.setScript((_req, res) => json(res, 503, { error: { message: 'busy' } }));
  const err = await client().completions.create({ model: 'coder-fb', prompt: 'x' }).catch((e) => e);
  t.equal(err.status, 503, 'the last target\'s error when every target fails');
  t.equal(err.code, 'model_unavailable');
  up.setScript((_req, res) => json(res, 200, textAnswer(['  return a + b'])));
  spare.setScript((_req, res) => json(res, 200, textAnswer(['from the spare'])));
});

t.test('an upstream error before the first byte of a stream: real status; after it: one envelope event, no [DONE]', async (t) => {
  up.setScript((_req, res) => json(res, 400, { error: { message: 'This model\'s maximum context length is 4096 tokens' } }));
  const early = await post({ model: 'coder', prompt: 'x', stream: true });
  t.equal(early.status, 422);
  t.equal(JSON.parse(early.text).code, 'context_length_exceeded');
  up.setScript(async (_req, res) => {
    await writeSse(res, [`data: ${JSON.stringify(textChunk('half'))}\n\n`], { end: false });
    await new Promise((r) => setTimeout(r, 50)); // the chunk reaches the gateway before the reset
    res.destroy();
  });
  const late = await post({ model: 'coder', prompt: 'x', stream: true });
  t.equal(late.status, 200);
  const { events, done } = sseData(late.text);
  t.notOk(done, 'no [DONE]');
  t.equal(events[0].choices[0].text, 'half');
  t.equal(events.at(-1).code, 'provider_error');
  await settled();
  up.setScript((_req, res) => json(res, 200, textAnswer(['  return a + b'])));
});

t.test('a client that leaves mid-stream aborts the upstream and pays for what it was sent', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  up.setScript(async (_req, res) => {
    await writeSse(res, [`data: ${JSON.stringify(textChunk('one two'))}\n\n`], { end: false });
    await gate;
    if (!res.destroyed) res.end();
  });
  const before = await account();
  const ac = new AbortController();
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'coder', prompt: 'count', stream: true }),
  });
  const reader = res.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  t.match(first, /one two/);
  ac.abort();
  const seen = up.requests.at(-1)!;
  for (let i = 0; i < 100 && !seen.aborted; i++) await new Promise((r) => setTimeout(r, 20));
  t.ok(seen.aborted, 'the upstream call was aborted');
  release();
  const after = await settled();
  t.ok(before.balance_units - after.balance_units > 0, 'charged for the delivered text');
  up.setScript((_req, res) => json(res, 200, textAnswer(['  return a + b'])));
});
