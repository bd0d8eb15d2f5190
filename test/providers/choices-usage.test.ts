// Usage of an answer with several choices covers every choice (issue #40, CONTRACT sections 14
// and 21), and one answer has one id: `tollgate serve` from a YAML file in front of a fake
// llama.cpp server (helpers/llama-fake.ts: one task per choice, each with its own usage; a
// whole answer carries the first task's usage alone) and a fake vLLM-like server (usage over
// the choices it returns; best_of taken), with the official openai SDK and raw HTTP.
// n: 2 and prompt arrays are charged for every choice, to the unit; best_of is held like n and
// charged as the server reports it; every chunk of a completions stream, the usage chunk too, and the JSON answer carry
// Tollgate's `cmpl-…`, never llama.cpp's `chatcmpl-…`.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { ADMIN, KEY, PRICE, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { generation, promptTokens, startLlamaFake } from '../helpers/llama-fake.js';
import { json, startUpstream, writeSse } from '../helpers/upstream.js';
import { sseData } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

const POOR = 'tg_poor_11111111111111111111';

/** A vLLM-like server: n answers per prompt (best_of taken, the n best returned); usage over what it returns ('stingy': the first choice's). */
const vllm = await startUpstream(async (req, res, body) => {
  const chat = req.url === '/v1/chat/completions';
  const n = body.n ?? 1;
  const prompts: string[] = chat ? ['chat'] : Array.isArray(body.prompt) ? body.prompt : [body.prompt];
  // A chat model asked for one answer that gives two all the same: an upstream the gateway must not trust to count.
  const per = chat && body.messages.at(-1).content === 'two answers, please' ? 2 : n;
  const choices: any[] = [];
  prompts.forEach((_p, pi) => { for (let j = 0; j < per; j++) choices.push({ index: pi * per + j, gen: generation(pi * per + j, body.max_tokens, []) }); });
  const counted = body.model === 'stingy' ? choices.slice(0, 1) : choices;
  const completion = counted.reduce((a, c) => a + c.gen.decoded, 0);
  const prompt = prompts.reduce((a, p) => a + promptTokens(p, 1), 0);
  const usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  const text = (c: any) => c.gen.tokens.join('');
  if (chat) {
    return json(res, 200, {
      id: 'chatcmpl-v', object: 'chat.completion', created: 1, model: body.model,
      choices: choices.map((c) => ({ index: c.index, message: { role: 'assistant', content: text(c) }, finish_reason: 'length', logprobs: null })), usage,
    });
  }
  const head = { id: 'cmpl-v', object: 'text_completion', created: 1, model: body.model };
  if (body.stream !== true) return json(res, 200, { ...head, choices: choices.map((c) => ({ index: c.index, text: text(c), logprobs: null, finish_reason: 'length' })), usage });
  const frames: string[] = [];
  for (const c of choices) {
    for (const tok of c.gen.tokens) frames.push(`data: ${JSON.stringify({ ...head, choices: [{ index: c.index, text: tok, logprobs: null, finish_reason: null }] })}\n\n`);
    frames.push(`data: ${JSON.stringify({ ...head, choices: [{ index: c.index, text: '', logprobs: null, finish_reason: 'length' }] })}\n\n`);
  }
  frames.push(`data: ${JSON.stringify({ ...head, choices: [], usage })}\n\n`, 'data: [DONE]\n\n');
  await writeSse(res, frames, { split: 13 });
});
const llama = await startLlamaFake();
t.teardown(async () => { await vllm.close(); await llama.close(); });

const served = await serveFile(t, operatorConfig({
  accounts: [{ id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEY] }, { id: 'poor', plan: 'free', wallet_units: 100, keys: [POOR] }],
  providers: {
    llama: { kind: 'openai', base_url: llama.baseUrl },
    whole: { kind: 'openai', base_url: llama.baseUrl, stream_upstream: 'never' },
    v: { kind: 'openai', base_url: vllm.baseUrl },
  },
  models: [
    { id: 'tiny', provider: 'llama', upstream_model: 'tiny.gguf', price: PRICE },
    { id: 'tiny-whole', provider: 'whole', upstream_model: 'tiny.gguf', price: PRICE },
    { id: 'honest', provider: 'v', price: PRICE },
    { id: 'stingy', provider: 'v', price: PRICE },
  ],
}));
const url = served.url;
const openai = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });

/** The wallet after every hold is released, and what the last request cost it. */
async function debited(before: number, account = 'demo'): Promise<number> {
  for (let i = 0; i < 500 && (await wallet(url, account)).held_units !== 0; i++) await sleep(10);
  return before - (await wallet(url, account)).balance_units;
}

/** The usage record of the last request: what the ledger says was charged. */
async function lastRecord(): Promise<any> {
  const res = await fetch(`${url}/admin/usage/records?account=demo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).records.at(-1);
}

const texts = (k: number[], max: number) => k.map((i) => generation(i, max, []).tokens.join(''));
const cost = (prompt: number, completion: number) => prompt + 2 * completion;
/** llama.cpp reports its prompt cache's share (none here): passed on. */
const CACHED = { prompt_tokens_details: { cached_tokens: 0 } };

t.test('llama.cpp, n: 2, whole (streamed upstream): both choices\' usage, added up, charged to the unit; one cmpl- id', async (t) => {
  const before = (await wallet(url)).balance_units;
  const { data: r, response } = await openai.completions.create({ model: 'tiny', prompt: 'Tell a story', n: 2, max_tokens: 7 }).withResponse();
  t.equal(llama.work.at(-1)!.stream, true, 'streamed upstream (stream_upstream auto on llama.cpp)');
  t.same(r.choices.map((c) => [c.index, c.text]), [[0, texts([0], 7)[0]], [1, texts([1], 7)[0]]]);
  const prompt = promptTokens('Tell a story', 1);
  t.same(r.usage, { prompt_tokens: prompt, completion_tokens: 14, total_tokens: prompt + 14, ...CACHED }, 'the server\'s own counts: 7 + 7, the prompt once');
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/, 'Tollgate\'s id, not llama.cpp\'s chatcmpl-');
  t.same(schemas.textCompletion(r), []);
  t.equal(response.headers.get('x-tollgate-units-charged'), String(cost(prompt, 14)));
  t.equal(await debited(before), cost(prompt, 14), 'the wallet: every choice');
  t.match(await lastRecord(), { route: '/v1/completions', prompt_tokens: prompt, completion_tokens: 14, units: cost(prompt, 14) });
});

t.test('llama.cpp, n: 2 streamed with include_usage: the usage chunk adds both choices; one id on every chunk, the usage chunk too', async (t) => {
  const before = (await wallet(url)).balance_units;
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: 'Tell a story', n: 2, max_tokens: 5, stream: true, stream_options: { include_usage: true } }),
  });
  const { events, done } = sseData(await res.text());
  t.ok(done);
  const prompt = promptTokens('Tell a story', 1);
  t.same(events.at(-1).usage, { prompt_tokens: prompt, completion_tokens: 10, total_tokens: prompt + 10, ...CACHED });
  const ids = new Set(events.map((e) => e.id));
  t.equal(ids.size, 1, 'one id across the answer');
  t.match([...ids][0], /^cmpl-[0-9a-f]{32}$/);
  for (const e of events) t.same(schemas.textCompletion(e), [], 'each chunk a text_completion');
  const byIndex = ['', ''];
  for (const e of events) for (const c of e.choices) byIndex[c.index] += c.text;
  t.same(byIndex, texts([0, 1], 5));
  t.equal(await debited(before), cost(prompt, 10));
});

t.test('llama.cpp, two prompts x n: 2 streamed: each prompt once, every choice', async (t) => {
  const before = (await wallet(url)).balance_units;
  const stream = await openai.completions.create({ model: 'tiny', prompt: ['one two three', 'four five'], n: 2, max_tokens: 3, stream: true, stream_options: { include_usage: true } });
  let usage: any;
  const ids = new Set<string>();
  for await (const c of stream) { ids.add(c.id); if (c.usage) usage = c.usage; }
  const prompt = promptTokens('one two three', 1) + promptTokens('four five', 1);
  t.same(usage, { prompt_tokens: prompt, completion_tokens: 12, total_tokens: prompt + 12, ...CACHED });
  t.equal(ids.size, 1);
  t.equal(await debited(before), cost(prompt, 12));
});

t.test('llama.cpp whole (stream_upstream: never), n: 2: the first choice\'s usage as the server gave it, the second counted', async (t) => {
  const before = (await wallet(url)).balance_units;
  const r = await openai.completions.create({ model: 'tiny-whole', prompt: 'Tell a story', n: 2, max_tokens: 6 });
  t.equal(llama.work.at(-1)!.stream, false, 'called whole, as configured');
  t.equal(llama.work.at(-1)!.request.body.n, 2);
  const prompt = promptTokens('Tell a story', 1);
  const second = countTokens(r.choices[1]!.text);
  t.equal(second, 6, 'the fake\'s words are one token each with o200k_base too');
  t.same(r.usage, { prompt_tokens: prompt, completion_tokens: 6 + second, total_tokens: prompt + 6 + second, ...CACHED }, 'the usage reported is the one charged');
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/, 'Tollgate\'s id on the JSON answer too');
  t.equal(await debited(before), cost(prompt, 6 + second));

  // Two prompts: the second prompt's tokens as the hold counted them (llama.cpp reports the first task's).
  const before2 = (await wallet(url)).balance_units;
  const r2 = await openai.completions.create({ model: 'tiny-whole', prompt: ['one two three', 'four five'], max_tokens: 2 });
  const prompt2 = promptTokens('one two three', 1) + countTokens('four five');
  t.same(r2.usage, { prompt_tokens: prompt2, completion_tokens: 4, total_tokens: prompt2 + 4, ...CACHED });
  t.equal(await debited(before2), cost(prompt2, 4));
});

t.test('a server whose usage covers every choice is charged what it says', async (t) => {
  const before = (await wallet(url)).balance_units;
  const r = await openai.completions.create({ model: 'honest', prompt: 'Tell a story', n: 3, max_tokens: 4 });
  t.same(r.usage, { prompt_tokens: 4, completion_tokens: 12, total_tokens: 16 });
  t.equal(await debited(before), cost(4, 12));
});

t.test('a server whose usage counts one choice: at least what the choices hold, whole and streamed', async (t) => {
  const before = (await wallet(url)).balance_units;
  const r = await openai.completions.create({ model: 'stingy', prompt: 'Tell a story', n: 2, max_tokens: 5 });
  t.equal(vllm.requests.at(-1)!.body.stream, undefined, 'not llama.cpp: called as asked');
  t.same(r.usage, { prompt_tokens: 4, completion_tokens: 10, total_tokens: 14 }, 'raised from 5 to the 10 tokens the two choices hold');
  t.equal(await debited(before), cost(4, 10));

  const before2 = (await wallet(url)).balance_units;
  const stream = await openai.completions.create({ model: 'stingy', prompt: 'Tell a story', n: 2, max_tokens: 5, stream: true, stream_options: { include_usage: true } });
  let usage: any;
  for await (const c of stream) if (c.usage) usage = c.usage;
  t.same(usage, { prompt_tokens: 4, completion_tokens: 10, total_tokens: 14 });
  t.equal(await debited(before2), cost(4, 10));

  // Chat: an upstream that answered two choices to a request for one is charged both.
  const before3 = (await wallet(url)).balance_units;
  const chat = await openai.chat.completions.create({ model: 'stingy', max_tokens: 3, messages: [{ role: 'user', content: 'two answers, please' }] });
  t.equal(chat.choices.length, 2);
  t.same(chat.usage, { prompt_tokens: 2, completion_tokens: 6, total_tokens: 8 });
  t.equal(await debited(before3), cost(2, 6));
});

t.test('best_of: held like n, charged as the server reports it', async (t) => {
  const before = (await wallet(url)).balance_units;
  const r = await openai.completions.create({ model: 'honest', prompt: 'Tell a story', best_of: 3, max_tokens: 4 });
  t.equal(vllm.requests.at(-1)!.body.best_of, 3, 'passed as sent');
  t.equal(r.choices.length, 1, 'the best one returned');
  t.same(r.usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 }, 'the server\'s usage: the answers it dropped are never seen');
  t.equal(await debited(before), cost(4, 4));

  // The hold: 100 units hold one answer of 20 tokens (prompt + 2 x 20) but not three.
  const poor = new OpenAI({ apiKey: POOR, baseURL: `${url}/v1`, maxRetries: 0 });
  const err: any = await poor.completions.create({ model: 'honest', prompt: 'Tell a story', best_of: 3, max_tokens: 20 }).catch((e) => e);
  t.equal(err.status, 402);
  t.equal(err.code, 'insufficient_credits');
  t.equal((await wallet(url, 'poor')).balance_units, 100, 'nothing charged');
  t.equal(vllm.requests.at(-1)!.body.max_tokens, 4, 'the upstream was never called');
  const one = await poor.completions.create({ model: 'honest', prompt: 'Tell a story', max_tokens: 20 });
  t.equal(one.choices.length, 1, 'one answer of the same length is held and served');

  // llama.cpp takes best_of and generates n: one answer, its own usage, exactly.
  const before2 = (await wallet(url)).balance_units;
  const l = await openai.completions.create({ model: 'tiny', prompt: 'Tell a story', best_of: 2, max_tokens: 4 });
  t.equal(l.choices.length, 1);
  t.same(l.usage, { prompt_tokens: 4, completion_tokens: 4, total_tokens: 8, ...CACHED });
  t.equal(await debited(before2), cost(4, 4));
});
