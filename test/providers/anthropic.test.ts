// The `anthropic` provider against a fake Anthropic Messages API speaking the real wire
// protocol (fixtures follow Anthropic's documented answers and event sequences): request
// translation, answers, streams rebuilt chunk for chunk as an OpenAI-compatible upstream
// would send them, and every error path.

import t from 'tap';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { DEMO_KEY, baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const FIXTURES = new URL('../fixtures/anthropic/', import.meta.url);
const fixture = (name: string) => readFileSync(new URL(name, FIXTURES), 'utf8');
const fixtureJson = (name: string) => JSON.parse(fixture(name));
/** An .sse fixture as its events, each ending in its blank line. */
const frames = (name: string) => fixture(name).split(/(?<=\n\n)/).filter((f) => f.trim() !== '');
const event = (type: string, data: Record<string, any>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const errorEvent = (type: string, message: string) => event('error', { error: { type, message } });

const UPSTREAM_MODEL = 'claude-sonnet-4-5-20250929';
const TEXT = frames('text.sse');

let ant: FakeUpstream; // the fake Anthropic API
let oai: FakeUpstream; // a fake OpenAI-compatible server giving the same answers, to compare with
let gw: TestGateway; // model "claude" on the anthropic provider
let gwOai: TestGateway; // model "claude" on the openai provider

function config(provider: Record<string, any>) {
  const c = baseConfig();
  c.providers.up = { timeout_ms: 1500, circuit_failures: 1000, ...provider };
  c.models.push({ id: 'claude', provider: 'up', upstream_model: UPSTREAM_MODEL, context_window: 200000, max_output_tokens: 512, supports_vision: true, max_images: 4 });
  return c;
}
const anthropic = (over: Record<string, any> = {}) => config({ kind: 'anthropic', base_url: ant.url, api_key: 'sk-ant-secret', headers: { 'x-team': 'core' }, ...over });

t.before(async () => {
  ant = await startUpstream((_req, res) => json(res, 200, fixtureJson('message.json')));
  oai = await startUpstream((_req, res) => json(res, 200, completionBody('hi')));
  gw = await startGateway(anthropic());
  gwOai = await startGateway(config({ kind: 'openai', base_url: oai.baseUrl }));
});
t.teardown(async () => { await gw.close(); await gwOai.close(); await ant.close(); await oai.close(); });

const ask = (extra: Record<string, any> = {}) => ({ model: 'claude', messages: [{ role: 'user', content: 'Say hi' }], ...extra });

function expectError(t: any, res: Awaited<ReturnType<typeof postChat>>, status: number, code: string) {
  t.equal(res.status, status, `status ${status}`);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = res.json();
  t.same(schemas.error(body), [], 'envelope validates');
  t.equal(body.code, code);
  t.equal(body.request_id, res.headers['x-request-id']);
  t.notMatch(res.text, new RegExp(`${UPSTREAM_MODEL}|sk-ant-secret`), 'no upstream model name or key');
  return body;
}

/** A stream's events without what differs between any two answers (id, created), as text. */
function comparable(t: any, text: string) {
  const { events, done } = sseData(text);
  for (const e of events) t.same(schemas.chunk(e), [], 'chunk validates');
  return { done, events: events.map(({ id: _id, created: _created, ...rest }) => JSON.stringify(rest)) };
}

t.test('request translation: the exact body sent upstream', async (t) => {
  const png = 'iVBORw0KGgo=';
  const res = await postChat(gw.url, {
    model: 'claude',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'developer', content: [{ type: 'text', text: 'Answer in English.' }, { type: 'text', text: 'Use metric units.' }] },
      { role: 'user', content: [
        { type: 'text', text: 'What is in these pictures, and the weather in Oslo?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg', detail: 'low' } },
      ] },
      { role: 'assistant', content: 'Let me look that up.', tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
        { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{not json' } },
      ] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp":21}' },
      { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '12:00' }] },
      { role: 'user', content: 'Thanks. And tomorrow?' },
      { role: 'assistant', content: 'Sunny.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'get_time', arguments: '' } }] },
      { role: 'tool', tool_call_id: 'call_3', content: '13:00' },
    ],
    tools: [
      { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
      { type: 'function', function: { name: 'get_time' } },
    ],
    tool_choice: 'required', parallel_tool_calls: false, stop: 'END', temperature: 0.2, top_p: 0.9, user: 'user-42',
    seed: 7, response_format: { type: 'text' }, frobnicate: true,
  });
  t.equal(res.status, 200);
  const seen = ant.requests.at(-1)!;
  t.equal(`${seen.method} ${seen.url}`, 'POST /v1/messages');
  t.strictSame(seen.body, {
    model: UPSTREAM_MODEL, max_tokens: 512, system: 'You are terse.\n\nAnswer in English.\nUse metric units.',
    messages: [
      { role: 'user', content: [
        { type: 'text', text: 'What is in these pictures, and the weather in Oslo?' },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
        { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
      ] },
      { role: 'assistant', content: [
        { type: 'text', text: 'Let me look that up.' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Oslo' } },
        { type: 'tool_use', id: 'call_2', name: 'get_time', input: {} },
      ] },
      { role: 'user', content: [
        { type: 'tool_result', tool_use_id: 'call_1', content: '{"temp":21}' },
        { type: 'tool_result', tool_use_id: 'call_2', content: '12:00' },
        { type: 'text', text: 'Thanks. And tomorrow?' },
      ] },
      { role: 'assistant', content: [{ type: 'text', text: 'Sunny.' }, { type: 'tool_use', id: 'call_3', name: 'get_time', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_3', content: '13:00' }] },
    ],
    stop_sequences: ['END'], temperature: 0.2, top_p: 0.9, metadata: { user_id: 'user-42' },
    tools: [
      { name: 'get_weather', description: 'Weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
      { name: 'get_time', input_schema: { type: 'object', properties: {} } },
    ],
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
  }, 'system joined, roles alternate, tools and tool results translated, unknown fields dropped');
});

t.test('request translation: tool_choice, max_tokens, stop and stream', async (t) => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
  const choices: Array<[Record<string, any>, any]> = [
    [{ tool_choice: 'auto' }, { type: 'auto' }],
    [{ tool_choice: 'none' }, { type: 'none' }],
    [{ tool_choice: 'required' }, { type: 'any' }],
    [{ tool_choice: { type: 'function', function: { name: 'get_weather' } } }, { type: 'tool', name: 'get_weather' }],
    [{ tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false }, { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }],
    [{ parallel_tool_calls: false }, { type: 'auto', disable_parallel_tool_use: true }],
    [{ tool_choice: 'none', parallel_tool_calls: false }, { type: 'none' }],
    [{ parallel_tool_calls: true }, undefined],
  ];
  for (const [extra, expected] of choices) {
    await postChat(gw.url, ask({ tools, ...extra }));
    t.strictSame(ant.requests.at(-1)!.body.tool_choice, expected, JSON.stringify(extra));
  }
  await postChat(gw.url, ask({ tool_choice: 'auto' }));
  let body = ant.requests.at(-1)!.body;
  t.notOk('tools' in body || 'tool_choice' in body, 'no tools: neither tools nor tool_choice');

  await postChat(gw.url, ask({ max_tokens: 99, max_completion_tokens: 77, stop: ['a', 'b'] }));
  body = ant.requests.at(-1)!.body;
  t.equal(body.max_tokens, 77, 'max_completion_tokens wins');
  t.strictSame(body.stop_sequences, ['a', 'b']);
  await postChat(gw.url, ask({ max_tokens: 99 }));
  body = ant.requests.at(-1)!.body;
  t.equal(body.max_tokens, 99);
  t.strictSame(Object.keys(body), ['model', 'max_tokens', 'messages'], 'nothing else when nothing else was asked');
  t.strictSame(body.messages, [{ role: 'user', content: 'Say hi' }], 'string content stays a string');

  ant.setScript((_req, res) => writeSse(res, TEXT));
  await postChat(gw.url, ask({ stream: true }));
  t.equal(ant.requests.at(-1)!.body.stream, true);
  t.notOk('stream_options' in ant.requests.at(-1)!.body);
  ant.setScript((_req, res) => json(res, 200, fixtureJson('message.json')));
});

t.test('headers: x-api-key, anthropic-version, config headers; base_url as the host', async (t) => {
  await postChat(gw.url, ask());
  let seen = ant.requests.at(-1)!;
  t.equal(seen.headers['x-api-key'], 'sk-ant-secret');
  t.equal(seen.headers['anthropic-version'], '2023-06-01');
  t.equal(seen.headers['content-type'], 'application/json');
  t.equal(seen.headers['x-team'], 'core');
  t.notOk(seen.headers.authorization, 'no bearer token');

  const g = await startGateway(anthropic({ base_url: `${ant.url}/proxy/anthropic/`, api_key: '', anthropic_version: '2024-10-22' }));
  t.teardown(() => g.close());
  t.equal((await postChat(g.url, ask())).status, 200);
  seen = ant.requests.at(-1)!;
  t.equal(seen.url, '/proxy/anthropic/v1/messages', 'a trailing slash is stripped');
  t.notOk('x-api-key' in seen.headers, 'no x-api-key without a key');
  t.equal(seen.headers['anthropic-version'], '2024-10-22');
});

t.test('non-streaming text answer: identical to an OpenAI-compatible one; usage includes cache tokens', async (t) => {
  ant.setScript((_req, res) => json(res, 200, fixtureJson('message.json'), { 'request-id': 'req_up_1' }));
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello! How can I help?', { usage: { prompt_tokens: 2112, completion_tokens: 9, total_tokens: 2121, prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 100 } } })));
  const a = await postChat(gw.url, ask());
  const o = await postChat(gwOai.url, ask());
  t.equal(a.status, 200);
  const body = a.json();
  t.same(schemas.completion(body), []);
  t.match(body.id, /^chatcmpl-/);
  t.equal(body.model, 'claude');
  t.strictSame(body.choices, [{ index: 0, message: { role: 'assistant', content: 'Hello! How can I help?', refusal: null }, logprobs: null, finish_reason: 'stop' }]);
  t.strictSame(body.usage, { prompt_tokens: 12 + 100 + 2000, completion_tokens: 9, total_tokens: 2121, prompt_tokens_details: { cached_tokens: 2000, cache_write_tokens: 100 } },
    'the cache reads and writes in the prompt, and passed on (CONTRACT section 8)');
  t.equal(a.headers['x-upstream-request-id'], 'req_up_1');
  const strip = ({ id: _id, created: _created, ...rest }: any) => JSON.stringify(rest);
  t.equal(strip(body), strip(o.json()), 'same bytes as the openai provider, id and created aside');
});

t.test('non-streaming tool_use answer', async (t) => {
  ant.setScript((_req, res) => json(res, 200, fixtureJson('tool_use.json')));
  const body = (await postChat(gw.url, ask())).json();
  t.same(schemas.completion(body), []);
  t.strictSame(body.choices[0].message, {
    role: 'assistant', content: "I'll check the weather in Oslo.", refusal: null,
    tool_calls: [{ id: 'toolu_01A09q90qw90lq917835lq9', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Oslo","unit":"celsius"}' } }],
  });
  t.equal(body.choices[0].finish_reason, 'tool_calls');
  t.strictSame(body.usage, { prompt_tokens: 384, completion_tokens: 57, total_tokens: 441 }, 'missing cache tokens count as 0');

  const only = fixtureJson('tool_use.json');
  only.content = only.content.slice(1);
  ant.setScript((_req, res) => json(res, 200, only));
  const msg = (await postChat(gw.url, ask())).json().choices[0].message;
  t.equal(msg.content, null, 'no text blocks: content null');
  t.equal(msg.tool_calls.length, 1);
});

t.test('stop_reason -> finish_reason', async (t) => {
  const table: Array<[string, string, any[]]> = [
    ['end_turn', 'stop', [{ type: 'text', text: 'x' }]],
    ['stop_sequence', 'stop', [{ type: 'text', text: 'x' }]],
    ['max_tokens', 'length', []],
    ['model_context_window_exceeded', 'length', []],
    ['refusal', 'content_filter', []],
    ['pause_turn', 'stop', [{ type: 'text', text: 'x' }]],
    ['some_future_reason', 'stop', [{ type: 'text', text: 'x' }]],
  ];
  for (const [reason, finish, content] of table) {
    ant.setScript((_req, res) => json(res, 200, { ...fixtureJson('message.json'), content, stop_reason: reason }));
    const res = await postChat(gw.url, ask());
    t.equal(res.status, 200, reason);
    t.same(schemas.completion(res.json()), []);
    t.equal(res.json().choices[0].finish_reason, finish, `${reason} -> ${finish}`);
  }
  ant.setScript((_req, res) => writeSse(res, TEXT.map((f) => f.replace('"end_turn"', '"max_tokens"'))));
  const { events } = sseData((await postChat(gw.url, ask({ stream: true }))).text);
  t.equal(events.at(-1).choices[0].finish_reason, 'length', 'streams map it too');

  ant.setScript((_req, res) => json(res, 200, { ...fixtureJson('message.json'), content: [] }));
  expectError(t, await postChat(gw.url, ask()), 502, 'provider_error');
  ant.setScript((_req, res) => json(res, 200, { ...fixtureJson('message.json'), usage: undefined }));
  const counted = (await postChat(gw.url, ask())).json().usage;
  t.ok(counted.prompt_tokens > 0 && counted.completion_tokens > 0, 'no usage: counted with the tokenizer');
});

t.test('streaming text: chunk for chunk what an OpenAI-compatible upstream gives', async (t) => {
  oai.setScript((_req, res) => writeSse(res, streamFrames(['Hel', 'lo', ' wör', 'ld 😀'], { prompt_tokens: 25, completion_tokens: 4, total_tokens: 29, prompt_tokens_details: { cached_tokens: 20, cache_write_tokens: 0 } } as any)));
  for (const opts of [{ split: 1 }, { split: 7, crlf: true }, { split: 64 }]) {
    for (const usage of [false, true]) {
      ant.setScript((_req, res) => writeSse(res, TEXT, opts));
      const req = ask({ stream: true, ...(usage ? { stream_options: { include_usage: true } } : {}) });
      const a = await postChat(gw.url, req);
      const o = await postChat(gwOai.url, req);
      const name = `${JSON.stringify(opts)} include_usage ${usage}`;
      t.equal(a.status, 200, name);
      t.equal(a.headers['content-type'], 'text/event-stream');
      const got = comparable(t, a.text);
      t.ok(got.done, '[DONE]');
      t.strictSame(got, comparable(t, o.text), name);
      const { events } = sseData(a.text);
      t.ok(events.every((e) => e.id === events[0].id));
      t.equal(events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'Hello wörld 😀');
      if (usage) t.strictSame(events.at(-1).usage, { prompt_tokens: 25, completion_tokens: 4, total_tokens: 29, prompt_tokens_details: { cached_tokens: 20, cache_write_tokens: 0 } }, 'cache reads in the prompt, and passed on');
    }
  }
});

const TOOL_FRAMES_OPENAI = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Okay, let me check' }),
  chunk({ content: ' the weather and the time.' }),
  chunk({ tool_calls: [{ index: 0, id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"location":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: ' "San Francisco, CA", "unit": "fah' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'renheit"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'toolu_01NRLabsLyVHZPKxbKvkfSMn', type: 'function', function: { name: 'get_time', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: '{"timezone": "America/Los_Angeles"}' } }] }),
  chunk({}, 'tool_calls'),
  { ...chunk({}), choices: [], usage: { prompt_tokens: 472, completion_tokens: 89, total_tokens: 561 } },
].map((c) => `data: ${JSON.stringify(c)}\n\n`).concat('data: [DONE]\n\n');

t.test('streaming tool_use: input_json_delta becomes tool_calls deltas, tools counted from 0', async (t) => {
  ant.setScript((_req, res) => writeSse(res, frames('tool_use.sse'), { split: 5 }));
  oai.setScript((_req, res) => writeSse(res, TOOL_FRAMES_OPENAI));
  const req = ask({ stream: true, stream_options: { include_usage: true } });
  const a = await postChat(gw.url, req);
  t.equal(a.status, 200);
  const got = comparable(t, a.text);
  t.strictSame(got, comparable(t, (await postChat(gwOai.url, req)).text), 'same chunks as the openai provider');
  const { events } = sseData(a.text);
  const args: string[] = [];
  for (const e of events) for (const c of e.choices[0]?.delta.tool_calls ?? []) args[c.index] = (args[c.index] ?? '') + (c.function?.arguments ?? '');
  t.strictSame(args.map((s) => JSON.parse(s)), [{ location: 'San Francisco, CA', unit: 'fahrenheit' }, { timezone: 'America/Los_Angeles' }]);
  t.equal(events.at(-2).choices[0].finish_reason, 'tool_calls');
  t.ok(events.every((e) => !JSON.stringify(e).includes('ping')), 'ping events leave no trace');
});

t.test('stream errors before the first content: real status and envelope', async (t) => {
  const start = TEXT.slice(0, 3); // message_start, content_block_start, ping
  const cases: Array<[string, string[], number, string, string | undefined]> = [
    ['overloaded_error', [...start, errorEvent('overloaded_error', 'Overloaded')], 503, 'model_unavailable', '1'],
    ['rate_limit_error', [errorEvent('rate_limit_error', 'Too many requests')], 503, 'model_unavailable', '1'],
    ['prompt too long', [...start, errorEvent('invalid_request_error', 'prompt is too long: 210000 tokens > 200000 maximum')], 422, 'context_length_exceeded', undefined],
    ['api_error', [...start, errorEvent('api_error', 'Internal server error')], 502, 'provider_error', undefined],
    ['other invalid_request_error', [...start, errorEvent('invalid_request_error', 'messages: roles must alternate')], 502, 'provider_error', undefined],
    ['ends early', start, 502, 'provider_error', undefined],
    ['not JSON', ['event: message_start\ndata: {"type":"mess\n\n'], 502, 'provider_error', undefined],
  ];
  for (const [name, fr, status, code, retry] of cases) {
    ant.setScript((_req, res) => writeSse(res, fr, { split: 9 }));
    const res = await postChat(gw.url, ask({ stream: true }));
    t.comment(name);
    expectError(t, res, status, code);
    t.equal(res.headers['retry-after'], retry, `${name}: retry-after`);
    if (retry !== undefined) t.equal(res.headers['retry-after-ms'], '1000');
  }
  ant.setScript((_req, res) => json(res, 200, fixtureJson('message.json')));
  expectError(t, await postChat(gw.url, ask({ stream: true })), 502, 'provider_error');
});

t.test('stream errors after content: one envelope event, no [DONE]', async (t) => {
  const partial = TEXT.slice(0, 5); // ... "Hel", "lo"
  const cases: Array<[string, string[], string]> = [
    ['overloaded', [...partial, errorEvent('overloaded_error', 'Overloaded')], 'model_unavailable'],
    ['api_error', [...partial, errorEvent('api_error', 'Internal server error')], 'provider_error'],
    ['ends early', TEXT.slice(0, -1), 'provider_error'],
  ];
  for (const [name, fr, code] of cases) {
    ant.setScript((_req, res) => writeSse(res, fr, { split: 3 }));
    const res = await postChat(gw.url, ask({ stream: true }));
    t.equal(res.status, 200, name);
    const { events, done } = sseData(res.text);
    t.notOk(done, `${name}: no [DONE]`);
    t.equal(events.slice(0, -1).map((e) => e.choices[0].delta.content ?? '').join('').slice(0, 5), 'Hello');
    const last = events.at(-1);
    t.same(schemas.error(last), [], `${name}: envelope event`);
    t.equal(last.code, code);
    t.equal(last.request_id, res.headers['x-request-id']);
  }
});

t.test('HTTP errors map to exact codes, streaming or not', async (t) => {
  const cases: Array<[number, string, Record<string, string>, number, string, string | undefined]> = [
    [529, 'error-overloaded.json', {}, 503, 'model_unavailable', '1'],
    [503, 'error-overloaded.json', { 'retry-after': '120' }, 503, 'model_unavailable', '120'],
    [429, 'error-rate-limit.json', { 'retry-after': '9' }, 503, 'model_unavailable', '9'],
    [400, 'error-prompt-too-long.json', {}, 422, 'context_length_exceeded', undefined],
    [400, 'error-invalid-request.json', {}, 400, 'invalid_value', undefined],
    [401, 'error-invalid-request.json', {}, 502, 'provider_error', undefined],
    [403, 'error-invalid-request.json', {}, 502, 'provider_error', undefined],
    [404, 'error-invalid-request.json', {}, 502, 'provider_error', undefined],
    [500, 'error-invalid-request.json', {}, 502, 'provider_error', undefined],
  ];
  for (const stream of [false, true]) {
    for (const [upStatus, file, headers, status, code, retry] of cases) {
      ant.setScript((_req, res) => json(res, upStatus, fixtureJson(file), headers));
      const res = await postChat(gw.url, ask({ stream }));
      t.comment(`${upStatus} ${file} stream=${stream}`);
      const body = expectError(t, res, status, code);
      t.equal(res.headers['retry-after'], retry);
      if (code === 'context_length_exceeded') t.match(body.message, /210000 tokens > 200000/);
      if (code === 'invalid_value') t.match(body.message, /output tokens for claude$/, 'upstream model name replaced by the slug');
      if (code === 'provider_error') t.notMatch(body.message, /max_tokens/, 'no upstream detail');
    }
  }
  ant.setScript((_req, res) => json(res, 429, fixtureJson('error-rate-limit.json'), { 'retry-after': '9' }));
  t.equal((await postChat(gw.url, ask())).headers['retry-after-ms'], '9000');
  ant.setScript((_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"content": [ {"ty'); });
  expectError(t, await postChat(gw.url, ask()), 502, 'provider_error');
});

t.test('the official OpenAI SDK works unchanged', async (t) => {
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  ant.setScript((_req, res) => json(res, 200, fixtureJson('tool_use.json')));
  const c = await client.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'Weather in Oslo?' }] });
  t.equal(c.choices[0]!.finish_reason, 'tool_calls');
  const call = c.choices[0]!.message.tool_calls![0]!;
  t.ok(call.type === 'function' && JSON.parse(call.function.arguments).location === 'Oslo');

  ant.setScript((_req, res) => writeSse(res, frames('tool_use.sse'), { split: 11 }));
  const stream = await client.chat.completions.create({
    model: 'claude', messages: [{ role: 'user', content: 'Weather and time?' }], stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  const args: string[] = [];
  let usage;
  for await (const ch of stream) {
    text += ch.choices[0]?.delta.content ?? '';
    for (const d of ch.choices[0]?.delta.tool_calls ?? []) args[d.index] = (args[d.index] ?? '') + (d.function?.arguments ?? '');
    if (ch.usage) usage = ch.usage;
  }
  t.equal(text, 'Okay, let me check the weather and the time.');
  t.same(args.map((a) => JSON.parse(a)), [{ location: 'San Francisco, CA', unit: 'fahrenheit' }, { timezone: 'America/Los_Angeles' }]);
  t.same(usage, { prompt_tokens: 472, completion_tokens: 89, total_tokens: 561 });

  ant.setScript((_req, res) => json(res, 529, fixtureJson('error-overloaded.json')));
  const err = await client.chat.completions.create({ model: 'claude', messages: [{ role: 'user', content: 'x' }] }).catch((e) => e);
  t.ok(err instanceof OpenAI.InternalServerError);
  t.equal(err.status, 503);
  t.equal(err.code, 'model_unavailable');
});

// Found by test/property/upstream-json: usage past 2^53 (already imprecise once parsed) was a
// 500 that left the hold open; it is counted instead.
t.test('an inexact usage is not charged: the answer is counted', async (t) => {
  ant.setScript((_req, res) => json(res, 200, '{"type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":0,"output_tokens":9007199254740992}}'));
  const res = await postChat(gw.url, { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(res.status, 200);
  const body = res.json();
  t.same(schemas.completion(body), []);
  t.ok(body.usage.completion_tokens < 10, 'the answer is counted');
});

// Found by test/property/logs: an upstream that echoes the key it was sent had the operator's
// key passed on to the client in the error message.
t.test('the upstream key never reaches the client, even when the upstream echoes it', async (t) => {
  ant.setScript((req, res) => json(res, 400, { type: 'error', error: { type: 'invalid_request_error', message: `invalid x-api-key ${req.headers['x-api-key']}` } }));
  const res = await postChat(gw.url, { model: 'claude', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(res.status, 400);
  t.notMatch(res.text, /sk-ant-secret/);
  t.match(res.json().message, /invalid x-api-key \[redacted\]/);
});
