// The first request after a start or a reload behaves like the thousandth (issue #40, CONTRACT
// section 11): `tollgate serve` from a YAML file in front of a fake llama.cpp server
// (helpers/llama-fake.ts: its /props, one task per answer, whole answers that run to their end
// whatever the client does, streams it cancels) and the official Anthropic and OpenAI SDKs.
// A non-streaming client of /v1/messages or /v1/completions that leaves, as the very first
// request after a start or after a SIGHUP, stops the server's work (the call went streamed, and
// the server saw its connection close before it finished) and is charged nothing; the first
// stop-sequence request reports its stop sequence; `stream_upstream: always` streams native
// calls too (completions, Anthropic Messages), assembled in their own shape.

import t from 'tap';
import { writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import YAML from 'yaml';
import { KEY, PRICE, WALLET, fakeAnthropic, operatorConfig, serveFile, wallet, type Served } from '../helpers/operator.js';
import { startLlamaFake, type LlamaFake, type Work } from '../helpers/llama-fake.js';
import { json, startUpstream, writeSse } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

/** A generation of this many tokens takes the fake 15 s: long past any test's wait. */
const LONG = 1500;

function config(baseUrl: string, extra: Record<string, unknown> = {}, models: Record<string, unknown>[] = []) {
  return operatorConfig({
    providers: { llama: { kind: 'openai', base_url: baseUrl, timeout_ms: 60_000, ...extra } },
    models: [{ id: 'tiny', provider: 'llama', upstream_model: 'tiny.gguf', context_window: 4096, max_output_tokens: 2048, price: PRICE }, ...models],
  });
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The fake's work for the next generation request, once it has decoded a few tokens. */
async function generating(fake: LlamaFake, before: number): Promise<Work> {
  await until('the server to be generating', () => fake.work.length > before && fake.work[before]!.decoded >= 5);
  return fake.work[before]!;
}

/** What a client that left must find: the call streamed, closed before its end, no work after, nothing charged. */
async function abandoned(t: any, served: Served, w: Work, balance: number): Promise<void> {
  await until('the server to be done with it', () => w.ended);
  t.equal(w.stream, true, 'the call went streamed upstream, though the client asked for no stream');
  t.ok(w.request.aborted, 'the server saw its connection close');
  t.notOk(w.finished, `before it finished (${w.decoded} of ${LONG} tokens)`);
  t.equal(w.afterClose, 0, 'no token decoded after the client left');
  await until('the hold to be released', async () => (await wallet(served.url)).held_units === 0);
  t.equal((await wallet(served.url)).balance_units, balance, 'charged nothing: it left before the answer');
}

async function leaveMessages(served: Served, fake: LlamaFake): Promise<Work> {
  const before = fake.work.length;
  const anthropic = new Anthropic({ apiKey: KEY, baseURL: served.url, maxRetries: 0 });
  const ac = new AbortController();
  const pending = anthropic.messages.create({ model: 'tiny', max_tokens: LONG, messages: [{ role: 'user', content: 'Count to a thousand.' }] }, { signal: ac.signal })
    .then(() => 'answered', (e: unknown) => e);
  const w = await generating(fake, before);
  ac.abort();
  await pending;
  return w;
}

async function leaveCompletions(served: Served, fake: LlamaFake): Promise<Work> {
  const before = fake.work.length;
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const ac = new AbortController();
  const pending = openai.completions.create({ model: 'tiny', prompt: 'Count to a thousand:', max_tokens: LONG }, { signal: ac.signal })
    .then(() => 'answered', (e: unknown) => e);
  const w = await generating(fake, before);
  ac.abort();
  await pending;
  return w;
}

for (const [route, leave] of [['/v1/messages', leaveMessages], ['/v1/completions', leaveCompletions]] as const) {
  t.test(`the first request after a start: a non-streaming ${route} client that leaves stops the server's work, charged nothing`, async (t) => {
    const fake = await startLlamaFake({ tokenMs: 10 });
    t.teardown(() => fake.close());
    const served = await serveFile(t, config(fake.baseUrl));
    const w = await leave(served, fake);
    t.equal(fake.requests[0]!.url, '/props', 'the server was asked what it is as the gateway started, before any request');
    t.equal(fake.work.length, 1, 'the very first generation request');
    await abandoned(t, served, w, WALLET);
  });
}

t.test('the first request after a SIGHUP: what was learned is kept (the server\'s /props no longer answers), the call streamed', async (t) => {
  const fake = await startLlamaFake({ tokenMs: 10 });
  t.teardown(() => fake.close());
  const served = await serveFile(t, config(fake.baseUrl));
  // One answer before the reload: the server is known (from /props, and from the answer's timings).
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  await openai.chat.completions.create({ model: 'tiny', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
  fake.options.props = 'hang';
  for (const [i, [route, leave]] of ([['/v1/messages', leaveMessages], ['/v1/completions', leaveCompletions]] as const).entries()) {
    const cfg = config(fake.baseUrl, {}, [{ id: `tiny-${i}`, provider: 'llama', upstream_model: 'tiny.gguf', price: PRICE }]);
    await writeFile(served.file, YAML.stringify(cfg));
    const asked = fake.requests.filter((r) => r.url === '/props').length;
    served.proc.kill('SIGHUP');
    await until('the reload', async () => (await fetch(`${served.url}/v1/models/tiny-${i}`, { headers: { authorization: `Bearer ${KEY}` } })).status === 200);
    // The new provider asks again; unanswered (a later reload's provider shares the open question).
    if (i === 0) await until('the new provider\'s question', () => fake.requests.filter((r) => r.url === '/props').length > asked);
    const balance = (await wallet(served.url)).balance_units;
    const w = await leave(served, fake);
    t.equal(fake.work.length, i + 2, `${route}: the first generation request after the reload`);
    await abandoned(t, served, w, balance);
  }
});

t.test('the first stop-sequence request after a start reports its stop sequence (Messages stop_sequence, chat stop_reason)', async (t) => {
  const fake = await startLlamaFake();
  t.teardown(() => fake.close());
  for (const route of ['messages', 'chat']) {
    const served = await serveFile(t, config(fake.baseUrl));
    const before = fake.work.length;
    if (route === 'messages') {
      const anthropic = new Anthropic({ apiKey: KEY, baseURL: served.url, maxRetries: 0 });
      const msg = await anthropic.messages.create({ model: 'tiny', max_tokens: 50, stop_sequences: ['mat'], messages: [{ role: 'user', content: 'Where did the cat sit?' }] });
      t.equal(msg.stop_reason, 'stop_sequence', 'Messages: stop_sequence, not end_turn');
      t.equal(msg.stop_sequence, 'mat');
      t.same(msg.content, [{ type: 'text', text: ' the cat sat on a warm ' }], 'the text before the stop string');
    } else {
      const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
      const answer: any = await openai.chat.completions.create({ model: 'tiny', max_tokens: 50, stop: ['mat'], messages: [{ role: 'user', content: 'Where did the cat sit?' }] });
      t.equal(answer.choices[0].finish_reason, 'stop');
      t.equal(answer.choices[0].stop_reason, 'mat', 'chat: the stop string, as vLLM reports it');
    }
    t.equal(fake.work.length, before + 1, `${route}: the first generation request of this start`);
    t.equal(fake.work.at(-1)!.request.body.verbose, true, 'llama.cpp asked to say which stop string ended it');
    served.proc.kill('SIGKILL');
  }
});

t.test('a server whose /props never answers: the first request waits a bounded time, then goes as asked', async (t) => {
  const fake = await startLlamaFake({ props: 'hang' });
  t.teardown(() => fake.close());
  const served = await serveFile(t, config(fake.baseUrl));
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const first = await openai.chat.completions.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(first.choices[0]!.message.content, ' the cat sat on', 'answered');
  t.equal(fake.work[0]!.stream, false, 'unknown: as the client asked');
  await openai.chat.completions.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(fake.work[1]!.stream, true, 'the first answer\'s timings told: streamed from then on');
});

t.test('stream_upstream: always streams native calls too: completions and Anthropic Messages, assembled in their own shape', async (t) => {
  // An OpenAI-compatible server that is not llama.cpp (its /props is not found), serving completions.
  const piece = (text: string, extra: Record<string, unknown> = {}) => ({
    id: 'cmpl-up', object: 'text_completion', created: 1700000000, model: 'coder', system_fingerprint: 'fp_v',
    choices: [{ index: 0, text, logprobs: { tokens: [text], token_logprobs: [-0.5], top_logprobs: [{ [text]: -0.5 }], text_offset: [0] }, finish_reason: null, ...extra }],
  });
  const vllm = await startUpstream(async (req, res, body) => {
    if (req.url !== '/v1/completions') return json(res, 404, { detail: 'Not Found' });
    if (body.stream !== true) return json(res, 200, { ...piece(' return a + b', { finish_reason: 'stop' }), usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } });
    await writeSse(res, [
      `data: ${JSON.stringify(piece(' return'))}\n\n`, `data: ${JSON.stringify(piece(' a'))}\n\n`,
      `data: ${JSON.stringify(piece(' + b', { finish_reason: 'stop', stop_reason: null }))}\n\n`,
      `data: ${JSON.stringify({ ...piece(''), choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } })}\n\n`, 'data: [DONE]\n\n',
    ], { split: 11 });
  });
  const anthropicUp = await fakeAnthropic();
  t.teardown(async () => { await vllm.close(); await anthropicUp.close(); });
  const served = await serveFile(t, operatorConfig({
    providers: {
      v: { kind: 'openai', base_url: vllm.baseUrl, stream_upstream: 'always' },
      ant: { kind: 'anthropic', base_url: anthropicUp.url, stream_upstream: 'always' },
    },
    models: [{ id: 'coder', provider: 'v', price: PRICE }, { id: 'claude', provider: 'ant', upstream_model: 'claude-x', price: PRICE }],
  }));
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const before = await wallet(served.url);
  const r: any = await openai.completions.create({ model: 'coder', prompt: 'def add(a, b):', max_tokens: 8, logprobs: 1 });
  t.equal(vllm.requests.at(-1)!.body.stream, true, 'completions: called streaming');
  t.same(schemas.textCompletion(r), [], 'a text_completion as the schema has it');
  t.match(r.id, /^cmpl-[0-9a-f]{32}$/);
  t.equal(r.model, 'coder');
  t.equal(r.system_fingerprint, 'fp_v', 'the upstream\'s own members, as a whole answer carries them');
  t.same(r.choices, [{
    index: 0, text: ' return a + b', finish_reason: 'stop', stop_reason: null,
    logprobs: { tokens: [' return', ' a', ' + b'], token_logprobs: [-0.5, -0.5, -0.5], top_logprobs: [{ ' return': -0.5 }, { ' a': -0.5 }, { ' + b': -0.5 }], text_offset: [0, 0, 0] },
  }], 'the pieces joined, logprobs too');
  t.same(r.usage, { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });

  const anthropic = new Anthropic({ apiKey: KEY, baseURL: served.url, maxRetries: 0 });
  const msg = await anthropic.messages.create({ model: 'claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(anthropicUp.requests.at(-1)!.body.stream, true, 'Messages natively: called streaming');
  t.equal(anthropicUp.requests.at(-1)!.body.model, 'claude-x');
  t.same(msg.content, [{ type: 'text', text: 'Hello from anthropic' }]);
  t.equal(msg.id, 'msg_01Fake');
  t.equal(msg.model, 'claude');
  t.equal(msg.stop_reason, 'end_turn');
  t.same(msg.usage, { input_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 6 });
  await until('the debits', async () => (await wallet(served.url)).held_units === 0);
  t.equal(before.balance_units - (await wallet(served.url)).balance_units, (5 + 2 * 3) + (15 + 2 * 6), 'each charged its usage');
});
