// What real model servers do that a plain fake does not (CONTRACT section 10): reasoning
// output, answers emptied by the client's own stop sequence, faults that are not the
// upstream's, server-specific parameters, and llama.cpp's context size in discovery.

import t from 'tap';
import OpenAI from 'openai';
import { PRO_KEY, baseConfig, postChat, sseData, startGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, writeSse } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'servers-admin-token-0123';
const ask = (extra: Record<string, any> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'think' }], max_tokens: 50, ...extra });

async function setup(t: any, kind: 'openai' | 'anthropic' = 'openai', provider: Record<string, any> = {}) {
  const up = await startUpstream((_req, res) => json(res, 200, completionBody('ok')));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.up = {
    kind, base_url: kind === 'openai' ? up.baseUrl : up.url, timeout_ms: 3000, circuit_failures: 2, circuit_cooldown_ms: 30000, ...provider,
  };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'qwen-7b', context_window: 8192, max_output_tokens: 100, price: { input_per_mtok: 1000, output_per_mtok: 1000 } });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  return { up, gw };
}

async function balance(url: string, id = 'demo'): Promise<number> {
  const r = await fetch(`${url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await r.json()) as any).balance_units;
}

t.test('reasoning_content is passed on in answers and chunks, and a reasoning-only answer is an answer', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript((_req, res) => json(res, 200, completionBody(null, {
    choices: [{ index: 0, message: { role: 'assistant', content: null, reasoning_content: 'Let me think.' }, finish_reason: 'length' }],
    usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 },
  })));
  let res = await postChat(gw.url, ask());
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.reasoning_content, 'Let me think.');
  t.same(schemas.completion(res.json()), [], 'the answer validates against the OpenAI schema');

  up.setScript((_req, res) => json(res, 200, completionBody('', {
    choices: [{ index: 0, message: { role: 'assistant', content: '', reasoning: 'newer vLLM names it reasoning' }, finish_reason: 'stop' }],
  })));
  res = await postChat(gw.url, ask());
  t.equal(res.status, 200, 'reasoning and no text, finish stop: not empty');
  t.equal(res.json().choices[0].message.reasoning_content, 'newer vLLM names it reasoning');

  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: null, reasoning_content: 'Hmm' }))}\n\n`,
    `data: ${JSON.stringify(chunk({ reasoning_content: ', thinking' }))}\n\n`,
    `data: ${JSON.stringify(chunk({ content: 'Answer.' }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    'data: [DONE]\n\n',
  ], { split: 7 }));
  res = await postChat(gw.url, ask({ stream: true }));
  t.equal(res.status, 200);
  const { events, done } = sseData(res.text);
  t.ok(done);
  t.equal(events.map((e) => e.choices[0]?.delta.reasoning_content ?? '').join(''), 'Hmm, thinking');
  t.equal(events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'Answer.');
  for (const e of events) t.same(schemas.chunk(e), [], 'every chunk validates');

  // A stream of reasoning alone, cut by the client: what was delivered (the reasoning) is charged.
  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', reasoning_content: 'only thoughts here' }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'length'))}\n\n`,
    'data: [DONE]\n\n',
  ]));
  const before = await balance(gw.url);
  res = await postChat(gw.url, ask({ stream: true }));
  t.ok(sseData(res.text).done, 'a reasoning-only stream completes');
  t.ok(before - (await balance(gw.url)) > 0, 'its reasoning tokens are charged (no usage from upstream: counted)');
});

t.test('an answer emptied by the client stop sequence is legitimate and opens no circuit', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript((_req, res) => json(res, 200, completionBody('', { usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } })));
  for (let i = 0; i < 5; i++) {
    const res = await postChat(gw.url, ask({ stop: ['\n', 'Answer:', 'x', 'y', 'z'] }));
    t.equal(res.status, 200, `emptied by its own stop (${i})`);
    t.equal(res.json().choices[0].message.content, '');
  }
  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    'data: [DONE]\n\n',
  ]));
  const res = await postChat(gw.url, ask({ stream: true, stop: 'Q:' }));
  t.equal(res.status, 200, 'streaming too');
  t.ok(sseData(res.text).done);
  t.equal(up.requests.at(-1)!.body.stop, 'Q:');
  t.same(up.requests[0]!.body.stop, ['\n', 'Answer:', 'x', 'y', 'z'], 'five stop sequences go upstream: the limit is the server\'s');
});

t.test('empty answers and upstream 429s never open the circuit for other accounts; 5xx do', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript((_req, res) => json(res, 200, completionBody('')));
  for (let i = 0; i < 5; i++) {
    const res = await postChat(gw.url, ask());
    t.equal(res.status, 502, 'an empty answer without a stop to explain it is still 502');
    t.equal(res.json().code, 'provider_error');
  }
  up.setScript((_req, res) => json(res, 429, { error: { message: 'slow down' } }));
  for (let i = 0; i < 5; i++) t.equal((await postChat(gw.url, ask())).status, 503);
  up.setScript((_req, res) => json(res, 200, completionBody('fine')));
  const other = await postChat(gw.url, ask(), { authorization: `Bearer ${PRO_KEY}`, 'content-type': 'application/json' });
  t.equal(other.status, 200, 'another account is served: the circuit stayed closed');
  t.match(await fetch(`${gw.url}/metrics`).then((r) => r.text()), /tollgate_upstream_healthy\{[^}]*\} 1/);

  up.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  for (let i = 0; i < 2; i++) t.equal((await postChat(gw.url, ask())).status, 502);
  const after = await postChat(gw.url, ask(), { authorization: `Bearer ${PRO_KEY}`, 'content-type': 'application/json' });
  t.equal(after.status, 503, 'two 5xx open it (circuit_failures: 2)');
  t.equal(after.json().code, 'model_unavailable');
  t.ok(Number(after.headers['retry-after']) >= 1);
  t.equal((await fetch(`${gw.url}/readyz`)).status, 200, '/readyz stays 200 while a circuit is open');
  t.match(await fetch(`${gw.url}/metrics`).then((r) => r.text()), /tollgate_upstream_healthy\{[^}]*\} 0/);
  t.match(gw.logs(), /"provider":"up","upstream_model":"qwen-7b","msg":"circuit open: /, 'the operator is told why, in the log');
});

t.test('forward_params pass server-specific fields as they are; others are dropped', async (t) => {
  const { up, gw } = await setup(t, 'openai', { forward_params: ['grammar', 'top_k', 'min_p', 'n_probs'] });
  const res = await postChat(gw.url, ask({ grammar: 'root ::= "yes"', top_k: 40, min_p: 0.05, n_probs: 3, mirostat: 2, top_logprobs: 50, logprobs: true }));
  t.equal(res.status, 200);
  const sent = up.requests.at(-1)!.body;
  t.match(sent, { grammar: 'root ::= "yes"', top_k: 40, min_p: 0.05, n_probs: 3, top_logprobs: 50, logprobs: true });
  t.notOk('mirostat' in sent, 'a field not listed is dropped');
  t.equal(sent.model, 'qwen-7b');

  const client = new OpenAI({ apiKey: PRO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], top_k: 7 } as any);
  t.equal(answer.choices[0]!.message.content, 'ok');
  t.equal(up.requests.at(-1)!.body.top_k, 7, 'through the SDK as an extra body field');
});

t.test('forward_params on an anthropic upstream never replace the translated fields', async (t) => {
  const { up, gw } = await setup(t, 'anthropic', { forward_params: ['top_k', 'model'.replace('model', 'thinking')] });
  up.setScript((_req, res) => json(res, 200, {
    id: 'msg_1', type: 'message', role: 'assistant', model: 'qwen-7b',
    content: [{ type: 'thinking', thinking: 'pondering' }, { type: 'text', text: 'hi' }],
    stop_reason: 'end_turn', usage: { input_tokens: 3, output_tokens: 2 },
  }));
  const res = await postChat(gw.url, ask({ top_k: 5, thinking: { type: 'enabled', budget_tokens: 1024 } }));
  t.equal(res.status, 200);
  t.match(up.requests.at(-1)!.body, { model: 'qwen-7b', max_tokens: 50, top_k: 5, thinking: { type: 'enabled', budget_tokens: 1024 } });
  t.equal(res.json().choices[0].message.reasoning_content, 'pondering', 'Anthropic thinking blocks are reasoning_content');
});

t.test('check refuses forward_params that would replace what the gateway controls', async (t) => {
  const { validateConfig } = await import('../../lib/config/load.js');
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: 'http://127.0.0.1:1/v1', forward_params: ['top_k', 'stream', 'bad-name'] };
  t.throws(() => validateConfig(c), /providers\.up\.forward_params\[1\]: .*not model, messages, stream/);
});

t.test("discovery takes llama.cpp's n_ctx from /props, not the training context", async (t) => {
  const up = await startUpstream((req, res) => {
    if (req.url === '/v1/models') {
      json(res, 200, { object: 'list', data: [{ id: 'qwen2-tiny.gguf', object: 'model', owned_by: 'llamacpp', meta: { n_ctx_train: 8192 } }] });
    } else if (req.url === '/props') {
      json(res, 200, { default_generation_settings: { n_ctx: 4096, params: {} }, total_slots: 1, model_path: '/m/qwen2-tiny.gguf' });
    } else json(res, 404, { error: { message: 'not found' } });
  }, { props: true });
  const c = baseConfig();
  c.providers.llama = { kind: 'openai', base_url: up.baseUrl, discover_models: true };
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  await gw.gateway.ready;
  const auth = { authorization: `Bearer ${PRO_KEY}` };
  for (let i = 0; i < 100 && (await fetch(`${gw.url}/v1/models/qwen2-tiny.gguf`, { headers: auth })).status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const big = await postChat(gw.url, { model: 'qwen2-tiny.gguf', messages: [{ role: 'user', content: 'x' }], max_tokens: 4095 + 100 },
    { authorization: `Bearer ${PRO_KEY}`, 'content-type': 'application/json' });
  t.equal(big.status, 422, 'a request past the served 4096 is refused before it reaches the server');
  t.equal(big.json().code, 'context_length_exceeded');
  t.ok(up.requests.some((r) => r.url === '/props'), '/props was read');
});
