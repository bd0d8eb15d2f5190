// A rig for reaching every error of the spec's section 7 through one dialect: a real gateway
// in front of a fake upstream of either kind (OpenAI-compatible or Anthropic) that misbehaves
// on cue (a marker word in the prompt), with accounts set up for each refusal (empty wallet,
// used-up quota, one request a minute, one at a time), dashboard JWTs, a content policy and a
// small body limit. Each dialect's test file supplies its wire format and error shape and runs
// the same table, so every route is held to the same list.

import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { baseConfig, startGateway, type TestGateway } from './gateway.js';
import { chunk, json, startUpstream, writeSse, type FakeUpstream } from './upstream.js';

export const ADMIN = 'error-rig-admin-token-0123';
export const SECRET = 'an-error-rig-dashboard-secret-0123456789';
const jwtKey = new TextEncoder().encode(SECRET);
/** Output at 1 unit a token, input free: a charge for a cut stream is its delivered tokens. */
export const PRICE = { input_per_mtok: 0, output_per_mtok: 1_000_000 };
export const KEYS = {
  demo: 'tg_demo_0000000000000000',
  poor: 'tg_poor_0000000000000000',
  quota: 'tg_quota_000000000000000',
  rpm: 'tg_rpm_00000000000000000',
  conc: 'tg_conc_0000000000000000',
} as const;
export type AccountId = keyof typeof KEYS;
/** The text every misbehaving stream delivers before it fails. */
export const PARTIAL = 'one two three';
export const PARTIAL_TOKENS = countTokens(PARTIAL);
/** A 1x1 PNG. */
export const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

export type Kind = 'openai' | 'anthropic';

export interface Rig {
  kind: Kind;
  gw: TestGateway;
  up: FakeUpstream;
  close(): Promise<void>;
}

/** What the fake upstream does, by the marker word the prompt carries. */
const MARKERS = ['FAIL500', 'BUSY503', 'SLOW', 'CTXERR', 'HOLD', 'MIDCUT', 'MIDSTALL', 'MIDBUSY', 'MIDCTX'] as const;
type Marker = typeof MARKERS[number];

function markerOf(body: unknown): Marker | undefined {
  const text = JSON.stringify(body);
  return MARKERS.find((m) => text.includes(m));
}

const untilClosed = (res: ServerResponse) => new Promise<void>((r) => { if (res.destroyed) r(); else res.once('close', () => r()); });

const antEvent = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
const antStart = () => [
  antEvent('message_start', { type: 'message_start', message: { id: 'msg_up', type: 'message', role: 'assistant', model: 'claude-up', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, output_tokens: 1 } } }),
  antEvent('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
  antEvent('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: PARTIAL } }),
];
const antWhole = () => [
  ...antStart(),
  antEvent('content_block_stop', { type: 'content_block_stop', index: 0 }),
  antEvent('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } }),
  antEvent('message_stop', { type: 'message_stop' }),
];
const oaiStart = () => [`data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\n`, `data: ${JSON.stringify(chunk({ content: PARTIAL }))}\n\n`];
const oaiWhole = () => [
  ...oaiStart(),
  `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
  `data: ${JSON.stringify({ ...chunk({}), choices: [], usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 } })}\n\n`,
  'data: [DONE]\n\n',
];

async function openaiScript(res: ServerResponse, url: string, body: any): Promise<void> {
  const marker = markerOf(body);
  switch (marker) {
    case 'FAIL500': return json(res, 500, { error: { message: 'boom', type: 'server_error' } });
    case 'BUSY503': return json(res, 503, { error: { message: 'busy' } }, { 'retry-after': '2' });
    case 'CTXERR': return json(res, 400, { error: { message: "This model's maximum context length is 10 tokens.", code: 'context_length_exceeded' } });
    case 'SLOW': case 'HOLD': return untilClosed(res);
    case 'MIDCUT': await writeSse(res, oaiStart(), { end: false }); await sleep(30); res.destroy(); return;
    case 'MIDSTALL': await writeSse(res, oaiStart(), { end: false }); return untilClosed(res);
    case 'MIDBUSY': return writeSse(res, [...oaiStart(), `data: ${JSON.stringify({ error: { message: 'overloaded', code: 503 } })}\n\n`]);
    case 'MIDCTX': return writeSse(res, [...oaiStart(), `data: ${JSON.stringify({ error: { message: "This model's maximum context length is 10 tokens." } })}\n\n`]);
    default:
      if (url.endsWith('/embeddings')) {
        const n = Array.isArray(body.input) ? body.input.length : 1;
        return json(res, 200, { object: 'list', model: 'e-up', data: Array.from({ length: n }, (_x, index) => ({ object: 'embedding', index, embedding: [0.5, 0.25] })), usage: { prompt_tokens: 3, total_tokens: 3 } });
      }
      if (body.stream === true) return writeSse(res, oaiWhole());
      return json(res, 200, {
        id: 'c1', object: 'chat.completion', created: 1, model: 'm-up',
        choices: [{ index: 0, message: { role: 'assistant', content: PARTIAL }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 },
      });
  }
}

async function anthropicScript(res: ServerResponse, body: any): Promise<void> {
  const marker = markerOf(body);
  switch (marker) {
    case 'FAIL500': return json(res, 500, { type: 'error', error: { type: 'api_error', message: 'boom' } });
    case 'BUSY503': return json(res, 529, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }, { 'retry-after': '2' });
    case 'CTXERR': return json(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 300000 tokens > 200000 maximum' } });
    case 'SLOW': case 'HOLD': return untilClosed(res);
    case 'MIDCUT': await writeSse(res, antStart(), { end: false }); await sleep(30); res.destroy(); return;
    case 'MIDSTALL': await writeSse(res, antStart(), { end: false }); return untilClosed(res);
    case 'MIDBUSY': return writeSse(res, [...antStart(), antEvent('error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })]);
    case 'MIDCTX': return writeSse(res, [...antStart(), antEvent('error', { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 300000 tokens > 200000 maximum' } })]);
    default:
      if (body.stream === true) return writeSse(res, antWhole());
      return json(res, 200, {
        id: 'msg_up', type: 'message', role: 'assistant', model: 'claude-up', content: [{ type: 'text', text: PARTIAL }],
        stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 9, output_tokens: 3 },
      });
  }
}

export async function startRig(kind: Kind, extra: (c: Record<string, any>) => void = () => {}): Promise<Rig> {
  const up = await startUpstream((req, res, body) => (kind === 'openai' ? openaiScript(res, req.url ?? '', body) : anthropicScript(res, body)));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.auth = { jwt: { secret: SECRET } };
  c.server.max_body_bytes = 65536;
  c.content_policy = { block: ['forbidden-word'] };
  c.plans.quota = { paid: false, quotas: { requests_per_day: 0 } };
  c.plans.rpm = { paid: false, requests_per_minute: 1 };
  c.plans.conc = { paid: false, max_concurrent: 1 };
  c.accounts = [
    { id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEYS.demo] },
    { id: 'poor', plan: 'free', wallet_units: 0, keys: [KEYS.poor] },
    { id: 'quota', plan: 'quota', wallet_units: 1_000_000, keys: [KEYS.quota] },
    { id: 'rpm', plan: 'rpm', wallet_units: 1_000_000, keys: [KEYS.rpm] },
    { id: 'conc', plan: 'conc', wallet_units: 1_000_000, keys: [KEYS.conc] },
  ];
  c.providers = { up: kind === 'openai'
    ? { kind: 'openai', base_url: up.baseUrl, timeout_ms: 1000, circuit_failures: 1000 }
    : { kind: 'anthropic', base_url: up.url, api_key: 'sk-ant-rig-secret', timeout_ms: 1000, circuit_failures: 1000 } };
  const model = { provider: 'up', upstream_model: 'm-up', context_window: 4096, max_output_tokens: 100, price: PRICE };
  c.models = [
    { id: 'm', ...model },
    { id: 'mv', ...model, supports_vision: true, max_images: 1 },
    { id: 'paid', ...model, paid_only: true },
    { id: 'tiny', ...model, context_window: 64, max_output_tokens: 16 },
  ];
  if (kind === 'openai') {
    // Embeddings are charged their input only.
    const embed = { ...model, type: 'embedding', price: { input_per_mtok: 1_000_000, output_per_mtok: 0 } };
    c.models.push({ id: 'e', ...embed }, { id: 'epaid', ...embed, paid_only: true }, { id: 'etiny', ...embed, context_window: 64, max_output_tokens: 16 });
  }
  c.routing = { auto: ['m'] };
  extra(c);
  const gw = await startGateway(c);
  return { kind, gw, up, close: async () => { await gw.close(); await up.close(); } };
}

export interface AccountState { balance_units: number; held_units: number; usage: { day: { requests: number } } }

export async function account(rig: Rig, id: AccountId): Promise<AccountState> {
  return (await fetch(`${rig.gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<AccountState>;
}

/** The account once nothing is held (a settle or release may land just after the answer). */
export async function settledAccount(rig: Rig, id: AccountId): Promise<AccountState> {
  let a = await account(rig, id);
  for (let i = 0; i < 200 && a.held_units > 0; i++) { await sleep(10); a = await account(rig, id); }
  return a;
}

export async function jwt(claims: Record<string, unknown>, expSeconds = 600): Promise<string> {
  return new SignJWT({ type: 'access', sub: 'demo', ...claims }).setProtectedHeader({ alg: 'HS256' }).setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + expSeconds).sign(jwtKey);
}

/** A port nothing listens on. */
export async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Named SSE events as [name, data]. */
export function namedEvents(text: string): Array<[string, any]> {
  return text.split('\n\n').filter((b) => b !== '' && !b.startsWith(':')).map((b) => {
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(b);
    if (m === null) throw new Error(`not a named event: ${JSON.stringify(b.slice(0, 200))}`);
    return [m[1]!, JSON.parse(m[2]!)];
  });
}
