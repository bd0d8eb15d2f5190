// Translation details between the dialects and an OpenAI-compatible upstream: Messages'
// stop_reason "stop_sequence" when the upstream says which of the client's stop sequences ended
// the answer (vLLM's choices[].stop_reason, llama.cpp's stopping_word), end_turn when it cannot
// be told; Responses' text.format as chat's response_format; an upstream's reasoning_content
// as Responses reasoning items (answered whole and streamed), reasoning items passed back as
// input, and `include`.

import t from 'tap';
import OpenAI from 'openai';
import fc from 'fast-check';
import { DEMO_KEY, baseConfig, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { namedEvents } from '../helpers/error-rig.js';
import { holds, oddString, oddValue } from '../property/arbitraries.js';

let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, completionBody('ok')));
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'm-up', context_window: 8192, max_output_tokens: 200 });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

async function post(path: string, body: unknown): Promise<{ status: number; text: string; json: () => any }> {
  const headers: Record<string, string> = path === '/v1/messages'
    ? { 'x-api-key': DEMO_KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }
    : { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' };
  const res = await fetch(`${gw.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) };
}

const messages = (extra: Record<string, unknown> = {}) => ({
  model: 'm', max_tokens: 50, stop_sequences: ['###', 'END'], messages: [{ role: 'user', content: 'Count' }], ...extra,
});
/** An answer that stopped at `stop` as the upstream reports it (`fields` on the choice or the body). */
const stopped = (choice: Record<string, unknown>, body: Record<string, unknown> = {}) => {
  const b = completionBody('1 2 3');
  Object.assign(b.choices[0], choice);
  return { ...b, ...body };
};

t.test('messages on an OpenAI-compatible upstream: stop_sequence when the upstream names the client\'s stop', async (t) => {
  const cases: Array<[string, any, string | null]> = [
    ["vLLM's stop_reason", stopped({ stop_reason: '###' }), '###'],
    ["llama.cpp's stopping_word", stopped({}, { stopping_word: 'END' }), 'END'],
    ['a stop token id (vLLM: EOS)', stopped({ stop_reason: 128001 }), null],
    ['a string the client did not ask for', stopped({ stop_reason: '<|eot_id|>' }), null],
    ['nothing said', stopped({}), null],
  ];
  for (const [name, answer, seq] of cases) {
    up.setScript((_req, res) => json(res, 200, answer));
    const res = await post('/v1/messages', messages());
    t.equal(res.status, 200, name);
    const body = res.json();
    t.equal(body.stop_reason, seq === null ? 'end_turn' : 'stop_sequence', `${name}: stop_reason`);
    t.equal(body.stop_sequence, seq, `${name}: stop_sequence`);
  }
  t.same(up.requests.at(-1)!.body.stop, ['###', 'END'], 'the upstream got the stop sequences');

  // Streamed: the finish chunk carries vLLM's stop_reason.
  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: '1 2' }))}\n\n`,
    `data: ${JSON.stringify({ ...chunk({}, 'stop'), choices: [{ index: 0, delta: {}, finish_reason: 'stop', stop_reason: 'END' }] })}\n\n`,
    'data: [DONE]\n\n',
  ], { split: 9 }));
  const s = await post('/v1/messages', messages({ stream: true }));
  const delta = namedEvents(s.text).find(([n]) => n === 'message_delta')![1];
  t.same(delta.delta, { stop_reason: 'stop_sequence', stop_sequence: 'END' }, 'streamed: message_delta names the stop sequence');

  // Chat completions report it as stop_reason (vLLM's field), never the internal stop_sequence.
  up.setScript((_req, res) => json(res, 200, stopped({ stop_reason: '###' })));
  const chat = await post('/v1/chat/completions', { model: 'm', stop: ['###'], messages: [{ role: 'user', content: 'Count' }] });
  t.same(Object.keys(chat.json().choices[0]).sort(), ['finish_reason', 'index', 'logprobs', 'message', 'stop_reason']);
  t.equal(chat.json().choices[0].stop_reason, '###');
  t.same(schemas.completion(chat.json()), []);
  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: '1' }))}\n\n`,
    `data: ${JSON.stringify({ ...chunk({}, 'stop'), choices: [{ index: 0, delta: {}, finish_reason: 'stop', stop_reason: '###' }] })}\n\n`,
    'data: [DONE]\n\n',
  ]));
  const cs = await post('/v1/chat/completions', { model: 'm', stop: ['###'], stream: true, messages: [{ role: 'user', content: 'Count' }] });
  for (const e of sseData(cs.text).events) t.notOk('stop_sequence' in e.choices[0], 'no stop_sequence in chat chunks');
  t.equal(sseData(cs.text).events.at(-1).choices[0].stop_reason, '###', 'the finish chunk names it');
});

t.test('responses: text.format becomes response_format; the response echoes it', async (t) => {
  up.setScript((_req, res) => json(res, 200, completionBody('{"a":1}')));
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false };
  const cases: Array<[unknown, unknown, unknown]> = [
    [{ format: { type: 'json_schema', name: 'thing', schema, strict: true } }, { type: 'json_schema', json_schema: { name: 'thing', schema, strict: true } },
      { format: { type: 'json_schema', name: 'thing', schema, strict: true } }],
    [{ format: { type: 'json_object' } }, { type: 'json_object' }, { format: { type: 'json_object' } }],
    [{ format: { type: 'text' } }, undefined, { format: { type: 'text' } }],
    [undefined, undefined, { format: { type: 'text' } }],
  ];
  for (const [text, sent, echoed] of cases) {
    const res = await post('/v1/responses', { model: 'm', input: 'JSON please', ...(text === undefined ? {} : { text }) });
    t.equal(res.status, 200);
    t.same(up.requests.at(-1)!.body.response_format, sent, `response_format for ${JSON.stringify(text)}`);
    t.same(res.json().text, echoed, 'echoed');
    t.same(schemas.response(res.json()), [], 'validates against Response.json');
  }
  const bad: Array<[unknown, number, string, string]> = [
    [{ format: { type: 'xml' } }, 400, 'unsupported_value', 'text.format.type'],
    [{ format: { type: 'json_schema', schema } }, 400, 'missing_required_parameter', 'text.format.name'],
    [{ format: { type: 'json_schema', name: 'x' } }, 400, 'missing_required_parameter', 'text.format.schema'],
    [{ format: { type: 'json_schema', name: 'x', schema, strict: 'yes' } }, 400, 'invalid_type', 'text.format.strict'],
    ['json', 400, 'invalid_type', 'text'],
  ];
  for (const [text, status, code, param] of bad) {
    const res = await post('/v1/responses', { model: 'm', input: 'x', text });
    t.equal(res.status, status);
    t.match(res.json(), { code, param }, `${JSON.stringify(text)}: ${code} ${param}`);
  }
});

t.test('responses: reasoning_content becomes a reasoning item, whole and streamed; passed back as input it is left out', async (t) => {
  up.setScript((_req, res) => json(res, 200, completionBody('Four.', {
    choices: [{ index: 0, message: { role: 'assistant', content: 'Four.', reasoning_content: 'Two and two make four.' }, finish_reason: 'stop' }],
  })));
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const r = await client.responses.create({ model: 'm', input: '2+2?', include: ['reasoning.encrypted_content'] });
  t.same(schemas.response(r), [], 'validates against Response.json');
  t.same(r.output.map((o) => o.type), ['reasoning', 'message']);
  t.match(r.output[0], { type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'Two and two make four.' }], status: 'completed' });
  t.equal(r.output_text, 'Four.');

  // The client's next turn passes the whole output back, reasoning item included.
  const next = await client.responses.create({ model: 'm', store: false, input: [{ role: 'user', content: '2+2?' }, ...r.output as any[], { role: 'user', content: 'And 3+3?' }] });
  t.equal(next.status, 'completed');
  t.same(up.requests.at(-1)!.body.messages.map((m: any) => [m.role, m.content]), [['user', '2+2?'], ['assistant', 'Four.'], ['user', 'And 3+3?']],
    'the reasoning item is not sent upstream');

  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', reasoning_content: 'Two and ' }))}\n\n`,
    `data: ${JSON.stringify(chunk({ reasoning_content: 'two.' }))}\n\n`,
    `data: ${JSON.stringify(chunk({ content: 'Fo' }))}\n\n`,
    `data: ${JSON.stringify(chunk({ content: 'ur.' }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    'data: [DONE]\n\n',
  ], { split: 11 }));
  const s = await post('/v1/responses', { model: 'm', input: '2+2?', stream: true });
  const evs = namedEvents(s.text).map(([, d]) => d);
  for (const e of evs) t.same(schemas.responseEvent(e), [], `${e.type} validates`);
  t.same(evs.map((e) => e.type), [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
  ]);
  t.same(evs.map((e) => e.sequence_number), evs.map((_e, i) => i));
  t.equal(evs[6].text, 'Two and two.');
  t.same(evs[7].part, { type: 'reasoning_text', text: 'Two and two.' });
  t.equal(evs[8].item.content[0].text, 'Two and two.');
  const final = evs.at(-1).response;
  t.same(schemas.response(final), []);
  t.same(final.output.map((o: any) => [o.type, o.type === 'message' ? o.content[0].text : o.content[0].text]), [['reasoning', 'Two and two.'], ['message', 'Four.']]);
  t.same(final.output.map((o: any) => final.output.indexOf(o)), [0, 1]);
  t.equal(evs[9].output_index, 1, 'the message is output 1');

  // The official SDK's stream accumulates the reasoning item too.
  const sdkFinal = await client.responses.stream({ model: 'm', input: '2+2?' }).finalResponse();
  t.same(sdkFinal.output.map((o) => o.type), ['reasoning', 'message']);
  t.match(sdkFinal.output[0], { content: [{ type: 'reasoning_text', text: 'Two and two.' }] });
  t.equal(sdkFinal.output_text, 'Four.');

  const bad = await post('/v1/responses', { model: 'm', input: 'x', include: 'reasoning.encrypted_content' });
  t.equal(bad.status, 400);
  t.match(bad.json(), { code: 'invalid_type', param: 'include' });
});

t.test('property: any text, include and passed-back reasoning item is a 200 or a 400 naming its field, never more', async (t) => {
  up.setScript((_req, res) => json(res, 200, completionBody('ok')));
  const format = fc.oneof(
    fc.record({ type: fc.constantFrom('text', 'json_object', 'json_schema', 'xml', '', 5), name: oddValue, schema: fc.oneof(fc.constant({ type: 'object' }), oddValue), strict: oddValue, description: oddValue }, { requiredKeys: [] }),
    oddValue,
  );
  const text = fc.oneof(fc.record({ format, verbosity: oddValue }, { requiredKeys: [] }), oddValue);
  const include = fc.oneof(fc.array(fc.oneof(fc.constantFrom('reasoning.encrypted_content', 'message.output_text.logprobs'), oddString, oddValue), { maxLength: 3 }), oddValue);
  const reasoningItem = fc.record({ type: fc.constant('reasoning'), id: oddValue, summary: oddValue, content: oddValue, encrypted_content: oddValue }, { requiredKeys: ['type'] });
  await holds(t, 'responses text/include/reasoning input', fc.asyncProperty(
    fc.record({ text, include, reasoning: fc.boolean(), item: reasoningItem }, { requiredKeys: ['reasoning', 'item'] }),
    async ({ text, include, reasoning, item }) => {
      const body: Record<string, unknown> = { model: 'm', input: reasoning ? [{ role: 'user', content: 'hi' }, item] : 'hi' };
      if (text !== undefined) body.text = text;
      if (include !== undefined) body.include = include;
      const res = await post('/v1/responses', body);
      if (res.status === 200) {
        if (schemas.response(res.json()).length > 0) throw new Error(`schema-invalid answer: ${res.text.slice(0, 300)}`);
        return;
      }
      if (res.status !== 400) throw new Error(`status ${res.status}: ${res.text.slice(0, 300)}`);
      const e = res.json();
      if (!['invalid_type', 'invalid_value', 'unsupported_value', 'missing_required_parameter'].includes(e.code)) throw new Error(`code ${e.code}`);
      if (typeof e.param !== 'string' || !/^(text|include)\b/.test(e.param)) throw new Error(`param ${e.param}`);
    },
  ), 150);
});
