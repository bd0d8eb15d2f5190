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
