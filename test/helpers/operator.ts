// The operator's path (CONTRACT section 11), for test/operator/: a YAML file served by
// `node bin/tollgate.js serve --config FILE` as a child process, fake model servers speaking the
// real wire formats (OpenAI-compatible chat, Anthropic Messages), and real clients: the official
// `openai` and `@anthropic-ai/sdk` packages. exercise() sends one plain and one streamed chat
// completion (and a plain and a streamed Messages call where asked) and checks the answers, the wallet to the unit
// through the admin API, and the metrics; drainExit() checks /readyz and a SIGTERM drain.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import YAML from 'yaml';
import { serveChild, type ChildGateway } from './child.js';
import { DEMO_KEY } from './gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from './upstream.js';

export const KEY = DEMO_KEY;
export const ADMIN = 'operator-admin-token';
export const WALLET = 1_000_000;
/** 1 unit per prompt token, 2 per completion token: a debit is prompt + 2 × completion. */
export const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };

/** A fake OpenAI-compatible model server; its answers say `name` (which replica answered). */
export async function fakeOpenAI(name: string): Promise<FakeUpstream> {
  return startUpstream(async (req, res, body) => {
    if (req.method === 'GET' && req.url === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: 'upstream-model', object: 'model' }] });
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return json(res, 404, { error: { message: 'no such route' } });
    if (body.stream === true) return writeSse(res, streamFrames(['Hello', ' from', ` ${name}`], { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 }));
    json(res, 200, completionBody(`Hello from ${name}`, { usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } }));
  });
}

const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

/** A fake Anthropic Messages API (POST /v1/messages), answers and event streams as Anthropic sends them. */
export async function fakeAnthropic(): Promise<FakeUpstream> {
  return startUpstream(async (req, res, body) => {
    if (req.method !== 'POST' || req.url !== '/v1/messages') return json(res, 404, { type: 'error', error: { type: 'not_found_error', message: 'no such route' } });
    const usage = { input_tokens: 15, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 6 };
    const message = { id: 'msg_01Fake', type: 'message', role: 'assistant', model: body.model, stop_sequence: null };
    if (body.stream !== true) {
      return json(res, 200, { ...message, content: [{ type: 'text', text: 'Hello from anthropic' }], stop_reason: 'end_turn', usage });
    }
    await writeSse(res, [
      event('message_start', { message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } }),
      event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      event('ping', {}),
      event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello' } }),
      event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' from anthropic' } }),
      event('content_block_stop', { index: 0 }),
      event('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 6 } }),
      event('message_stop', {}),
    ]);
  });
}

/**
 * A config every operator test starts from: an admin token, the demo account, and a slow echo
 * model (`slow`, for the drain); `extra` adds to or replaces sections.
 */
export function operatorConfig(extra: Record<string, any> = {}): Record<string, any> {
  const { providers = {}, models = [], ...rest } = extra;
  return {
    server: { port: 0, drain_timeout_ms: 10_000, sse_keepalive_ms: 60_000 },
    admin: { token: ADMIN },
    plans: { free: { paid: false, requests_per_minute: 1000 } },
    accounts: [{ id: 'demo', plan: 'free', wallet_units: WALLET, keys: [KEY] }],
    providers: { slow: { kind: 'echo', chunk_delay_ms: 40 }, ...providers },
    models: [{ id: 'slow', provider: 'slow', price: PRICE }, ...models],
    ...rest,
  };
}

/** operatorConfig with `store` and one model, `llama`, served by the fake vLLM at `upstream`. */
export function llamaConfig(upstream: FakeUpstream, store: Record<string, unknown>): Record<string, any> {
  return operatorConfig({
    store,
    providers: { vllm: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [{ id: 'llama', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  });
}

/** An admin API call with the operator token; its status and JSON body (undefined when empty). */
export async function adminCall(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

export interface Served extends ChildGateway { file: string }

/** Writes `config` as YAML in a fresh folder and serves it as a child process (a second call with `file` restarts on it). */
export async function serveFile(t: any, config: Record<string, any> | undefined, file?: string, env: NodeJS.ProcessEnv = {}): Promise<Served> {
  let path = file;
  if (path === undefined) {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-operator-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    path = join(dir, 'tollgate.yaml');
  }
  if (config !== undefined) await writeFile(path, YAML.stringify(config));
  return { ...(await serveChild(t, path, env)), file: path };
}

/** Polls `url` until it answers `status` (within `ms`); the last status seen. */
export async function statusOf(url: string, status: number, ms = 15_000): Promise<number | string> {
  const deadline = Date.now() + ms;
  let seen: number | string = 'none';
  while (Date.now() < deadline) {
    seen = await fetch(url).then((r) => r.status, (e: Error) => e.message);
    if (seen === status) return seen;
    await sleep(50);
  }
  return seen;
}

export interface Wallet { balance_units: number; held_units: number; available_units: number }

export async function wallet(url: string, account = 'demo'): Promise<Wallet> {
  const res = await fetch(`${url}/admin/accounts/${account}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  if (res.status !== 200) throw new Error(`GET /admin/accounts/${account}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<Wallet>;
}

/** The sum of a metric's samples whose labels include `labels`. */
export async function metric(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (m === null || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/** Waits until `read` gives `want` (metrics are written once each answer has closed); the last value. */
async function settles(read: () => Promise<number>, want: number, ms = 5000): Promise<number> {
  const deadline = Date.now() + ms;
  let v = await read();
  while (v !== want && Date.now() < deadline) {
    await sleep(25);
    v = await read();
  }
  return v;
}

export interface Exercise {
  /** The model for the OpenAI SDK's chat completions, and what its answers must say. */
  model: string;
  answer: RegExp;
  /** Also Messages calls (plain and streamed) through @anthropic-ai/sdk, to this model. */
  messages?: { model: string; answer: RegExp };
  /** The credential (a developer key by default; a dashboard JWT works as well). */
  credential?: string;
}

/**
 * One plain and one streamed chat completion through the openai SDK (and a plain and a streamed
 * Messages call through the Anthropic SDK when asked): the answers, each debit (prompt + 2 × completion
 * units, from the usage the client got) on the wallet to the unit, no hold left, and the
 * metrics (requests, units charged) of this process. Returns the units debited.
 */
export async function exercise(t: any, url: string, x: Exercise): Promise<number> {
  t.equal(await statusOf(`${url}/readyz`, 200), 200, '/readyz 200: the store answers, the catalog is populated');
  const credential = x.credential ?? KEY;
  const before = await wallet(url);
  const unitsBefore = await metric(url, 'tollgate_units_charged_total');
  const chatBefore = await metric(url, 'tollgate_requests_total', { route: 'chat', status: '200' });
  const messagesBefore = await metric(url, 'tollgate_requests_total', { route: 'messages', status: '200' });
  const openai = new OpenAI({ apiKey: credential, baseURL: `${url}/v1`, maxRetries: 0 });
  let debited = 0;

  const { data: plain, response } = await openai.chat.completions.create({ model: x.model, messages: [{ role: 'user', content: 'Say hello' }] }).withResponse();
  t.match(plain.choices[0]!.message.content, x.answer, 'openai SDK: the answer');
  t.equal(plain.model, x.model, 'the catalog slug, never the upstream name');
  const plainCost = plain.usage!.prompt_tokens + 2 * plain.usage!.completion_tokens;
  t.equal(response.headers.get('x-tollgate-units-charged'), String(plainCost), 'charged prompt + 2 × completion units');
  debited += plainCost;

  const stream = await openai.chat.completions.create({
    model: x.model, messages: [{ role: 'user', content: 'Say hello slowly' }], stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage: OpenAI.CompletionUsage | null | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  t.match(text, x.answer, 'openai SDK, streamed: the answer');
  t.ok(usage, 'the usage chunk (include_usage)');
  debited += usage!.prompt_tokens + 2 * usage!.completion_tokens;

  if (x.messages !== undefined) {
    const anthropic = new Anthropic({ apiKey: credential, baseURL: url, maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: x.messages.model, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello' }] });
    t.match(msg.content.map((b) => (b.type === 'text' ? b.text : '')).join(''), x.messages.answer, '@anthropic-ai/sdk: the answer');
    t.equal(msg.model, x.messages.model);
    const streamed = await anthropic.messages.stream({ model: x.messages.model, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello slowly' }] }).finalMessage();
    t.match(streamed.content.map((b) => (b.type === 'text' ? b.text : '')).join(''), x.messages.answer, '@anthropic-ai/sdk, streamed: the answer');
    for (const u of [msg.usage, streamed.usage]) {
      debited += u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + 2 * u.output_tokens;
    }
  }

  const after = await wallet(url);
  t.equal(after.balance_units, before.balance_units - debited, `the wallet is debited exactly ${debited} units`);
  t.equal(after.held_units, 0, 'no hold left');
  t.equal(await settles(() => metric(url, 'tollgate_units_charged_total'), unitsBefore + debited), unitsBefore + debited, 'metrics: the units charged');
  t.equal(await settles(() => metric(url, 'tollgate_requests_total', { route: 'chat', status: '200' }), chatBefore + 2), chatBefore + 2, 'metrics: two chat requests, 200');
  if (x.messages !== undefined) {
    t.equal(await settles(() => metric(url, 'tollgate_requests_total', { route: 'messages', status: '200' }), messagesBefore + 2), messagesBefore + 2, 'metrics: two messages requests, 200');
  }
  return debited;
}

/**
 * SIGTERM while a slow stream is open: /readyz stops answering 200, the stream still ends with
 * [DONE], and the process exits 0. Returns the units the stream cost (from its usage chunk).
 */
export async function drainExit(t: any, served: ChildGateway): Promise<number> {
  const { proc, url } = served;
  const exited = new Promise<number | null>((resolve) => {
    if (proc.exitCode !== null) resolve(proc.exitCode);
    else proc.once('exit', (code) => resolve(code));
  });
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'slow', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten' }],
    }),
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  let body = new TextDecoder().decode((await reader.read()).value);
  proc.kill('SIGTERM');
  await sleep(50);
  const ready = await fetch(`${url}/readyz`).then((r) => r.status, () => 'refused');
  t.not(ready, 200, `/readyz while draining: ${ready}`);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    body += new TextDecoder().decode(value);
  }
  t.match(body, /data: \[DONE\]\n\n$/, 'the open stream finished during the drain');
  t.equal(await exited, 0, 'SIGTERM: exit 0');
  t.notMatch(served.output(), /^\s+at /m, 'no stack trace');
  const usage = body.split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6))).find((c) => c.usage)?.usage;
  t.ok(usage, 'the drained stream carried its usage');
  return usage === undefined ? 0 : usage.prompt_tokens + 2 * usage.completion_tokens;
}
