// The out-of-the-box path: the echo provider through raw HTTP and the official OpenAI SDK.

import t from 'tap';
import OpenAI from 'openai';
import { DEMO_KEY, PRO_KEY, authHeaders, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

let gw: TestGateway;
t.before(async () => { gw = await startGateway(); });
t.teardown(() => gw.close());

const ask = { model: 'echo-small', messages: [{ role: 'user', content: 'The quick brown fox' }] };

t.test('non-streaming answer validates against OpenAI\'s schema', async (t) => {
  const res = await postChat(gw.url, ask);
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /^application\/json/);
  t.match(res.headers['x-request-id'], /^req_/);
  const body = res.json();
  t.same(schemas.completion(body), []);
  t.match(body.id, /^chatcmpl-[0-9a-f]{32}$/);
  t.equal(body.object, 'chat.completion');
  t.equal(body.model, 'echo-small');
  t.ok(Math.abs(body.created - Date.now() / 1000) < 5);
  t.same(body.choices, [{ index: 0, message: { role: 'assistant', content: 'The quick brown fox', refusal: null }, logprobs: null, finish_reason: 'stop' }]);
  t.equal(body.usage.completion_tokens, 4);
  t.equal(body.usage.total_tokens, body.usage.prompt_tokens + 4);
});

t.test('streaming: word by word, role first, one id, [DONE], no usage member without include_usage', async (t) => {
  const res = await postChat(gw.url, { ...ask, stream: true });
  t.equal(res.status, 200);
  t.equal(res.headers['content-type'], 'text/event-stream');
  t.equal(res.headers['cache-control'], 'no-cache');
  t.equal(res.headers['x-accel-buffering'], 'no');
  const { events, done } = sseData(res.text);
  t.ok(done, 'ends with [DONE]');
  for (const e of events) {
    t.same(schemas.chunk(e), [], 'chunk validates');
    t.notOk('usage' in e, 'no usage member');
    t.equal(e.id, events[0].id);
    t.equal(e.model, 'echo-small');
    t.equal(e.object, 'chat.completion.chunk');
  }
  t.equal(events[0].choices[0].delta.role, 'assistant');
  t.equal(events.map((e) => e.choices[0].delta.content ?? '').join(''), 'The quick brown fox');
  t.equal(events.at(-1).choices[0].finish_reason, 'stop');
  t.ok(events.slice(0, -1).every((e) => e.choices[0].finish_reason === null));
});

t.test('streaming with include_usage: usage null on chunks, then one usage chunk', async (t) => {
  const res = await postChat(gw.url, { ...ask, stream: true, stream_options: { include_usage: true } });
  const { events, done } = sseData(res.text);
  t.ok(done);
  const last = events.at(-1);
  t.same(last.choices, []);
  t.equal(last.usage.completion_tokens, 4);
  t.ok(events.slice(0, -1).every((e) => e.usage === null));
  for (const e of events) t.same(schemas.chunk(e), []);
});

t.test('max_tokens cuts the answer with finish_reason length', async (t) => {
  const res = await postChat(gw.url, { ...ask, max_tokens: 2 });
  const body = res.json();
  t.equal(body.choices[0].message.content, 'The quick');
  t.equal(body.choices[0].finish_reason, 'length');
  t.equal(body.usage.completion_tokens, 2);
});

t.test('the official OpenAI SDK works unchanged', async (t) => {
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const c = await client.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'hello sdk' }] });
  t.equal(c.choices[0]!.message.content, 'hello sdk');

  const stream = await client.chat.completions.create({
    model: 'echo-small', messages: [{ role: 'user', content: 'one two three' }], stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let usage;
  for await (const ch of stream) {
    text += ch.choices[0]?.delta.content ?? '';
    if (ch.usage) usage = ch.usage;
  }
  t.equal(text, 'one two three');
  t.equal(usage?.completion_tokens, 3);

  const models = await client.models.list();
  t.same(models.data.map((m) => m.id), ['echo-small']);
  const m = await client.models.retrieve('echo-small');
  t.equal(m.owned_by, 'tollgate');

  const err = await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }).catch((e) => e);
  t.ok(err instanceof OpenAI.NotFoundError);
  t.equal(err.status, 404);
  t.equal(err.code, 'model_not_found');
  t.equal(err.type, 'invalid_request_error');
  t.equal(err.param, 'model');
  t.same(err.error.suggested_models, ['echo-small'], 'extras reach SDK users through err.error');
  t.match(err.requestID, /^req_/);

  const bad = new OpenAI({ apiKey: 'tg_wrong', baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const e401 = await bad.models.list().catch((e) => e);
  t.ok(e401 instanceof OpenAI.AuthenticationError);
  t.equal(e401.code, 'invalid_api_key');

  const streamErr = await client.chat.completions.create({ model: 'echo-small', messages: [], stream: true }).catch((e) => e);
  t.equal(streamErr.status, 400);
  t.equal(streamErr.code, 'invalid_value');
  t.equal(streamErr.param, 'messages');
});

t.test('models: list by plan, retrieve any, schema-valid', async (t) => {
  const free: any = await fetch(`${gw.url}/v1/models`, { headers: authHeaders() }).then((r) => r.json());
  t.same(schemas.list(free), []);
  t.same(free.data.map((m: any) => m.id), ['echo-small']);
  const pro: any = await fetch(`${gw.url}/v1/models`, { headers: authHeaders(PRO_KEY) }).then((r) => r.json());
  t.same(pro.data.map((m: any) => m.id), ['echo-small', 'echo-vision']);
  const one = await fetch(`${gw.url}/v1/models/echo-vision`, { headers: authHeaders() });
  t.equal(one.status, 200);
  const m = await one.json();
  t.same(schemas.model(m), []);
  t.match(m, { id: 'echo-vision', object: 'model', owned_by: 'tollgate', context_window: 8192, max_output_tokens: 2048, supports_vision: true });
});

// Found by test/property/chat-body: the echo provider split the text with /\s*\S+/g, which
// backtracks quadratically on a run of spaces: 600 KB of spaces held the event loop for
// minutes (this test would hit tap's timeout). The split is now a linear scan.
t.test('a long run of spaces is answered at once, its words concatenating back', async (t) => {
  // Trailing spaces are what the backtracking split choked on: no word follows them.
  const long = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: `a b${' '.repeat(400_000)}` }] });
  t.equal(long.status, 200);
  t.equal(long.json().choices[0].message.content, 'a b');
  const text = `${' '.repeat(300)}a  b \n `;
  const res = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: text }] });
  t.equal(res.json().choices[0].message.content, text.trimEnd(), 'trailing whitespace dropped, the rest whole');
  const { events, done } = sseData((await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: text }], stream: true })).text);
  t.ok(done);
  t.equal(events.map((e) => e.choices[0]?.delta.content ?? '').join(''), text.trimEnd());
});
