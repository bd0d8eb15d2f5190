// POST /v1/completions as an operator meets it: a YAML file served by `tollgate serve --config`
// as a child process, with an echo model, a model on a fake OpenAI-compatible server (which
// serves /v1/completions) and one on a fake Anthropic API; the official openai SDK's
// completions.create (plain and streamed) and raw HTTP; the wallet to the unit, the usage
// record's route, the metrics, and the anthropic model's 400.

import t from 'tap';
import OpenAI from 'openai';
import { ADMIN, KEY, PRICE, fakeAnthropic, metric, operatorConfig, serveFile, statusOf, wallet } from '../helpers/operator.js';
import { json, startUpstream, writeSse } from '../helpers/upstream.js';

const text = (t: string, finish: string | null = null) => ({
  id: 'cmpl-op', object: 'text_completion', created: 1700000000, model: 'upstream-coder', choices: [{ index: 0, text: t, logprobs: null, finish_reason: finish }],
});
const coder = await startUpstream(async (req, res, body) => {
  if (req.method !== 'POST' || req.url !== '/v1/completions') return json(res, 404, { error: { message: 'no such route' } });
  // The attack's server: generates what it is told and reports it (n_predict first, as llama.cpp reads it).
  if (body.prompt === 'hi') {
    const made = typeof body.n_predict === 'number' ? body.n_predict : body.max_tokens;
    return json(res, 200, { ...text(' x'.repeat(Math.min(made, 4)), 'length'), usage: { prompt_tokens: 1, completion_tokens: made, total_tokens: 1 + made } });
  }
  if (body.stream === true) {
    return writeSse(res, [
      `data: ${JSON.stringify(text('  return'))}\n\n`, `data: ${JSON.stringify(text(' a + b', 'stop'))}\n\n`,
      `data: ${JSON.stringify({ ...text(''), choices: [], usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } })}\n\n`, 'data: [DONE]\n\n',
    ], { split: 5 });
  }
  json(res, 200, { ...text('  return a + b', 'stop'), usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 } });
});
const anthropic = await fakeAnthropic();
t.teardown(async () => { await coder.close(); await anthropic.close(); });

t.test('tollgate serve --config: /v1/completions on echo and openai models, refused on anthropic', async (t) => {
  const served = await serveFile(t, operatorConfig({
    providers: {
      echo: { kind: 'echo' },
      oai: { kind: 'openai', base_url: coder.baseUrl, api_key: 'sk-coder-upstream-secret' },
      ant: { kind: 'anthropic', base_url: anthropic.url },
    },
    models: [
      { id: 'fim-echo', provider: 'echo', price: PRICE },
      { id: 'fim-coder', provider: 'oai', upstream_model: 'upstream-coder', price: PRICE },
      { id: 'fim-claude', provider: 'ant', upstream_model: 'claude-sonnet-4-5', price: PRICE },
    ],
  }));
  const url = served.url;
  t.equal(await statusOf(`${url}/readyz`, 200), 200);
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  const before = await wallet(url);
  const requestsBefore = await metric(url, 'tollgate_requests_total', { route: 'completions', status: '200' });
  let debited = 0;

  const { data: plain, response } = await openai.completions.create({ model: 'fim-echo', prompt: 'def add(a, b):', suffix: 'print(add(1, 2))' }).withResponse();
  t.equal(plain.object, 'text_completion');
  t.equal(plain.choices[0]!.text, 'def add(a, b): print(add(1, 2))');
  const plainCost = plain.usage!.prompt_tokens + 2 * plain.usage!.completion_tokens;
  t.equal(response.headers.get('x-tollgate-units-charged'), String(plainCost), 'charged prompt + 2 x completion units');
  debited += plainCost;

  const native = await openai.completions.create({ model: 'fim-coder', prompt: 'def add(a, b):', suffix: '\n', max_tokens: 8 });
  t.equal(native.choices[0]!.text, '  return a + b');
  t.equal(native.model, 'fim-coder');
  t.same(coder.requests.at(-1)!.body, { model: 'upstream-coder', prompt: 'def add(a, b):', suffix: '\n', max_tokens: 8 }, 'the body natively, model rewritten');
  t.equal(coder.requests.at(-1)!.headers.authorization, 'Bearer sk-coder-upstream-secret');
  debited += 9 + 2 * 4;

  const stream = await openai.completions.create({ model: 'fim-coder', prompt: 'def add(a, b):', stream: true, stream_options: { include_usage: true } });
  let streamed = '';
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const c of stream) {
    streamed += c.choices.map((ch) => ch.text).join('');
    if (c.usage) usage = c.usage;
    t.equal(c.model, 'fim-coder');
  }
  t.equal(streamed, '  return a + b');
  t.same(usage, { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 });
  debited += 9 + 2 * 4;

  const refused = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'fim-claude', prompt: 'x' }),
  });
  t.equal(refused.status, 400);
  t.match(await refused.json(), { code: 'unsupported_value', param: 'model', type: 'invalid_request_error' });
  t.equal(anthropic.requests.length, 0, 'the anthropic upstream was never called');

  const after = await wallet(url);
  t.equal(after.balance_units, before.balance_units - debited, `the wallet is debited exactly ${debited} units`);
  t.equal(after.held_units, 0);
  const records: any = await (await fetch(`${url}/admin/usage/records?account=demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  t.same(records.records.filter((r: any) => r.status === 200).map((r: any) => [r.route, r.model]),
    [['/v1/completions', 'fim-echo'], ['/v1/completions', 'fim-coder'], ['/v1/completions', 'fim-coder']], 'usage records name the route');
  let requests = 0;
  for (let i = 0; i < 100 && requests !== requestsBefore + 3; i++) {
    requests = await metric(url, 'tollgate_requests_total', { route: 'completions', status: '200' });
    await new Promise((r) => setTimeout(r, 25));
  }
  t.equal(requests, requestsBefore + 3, 'metrics: three completions requests, 200');
  t.notMatch(served.output(), /sk-coder-upstream-secret|tg_demo_0000000000000000/, 'no credential in the logs');
});

t.test('tollgate serve --config: n_predict (llama.cpp\'s output limit) is held and sent as max_tokens, never itself', async (t) => {
  const served = await serveFile(t, operatorConfig({
    accounts: [{ id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEY] }, { id: 'small', plan: 'free', wallet_units: 12, keys: ['tg_small_0000000000000000'] }],
    providers: { oai: { kind: 'openai', base_url: coder.baseUrl } },
    models: [{ id: 'fim-coder', provider: 'oai', upstream_model: 'upstream-coder', context_window: 200_000, max_output_tokens: 200_000, price: PRICE }],
  }));
  const url = served.url;
  t.equal(await statusOf(`${url}/readyz`, 200), 200);
  const post = (body: unknown) => fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { authorization: 'Bearer tg_small_0000000000000000', 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const before = await wallet(url, 'small');
  const calls = coder.requests.length;

  const attack = await post({ model: 'fim-coder', max_tokens: 1, n_predict: 100000, prompt: 'hi' });
  t.equal(attack.status, 400);
  t.equal(attack.headers.get('content-type'), 'application/json');
  const e: any = await attack.json();
  t.same(e.error, {
    message: "Invalid value for 'n_predict': must equal 'max_tokens' when both are given (100000 and 1): 'n_predict' is another name for 'max_tokens'.",
    type: 'invalid_request_error', param: 'n_predict', code: 'invalid_value',
  });
  const alone = await post({ model: 'fim-coder', n_predict: 100000, prompt: 'hi' });
  t.equal(alone.status, 402, 'n_predict alone is held in full');
  t.match(await alone.json(), { code: 'insufficient_credits', type: 'insufficient_credits' });
  t.equal(coder.requests.length, calls, 'the upstream was never called');
  t.same(await wallet(url, 'small'), before, 'the wallet is unchanged by the refusals');

  const ok = await post({ model: 'fim-coder', n_predict: 3, prompt: 'hi' });
  t.equal(ok.status, 200);
  await ok.json();
  t.same(coder.requests.at(-1)!.body, { model: 'upstream-coder', prompt: 'hi', max_tokens: 3 }, 'sent as max_tokens, no n_predict');
  t.equal(ok.headers.get('x-tollgate-units-charged'), String(1 + 2 * 3));
  let after = await wallet(url, 'small');
  for (let i = 0; i < 100 && after.held_units !== 0; i++) after = await wallet(url, 'small');
  t.equal(after.balance_units, before.balance_units - 7, 'charged exactly 1 prompt + 2 x 3 completion units');
  t.equal(after.held_units, 0);
});
