// The official @anthropic-ai/sdk against a real gateway on /v1/messages, once with the model on
// an OpenAI-compatible fake upstream and once on a fake Anthropic API: create, stream with
// finalMessage, streamed tool use, typed errors, count_tokens; the wallet checked to the unit
// after each (1 unit per input token, 2 per output token).

import t from 'tap';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';

const ADMIN = 'messages-admin-token-0123';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };
const TIGHT_KEY = 'tg_tight_2222222222222222';
const POOR_KEY = 'tg_poor_33333333333333333';
const FIXTURES = new URL('../fixtures/anthropic/', import.meta.url);
const fixture = (name: string) => readFileSync(new URL(name, FIXTURES), 'utf8');
const frames = (name: string) => fixture(name).split(/(?<=\n\n)/).filter((f) => f.trim() !== '');

let oai: FakeUpstream;
let ant: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  oai = await startUpstream((_req, res) => json(res, 200, completionBody('hi')));
  ant = await startUpstream((_req, res) => json(res, 200, JSON.parse(fixture('message.json'))));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans.tight = { paid: false, requests_per_minute: 1 };
  c.accounts.push({ id: 'tight', plan: 'tight', wallet_units: 1000, keys: [TIGHT_KEY] });
  c.accounts.push({ id: 'poor', plan: 'free', wallet_units: 0, keys: [POOR_KEY] });
  c.providers.oai = { kind: 'openai', base_url: oai.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.providers.ant = { kind: 'anthropic', base_url: ant.url, api_key: 'sk-ant-secret', timeout_ms: 3000, circuit_failures: 1000 };
  c.models.push({ id: 'm-oai', provider: 'oai', upstream_model: 'llama-70b', context_window: 32768, max_output_tokens: 1000, price: PRICE });
  c.models.push({ id: 'm-ant', provider: 'ant', upstream_model: 'claude-sonnet-4-5-20250929', context_window: 200000, max_output_tokens: 1000, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await oai.close(); await ant.close(); });

const client = (key = DEMO_KEY) => new Anthropic({ apiKey: key, baseURL: gw.url, maxRetries: 0 });

async function balance(id = 'demo'): Promise<number> {
  const res = await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  const body: any = await res.json();
  t.equal(body.held_units, 0, 'no hold left');
  return body.balance_units;
}

const WEATHER_TOOL = { name: 'get_weather', description: 'Weather now', input_schema: { type: 'object' as const, properties: { location: { type: 'string' } }, required: ['location'] } };

/** OpenAI-compatible frames of a text then a tool call, its arguments split in pieces. */
function oaiToolFrames(): string[] {
  const f = (d: any, finish: string | null = null) => `data: ${JSON.stringify(chunk(d, finish))}\n\n`;
  return [
    f({ role: 'assistant', content: '' }),
    f({ content: 'Let me check.' }),
    f({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
    f({ tool_calls: [{ index: 0, function: { arguments: '{"location":' } }] }),
    f({ tool_calls: [{ index: 0, function: { arguments: ' "Paris"}' } }] }),
    f({}, 'tool_calls'),
    `data: ${JSON.stringify({ ...chunk({}), choices: [], usage: { prompt_tokens: 40, completion_tokens: 11, total_tokens: 51 } })}\n\n`,
    'data: [DONE]\n\n',
  ];
}

t.test('messages.create: OpenAI-compatible upstream, translated both ways', async (t) => {
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there', { usage: { prompt_tokens: 30, completion_tokens: 5, total_tokens: 35 } })));
  const before = await balance();
  const msg = await client().messages.create({
    model: 'm-oai', max_tokens: 100, system: 'Be brief.', stop_sequences: ['END'], temperature: 0.5, top_p: 0.9, top_k: 5,
    metadata: { user_id: 'u-1' }, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
  } as Anthropic.MessageCreateParamsNonStreaming); // this SDK's types leave out the sampling fields the API takes
  t.match(msg.id, /^msg_/);
  t.equal(msg.type, 'message');
  t.equal(msg.model, 'm-oai');
  t.same(msg.content, [{ type: 'text', text: 'Hello there' }]);
  t.equal(msg.stop_reason, 'end_turn');
  t.same(msg.usage, { input_tokens: 30, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
  const sent = oai.requests.at(-1)!.body;
  t.same(sent.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }] }]);
  t.equal(sent.model, 'llama-70b');
  t.equal(sent.max_tokens, 100);
  t.same(sent.stop, ['END']);
  t.equal(sent.temperature, 0.5);
  t.equal(sent.user, 'u-1');
  t.equal(await balance(), before - (30 + 2 * 5), 'charged 40 units');
});

t.test('messages.create: Anthropic upstream (prompt = input + cache reads and writes)', async (t) => {
  ant.setScript((_req, res) => json(res, 200, JSON.parse(fixture('message.json'))));
  const before = await balance();
  const msg = await client().messages.create({ model: 'm-ant', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  t.equal(msg.model, 'm-ant');
  t.equal(msg.content.map((b) => (b.type === 'text' ? b.text : '')).join(''), 'Hello! How can I help?');
  t.equal(msg.stop_reason, 'end_turn');
  t.equal(ant.requests.at(-1)!.body.model, 'claude-sonnet-4-5-20250929');
  t.equal(await balance(), before - (12 + 100 + 2000 + 2 * 9));
});

t.test('messages.stream + finalMessage on both upstream kinds, under split writes', async (t) => {
  oai.setScript((_req, res) => writeSse(res, streamFrames(['Hello', ' world'], { prompt_tokens: 20, completion_tokens: 2, total_tokens: 22 }), { split: 7 }));
  let before = await balance();
  const texts: string[] = [];
  const stream = client().messages.stream({ model: 'm-oai', max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }] });
  stream.on('text', (d) => texts.push(d));
  const final = await stream.finalMessage();
  t.same(texts, ['Hello', ' world']);
  t.same(final.content, [{ type: 'text', text: 'Hello world' }]);
  t.equal(final.model, 'm-oai');
  t.equal(final.stop_reason, 'end_turn');
  t.equal(final.usage.input_tokens, 20);
  t.equal(final.usage.output_tokens, 2);
  t.equal(await balance(), before - (20 + 4));

  ant.setScript((_req, res) => writeSse(res, frames('text.sse'), { split: 5 }));
  before = await balance();
  const final2 = await client().messages.stream({ model: 'm-ant', max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }] }).finalMessage();
  t.equal(final2.model, 'm-ant');
  t.equal(final2.stop_reason, 'end_turn');
  t.equal(ant.requests.at(-1)!.body.stream, true);
  // text.sse: input 5 + cache read 20, output 4.
  t.equal(await balance(), before - (25 + 2 * 4));
});

t.test('streamed tool use: input_json_delta, then the tool result sent back', async (t) => {
  oai.setScript((_req, res) => writeSse(res, oaiToolFrames(), { split: 11 }));
  let before = await balance();
  const partials: string[] = [];
  const stream = client().messages.stream({
    model: 'm-oai', max_tokens: 200, tools: [WEATHER_TOOL], tool_choice: { type: 'any', disable_parallel_tool_use: true },
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  });
  stream.on('inputJson', (p) => partials.push(p));
  const final = await stream.finalMessage();
  t.same(partials, ['{"location":', ' "Paris"}']);
  t.equal(final.stop_reason, 'tool_use');
  t.same(final.content, [
    { type: 'text', text: 'Let me check.' },
    { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { location: 'Paris' } },
  ]);
  const sent = oai.requests.at(-1)!.body;
  t.same(sent.tools, [{ type: 'function', function: { name: 'get_weather', description: 'Weather now', parameters: WEATHER_TOOL.input_schema } }]);
  t.equal(sent.tool_choice, 'required');
  t.equal(sent.parallel_tool_calls, false);
  t.equal(await balance(), before - (40 + 22));

  // The tool result goes back as a chat tool message, after the assistant's tool call.
  oai.setScript((_req, res) => json(res, 200, completionBody('Sunny', { usage: { prompt_tokens: 60, completion_tokens: 1, total_tokens: 61 } })));
  before = await balance();
  const msg = await client().messages.create({
    model: 'm-oai', max_tokens: 100, tools: [WEATHER_TOOL],
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: final.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '18C, sunny' }, { type: 'text', text: 'Thanks' }] },
    ],
  });
  t.same(msg.content, [{ type: 'text', text: 'Sunny' }]);
  t.same(oai.requests.at(-1)!.body.messages, [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18C, sunny' },
    { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
  ]);
  t.equal(await balance(), before - (60 + 2));

  // The Anthropic fake's tool_use stream, rebuilt.
  ant.setScript((_req, res) => writeSse(res, frames('tool_use.sse'), { split: 9 }));
  before = await balance();
  const partials2: string[] = [];
  const s2 = client().messages.stream({ model: 'm-ant', max_tokens: 200, tools: [WEATHER_TOOL], messages: [{ role: 'user', content: 'Weather?' }] });
  s2.on('inputJson', (p) => partials2.push(p));
  const f2 = await s2.finalMessage();
  t.equal(f2.stop_reason, 'tool_use');
  const tool = f2.content.find((b) => b.type === 'tool_use');
  t.match(tool, { type: 'tool_use', id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', input: { location: 'San Francisco, CA' } });
  t.ok(partials2.length > 1, 'arguments arrive in pieces');
  t.same(ant.requests.at(-1)!.body.tools, [{ name: 'get_weather', description: 'Weather now', input_schema: WEATHER_TOOL.input_schema }]);
  t.equal(await balance(), before - (472 + 2 * 89));
});

t.test('errors arrive as the SDK typed errors, with our code and request id', async (t) => {
  const before = await balance();
  const ask = { model: 'm-oai', max_tokens: 10, messages: [{ role: 'user' as const, content: 'Hi' }] };
  const cases: Array<[() => Promise<unknown>, any, number, string, string]> = [
    [() => client('tg_demo_wrong00000000000').messages.create(ask), Anthropic.AuthenticationError, 401, 'authentication_error', 'invalid_api_key'],
    [() => client().messages.create({ ...ask, model: 'nope' }), Anthropic.NotFoundError, 404, 'not_found_error', 'model_not_found'],
    [() => client().messages.create({ ...ask, max_tokens: undefined as any }), Anthropic.BadRequestError, 400, 'invalid_request_error', 'missing_required_parameter'],
    [() => client(POOR_KEY).messages.create(ask), Anthropic.APIError, 402, 'billing_error', 'insufficient_credits'],
    [() => client().messages.create({ ...ask, model: 'echo-vision' }), Anthropic.PermissionDeniedError, 403, 'permission_error', 'model_requires_paid_plan'],
  ];
  for (const [call, cls, status, type, code] of cases) {
    const err: any = await call().then(() => undefined, (e: unknown) => e);
    t.ok(err instanceof cls, `${code}: ${cls.name}`);
    t.equal(err?.status, status, `${code}: status`);
    t.equal(err?.error?.type, 'error');
    t.equal(err?.error?.error?.type, type, `${code}: type`);
    t.equal(err?.error?.error?.code, code);
    t.equal(err?.error?.request_id, err?.requestID ?? err?.headers?.get?.('x-request-id'));
  }
  t.equal(await balance(), before, 'nothing charged');

  oai.setScript((_req, res) => json(res, 200, completionBody('ok', { usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })));
  const tightBefore = await balance('tight');
  await client(TIGHT_KEY).messages.create(ask);
  const err: any = await client(TIGHT_KEY).messages.create(ask).catch((e: unknown) => e);
  t.ok(err instanceof Anthropic.RateLimitError);
  t.equal(err.status, 429);
  t.equal(err.error.error.code, 'rate_limit_exceeded');
  t.ok(Number(err.headers.get('retry-after')) >= 1);
  t.equal(await balance('tight'), tightBefore - 3, 'only the first charged');
});

t.test('count_tokens: a number, never charged', async (t) => {
  const before = await balance();
  const res = await client().messages.countTokens({ model: 'm-oai', messages: [{ role: 'user', content: 'Hello there, how are you?' }] });
  t.ok(Number.isInteger(res.input_tokens) && res.input_tokens > 5, `input_tokens ${res.input_tokens}`);
  const longer = await client().messages.countTokens({ model: 'm-oai', system: 'You are a helpful assistant.', messages: [{ role: 'user', content: 'Hello there, how are you?' }] });
  t.ok(longer.input_tokens > res.input_tokens, 'the system prompt counts');
  t.equal(await balance(), before);
});

t.test('native path to the Anthropic upstream: the body as sent, anthropic-beta passed, answers passed back with the slug', async (t) => {
  ant.setScript((_req, res) => json(res, 200, JSON.parse(fixture('message.json'))));
  let before = await balance();
  const params = {
    model: 'm-ant', max_tokens: 100, system: [{ type: 'text' as const, text: 'Be brief.', cache_control: { type: 'ephemeral' as const } }],
    messages: [{ role: 'user' as const, content: 'Hi' }], metadata: { user_id: 'u-9' },
  };
  const msg = await client().messages.create(params, { headers: { 'anthropic-beta': 'prompt-caching-2024-07-31' } });
  const seen = ant.requests.at(-1)!;
  t.same(seen.body, { ...params, model: 'claude-sonnet-4-5-20250929' }, 'the client body, model rewritten');
  t.equal(seen.headers['anthropic-beta'], 'prompt-caching-2024-07-31');
  t.equal(seen.headers['x-api-key'], 'sk-ant-secret', 'the provider key, not the client key');
  t.equal(msg.id, 'msg_01XFDUDYJgAACzvnptvVoYEL', 'the upstream answer itself');
  t.equal(msg.model, 'm-ant');
  t.same(msg.usage, { input_tokens: 12, cache_creation_input_tokens: 100, cache_read_input_tokens: 2000, output_tokens: 9 });
  t.equal(await balance(), before - (2112 + 18));

  ant.setScript((_req, res) => writeSse(res, frames('text.sse'), { split: 4 }));
  before = await balance();
  const events: string[] = [];
  const stream = client().messages.stream({ model: 'm-ant', max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }] });
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  t.equal(final.id, 'msg_01XFDUDYJgAACzvnptvVoYEL');
  t.equal(final.model, 'm-ant');
  t.equal(final.usage.cache_read_input_tokens, 20, 'cache usage as the upstream sent it');
  // The SDK drops pings before its listeners see them.
  const upstreamTypes = frames('text.sse').map((f) => /^event: (\S+)/.exec(f)![1]).filter((e) => e !== 'ping');
  t.same(events, upstreamTypes, 'every upstream event, in order');
  t.equal(await balance(), before - (25 + 8));

  // An error event mid-stream: one error event in our shape, no message_stop, charged what was sent.
  const first = frames('text.sse').filter((f) => !/message_delta|message_stop/.test(f));
  ant.setScript((_req, res) => writeSse(res, [...first, 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n']));
  before = await balance();
  const raw = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST', headers: { 'x-api-key': DEMO_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm-ant', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
  });
  const text = await raw.text();
  t.equal(raw.status, 200);
  t.notMatch(text, /message_stop/);
  const last = text.trim().split('\n\n').at(-1)!;
  t.match(last, /^event: error\ndata: /);
  const err = JSON.parse(last.split('data: ')[1]!);
  t.equal(err.type, 'error');
  t.equal(err.request_id, raw.headers.get('x-request-id'));
  t.ok(['overloaded_error', 'api_error'].includes(err.error.type), err.error.type);
  t.notMatch(text, /claude-sonnet-4-5-20250929/, 'the upstream model never shows');
  t.ok(before - (await balance()) > 0, 'charged what reached the client');
});

t.test('native path: usage always carries the four counts, 0 (or message_start\'s) where the upstream leaves them out (CONTRACT section 11)', async (t) => {
  const bare = JSON.parse(fixture('message.json'));
  bare.usage = { input_tokens: 12, output_tokens: 9 };
  ant.setScript((_req, res) => json(res, 200, bare));
  let before = await balance();
  const msg = await client().messages.create({ model: 'm-ant', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  t.strictSame(msg.usage, { input_tokens: 12, output_tokens: 9, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }, 'non-streamed');
  t.equal(await balance(), before - (12 + 18), 'charged the upstream usage');

  // A server that sends no cache counts and a message_delta with output_tokens only (llama.cpp,
  // vLLM and older Anthropic releases do).
  const lean = frames('text.sse').map((f) => f
    .replace('"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":20,"output_tokens":1}', '"usage":{"input_tokens":5,"output_tokens":1}'));
  t.match(lean[0], /"usage":\{"input_tokens":5,"output_tokens":1\}/, 'the fixture was rewritten');
  ant.setScript((_req, res) => writeSse(res, lean, { split: 3 }));
  before = await balance();
  const raw = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST', headers: { 'x-api-key': DEMO_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm-ant', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
  });
  const events = (await raw.text()).trim().split('\n\n').map((b) => ({ name: /^event: (\S+)/.exec(b)![1], data: JSON.parse(b.slice(b.indexOf('data: ') + 6)) }));
  const start = events.find((e) => e.name === 'message_start')!.data.message.usage;
  t.strictSame(start, { input_tokens: 5, output_tokens: 1, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }, 'message_start');
  const delta = events.find((e) => e.name === 'message_delta')!.data.usage;
  t.strictSame(delta, { output_tokens: 4, input_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }, 'message_delta: what it leaves out, as message_start said it');
  t.equal(await balance(), before - (5 + 8));

  const final = await client().messages.stream({ model: 'm-ant', max_tokens: 50, messages: [{ role: 'user', content: 'Hi' }] }).finalMessage();
  t.strictSame(final.usage, { input_tokens: 5, output_tokens: 4, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }, 'the SDK\'s final message');
});

t.test('native falls back to an OpenAI-compatible target through the translated path', async (t) => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.ant = { kind: 'anthropic', base_url: ant.url, api_key: 'k', timeout_ms: 3000, circuit_failures: 1000 };
  c.providers.oai = { kind: 'openai', base_url: oai.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.models.push({ id: 'fb', provider: 'ant', upstream_model: 'claude-x', fallbacks: [{ provider: 'oai', upstream_model: 'llama-70b' }], context_window: 32768, max_output_tokens: 1000, price: PRICE });
  const gw2 = await startGateway(c);
  t.teardown(() => gw2.close());
  ant.setScript((_req, res) => json(res, 500, { type: 'error', error: { type: 'api_error', message: 'down' } }));
  oai.setScript((_req, res) => json(res, 200, completionBody('from fallback', { usage: { prompt_tokens: 7, completion_tokens: 2, total_tokens: 9 } })));
  const before: any = await (await fetch(`${gw2.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  const msg = await new Anthropic({ apiKey: DEMO_KEY, baseURL: gw2.url, maxRetries: 0 }).messages.create({ model: 'fb', max_tokens: 20, messages: [{ role: 'user', content: 'Hi' }] });
  t.same(msg.content, [{ type: 'text', text: 'from fallback' }]);
  t.equal(msg.model, 'fb');
  t.same(oai.requests.at(-1)!.body.messages, [{ role: 'user', content: 'Hi' }]);
  const after: any = await (await fetch(`${gw2.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  t.equal(before.balance_units - after.balance_units, 7 + 4);
  t.equal(after.held_units, 0);
});

t.test('count_tokens on an Anthropic model: the upstream own count, the tokenizer when it fails', async (t) => {
  ant.setScript((req, res) => (req.url === '/v1/messages/count_tokens' ? json(res, 200, { input_tokens: 4242 }) : json(res, 500, {})));
  const before = await balance();
  const res = await client().messages.countTokens({ model: 'm-ant', messages: [{ role: 'user', content: 'Hello' }] }, { headers: { 'anthropic-beta': 'b1' } });
  t.equal(res.input_tokens, 4242);
  const seen = ant.requests.at(-1)!;
  t.equal(seen.url, '/v1/messages/count_tokens');
  t.same(seen.body, { model: 'claude-sonnet-4-5-20250929', messages: [{ role: 'user', content: 'Hello' }] });
  t.equal(seen.headers['anthropic-beta'], 'b1');
  ant.setScript((_req, res) => json(res, 500, { type: 'error', error: { type: 'api_error', message: 'down' } }));
  const fallback = await client().messages.countTokens({ model: 'm-ant', messages: [{ role: 'user', content: 'Hello' }] });
  t.ok(fallback.input_tokens > 0 && fallback.input_tokens < 100, `the tokenizer's ${fallback.input_tokens}`);
  t.equal(await balance(), before, 'never charged');
});
