// Fill-in-the-middle on llama.cpp (issue #32): a /v1/completions request with a suffix, to an
// openai-kind provider that is llama.cpp's server, goes to its POST /infill (its /v1/completions
// does no FIM: it refuses `suffix` or ignores it, by release), translated, and its native answer
// comes back as text_completion objects and chunks. The fake speaks llama.cpp's wire as its server writes it (tools/server: /props, /infill
// with input_prefix/input_suffix/n_predict, answers with content, stop, stop_type,
// stopping_word, tokens_evaluated/tokens_predicted, timings; streamed as data-only events in
// split writes, no [DONE]; errors as {error: {code, message, type}}, 501 not_supported_error for
// a model without FIM tokens). What /infill cannot serve (n, echo, several prompts) is 400
// unsupported_value naming the parameter, and nothing is charged.

import t from 'tap';
import OpenAI from 'openai';
import { cost } from '../../lib/billing/meter.js';
import { DEMO_KEY, baseConfig, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'infill-admin-token';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 }; // 1 unit per prompt token, 2 per completion token
const PROPS = { default_generation_settings: { n_ctx: 4096, params: {} }, total_slots: 1, model_path: '/m/coder.gguf', build_info: 'b7000' };
const TIMINGS = { cache_n: 0, prompt_n: 11, prompt_ms: 1.2, prompt_per_token_ms: 0.1, prompt_per_second: 9000, predicted_n: 3, predicted_ms: 4.5, predicted_per_token_ms: 1.5, predicted_per_second: 600 };

interface Fim { words: string[]; stopType?: 'eos' | 'word' | 'limit'; stoppingWord?: string; usage?: boolean; fim?: boolean; failAfter?: number; pauseMs?: number }

/** llama.cpp's final object (to_json_non_oaicompat), `content` the whole text unless streamed. */
function final(body: any, o: Fim, content: string): any {
  const out: any = {
    index: 0, content, tokens: [], id_slot: 0, stop: true, model: 'coder.gguf',
    tokens_predicted: o.words.length, tokens_evaluated: 11, generation_settings: { n_predict: body.n_predict }, prompt: '<|fim_prefix|>...',
    has_new_line: false, truncated: false, stop_type: o.stopType ?? 'eos', stopping_word: o.stoppingWord ?? '', tokens_cached: 11 + o.words.length,
    timings: { ...TIMINGS, predicted_n: o.words.length },
  };
  if (o.usage) out.usage = { prompt_tokens: 13, completion_tokens: o.words.length, total_tokens: 13 + o.words.length };
  return out;
}

/** A llama.cpp server: /props, /infill (whole or streamed), and its /v1/completions refusing suffix. */
async function llamaServer(o: () => Fim): Promise<FakeUpstream> {
  return startUpstream(async (req, res, body) => {
    const fim = o();
    if (req.url === '/props') return json(res, 200, PROPS);
    if (req.url === '/v1/completions' && body.suffix !== undefined) {
      return json(res, 400, { error: { code: 400, message: 'Unsupported param: suffix', type: 'invalid_request_error' } });
    }
    if (req.url !== '/infill') return json(res, 404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
    if (fim.fim === false) {
      return json(res, 501, { error: { code: 501, message: 'Infill is not supported by this model: prefix token is missing. suffix token is missing. middle token is missing. ', type: 'not_supported_error' } });
    }
    if (body.stream !== true) return json(res, 200, final(body, fim, fim.words.join('')));
    const partial = (w: string) => ({ index: 0, content: w, tokens: [1], stop: false, id_slot: 0, tokens_predicted: 1, tokens_evaluated: 11 });
    const frames = fim.words.map((w) => `data: ${JSON.stringify(partial(w))}\n\n`);
    if (fim.failAfter !== undefined) {
      frames.splice(fim.failAfter, Infinity, `data: ${JSON.stringify({ error: { code: 500, message: 'Failed to decode the batch', type: 'server_error' } })}\n\n`);
    } else {
      frames.push(`data: ${JSON.stringify(final(body, fim, ''))}\n\n`);
    }
    await writeSse(res, frames, { split: 9, pauseMs: fim.pauseMs });
  }, { props: true });
}

let fim: Fim = { words: [' return', ' a', ' + b'] };
let up: FakeUpstream;
let other: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await llamaServer(() => fim);
  // Not llama.cpp: /props is not found; it serves suffix natively at /v1/completions.
  other = await startUpstream((req, res) => req.url === '/props'
    ? json(res, 404, { error: { message: 'Not Found' } })
    : json(res, 200, { id: 'cmpl-o', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: 'native', logprobs: null, finish_reason: 'stop' }], usage: { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 } }), { props: true });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.llama = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000, forward_params: ['cache_prompt'] };
  c.providers.whole = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000, stream_upstream: 'never' };
  c.providers.other = { kind: 'openai', base_url: other.baseUrl, timeout_ms: 3000 };
  c.models.push({ id: 'coder', provider: 'llama', upstream_model: 'coder.gguf', context_window: 4096, max_output_tokens: 64, price: PRICE });
  c.models.push({ id: 'coder-whole', provider: 'whole', upstream_model: 'coder.gguf', context_window: 4096, max_output_tokens: 64, price: PRICE });
  c.models.push({ id: 'coder-other', provider: 'other', upstream_model: 'm', context_window: 4096, max_output_tokens: 64, price: PRICE });
  c.models.push({
    id: 'coder-fb', provider: 'whole', upstream_model: 'coder.gguf', context_window: 4096, max_output_tokens: 64, price: PRICE,
    fallbacks: [{ provider: 'other', upstream_model: 'm' }],
  });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); await other.close(); });

const client = () => new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
const account = async (): Promise<any> => (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const post = async (body: unknown) => {
  const res = await fetch(`${gw.url}/v1/completions`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, text: await res.text() };
};
const settled = async (): Promise<any> => {
  for (let i = 0; i < 100; i++) {
    const a = await account();
    if (a.held_units === 0) return a;
    await new Promise((r) => setTimeout(r, 20));
  }
  return account();
};
const infills = (u = up) => u.requests.filter((r) => r.url === '/infill');

t.test('the first FIM request asks /props, then goes to /infill translated; a text_completion back, charged its counts', async (t) => {
  const before = await account();
  const r = await client().completions.create({
    model: 'coder', prompt: 'def add(a, b):\n', suffix: '\n\nprint(add(1, 2))', max_tokens: 20, temperature: 0, top_p: 0.9, seed: 7, stop: ['\n\n'],
    presence_penalty: 0.5, user: 'u1', cache_prompt: false,
  } as any);
  const props = up.requests.findIndex((q) => q.url === '/props');
  t.ok(props >= 0 && props < up.requests.findIndex((q) => q.url === '/infill'), '/props asked before the first call');
  t.notOk(up.requests.some((q) => q.url === '/v1/completions'), 'never its /v1/completions, which does no FIM');
  const seen = infills().at(-1)!;
  t.same(seen.body, {
    input_prefix: 'def add(a, b):\n', input_suffix: '\n\nprint(add(1, 2))', n_predict: 20,
    temperature: 0, top_p: 0.9, seed: 7, stop: ['\n\n'], presence_penalty: 0.5, cache_prompt: false, stream: true,
  }, 'translated; streamed upstream (stream_upstream auto on llama.cpp); forward_params passed');
  t.same(schemas.textCompletion(r), []);
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/);
  t.equal(r.model, 'coder');
  t.same(r.choices.map((c) => [c.index, c.text, c.finish_reason, c.logprobs]), [[0, ' return a + b', 'stop', null]]);
  t.same(r.usage, { prompt_tokens: 11, completion_tokens: 3, total_tokens: 14, prompt_tokens_details: { cached_tokens: 0 } }, 'tokens_evaluated, tokens_predicted, timings.cache_n');
  const after = await settled();
  t.equal(before.balance_units - after.balance_units, Number(cost(11, 3, PRICE)), 'debited exactly its usage');
  t.equal(up.requests.filter((q) => q.url === '/props').length, 1, 'asked once');
});

t.test('streamed through the SDK with include_usage: text_completion chunks, the usage chunk, [DONE]; stop_type limit is length', async (t) => {
  fim = { words: [' return', ' a', ' +'], stopType: 'limit' };
  const before = await account();
  const stream = await client().completions.create({ model: 'coder', prompt: 'def add(a, b):\n', suffix: '\n', max_tokens: 3, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage: any;
  let finish: string | null = null;
  const ids = new Set<string>();
  for await (const c of stream) {
    t.same(schemas.textCompletion(c), [], 'each chunk validates');
    ids.add(c.id);
    for (const ch of c.choices) { text += ch.text; finish = ch.finish_reason ?? finish; }
    if (c.usage) usage = c.usage;
  }
  t.equal(text, ' return a +');
  t.equal(finish, 'length');
  t.equal(ids.size, 1);
  t.same(usage, { prompt_tokens: 11, completion_tokens: 3, total_tokens: 14, prompt_tokens_details: { cached_tokens: 0 } });
  t.equal(infills().at(-1)!.body.stream, true);
  const after = await settled();
  t.equal(before.balance_units - after.balance_units, Number(cost(11, 3, PRICE)));

  const raw = await post({ model: 'coder', prompt: 'x', suffix: 'y', stream: true });
  const { events, done } = sseData(raw.text);
  t.ok(done, 'the gateway ends with [DONE] though llama.cpp sends none');
  t.ok(events.every((e) => e.object === 'text_completion' && !('usage' in e)));
  fim = { words: [' return', ' a', ' + b'] };
});

t.test('stream_upstream never: /infill answered whole; its `usage`, when sent, is the one charged; a stop word is stop', async (t) => {
  fim = { words: [' return a'], stopType: 'word', stoppingWord: '\n\n', usage: true };
  const before = await account();
  const r = await client().completions.create({ model: 'coder-whole', prompt: 'p', suffix: 's', stop: '\n\n' });
  const seen = infills().at(-1)!;
  t.equal(seen.body.stream, undefined, 'not streamed');
  t.equal(seen.body.n_predict, 16, 'no max_tokens: the held default (OpenAI\'s 16) as n_predict');
  t.equal(r.choices[0]!.text, ' return a');
  t.equal(r.choices[0]!.finish_reason, 'stop');
  t.same(r.usage, { prompt_tokens: 13, completion_tokens: 1, total_tokens: 14 }, 'llama.cpp\'s own usage over its native counts');
  const after = await account();
  t.equal(before.balance_units - after.balance_units, Number(cost(13, 1, PRICE)));
  t.equal(after.held_units, 0);
  fim = { words: [' return', ' a', ' + b'] };
});

t.test('what /infill cannot serve: 400 unsupported_value naming the parameter, before anything is held', async (t) => {
  const calls = infills().length;
  const before = await account();
  for (const [extra, param] of [[{ n: 2 }, 'n'], [{ echo: true }, 'echo'], [{ prompt: ['a', 'b'] }, 'prompt'], [{ logprobs: 2 }, 'logprobs'], [{ best_of: 3, n: 1 }, 'best_of']] as const) {
    const err = await client().completions.create({ model: 'coder', prompt: 'p', suffix: 's', ...extra } as any).catch((e) => e);
    t.equal(err.status, 400, `${param}: 400`);
    t.equal(err.code, 'unsupported_value');
    t.equal(err.param, param);
    t.match(err.message, /suffix/);
    const raw = await post({ model: 'coder', prompt: 'p', suffix: 's', stream: true, ...extra });
    t.equal(raw.status, 400, 'streamed too: a plain error answer');
    const body = JSON.parse(raw.text);
    t.same(schemas.error(body), []);
    t.match(body, { code: 'unsupported_value', param, type: 'invalid_request_error' });
    t.equal(body.request_id, raw.headers.get('x-request-id'));
  }
  t.equal(infills().length, calls, 'llama.cpp never called');
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'nothing held');
  const ok = await client().completions.create({ model: 'coder', prompt: 'p', suffix: 's', n: 1, echo: false, logprobs: 0 } as any);
  t.equal(ok.choices.length, 1, 'n: 1, echo: false and logprobs: 0 are served');
});

t.test('the model\'s own provider decides (400 though a fallback could serve it); a server not llama.cpp gets suffix natively', async (t) => {
  const err = await client().completions.create({ model: 'coder-fb', prompt: 'p', suffix: 's', n: 2 }).catch((e) => e);
  t.match(err, { status: 400, code: 'unsupported_value', param: 'n' }, 'as for any provider that refuses a request (checkProvider)');
  const r = await client().completions.create({ model: 'coder-fb', prompt: 'p', suffix: 's' });
  t.equal(r.choices[0]!.text, ' return a + b', 'n: 1 is served by the llama.cpp target');
  const o = await client().completions.create({ model: 'coder-other', prompt: 'p', suffix: 's' });
  t.equal(o.choices[0]!.text, 'native');
  t.same(other.requests.map((q) => q.url), ['/props', '/v1/completions'], '/props answers 404: not llama.cpp; suffix natively');
  t.equal(other.requests.at(-1)!.body.suffix, 's');
  await client().completions.create({ model: 'coder-other', prompt: 'p', suffix: 's' });
  t.same(other.requests.slice(2).map((q) => q.url), ['/v1/completions'], 'known: /props not asked again');
  await client().completions.create({ model: 'coder-other', prompt: 'p', suffix: null } as any);
  t.notOk('suffix' in other.requests.at(-1)!.body, 'a null suffix is no suffix: not sent (llama.cpp refuses the key)');
});

t.test('a model without FIM tokens (llama.cpp 501 not_supported_error): 400 unsupported_value param suffix, nothing charged, no circuit opened', async (t) => {
  fim = { words: [], fim: false };
  const before = await account();
  for (let i = 0; i < 3; i++) {
    const err = await client().completions.create({ model: 'coder', prompt: 'p', suffix: 's' }).catch((e) => e);
    t.equal(err.status, 400);
    t.equal(err.code, 'unsupported_value');
    t.equal(err.param, 'suffix');
    t.match(err.message, /cannot fill in the middle: Infill is not supported by this model/);
  }
  const after = await account();
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
  fim = { words: [' return', ' a', ' + b'] };
  const ok = await client().completions.create({ model: 'coder', prompt: 'p', suffix: 's' });
  t.equal(ok.choices[0]!.text, ' return a + b', 'the provider still served: no circuit opened');
});

t.test('an error event mid-stream: a non-streaming client gets 502 provider_error; a streaming one the envelope and no [DONE], charged what it was sent', async (t) => {
  fim = { words: [' return', ' a', ' + b'], failAfter: 2 };
  const before = await account();
  const whole = await post({ model: 'coder', prompt: 'p', suffix: 's' });
  t.equal(whole.status, 502);
  t.match(JSON.parse(whole.text), { code: 'provider_error', type: 'server_error' });
  const mid = await account();
  t.equal(mid.balance_units, before.balance_units, 'the non-streaming client: nothing charged');
  t.equal(mid.held_units, 0);
  const streamed = await post({ model: 'coder', prompt: 'p', suffix: 's', stream: true });
  t.equal(streamed.status, 200);
  const { events, done } = sseData(streamed.text);
  t.notOk(done, 'no [DONE]: the answer is incomplete');
  t.match(events.at(-1), { code: 'provider_error' });
  t.equal(events.slice(0, -1).map((e) => e.choices[0].text).join(''), ' return a', 'the text before the failure');
  const after = await settled();
  t.equal(after.held_units, 0, 'the hold released');
  const rec = ((await (await fetch(`${gw.url}/admin/usage/records?account=demo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any).records.at(-1);
  t.ok(rec.completion_tokens > 0, 'the text sent, counted by the gateway');
  t.equal(before.balance_units - after.balance_units, Number(cost(rec.prompt_tokens, rec.completion_tokens, PRICE)), 'the streaming client: charged exactly the text it was sent');
  fim = { words: [' return', ' a', ' + b'] };
});

t.test('a client that leaves mid-stream has the /infill call aborted (llama.cpp stops the generation), the hold released', async (t) => {
  fim = { words: Array.from({ length: 200 }, (_, i) => ` w${i}`), pauseMs: 5 };
  const ac = new AbortController();
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'coder', prompt: 'p', suffix: 's', stream: true, max_tokens: 64 }),
  });
  const reader = res.body!.getReader();
  await reader.read();
  ac.abort();
  const seen = infills().at(-1)!;
  for (let i = 0; i < 200 && !seen.aborted; i++) await new Promise((r) => setTimeout(r, 10));
  t.ok(seen.aborted, 'the upstream call was aborted');
  t.equal((await settled()).held_units, 0);
  fim = { words: [' return', ' a', ' + b'] };
});

t.test('concurrent first FIM requests share one GET /props', async (t) => {
  const fresh = await llamaServer(() => ({ words: [' ok'] }));
  const c = baseConfig();
  c.providers.llama = { kind: 'openai', base_url: fresh.baseUrl, timeout_ms: 3000 };
  c.models.push({ id: 'coder', provider: 'llama', context_window: 4096, max_output_tokens: 64, price: PRICE });
  const g = await startGateway(c);
  t.teardown(async () => { await g.close(); await fresh.close(); });
  const cl = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${g.url}/v1`, maxRetries: 0 });
  const answers = await Promise.all([1, 2, 3].map(() => cl.completions.create({ model: 'coder', prompt: 'p', suffix: 's' })));
  t.same(answers.map((a) => a.choices[0]!.text), [' ok', ' ok', ' ok']);
  t.equal(fresh.requests.filter((q) => q.url === '/props').length, 1, 'one /props');
  t.equal(infills(fresh).length, 3, 'each went to /infill');
});
