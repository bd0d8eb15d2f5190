// Tollgate in front of a real llama.cpp server when things go wrong (npm run test:real): a
// client that leaves mid-stream cancels the generation on the server (its /metrics stop
// moving), and so does a non-streaming client of any route, the very first request after a
// start or a SIGHUP included; the first stop-sequence request names its stop sequence; a server
// killed mid-stream gives the client the in-stream error and no [DONE] and charges what was
// delivered, and a server restarted on the same port is used again without anyone touching the
// gateway. Not part of `npm test`: it needs the llama.cpp build.

import t from 'tap';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { setTimeout as sleep } from 'node:timers/promises';
import { schemas } from '../helpers/schemas.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PRICE, account, answered, auth, cost, discovered, events, post, prepared, startLlama, startTollgate, tollgateYaml, usage, type Llama } from './llama.js';

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
  // The gateway knows the server is llama.cpp's from its /props (asked at start) and discovery.
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

/**
 * `server` behind a gateway of its own with a fixed model and no discovery: only the question
 * the provider asks as it starts (GET /props) can tell it what the server is.
 */
function fixedYaml(server: Llama, models: string[]): string {
  const price = `{ input_per_mtok: ${PRICE.input_per_mtok}, output_per_mtok: ${PRICE.output_per_mtok} }`;
  return `${tollgateYaml(server.url).replace(/^ {4}discover_models: true\n {4}discover_interval_ms: 1000\n/m, '')}models:\n${
    models.map((id) => `  - { id: ${id}, provider: llama, upstream_model: tiny-qwen2, context_window: 2048, max_output_tokens: 2000, price: ${price} }\n`).join('')}`;
}

/**
 * A non-streaming client of `route` that leaves while `server` generates: the server's decode
 * steps from the request on, counted once it is idle again and its count stops moving.
 */
async function abandonWhole(server: Llama, gateway: { url: string }, route: '/v1/messages' | '/v1/completions', model: string): Promise<number> {
  const idleNow = () => until('the server to be idle', async () => (await server.metrics()).requests_processing === 0);
  await idleNow();
  const m0 = await server.metrics();
  const body = route === '/v1/messages'
    ? { model, max_tokens: LONG, temperature: 0, messages: [{ role: 'user', content: 'Count to a thousand.' }] }
    : { model, max_tokens: LONG, temperature: 0, prompt: 'Count to a thousand:', cache_prompt: false };
  const ac = new AbortController();
  const pending = fetch(`${gateway.url}${route}`, { method: 'POST', headers: auth, body: JSON.stringify(body), signal: ac.signal }).catch((e: unknown) => e);
  await until('the server to be generating', async () => (await server.metrics()).requests_processing === 1);
  await sleep(300);
  ac.abort();
  await pending;
  await idleNow();
  let last = (await server.metrics()).n_decode_total;
  await until('the decode count to stop moving', async () => {
    await sleep(500);
    const now = (await server.metrics()).n_decode_total;
    const still = now === last;
    last = now;
    return still;
  }, 60_000);
  return last - m0.n_decode_total;
}

t.test('the first request after a start and after a SIGHUP: a non-streaming /v1/messages or /v1/completions client that leaves stops the server', async (t) => {
  // A server of its own that ignores EOS by default: Messages has no field to ask it.
  const eosless = await startLlama(t, p, { args: ['--ignore-eos'] });
  for (const route of ['/v1/messages', '/v1/completions'] as const) {
    const fresh = await startTollgate(t, fixedYaml(eosless, ['tiny-first']));
    const a0 = await account(fresh);
    const decoded = await abandonWhole(eosless, fresh, route, 'tiny-first');
    t.ok(decoded < LONG / 2, `${route}, the first request after a start: the server stopped early (${decoded} decode steps of ${LONG} tokens asked; it ran them all before)`);
    await until('the hold to go', async () => (await account(fresh)).held_units === 0);
    t.equal((await account(fresh)).balance_units, a0.balance_units, 'charged nothing: the client left before the answer');

    writeFileSync(join(fresh.dir, 'tollgate.yaml'), fixedYaml(eosless, ['tiny-first', 'tiny-reloaded']));
    fresh.proc.kill('SIGHUP');
    await until('the reload', async () => (await fetch(`${fresh.url}/v1/models/tiny-reloaded`, { headers: auth })).status === 200);
    const again = await abandonWhole(eosless, fresh, route, 'tiny-reloaded');
    t.ok(again < LONG / 2, `${route}, the first request after a SIGHUP: the server stopped early (${again} of ${LONG})`);
    await until('the hold to go', async () => (await account(fresh)).held_units === 0);
    t.equal((await account(fresh)).balance_units, a0.balance_units, 'charged nothing');
    fresh.proc.kill('SIGKILL');
  }
  await eosless.kill();
});

t.test('the first stop-sequence request after a start reports its stop sequence (Messages)', async (t) => {
  await idle(llama);
  const probe = { model: 'tiny-qwen2', max_tokens: 32, temperature: 0, cache_prompt: false, messages: [{ role: 'user', content: 'Name three colours.' }] };
  const full = JSON.parse((await post(llama.url, probe, { 'content-type': 'application/json' })).text).choices[0].message.content as string;
  // A stop string that first occurs a few characters in (greedy output repeats itself).
  let at = -1;
  for (let i = 4; i + 3 <= full.length && at < 0; i++) if (full.indexOf(full.slice(i, i + 3)) === i && full.slice(i, i + 3).trim() !== '') at = i;
  t.ok(at > 0, `found a stop string in ${JSON.stringify(full)}`);
  const stop = full.slice(at, at + 3);
  const fresh = await startTollgate(t, fixedYaml(llama, ['tiny-first']));
  const res = await post(fresh.url, { model: 'tiny-first', max_tokens: 32, temperature: 0, stop_sequences: [stop], messages: probe.messages }, auth, '/v1/messages');
  answered(t, res, 200);
  const m = JSON.parse(res.text);
  t.equal(m.stop_reason, 'stop_sequence', 'the very first request: stop_sequence, not end_turn');
  t.equal(m.stop_sequence, stop);
  fresh.proc.kill('SIGKILL');
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
