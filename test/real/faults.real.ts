// Tollgate in front of a real llama.cpp server when things go wrong (npm run test:real): a
// client that leaves mid-stream cancels the generation on the server (its /metrics stop
// moving), a server killed mid-stream gives the client the in-stream error and no [DONE] and
// charges what was delivered, and a server restarted on the same port is used again without
// anyone touching the gateway. Not part of `npm test`: it needs the llama.cpp build.

import t from 'tap';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { setTimeout as sleep } from 'node:timers/promises';
import { schemas } from '../helpers/schemas.js';
import { account, answered, auth, cost, discovered, events, post, prepared, startLlama, startTollgate, tollgateYaml, usage, type Llama } from './llama.js';

const p = prepared();
let llama = await startLlama(t, p);
const port = llama.port;
const gw = await startTollgate(t, tollgateYaml(llama.url));
await discovered(gw);

/** A long generation (within a slot's 2048 tokens): seconds of work for the server, with ignore_eos. */
const LONG = 1900;
const ask = (extra: Record<string, unknown> = {}) => ({
  model: 'tiny-qwen2', messages: [{ role: 'user', content: 'Count to a thousand.' }],
  temperature: 0, seed: 7, cache_prompt: false, ignore_eos: true, max_tokens: LONG, stream: true, ...extra,
});

/**
 * Tokens the gateway must charge for delivered text: counted with the model's tokenizer
 * (this gateway's discovered model has no model_defaults.tokenizer: o200k_base). With
 * `tokenizer: upstream` it would be the server's own count; answers.real.ts checks that one.
 */
function deliveredTokens(text: string): number {
  return text === '' ? 0 : encode(text, { disallowedSpecial: new Set() }).length;
}

/** Reads a gateway stream until `enough` content chunks arrived; returns the reader and text. */
async function startStream(body: Record<string, unknown>, enough: number, signal?: AbortSignal) {
  const res = await fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: auth, body: JSON.stringify(body), signal });
  if (res.status !== 200) throw new Error(`stream answered ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let raw = '';
  while ((raw.match(/"content":"[^"]/g) ?? []).length < enough) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended early: ${raw}`);
    raw += decoder.decode(value, { stream: true });
  }
  return { reader, decoder, raw: () => raw, add: (s: string) => { raw += s; } };
}

async function until(what: string, check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const idle = (server: Llama) => until('the server to be idle', async () => (await server.metrics()).requests_processing === 0);

t.test('a client that leaves mid-stream cancels the generation on the server', async (t) => {
  await idle(llama);
  const m0 = await llama.metrics();
  const u0 = await usage(gw);
  const a0 = await account(gw);
  const ac = new AbortController();
  const s = await startStream(ask(), 5, ac.signal);
  t.equal((await llama.metrics()).requests_processing, 1, 'the server is generating');
  ac.abort();
  await s.reader.cancel().catch(() => undefined);

  await idle(llama);
  const m1 = await llama.metrics();
  await sleep(500);
  const m2 = await llama.metrics();
  t.equal(m2.n_decode_total, m1.n_decode_total, 'no decoding after the slot was released');
  const decoded = m2.n_decode_total - m0.n_decode_total;
  t.ok(decoded < LONG / 2, `the server stopped early: ${decoded} decode steps of ${LONG} tokens asked`);

  // Charged for what was generated: the counted text, priced exactly, debited once.
  await until('the debit', async () => (await usage(gw)).requests === u0.requests + 1);
  const u1 = await usage(gw);
  const a1 = await account(gw);
  const prompt = u1.prompt_tokens - u0.prompt_tokens;
  const completion = u1.completion_tokens - u0.completion_tokens;
  // The gateway wrote more than the client read before it saw the close: at least that is charged.
  const read = events(s.raw().split('\n\n').slice(0, -1).join('\n\n')).map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
  t.ok(completion >= deliveredTokens(read) - 1, `at least the text the client read is charged (${completion} tokens)`);
  t.equal(u1.units - u0.units, cost(prompt, completion), 'priced exactly');
  t.equal(a0.balance_units - a1.balance_units, u1.units - u0.units, 'the wallet lost what the record says');
  t.equal(a1.held_units, 0, 'no hold remains');
  const metrics = await (await fetch(`${gw.url}/metrics`)).text();
  t.match(metrics, /^tollgate_open_streams 0$/m, 'the gateway closed its stream');

  // The slot is free again: the next request is served.
  const next = await post(gw.url, ask({ stream: false, max_tokens: 8 }));
  answered(t, next, 200);
});

t.test('a non-streaming client that leaves stops the server\'s work too (stream_upstream: auto), charged nothing', async (t) => {
  // The gateway learns the server is llama.cpp from an answer (its timings) or discovery's /props.
  answered(t, await post(gw.url, ask({ stream: false, max_tokens: 4 })), 200);
  await idle(llama);
  const m0 = await llama.metrics();
  const a0 = await account(gw);
  const u0 = await usage(gw);
  const ac = new AbortController();
  const pending = fetch(`${gw.url}/v1/chat/completions`, { method: 'POST', headers: auth, body: JSON.stringify(ask({ stream: false })), signal: ac.signal })
    .catch((e: unknown) => e);
  await until('the server to be generating', async () => (await llama.metrics()).requests_processing === 1);
  await sleep(300);
  ac.abort();
  await pending;
  await idle(llama);
  const m1 = await llama.metrics();
  await sleep(500);
  const m2 = await llama.metrics();
  t.equal(m2.n_decode_total, m1.n_decode_total, 'no decoding after the client left');
  const decoded = m2.n_decode_total - m0.n_decode_total;
  t.ok(decoded < LONG / 2, `the server stopped early: ${decoded} decode steps of ${LONG} tokens asked (it ran to max_tokens before)`);
  await sleep(200);
  const a1 = await account(gw);
  t.equal(a1.balance_units, a0.balance_units, 'a non-streaming client gone before the answer is charged nothing');
  t.equal(a1.held_units, 0, 'no hold remains');
  t.equal((await usage(gw)).units, u0.units);
});

t.test('a server killed mid-stream: in-stream error, no [DONE], charged what was delivered', async (t) => {
  await idle(llama);
  const u0 = await usage(gw);
  const a0 = await account(gw);
  const s = await startStream(ask(), 5);
  await llama.kill();
  for (;;) {
    const { value, done } = await s.reader.read();
    if (done) break;
    s.add(s.decoder.decode(value, { stream: true }));
  }
  const evs = events(s.raw());
  t.notOk(evs.includes('[DONE]'), 'no [DONE]: the client knows the answer is incomplete');
  const last = evs.at(-1);
  t.match(last, {
    message: String, type: 'server_error', code: 'provider_error', param: null, request_id: String,
    error: { message: String, type: 'server_error', code: 'provider_error', param: null },
  }, 'the last event is the error envelope');
  t.notOk('choices' in last);
  t.same(schemas.error(last), [], 'the envelope validates');
  const delivered = evs.slice(0, -1).map((e) => e.choices?.[0]?.delta?.content ?? '').join('');
  t.ok(delivered.length > 0);

  await until('the debit', async () => (await usage(gw)).requests === u0.requests + 1);
  const u1 = await usage(gw);
  const a1 = await account(gw);
  const prompt = u1.prompt_tokens - u0.prompt_tokens;
  const completion = u1.completion_tokens - u0.completion_tokens;
  t.equal(completion, deliveredTokens(delivered), 'the delivered text, counted with the model\'s tokenizer');
  t.ok(prompt > 0, 'and the prompt estimate');
  t.equal(u1.units - u0.units, cost(prompt, completion));
  t.equal(a0.balance_units - a1.balance_units, cost(prompt, completion), 'the wallet lost exactly that');
  t.equal(a1.held_units, 0);
  t.match(await (await fetch(`${gw.url}/metrics`)).text(), /^tollgate_open_streams 0$/m);
});

t.test('a server down, then restarted on the same port: the gateway recovers by itself', async (t) => {
  if (llama.proc.exitCode === null && llama.proc.signalCode === null) await llama.kill();
  const a0 = await account(gw);
  for (let i = 0; i < 3; i++) {
    const res = await post(gw.url, ask({ stream: false, max_tokens: 8 }));
    const body = JSON.parse(res.text);
    if (res.status === 502) t.equal(body.code, 'provider_error', 'connection refused: 502 provider_error');
    else {
      t.equal(res.status, 503, 'or, once the circuit opened, 503');
      t.equal(body.code, 'model_unavailable');
      t.ok(Number(res.headers.get('retry-after')) >= 1);
    }
  }
  const a1 = await account(gw);
  t.equal(a1.balance_units, a0.balance_units, 'failed requests cost nothing');
  t.equal(a1.held_units, 0, 'and hold nothing');
  t.equal((await fetch(`${gw.url}/readyz`)).status, 200, '/readyz stays 200 (discovery keeps the last list)');

  llama = await startLlama(t, p, { port });
  const body = ask({ stream: false, max_tokens: 12 });
  let res = await post(gw.url, body);
  await until('the gateway to serve again', async () => {
    res = await post(gw.url, body);
    return res.status === 200;
  });
  const ref = await post(llama.url, body, { 'content-type': 'application/json' });
  t.equal(JSON.parse(res.text).choices[0].message.content, JSON.parse(ref.text).choices[0].message.content,
    'the restarted server answers through the gateway');
  const streamed = await post(gw.url, { ...body, stream: true });
  t.equal(events(streamed.text).at(-1), '[DONE]', 'streams too');
});
