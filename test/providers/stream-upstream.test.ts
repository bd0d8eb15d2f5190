// providers.NAME.stream_upstream (CONTRACT section 11): llama.cpp cancels a generation when its
// client leaves only for streamed requests, so for such a server (auto: known from its /props,
// asked as the provider starts, or its first answer's `timings`) a non-streaming client's
// request goes streamed upstream and is assembled here; a client that leaves then stops the
// server's work. And a
// matched stop string is reported from what the server says: llama.cpp names it only in its
// `__verbose` member, asked for with stop sequences. The fake speaks llama.cpp's wire as its
// server writes it: `timings` on whole answers and on the last chunk, the final batch's
// __verbose on its first chunk, the usage chunk with empty choices.

import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { request } from 'undici';
import { DEMO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { serveChild } from '../helpers/child.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'stream-upstream-admin';
const PROPS = { default_generation_settings: { n_ctx: 4096, params: {} }, total_slots: 1, model_path: '/m/tiny.gguf', build_info: 'b7000' };

/** llama.cpp's final batch: a last piece of text carrying __verbose, the finish, the usage. */
const TIMINGS = { prompt_n: 9, prompt_ms: 1.2, predicted_n: 3, predicted_ms: 4.5 };

function llamaFrames(words: string[], opts: { stoppingWord?: string; verbose?: boolean; llama?: boolean } = {}): string[] {
  const usage = { prompt_tokens: 9, completion_tokens: words.length, total_tokens: 9 + words.length };
  const last = words.at(-1)!;
  const lastChunk: any = chunk({ content: last });
  if (opts.verbose) lastChunk.__verbose = { content: words.join(''), stop: true, stop_type: opts.stoppingWord ? 'word' : 'eos', stopping_word: opts.stoppingWord ?? '' };
  return [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: null }))}\n\n`,
    ...words.slice(0, -1).map((w) => `data: ${JSON.stringify(chunk({ content: w }))}\n\n`),
    `data: ${JSON.stringify(lastChunk)}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    `data: ${JSON.stringify({ ...chunk({}), choices: [], usage, ...(opts.llama === false ? {} : { timings: TIMINGS }) })}\n\n`,
    'data: [DONE]\n\n',
  ];
}

/** A llama.cpp-like server (`llama` false: another OpenAI-compatible server): chat completions streamed or whole. */
async function llamaServer(llama = true): Promise<FakeUpstream> {
  return startUpstream(async (req, res, body) => {
    if (req.url === '/props') return llama ? json(res, 200, PROPS) : json(res, 404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
    if (body.stream === true) {
      await writeSse(res, llamaFrames(['1', ' 2', ' 3'], { stoppingWord: body.stop?.[0], verbose: body.verbose === true, llama }), { split: 7 });
      return;
    }
    const answer: any = {
      id: 'chatcmpl-x', object: 'chat.completion', created: 1, model: 'tiny.gguf',
      choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: '1 2 3' } }],
      usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 },
    };
    if (body.verbose === true) answer.__verbose = { stopping_word: body.stop?.[0] ?? '' };
    if (llama) answer.timings = TIMINGS;
    json(res, 200, answer);
  }, { props: true });
}

async function gatewayOn(t: any, up: FakeUpstream, streamUpstream?: string) {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.llama = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000, ...(streamUpstream ? { stream_upstream: streamUpstream } : {}) };
  c.models.push({ id: 'tiny', provider: 'llama', context_window: 4096, max_output_tokens: 256, price: { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 } });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  return gw;
}

async function balance(url: string): Promise<number> {
  const res = await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).balance_units;
}

/** A first request, answered whole: what the gateway learns the server is from. */
async function probed(up: FakeUpstream, gw?: { url: string }): Promise<void> {
  if (gw === undefined) return;
  const res = await request(`${gw.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'hello' }] }),
  });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`the first request failed: ${res.statusCode}`);
}

t.test('auto: a llama.cpp server gets non-streaming requests streamed, assembled into the same answer', async (t) => {
  const up = await llamaServer();
  const gw = await gatewayOn(t, up);
  await probed(up, gw);
  const before = await balance(gw.url);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] });
  const calls = up.requests.filter((r) => r.url === '/v1/chat/completions');
  t.equal(calls[0]!.body.stream, true, 'the first call too: /props asked as the provider started');
  const sent = calls.at(-1)!;
  t.equal(sent.body.stream, true, 'streamed');
  t.same(sent.body.stream_options, { include_usage: true });
  t.equal(answer.choices[0]!.message.content, '1 2 3');
  t.equal(answer.choices[0]!.finish_reason, 'stop');
  t.same(answer.usage, { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 });
  t.same(schemas.completion(answer), [], 'a chat.completion as the schema has it');
  t.equal(await balance(gw.url), before - (9 + 6), 'charged the server\'s usage');
});

t.test('auto: a server that is not llama.cpp (no timings) is called as the client asked', async (t) => {
  const up = await llamaServer(false);
  const gw = await gatewayOn(t, up);
  await probed(up, gw);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] });
  t.equal(answer.choices[0]!.message.content, '1 2 3');
  const sent = up.requests.filter((r) => r.url === '/v1/chat/completions').at(-1)!;
  t.equal(sent.body.stream, undefined, 'not streamed');
  t.equal(sent.body.verbose, undefined, 'never asked to be verbose: another server may refuse the field');
});

t.test('auto with discovery: /props tells before the first request', async (t) => {
  const up = await llamaServer();
  const inner = up;
  const models = await startUpstream(async (req, res, body) => {
    if (req.url === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: 'tiny', object: 'model' }] });
    return forward(inner, req.url!, body, res);
  }, { props: true });
  const c = baseConfig();
  c.providers.llama = { kind: 'openai', base_url: models.baseUrl, discover_models: true };
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await models.close(); await up.close(); });
  // Discovery lists the model (the provider asked /props as it started).
  for (let i = 0; i < 500; i++) {
    const listed = await fetch(`${gw.url}/v1/models/tiny`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
    if (listed.status === 200) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  t.ok(models.requests.some((r) => r.url === '/props'), '/props asked');
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] });
  t.equal(answer.choices[0]!.message.content, '1 2 3');
  t.equal(models.requests.filter((r) => r.url === '/v1/chat/completions')[0]!.body.stream, true, 'the very first call streamed');
});

/** Passes one request to another fake and its answer back (a front that adds /v1/models). */
async function forward(to: FakeUpstream, path: string, body: unknown, res: import('node:http').ServerResponse): Promise<void> {
  const r = await request(`${to.url}${path}`, { method: body === '' ? 'GET' : 'POST', headers: { 'content-type': 'application/json' }, body: body === '' ? undefined : JSON.stringify(body) });
  res.writeHead(r.statusCode, { 'content-type': String(r.headers['content-type']) });
  for await (const c of r.body) res.write(c);
  res.end();
}

t.test('always and never override what the probe says', async (t) => {
  for (const [mode, props, streamed] of [['always', false, true], ['never', true, undefined]] as const) {
    const up = await llamaServer(props);
    const gw = await gatewayOn(t, up, mode);
    await probed(up, gw);
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] }),
    });
    t.equal(res.statusCode, 200);
    t.equal(((await res.body.json()) as any).choices[0].message.content, '1 2 3');
    t.equal(up.requests.filter((r) => r.url === '/v1/chat/completions').at(-1)!.body.stream, streamed, `${mode}: streamed ${streamed}`);
  }
});

t.test('a non-streaming client that leaves stops the server\'s work, and is charged nothing', async (t) => {
  let started = 0;
  const up = await startUpstream(async (req, res, body) => {
    if (req.url === '/props') return json(res, 200, PROPS);
    if (body.stream !== true) {
      return json(res, 200, { ...completionBody('hi'), timings: TIMINGS });
    }
    started++;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'slow' }))}\n\n`);
    // A generation that would run long: the gateway must close it when its client leaves.
    await new Promise((r) => setTimeout(r, 10_000));
    res.end();
  }, { props: true });
  const gw = await gatewayOn(t, up);
  // The very first request: /props was asked as the provider started.
  const before = await balance(gw.url);
  const ac = new AbortController();
  const pending = fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'count slowly' }] }),
  }).catch((e) => e);
  for (let i = 0; i < 200 && started === 0; i++) await new Promise((r) => setTimeout(r, 10));
  const leftAt = Date.now();
  ac.abort();
  await pending;
  const call = up.requests.filter((r) => r.url === '/v1/chat/completions').at(-1)!;
  for (let i = 0; i < 200 && !call.aborted; i++) await new Promise((r) => setTimeout(r, 10));
  t.ok(call.aborted, 'the upstream call was closed');
  t.ok(call.abortedAt! - leftAt < 1000, `within ${call.abortedAt! - leftAt} ms of the client leaving`);
  for (let i = 0; i < 50 && (await gw.gateway.slotsInUse('demo')) > 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(await balance(gw.url), before, 'nothing charged');
});

t.test('llama.cpp\'s stop string: asked for with verbose, reported in chat (stop_reason) and Messages (stop_sequence)', async (t) => {
  const up = await llamaServer();
  const gw = await gatewayOn(t, up);
  await probed(up, gw);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const whole: any = await client.chat.completions.create({ model: 'tiny', stop: ['END'], messages: [{ role: 'user', content: 'count' }] });
  t.equal(up.requests.at(-1)!.body.verbose, true, 'verbose asked, as stop sequences were sent');
  t.equal(whole.choices[0].stop_reason, 'END', 'chat: the stop string as vLLM reports it');
  t.same(schemas.completion(whole), []);

  const stream = await client.chat.completions.create({ model: 'tiny', stop: ['END'], stream: true, messages: [{ role: 'user', content: 'count' }] });
  const finals: any[] = [];
  for await (const c of stream) if (c.choices[0]?.finish_reason) finals.push(c.choices[0]);
  t.equal(finals.length, 1);
  t.equal(finals[0].stop_reason, 'END', 'streamed: on the finish chunk, though llama.cpp said it a chunk earlier');
  t.notOk('stop_sequence' in finals[0], 'the internal field never shows');

  const anthropic = new Anthropic({ apiKey: DEMO_KEY, baseURL: gw.url, maxRetries: 0 });
  const msg = await anthropic.messages.create({ model: 'tiny', max_tokens: 50, stop_sequences: ['END'], messages: [{ role: 'user', content: 'count' }] });
  t.equal(msg.stop_reason, 'stop_sequence');
  t.equal(msg.stop_sequence, 'END');
  const streamed = await anthropic.messages.stream({ model: 'tiny', max_tokens: 50, stop_sequences: ['END'], messages: [{ role: 'user', content: 'count' }] }).finalMessage();
  t.equal(streamed.stop_reason, 'stop_sequence');
  t.equal(streamed.stop_sequence, 'END');

  // Without stop sequences nothing is asked: the verbose member costs the server a copy of the answer.
  await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] });
  t.equal(up.requests.at(-1)!.body.verbose, undefined);
});

t.test('tollgate serve: stream_upstream from a YAML file; check refuses a bad value', async (t) => {
  const up = await llamaServer(false);
  t.teardown(() => up.close());
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-stream-upstream-'));
  const file = join(dir, 'tollgate.yaml');
  writeFileSync(file, `server: { port: 0 }
accounts: [{ id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}] }]
providers:
  llama: { kind: openai, base_url: "${up.baseUrl}", stream_upstream: always }
models: [{ id: tiny, provider: llama, context_window: 4096, max_output_tokens: 64 }]
`);
  const gw = await serveChild(t, file);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'count' }] });
  t.equal(answer.choices[0]!.message.content, '1 2 3');
  t.equal(up.requests.filter((r) => r.url === '/v1/chat/completions').at(-1)!.body.stream, true);
  gw.proc.kill('SIGTERM');

  const bad = join(dir, 'bad.yaml');
  writeFileSync(bad, 'providers:\n  llama: { kind: openai, base_url: "http://127.0.0.1:9/v1", stream_upstream: sometimes }\n');
  const { spawnSync } = await import('node:child_process');
  const { BIN } = await import('../helpers/child.js');
  const checked = spawnSync(process.execPath, [BIN, 'check', '--config', bad], { encoding: 'utf8' });
  t.equal(checked.status, 1);
  t.match(checked.stderr, /providers\.llama\.stream_upstream: must be auto, always or never/);
});
