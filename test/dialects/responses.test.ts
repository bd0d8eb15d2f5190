// POST /v1/responses through the official openai SDK against a real gateway, on an
// OpenAI-compatible fake upstream and on an Anthropic fake upstream: answers and every stream
// event validate against OpenAI's published schemas, the wallet drops by exactly the cost of
// the reported usage, errors before the first byte are the envelope and after it one
// response.failed event, and a client that leaves mid-stream is charged once.

import t from 'tap';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { cost } from '../../lib/billing/meter.js';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'responses-admin-token';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 }; // 1 unit per input token, 2 per output token
const FIXTURES = new URL('../fixtures/anthropic/', import.meta.url);
const fixture = (name: string) => readFileSync(new URL(name, FIXTURES), 'utf8');
const frames = (name: string) => fixture(name).split(/(?<=\n\n)/).filter((f) => f.trim() !== '');

let oai: FakeUpstream;
let ant: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  oai = await startUpstream((_req, res) => json(res, 200, completionBody('Hello there')));
  ant = await startUpstream((_req, res) => json(res, 200, JSON.parse(fixture('message.json'))));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.oai = { kind: 'openai', base_url: oai.baseUrl, timeout_ms: 2000, circuit_failures: 1000 };
  c.providers.ant = { kind: 'anthropic', base_url: ant.url, api_key: 'sk-ant-secret', timeout_ms: 2000, circuit_failures: 1000 };
  c.models.push({ id: 'gpt', provider: 'oai', upstream_model: 'internal/model-7b', max_output_tokens: 500, price: PRICE });
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'claude-sonnet-4-5-20250929', max_output_tokens: 500, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await oai.close(); await ant.close(); });

const client = () => new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });

async function account(id = 'demo'): Promise<any> {
  return (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

/** The balance after the debit of the request just made (records land after the answer). */
async function settledBalance(requests: number): Promise<any> {
  let a = await account();
  for (let i = 0; i < 100 && (a.usage.day.requests < requests || a.held_units > 0); i++) { await sleep(10); a = await account(); }
  return a;
}

/** A named-event SSE body as its events, checking that each `event:` matches its data's type. */
function events(t: any, text: string): any[] {
  const out: any[] = [];
  for (const block of text.split('\n\n')) {
    if (block === '' || block.startsWith(':')) continue;
    const m = /^event: (\S+)\ndata: (.*)$/s.exec(block);
    if (m === null) throw new Error(`unexpected SSE block: ${JSON.stringify(block)}`);
    const data = JSON.parse(m[2]!);
    t.equal(data.type, m[1], `event name = data type (${m[1]})`);
    out.push(data);
  }
  return out;
}

function checkUsage(t: any, usage: any, input: number, output: number) {
  t.same(usage, {
    input_tokens: input, input_tokens_details: { cached_tokens: 0 }, output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + output,
  });
}

t.test('responses.create on an OpenAI-compatible upstream: the answer, the upstream request, the wallet', async (t) => {
  const before = await account();
  const r = await client().responses.create({
    model: 'gpt', instructions: 'Be brief.', input: 'Say hi', max_output_tokens: 100, temperature: 0.5, metadata: { run: 'a' },
  });
  t.same(schemas.response(r), [], 'validates against Response.json');
  t.match(r.id, /^resp_[0-9a-f]{48}$/);
  t.equal(r.object, 'response');
  t.equal(r.status, 'completed');
  t.equal(r.model, 'gpt');
  t.equal(r.output_text, 'Hello there');
  t.equal(r.output.length, 1);
  t.match(r.output[0], { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Hello there', annotations: [] }] });
  t.same(r.metadata, { run: 'a' });
  t.equal(r.incomplete_details, null);
  checkUsage(t, r.usage, 12, 7);
  const sent = oai.requests.at(-1)!.body;
  t.equal(sent.model, 'internal/model-7b');
  t.same(sent.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hi' }]);
  t.equal(sent.temperature, 0.5);
  const after = await settledBalance(before.usage.day.requests + 1);
  t.equal(before.balance_units - after.balance_units, Number(cost(12, 7, PRICE)), 'charged exactly the reported usage');
  t.equal(after.held_units, 0);
});

t.test('responses.stream on an OpenAI-compatible upstream: events, final response, wallet', async (t) => {
  oai.setScript((_req, res) => writeSse(res, streamFrames(['Hel', 'lo', ' you'], { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 }), { split: 7 }));
  const before = await account();
  const raw = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt', input: 'Say hello', stream: true }),
  });
  t.equal(raw.status, 200);
  t.match(raw.headers.get('content-type'), /^text\/event-stream/);
  const evs = events(t, await raw.text());
  for (const e of evs) t.same(schemas.responseEvent(e), [], `${e.type} validates`);
  t.same(evs.map((e) => e.sequence_number), evs.map((_e, i) => i), 'sequence numbers rise from 0');
  t.same(evs.map((e) => e.type), [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_text.delta', 'response.output_text.delta', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
  ]);
  const done = evs.at(-1).response;
  t.same(schemas.response(done), []);
  t.equal(done.output[0].content[0].text, 'Hello you');
  checkUsage(t, done.usage, 9, 3);
  const mid = await settledBalance(before.usage.day.requests + 1);
  t.equal(before.balance_units - mid.balance_units, Number(cost(9, 3, PRICE)));

  const stream = client().responses.stream({ model: 'gpt', input: 'Say hello' });
  const deltas: string[] = [];
  stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
  const final = await stream.finalResponse();
  t.same(deltas, ['Hel', 'lo', ' you']);
  t.equal(final.output_text, 'Hello you');
  t.equal(final.status, 'completed');
  const after = await settledBalance(before.usage.day.requests + 2);
  t.equal(mid.balance_units - after.balance_units, Number(cost(9, 3, PRICE)), 'the SDK stream is charged exactly once');
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there')));
});

t.test('function calls: tools out, function_call items back, and the call output continues', async (t) => {
  oai.setScript((_req, res) => json(res, 200, completionBody(null, {
    choices: [{ index: 0, finish_reason: 'tool_calls', logprobs: null, message: { role: 'assistant', content: null, tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
    ] } }],
  })));
  const tools = [{ type: 'function' as const, name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
  const r = await client().responses.create({ model: 'gpt', input: 'Weather in Oslo?', tools, tool_choice: 'auto', parallel_tool_calls: false });
  t.same(schemas.response(r), []);
  t.match(r.output, [{ type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' }]);
  t.match(r.output[0]!.id, /^fc_/);
  const sent = oai.requests.at(-1)!.body;
  t.same(sent.tools, [{ type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: tools[0]!.parameters, strict: false } }]);
  t.equal(sent.tool_choice, 'auto');
  t.equal(sent.parallel_tool_calls, false);

  oai.setScript((_req, res) => json(res, 200, completionBody('It is sunny.')));
  const r2 = await client().responses.create({
    model: 'gpt', tools,
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Weather in Oslo?' }] },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"sky":"clear"}' },
    ],
  });
  t.equal(r2.output_text, 'It is sunny.');
  t.same(oai.requests.at(-1)!.body.messages, [
    { role: 'user', content: [{ type: 'text', text: 'Weather in Oslo?' }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"clear"}' },
  ]);

  // Streamed tool calls: one function_call item per call, argument deltas, then done.
  oai.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_9', type: 'function', function: { name: 'get_weather', arguments: '' } }] }))}\n\n`,
    `data: ${JSON.stringify(chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }))}\n\n`,
    `data: ${JSON.stringify(chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'tool_calls'))}\n\n`, 'data: [DONE]\n\n',
  ]));
  const stream = client().responses.stream({ model: 'gpt', input: 'Weather?', tools });
  const kinds: string[] = [];
  stream.on('event', (e) => { kinds.push(e.type); t.same(schemas.responseEvent(e), [], `${e.type} validates`); });
  const final = await stream.finalResponse();
  t.match(final.output, [{ type: 'function_call', call_id: 'call_9', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' }]);
  t.same(kinds, ['response.created', 'response.in_progress', 'response.output_item.added', 'response.function_call_arguments.delta',
    'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there')));
});

t.test('on an Anthropic upstream: create and stream, wallet to the unit', async (t) => {
  const before = await account();
  const r = await client().responses.create({ model: 'claude', input: 'Say hi', max_output_tokens: 50 });
  t.same(schemas.response(r), []);
  t.equal(r.output_text, 'Hello! How can I help?');
  t.equal(r.model, 'claude');
  const sent = ant.requests.at(-1)!.body;
  t.equal(sent.model, 'claude-sonnet-4-5-20250929');
  t.equal(sent.max_tokens, 50);
  const u1 = r.usage!;
  const mid = await settledBalance(before.usage.day.requests + 1);
  t.equal(before.balance_units - mid.balance_units, Number(cost(u1.input_tokens, u1.output_tokens, PRICE)));

  ant.setScript((_req, res) => writeSse(res, frames('text.sse'), { split: 13 }));
  const final = await client().responses.stream({ model: 'claude', input: 'Say hello' }).finalResponse();
  t.same(schemas.response(final), []);
  t.equal(final.output_text, 'Hello wörld 😀');
  const u2 = final.usage!;
  t.ok(u2.output_tokens === 4, 'usage read from the Anthropic stream');
  const after = await settledBalance(before.usage.day.requests + 2);
  t.equal(mid.balance_units - after.balance_units, Number(cost(u2.input_tokens, u2.output_tokens, PRICE)));
  ant.setScript((_req, res) => json(res, 200, JSON.parse(fixture('message.json'))));
});

t.test('errors before the first byte are the envelope; the wallet is untouched', async (t) => {
  const before = await account();
  const post = (body: unknown) => fetch(`${gw.url}/v1/responses`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const cases: [unknown, number, string, string | null][] = [
    [{ model: 'gpt' }, 400, 'missing_required_parameter', 'input'],
    [{ model: 'gpt', input: 5 }, 400, 'invalid_type', 'input'],
    [{ model: 'gpt', input: [{ type: 'web_search_call' }] }, 400, 'unsupported_value', 'input[0].type'],
    [{ model: 'gpt', input: [{ role: 'user', content: [{ type: 'input_file' }] }] }, 400, 'unsupported_value', 'input[0].content[0].type'],
    [{ model: 'gpt', input: 'x', tools: [{ type: 'web_search' }] }, 400, 'unsupported_value', 'tools[0].type'],
    [{ model: 'gpt', input: 'x', max_output_tokens: 0 }, 400, 'invalid_value', 'max_output_tokens'],
    [{ model: 'gpt', input: 'x', store: 'yes' }, 400, 'invalid_type', 'store'],
    [{ model: 'nope', input: 'x' }, 404, 'model_not_found', 'model'],
    [{ model: 'gpt', input: 'x', previous_response_id: 'resp_missing' }, 404, 'response_not_found', 'response_id'],
  ];
  for (const [body, status, code, param] of cases) {
    const res = await post(body);
    const b: any = await res.json();
    t.equal(res.status, status, `${code}: status`);
    t.same(schemas.error(b), [], `${code}: envelope validates`);
    t.equal(b.code, code);
    t.equal(b.param, param);
    t.equal(b.request_id, res.headers.get('x-request-id'));
  }
  oai.setScript((_req, res) => json(res, 500, { error: { message: 'boom' } }));
  const err = await client().responses.create({ model: 'gpt', input: 'x' }).catch((e) => e);
  t.ok(err instanceof OpenAI.APIError);
  t.equal(err.status, 502);
  t.equal(err.code, 'provider_error');
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'no hold left');
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there')));
});

t.test('an error after the first byte is one response.failed event with {code, message}', async (t) => {
  oai.setScript(async (_req, res) => {
    await writeSse(res, streamFrames(['Hel', 'lo']).slice(0, 3), { end: false });
    await sleep(150); // the deltas reach the client first: the stream is committed
    res.destroy();
  });
  const res = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt', input: 'x', stream: true }),
  });
  t.equal(res.status, 200);
  const evs = events(t, await res.text());
  const last = evs.at(-1);
  t.equal(last.type, 'response.failed');
  t.equal(evs.filter((e) => e.type === 'response.failed').length, 1);
  t.notOk(evs.some((e) => e.type === 'response.completed'));
  t.equal(last.response.status, 'failed');
  t.same(last.response.error, { code: 'provider_error', message: last.response.error.message });
  // OpenAI's schema lists only its own error codes; CONTRACT §6 puts our stable code there.
  t.same(schemas.responseEvent({ ...last, response: { ...last.response, error: { ...last.response.error, code: 'server_error' } } }), [],
    'the event validates but for the code itself');
  t.same(evs.map((e) => e.sequence_number), evs.map((_e, i) => i));
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there')));
});

t.test('a client gone mid-stream: upstream aborted, charged once for what was delivered, no hold left', async (t) => {
  oai.setScript(async (_req, res) => {
    await writeSse(res, streamFrames([]).slice(0, 1), { end: false });
    for (let i = 0; i < 200 && !res.destroyed; i++) {
      res.write(`data: ${JSON.stringify(chunk({ content: ' word' }))}\n\n`);
      await sleep(20);
    }
    res.end();
  });
  const before = await account();
  const ac = new AbortController();
  const r = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt', input: 'go on', stream: true, max_output_tokens: 400 }),
  });
  const reader = r.body!.getReader();
  let got = '';
  while ((got.match(/output_text\.delta/g) ?? []).length < 6) got += new TextDecoder().decode((await reader.read()).value);
  const seen = oai.requests.at(-1)!;
  ac.abort();
  for (let i = 0; i < 100 && !seen.aborted; i++) await sleep(10);
  t.ok(seen.aborted, 'the upstream call was aborted');
  const after = await settledBalance(before.usage.day.requests + 1);
  t.equal(after.usage.day.requests, before.usage.day.requests + 1, 'one debit');
  t.equal(after.held_units, 0, 'no hold left');
  const charged = before.balance_units - after.balance_units;
  t.ok(charged > 0 && charged < Number(cost(50, 400, PRICE)), `charged ${charged}: the delivered part, not the worst case`);
  await sleep(100);
  t.equal((await account()).balance_units, after.balance_units, 'and nothing more later');
  oai.setScript((_req, res) => json(res, 200, completionBody('Hello there')));
});
