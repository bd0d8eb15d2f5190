// /v1/messages on the wire: Anthropic's error shape before the first byte (unknown paths,
// methods, validation, upstream failures), one `event: error` and no message_stop after it, and
// a client that leaves mid-stream (upstream aborted, charged once for what was generated).

import t from 'tap';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';

const ADMIN = 'wire-admin-token-0123';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };
let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000, circuit_failures: 1000, stream_usage: false };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'm-7b', context_window: 32768, max_output_tokens: 1000, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

async function balance(): Promise<number> {
  const body: any = await (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  return body.balance_units - body.held_units;
}

async function post(path: string, body: unknown, headers: Record<string, string> = { 'x-api-key': DEMO_KEY, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, method = 'POST') {
  const res = await request(`${gw.url}${path}`, { method: method as any, headers, body: method === 'POST' ? JSON.stringify(body) : undefined });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

function expectError(t: any, res: Awaited<ReturnType<typeof post>>, status: number, type: string, code: string) {
  t.equal(res.status, status, `${code}: status`);
  const body = JSON.parse(res.text);
  t.same(Object.keys(body).sort(), ['error', 'request_id', 'type']);
  t.equal(body.type, 'error');
  t.equal(body.error.type, type);
  t.equal(body.error.code, code);
  t.equal(typeof body.error.message, 'string');
  t.equal(body.request_id, res.headers['x-request-id']);
  return body;
}

/** Named SSE events as [event, data] pairs. */
function events(text: string): Array<[string, any]> {
  return text.split('\n\n').filter((b) => b !== '' && !b.startsWith(':')).map((b) => {
    const m = /^event: (.+)\ndata: (.*)$/s.exec(b);
    if (m === null) throw new Error(`not a named event: ${JSON.stringify(b)}`);
    return [m[1]!, JSON.parse(m[2]!)];
  });
}

const ask = (extra: Record<string, any> = {}) => ({ model: 'm', max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }], ...extra });

t.test('errors before the first byte in Anthropic shape', async (t) => {
  const before = await balance();
  expectError(t, await post('/v1/messages/nope', ask()), 404, 'not_found_error', 'unknown_url');
  const m = await post('/v1/messages', undefined, { 'x-api-key': DEMO_KEY }, 'GET');
  expectError(t, m, 405, 'invalid_request_error', 'method_not_allowed');
  t.equal(m.headers.allow, 'POST');
  expectError(t, await post('/v1/messages', ask(), { 'content-type': 'application/json' }), 401, 'authentication_error', 'invalid_api_key');
  const bearer = await post('/v1/messages', ask({ model: 'nope' }), { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' });
  expectError(t, bearer, 404, 'not_found_error', 'model_not_found');
  expectError(t, await post('/v1/messages', ask(), { 'x-api-key': DEMO_KEY, 'content-type': 'text/plain' }), 415, 'invalid_request_error', 'unsupported_media_type');
  const cases: Array<[Record<string, any>, string, string]> = [
    [{ max_tokens: undefined }, 'missing_required_parameter', 'max_tokens'],
    [{ max_tokens: 0 }, 'invalid_value', 'max_tokens'],
    [{ messages: [{ role: 'system', content: 'x' }] }, 'unsupported_value', 'messages[0].role'],
    [{ messages: [{ role: 'user', content: [{ type: 'video' }] }] }, 'unsupported_value', 'messages[0].content[0].type'],
    [{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '!!' } }] }] }, 'invalid_image_url', 'messages[0].content[0].source'],
    [{ tools: [{ name: 'f' }] }, 'missing_required_parameter', 'tools[0].input_schema'],
    [{ tool_choice: { type: 'sometimes' } }, 'unsupported_value', 'tool_choice.type'],
    [{ temperature: 'hot' }, 'invalid_type', 'temperature'],
    [{ stop_sequences: [1] }, 'invalid_type', 'stop_sequences[0]'],
  ];
  for (const [extra, code, param] of cases) {
    const body = expectError(t, await post('/v1/messages', ask(extra)), 400, 'invalid_request_error', code);
    t.equal(body.error.param, param, `${code}: param ${param}`);
  }
  up.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  expectError(t, await post('/v1/messages', ask()), 502, 'api_error', 'provider_error');
  up.setScript((_req, res) => json(res, 503, { error: { message: 'busy' } }, { 'retry-after': '2' }));
  const busy = await post('/v1/messages', ask({ stream: true }));
  expectError(t, busy, 503, 'overloaded_error', 'model_unavailable');
  t.equal(busy.headers['retry-after'], '2');
  t.equal(await balance(), before, 'nothing charged');
});

t.test('stream: named events under split writes; count_tokens without max_tokens', async (t) => {
  const f = (d: any, finish: string | null = null) => `data: ${JSON.stringify(chunk(d, finish))}\n\n`;
  up.setScript((_req, res) => writeSse(res, [f({ role: 'assistant', content: '' }), f({ content: 'Hel' }), f({ content: 'lo' }), f({}, 'length'), 'data: [DONE]\n\n'], { split: 3 }));
  const before = await balance();
  const res = await post('/v1/messages', ask({ stream: true }));
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /^text\/event-stream/);
  const evs = events(res.text);
  t.same(evs.map((e) => e[0]), ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  t.equal(evs[0]![1].message.model, 'm');
  t.same(evs[2]![1], { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
  t.same(evs[3]![1].delta, { type: 'text_delta', text: 'Hel' });
  t.equal(evs[6]![1].delta.stop_reason, 'max_tokens');
  const usage = evs[6]![1].usage;
  t.equal(await balance(), before - (usage.input_tokens + 2 * usage.output_tokens), 'charged what message_delta reports');

  const count = await post('/v1/messages/count_tokens', { model: 'm', messages: [{ role: 'user', content: 'Hi' }] });
  t.equal(count.status, 200);
  t.same(Object.keys(JSON.parse(count.text)), ['input_tokens']);
  expectError(t, await post('/v1/messages/count_tokens', { model: 'm' }), 400, 'invalid_request_error', 'missing_required_parameter');
});

t.test('an upstream failing after the first byte: one error event, no message_stop, charged what was sent', async (t) => {
  const f = (d: any) => `data: ${JSON.stringify(chunk(d))}\n\n`;
  up.setScript(async (_req, res) => {
    await writeSse(res, [f({ role: 'assistant', content: '' }), f({ content: 'partial answer' })], { end: false });
    await sleep(50);
    res.destroy();
  });
  const before = await balance();
  const res = await post('/v1/messages', ask({ stream: true }));
  t.equal(res.status, 200);
  const evs = events(res.text);
  const last = evs.at(-1)!;
  t.equal(last[0], 'error');
  t.equal(last[1].type, 'error');
  t.equal(last[1].error.type, 'api_error');
  t.equal(last[1].error.code, 'provider_error');
  t.equal(last[1].request_id, res.headers['x-request-id']);
  t.notOk(evs.some((e) => e[0] === 'message_stop'), 'no message_stop');
  t.equal(evs.filter((e) => e[0] === 'error').length, 1);
  const charged = before - (await balance());
  t.ok(charged > 0, `charged ${charged} for the text that reached the client`);
});

t.test('a client that leaves mid-stream: upstream aborted, charged once', async (t) => {
  const f = (d: any) => `data: ${JSON.stringify(chunk(d))}\n\n`;
  let seen: any;
  up.setScript(async (_req, res, _body, s) => {
    seen = s;
    await writeSse(res, [f({ role: 'assistant', content: '' }), f({ content: 'one two three' })], { end: false });
    while (!res.destroyed) { res.write(f({ content: ' more' })); await sleep(20); }
  });
  const before = await balance();
  const ac = new AbortController();
  const res = await request(`${gw.url}/v1/messages`, {
    method: 'POST', headers: { 'x-api-key': DEMO_KEY, 'content-type': 'application/json' }, body: JSON.stringify(ask({ stream: true })), signal: ac.signal,
  });
  t.equal(res.statusCode, 200);
  let got = '';
  for await (const c of res.body) { got += String(c); if (got.includes('text_delta')) break; }
  ac.abort();
  for (let i = 0; i < 100 && (seen?.aborted !== true || (await balance()) === before); i++) await sleep(20);
  t.equal(seen.aborted, true, 'upstream aborted');
  await sleep(100);
  const after = await balance();
  t.ok(after < before, 'charged for what was generated');
  await sleep(200);
  t.equal(await balance(), after, 'charged once');
  t.equal(await gw.gateway.slotsInUse('demo'), 0, 'slot freed');
});
