// Tollgate in front of a real llama.cpp server (npm run test:real): every answer is compared
// field by field with the server's own answer to the same request (greedy decoding, so the
// same tokens), and every debit with the server's usage, to the unit (with n: 2, both choices'
// usage, which its whole answer does not add up). Discovery, the held output limit, stop
// sequences, reasoning output and the official openai SDK, as an operator would meet them. Not part of `npm test`: it needs the llama.cpp build (see README).

import t from 'tap';
import OpenAI from 'openai';
import {
  CTX, DEFAULT_MAX_OUTPUT, account, answered, auth, cost, discovered, events, post, prepared, startLlama, startTollgate, tollgateYaml,
} from './llama.js';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { schemas } from '../helpers/schemas.js';
import { BIN } from '../helpers/child.js';

const p = prepared();
const llama = await startLlama(t, p);
const reasoner = await startLlama(t, p, {
  templateFile: `${p.source}/models/templates/Qwen-QwQ-32B.jinja`, reasoningFormat: 'deepseek',
});
const gw = await startTollgate(t, tollgateYaml(llama.url, reasoner.url));
const model = await discovered(gw);

const messages = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Name three colours of the rainbow.' },
];
/** Greedy, reproducible, and every answer computed from scratch like the reference. */
const ask = (extra: Record<string, unknown> = {}) => ({
  model: 'tiny-qwen2', messages, temperature: 0, seed: 7, cache_prompt: false, ignore_eos: true, max_tokens: 24, ...extra,
});

/** The server's own answer: the request as the gateway sends it, straight to llama.cpp. */
async function reference(body: Record<string, unknown>, server = llama): Promise<any> {
  const r = await post(server.url, body, { 'content-type': 'application/json' });
  if (r.status !== 200) throw new Error(`llama-server answered ${r.status}: ${r.text}`);
  return body.stream === true ? events(r.text) : JSON.parse(r.text);
}

/** A choice as both sides must agree on it. */
function choiceOf(c: any) {
  return {
    index: c.index,
    role: c.message.role,
    content: c.message.content ?? '',
    reasoning: c.message.reasoning_content || undefined,
    finish: c.finish_reason,
    logprobs: c.logprobs?.content ?? null,
  };
}

/** A stream's chunks as both sides must agree on them (the usage chunk and [DONE] apart). */
function chunksOf(evs: any[]) {
  return evs.filter((e) => e !== '[DONE]' && e.choices?.length > 0).map((e) => e.choices.map((c: any) => ({
    index: c.index, content: c.delta.content ?? '', reasoning: c.delta.reasoning_content || undefined, finish: c.finish_reason ?? null,
  })));
}

/**
 * The server's usage as the gateway passes it on: the three counts, and the cache and reasoning
 * breakdown where the server reports one (CONTRACT section 8; llama.cpp reports cached_tokens).
 */
const usageOf = (u: any) => ({
  prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens,
  ...(u.prompt_tokens_details?.cached_tokens !== undefined ? { prompt_tokens_details: { cached_tokens: u.prompt_tokens_details.cached_tokens } } : {}),
  ...(u.completion_tokens_details?.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: u.completion_tokens_details.reasoning_tokens } } : {}),
});

t.test("discovery lists the server's model with the context it serves (/props n_ctx)", async (t) => {
  const props = await (await fetch(`${llama.url}/props`)).json() as any;
  const nCtx = props.default_generation_settings.n_ctx;
  t.ok(nCtx > 0 && nCtx <= CTX, `the server serves ${nCtx} tokens per slot`);
  t.equal(model.context_window, nCtx, 'context_window is the served n_ctx');
  const listed = await (await fetch(`${llama.url}/v1/models`)).json() as any;
  t.not(model.context_window, listed.data[0].meta?.n_ctx_train, 'not the training context /v1/models reports');
  t.equal(model.max_output_tokens, DEFAULT_MAX_OUTPUT, 'model_defaults apply to discovered models');
  t.same(schemas.model(model), []);
});

t.test('a JSON answer is the server\'s answer, field by field, and is charged its usage exactly', async (t) => {
  const body = ask({ logprobs: true, top_logprobs: 2 });
  const ref = await reference(body);
  const before = await account(gw);
  const res = await post(gw.url, body);
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(schemas.completion(got), [], 'the answer validates against the OpenAI schema');
  t.equal(got.model, 'tiny-qwen2');
  t.match(got.id, /^chatcmpl-/);
  t.equal(got.choices.length, ref.choices.length);
  t.same(got.choices.map(choiceOf), ref.choices.map(choiceOf), 'choices: text, finish_reason and logprobs agree');
  t.ok(ref.choices[0].message.content.length > 0, 'the reference said something');
  t.ok(got.choices[0].logprobs.content.length > 0, 'logprobs came through');
  t.same(got.usage, usageOf(ref.usage), 'usage is the server\'s');

  const units = cost(ref.usage.prompt_tokens, ref.usage.completion_tokens);
  t.ok(units > 0);
  t.equal(res.headers.get('x-tollgate-units-charged'), String(units), 'charged the cost of the server\'s usage');
  const after = await account(gw);
  t.equal(before.balance_units - after.balance_units, units, 'the wallet lost exactly that');
  t.equal(after.held_units, 0, 'no hold remains');
  t.equal(res.headers.get('x-tollgate-wallet-balance-units'), String(after.available_units));
  t.equal(after.usage.day.requests - before.usage.day.requests, 1);
  t.equal(after.usage.day.tokens - before.usage.day.tokens, ref.usage.total_tokens, 'the day\'s tokens grew by the server\'s total');
});

t.test('without max_tokens, the held limit goes upstream and bounds the answer', async (t) => {
  const { max_tokens: _unused, ...body } = ask();
  const res = await post(gw.url, body);
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.equal(got.usage.completion_tokens, DEFAULT_MAX_OUTPUT, 'the server generated exactly the held limit');
  t.equal(got.choices[0].finish_reason, 'length');
  const ref = await reference({ ...body, max_tokens: DEFAULT_MAX_OUTPUT });
  t.same(got.choices.map(choiceOf), ref.choices.map(choiceOf), 'the same answer as max_tokens = the held limit');
});

t.test('a streamed answer is the server\'s stream, chunk by chunk, and is charged its usage', async (t) => {
  const body = ask({ stream: true, stream_options: { include_usage: true } });
  const ref = await reference(body);
  const before = await account(gw);
  const res = await post(gw.url, body);
  t.equal(res.status, 200);
  t.equal(res.headers.get('content-type'), 'text/event-stream');
  const got = events(res.text);
  t.equal(got.at(-1), '[DONE]', 'ends with [DONE]');
  t.equal(ref.at(-1), '[DONE]');
  t.same(chunksOf(got), chunksOf(ref), 'every chunk carries what the server\'s did');
  const chunks = got.slice(0, -1);
  t.equal(new Set(chunks.map((e: any) => e.id)).size, 1, 'one id across the stream');
  t.same(chunks.flatMap((e: any) => schemas.chunk(e)), [], 'every chunk validates against the OpenAI schema');
  t.equal(chunks[0].choices[0].delta.role, 'assistant');
  const refUsage = ref.filter((e: any) => e !== '[DONE]' && e.usage).at(-1).usage;
  const last = chunks.at(-1);
  t.same(last.choices, [], 'the usage chunk has no choices');
  t.same(last.usage, usageOf(refUsage), 'the usage chunk is the server\'s usage');
  t.ok(chunks.slice(0, -1).every((e: any) => e.usage === null), 'every other chunk carries usage: null');
  const after = await account(gw);
  t.equal(before.balance_units - after.balance_units, cost(refUsage.prompt_tokens, refUsage.completion_tokens));

  // Without include_usage the client sees no usage, and is charged the server's all the same.
  const plain = await post(gw.url, ask({ stream: true }));
  const plainEvents = events(plain.text);
  t.notOk(plainEvents.some((e) => e !== '[DONE]' && 'usage' in e), 'no usage member without include_usage');
  t.same(chunksOf(plainEvents), chunksOf(ref));
  t.equal(after.balance_units - (await account(gw)).balance_units, cost(refUsage.prompt_tokens, refUsage.completion_tokens));
});

t.test('stop sequences: the server applies them, the answer and its cost follow', async (t) => {
  const full = (await reference(ask({ max_tokens: 32 }))).choices[0].message.content as string;
  // A stop string that first occurs a few characters in (greedy output repeats itself).
  let at = -1;
  for (let i = 4; i + 3 <= full.length && at < 0; i++) if (full.indexOf(full.slice(i, i + 3)) === i && full.slice(i, i + 3).trim() !== '') at = i;
  t.ok(at > 0, `found a stop string in ${JSON.stringify(full)}`);
  const stop = [full.slice(at, at + 3), 'never-1', 'never-2', 'never-3', 'never-4'];
  const body = ask({ max_tokens: 32, stop });
  const ref = await reference(body);
  const before = await account(gw);
  const res = await post(gw.url, body);
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(got.choices.map(choiceOf), ref.choices.map(choiceOf), 'five stop strings: the server\'s limit, not OpenAI\'s four');
  t.equal(got.choices[0].finish_reason, 'stop');
  t.ok(full.startsWith(got.choices[0].message.content) && got.choices[0].message.content.length < full.length, 'cut at the stop string');
  t.same(got.usage, usageOf(ref.usage));
  t.equal(before.balance_units - (await account(gw)).balance_units, cost(ref.usage.prompt_tokens, ref.usage.completion_tokens));

  const streamed = events((await post(gw.url, { ...body, stream: true })).text);
  t.equal(streamed.at(-1), '[DONE]');
  t.equal(chunksOf(streamed).flat().map((c) => c.content).join(''), got.choices[0].message.content, 'streamed: the same text');

  // The stop string that ended it is reported, from the server's own word (CONTRACT section 11).
  t.equal(got.choices[0].stop_reason, stop[0], 'chat: stop_reason names the stop string');
  const finish = streamed.filter((e) => e !== '[DONE]' && e.choices?.[0]?.finish_reason).at(-1);
  t.equal(finish.choices[0].stop_reason, stop[0], 'streamed: on the finish chunk');
  const messagesBody = { model: 'tiny-qwen2', max_tokens: 32, temperature: 0, stop_sequences: stop, system: messages[0]!.content, messages: [messages[1]] };
  const msg = await post(gw.url, messagesBody, { 'x-api-key': auth.authorization.slice(7), 'content-type': 'application/json' }, '/v1/messages');
  answered(t, msg, 200);
  const m = JSON.parse(msg.text);
  t.equal(m.stop_reason, 'stop_sequence', 'Messages: stop_reason stop_sequence');
  t.equal(m.stop_sequence, stop[0], 'Messages: the sequence');
  const ms = await post(gw.url, { ...messagesBody, stream: true }, { 'x-api-key': auth.authorization.slice(7), 'content-type': 'application/json' }, '/v1/messages');
  const delta = ms.text.split('\n\n').find((b) => b.startsWith('event: message_delta'))!;
  t.match(JSON.parse(delta.slice(delta.indexOf('data: ') + 6)).delta, { stop_reason: 'stop_sequence', stop_sequence: stop[0] }, 'Messages streamed');

  // A stop string at the very start empties the answer: legitimate (finish_reason stop), not a 502.
  const emptied = ask({ max_tokens: 32, stop: [full.slice(0, 2)] });
  const refEmpty = await reference(emptied);
  t.equal(refEmpty.choices[0].message.content, '', 'the server answers nothing');
  const res2 = await post(gw.url, emptied);
  answered(t, res2, 200);
  t.same(JSON.parse(res2.text).choices.map(choiceOf), refEmpty.choices.map(choiceOf));
  const s2 = await post(gw.url, { ...emptied, stream: true });
  t.equal(s2.status, 200);
  t.equal(events(s2.text).at(-1), '[DONE]');
});

t.test('forward_params: a llama.cpp grammar reaches the server and constrains the answer', async (t) => {
  const body = ask({ ignore_eos: false, max_tokens: 16, grammar: 'root ::= ("yes" | "no") "."' });
  const ref = await reference(body);
  const res = await post(gw.url, body);
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.match(got.choices[0].message.content, /^(yes|no)\.$/, 'the random model said only what the grammar allows');
  t.same(got.choices.map(choiceOf), ref.choices.map(choiceOf));
  t.same(got.usage, usageOf(ref.usage));
});

t.test('reasoning output: a reasoning template\'s thoughts arrive as reasoning_content', async (t) => {
  const body = { ...ask({ max_tokens: 30 }), model: 'tiny-reasoner' };
  const ref = await reference({ ...body, model: 'tiny-qwen2' }, reasoner);
  t.ok(ref.choices[0].message.reasoning_content?.length > 0, 'the server split out reasoning_content');
  const before = await account(gw);
  const res = await post(gw.url, body);
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(got.choices.map(choiceOf), ref.choices.map(choiceOf), 'reasoning and text agree with the server\'s');
  t.same(schemas.completion(got), []);
  t.equal(before.balance_units - (await account(gw)).balance_units, cost(ref.usage.prompt_tokens, ref.usage.completion_tokens));

  const refStream = await reference({ ...body, model: 'tiny-qwen2', stream: true }, reasoner);
  const s = await post(gw.url, { ...body, stream: true });
  t.equal(s.status, 200);
  const evs = events(s.text);
  t.equal(evs.at(-1), '[DONE]');
  t.same(evs.slice(0, -1).flatMap((e: any) => schemas.chunk(e)), [], 'reasoning chunks validate');
  t.same(chunksOf(evs), chunksOf(refStream), 'reasoning chunks agree with the server\'s');
  const thoughts = chunksOf(evs).flat().map((c) => c.reasoning ?? '').join('');
  t.equal(thoughts, ref.choices[0].message.reasoning_content, 'the streamed reasoning is the whole reasoning');
});

t.test('the official openai SDK: create and stream', async (t) => {
  const client = new OpenAI({ apiKey: auth.authorization.slice(7), baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const body = ask();
  const ref = await reference(body);
  const answer = await client.chat.completions.create(body as any);
  t.equal(answer.choices[0]!.message.content, ref.choices[0].message.content);
  t.same(answer.usage, usageOf(ref.usage));

  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } } as any) as any;
  let text = '';
  let usage: any;
  for await (const c of stream) {
    text += c.choices[0]?.delta?.content ?? '';
    if (c.usage) usage = c.usage;
  }
  t.equal(text, ref.choices[0].message.content, 'streamed through the SDK: the same text');
  t.same(usage, usageOf(ref.usage));

  const err = await client.chat.completions.create({ ...body, max_tokens: CTX * 4 } as any).catch((e) => e);
  t.equal(err.status, 422, 'a request past the served context is refused before the server');
  t.equal(err.code, 'context_length_exceeded');
});

// `tokenizer: upstream` (CONTRACT section 10): prompts are estimated with the server's own
// POST /tokenize, so a prompt past the context is refused stating at least the server's count
// (o200k_base counts this Hindi text several times too low).
t.test('tokenizer: upstream follows the server\'s /tokenize', async (t) => {
  const text = 'नमस्ते दुनिया, यह एक परीक्षण है। '.repeat(40);
  const tok = await (await fetch(`${llama.url}/tokenize`, { method: 'POST', body: JSON.stringify({ content: text }) })).json() as any;
  const serverCount: number = tok.tokens.length;
  const yaml = tollgateYaml(llama.url).replace('max_output_tokens: 40', 'max_output_tokens: 40\n      tokenizer: upstream');
  const file = `${gw.dir}/upstream-tokenizer.yaml`;
  writeFileSync(file, yaml);
  const checked = spawnSync(process.execPath, [BIN, 'check', '--config', file], { encoding: 'utf8' });
  t.equal(checked.status, 0, `tollgate check accepts tokenizer: upstream: ${checked.stdout}${checked.stderr}`);
  if (checked.status !== 0) return;
  const up = await startTollgate(t, yaml);
  await discovered(up);
  const limit = model.context_window as number;
  const res = await post(up.url, { model: 'tiny-qwen2', messages: [{ role: 'user', content: text }], max_tokens: limit - Math.floor(serverCount / 2) });
  t.equal(res.status, 422, 'refused before the server: the estimate is the server\'s count');
  const about = Number(/at least (\d+) prompt tokens/.exec(res.text)?.[1]);
  t.ok(about >= serverCount && about <= serverCount + 32, `estimate ${about} vs the server's ${serverCount}`);
});

// POST /v1/completions (CONTRACT section 14): llama.cpp serves OpenAI's legacy completions, and
// the gateway sends the body natively to the server's own /v1/completions, so its answer is the
// server's, text for text and usage for usage. llama.cpp's /v1/completions does no
// fill-in-the-middle (older releases refuse `suffix`, "Unsupported param: suffix"; this one
// ignores it); its fill-in-the-middle is POST /infill, where the gateway sends
// a request with a suffix (translated; the tiny model has Qwen2.5's FIM tokens, see
// scripts/real/make-model.py), so that answer is compared with the server's own /infill answer.
const plainPrompt = {
  model: 'tiny-qwen2', prompt: 'def add(a, b):\n    ', max_tokens: 16, temperature: 0, seed: 7, cache_prompt: false, ignore_eos: true,
};

t.test('/v1/completions is the server\'s own answer, plain and streamed, charged its usage', async (t) => {
  const refRes = await post(llama.url, plainPrompt, { 'content-type': 'application/json' }, '/v1/completions');
  t.equal(refRes.status, 200, `llama-server serves /v1/completions: ${refRes.text.slice(0, 300)}`);
  if (refRes.status !== 200) return;
  const ref = JSON.parse(refRes.text);
  const before = await account(gw);
  const res = await post(gw.url, plainPrompt, auth, '/v1/completions');
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.equal(got.object, 'text_completion');
  t.equal(got.model, 'tiny-qwen2', 'the slug');
  t.same(got.choices.map((c: any) => [c.index, c.text, c.finish_reason]), ref.choices.map((c: any) => [c.index, c.text, c.finish_reason]), 'the server\'s text');
  t.ok(ref.choices[0].text.length > 0, 'the reference said something');
  t.same(got.usage, usageOf(ref.usage), 'usage is the server\'s');
  const after = await account(gw);
  t.equal(before.balance_units - after.balance_units, cost(ref.usage.prompt_tokens, ref.usage.completion_tokens), 'charged the server\'s usage exactly');
  t.equal(after.held_units, 0);

  const stream = await post(gw.url, { ...plainPrompt, stream: true, stream_options: { include_usage: true } }, auth, '/v1/completions');
  answered(t, stream, 200);
  const evs = events(stream.text);
  t.equal(evs.at(-1), '[DONE]');
  const chunks = evs.filter((e: any) => e !== '[DONE]');
  t.equal(chunks.filter((e: any) => e.choices.length > 0).map((e: any) => e.choices[0].text).join(''), ref.choices[0].text, 'streamed: the same text');
  t.same(chunks.at(-1).choices, [], 'the usage chunk');
  t.equal(chunks.at(-1).usage.completion_tokens, ref.usage.completion_tokens);

  const client = new OpenAI({ apiKey: auth.authorization.slice(7), baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const sdk = await client.completions.create(plainPrompt as any);
  t.equal(sdk.choices[0]!.text, ref.choices[0].text, 'through the openai SDK: the same text');
});

t.test('/v1/completions with n: 2: charged for both choices, the server\'s own counts; one id per answer', async (t) => {
  const body = { ...plainPrompt, n: 2 };
  const plain = { 'content-type': 'application/json' };
  // The server's own per-choice figures: one task per choice, each task's usage on its last event.
  const refEvents = events((await post(llama.url, { ...body, stream: true }, plain, '/v1/completions')).text).filter((e: any) => e !== '[DONE]');
  const finals = refEvents.filter((e: any) => e.usage);
  t.equal(finals.length, 2, 'one usage per choice');
  const prompt = finals[0].usage.prompt_tokens;
  const completion = finals.reduce((a: number, e: any) => a + e.usage.completion_tokens, 0);
  t.equal(completion, 2 * plainPrompt.max_tokens, 'ignore_eos: each choice runs to max_tokens');
  // Its whole answer carries the first task's usage alone: what the gateway used to charge.
  const whole = JSON.parse((await post(llama.url, body, plain, '/v1/completions')).text);
  t.equal(whole.choices.length, 2);
  t.equal(whole.usage.completion_tokens, plainPrompt.max_tokens, 'the server\'s whole answer counts one choice');
  t.match(whole.id, /^chatcmpl-/, 'the server names its completions chatcmpl-');

  const before = await account(gw);
  const res = await post(gw.url, body, auth, '/v1/completions');
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(got.choices.map((c: any) => [c.index, c.text, c.finish_reason]), whole.choices.map((c: any) => [c.index, c.text, c.finish_reason]), 'the server\'s two answers');
  t.match(got.usage, { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }, 'both choices, the prompt once');
  t.match(got.id, /^cmpl-[0-9a-f]{32}$/, 'Tollgate\'s id');
  t.equal(before.balance_units - (await account(gw)).balance_units, cost(prompt, completion), 'charged every choice, to the unit');

  const before2 = await account(gw);
  const streamed = events((await post(gw.url, { ...body, stream: true, stream_options: { include_usage: true } }, auth, '/v1/completions')).text);
  t.equal(streamed.at(-1), '[DONE]');
  const chunks = streamed.filter((e: any) => e !== '[DONE]');
  t.match(chunks.at(-1).usage, { prompt_tokens: prompt, completion_tokens: completion }, 'the usage chunk: both choices');
  const ids = new Set(chunks.map((e: any) => e.id));
  t.equal(ids.size, 1, 'one id on every chunk, the usage chunk too');
  t.match([...ids][0], /^cmpl-[0-9a-f]{32}$/);
  let held = (await account(gw)).held_units;
  for (let i = 0; i < 100 && held !== 0; i++) { await new Promise((r) => setTimeout(r, 20)); held = (await account(gw)).held_units; }
  t.equal(before2.balance_units - (await account(gw)).balance_units, cost(prompt, completion));
});

t.test('/v1/completions with best_of: llama.cpp takes it and generates n; charged its usage exactly', async (t) => {
  const body = { ...plainPrompt, best_of: 2 };
  const ref = JSON.parse((await post(llama.url, body, { 'content-type': 'application/json' }, '/v1/completions')).text);
  t.equal(ref.choices.length, 1, 'the server answers one');
  const before = await account(gw);
  const res = await post(gw.url, body, auth, '/v1/completions');
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(got.choices.map((c: any) => c.text), ref.choices.map((c: any) => c.text));
  t.same(got.usage, usageOf(ref.usage), 'the server\'s usage, not an estimate of answers it never generated');
  const after = await account(gw);
  t.equal(before.balance_units - after.balance_units, cost(ref.usage.prompt_tokens, ref.usage.completion_tokens));
  t.equal(after.held_units, 0, 'the hold (two answers\' worth) released');
});

t.test('/v1/completions with a suffix: llama.cpp\'s own /infill answer, plain and streamed, charged its counts', async (t) => {
  const body = { ...plainPrompt, suffix: '\n\nprint(add(1, 2))\n' };
  // Its /v1/completions does no fill-in-the-middle: older releases refuse `suffix`
  // ("Unsupported param: suffix"), this one ignores it (the same prompt tokens as without).
  const native = await post(llama.url, body, { 'content-type': 'application/json' }, '/v1/completions');
  if (native.status === 200) {
    const plain = JSON.parse((await post(llama.url, plainPrompt, { 'content-type': 'application/json' }, '/v1/completions')).text);
    t.equal(JSON.parse(native.text).usage.prompt_tokens, plain.usage.prompt_tokens, 'its /v1/completions ignores suffix');
  } else {
    t.match(native.text, /suffix/, `its /v1/completions refuses suffix (${native.status}): ${native.text.slice(0, 200)}`);
  }
  // The server's own FIM answer to the same input: what the gateway must give back.
  const refRes = await post(llama.url, {
    input_prefix: body.prompt, input_suffix: body.suffix, n_predict: body.max_tokens, temperature: 0, seed: 7, cache_prompt: false, ignore_eos: true,
  }, { 'content-type': 'application/json' }, '/infill');
  answered(t, refRes, 200);
  if (refRes.status !== 200) return;
  const ref = JSON.parse(refRes.text);
  t.ok(ref.content.length > 0, 'the reference said something');
  const before = await account(gw);
  const res = await post(gw.url, body, auth, '/v1/completions');
  answered(t, res, 200);
  const got = JSON.parse(res.text);
  t.same(schemas.textCompletion(got), []);
  t.equal(got.model, 'tiny-qwen2');
  t.same(got.choices.map((c: any) => [c.index, c.text, c.finish_reason]), [[0, ref.content, ref.stop_type === 'limit' ? 'length' : 'stop']], 'the server\'s infill text');
  t.same(got.usage, { prompt_tokens: ref.tokens_evaluated, completion_tokens: ref.tokens_predicted, total_tokens: ref.tokens_evaluated + ref.tokens_predicted, prompt_tokens_details: { cached_tokens: ref.timings.cache_n } },
    'usage: its tokens_evaluated and tokens_predicted');
  const after = await account(gw);
  t.equal(before.balance_units - after.balance_units, cost(ref.tokens_evaluated, ref.tokens_predicted), 'charged the server\'s counts exactly');
  t.equal(after.held_units, 0);

  const stream = await post(gw.url, { ...body, stream: true, stream_options: { include_usage: true } }, auth, '/v1/completions');
  answered(t, stream, 200);
  const evs = events(stream.text);
  t.equal(evs.at(-1), '[DONE]');
  const chunks = evs.filter((e: any) => e !== '[DONE]');
  t.equal(chunks.filter((e: any) => e.choices.length > 0).map((e: any) => e.choices[0].text).join(''), ref.content, 'streamed: the same text');
  t.equal(chunks.at(-1).usage.completion_tokens, ref.tokens_predicted);

  const client = new OpenAI({ apiKey: auth.authorization.slice(7), baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const sdk = await client.completions.create(body as any);
  t.equal(sdk.choices[0]!.text, ref.content, 'through the openai SDK: the same text');
  const err = await client.completions.create({ ...body, n: 2 } as any).catch((e) => e);
  t.match(err, { status: 400, code: 'unsupported_value', param: 'n' }, 'n: 2 cannot be served by /infill');
  const last = await account(gw);
  t.equal(last.held_units, 0);
});
