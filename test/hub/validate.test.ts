// Request validation, images, content policy, plans, auto and context limits, each asserted
// through a real socket with its exact status, code and param.

import t from 'tap';
import { PRO_KEY, authHeaders, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.models.push({ id: 'tiny', provider: 'echo', context_window: 64, max_output_tokens: 16 });
  c.models.push({ id: 'huge', provider: 'echo', context_window: 100000000, max_output_tokens: 16 });
  c.content_policy = { block: ['forbidden\\s+words', 'secret-project-[0-9]+'] };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const user = (content: unknown) => ({ role: 'user', content });
const base = { model: 'echo-small', messages: [user('hi')] };
const png = `data:image/png;base64,${Buffer.from('fake png bytes!!').toString('base64')}`;
const image = (url: string) => ({ type: 'image_url', image_url: { url } });

async function expectError(t: any, body: unknown, status: number, code: string, param: string | null, key?: string) {
  const res = await postChat(gw.url, body, authHeaders(key));
  const json = res.json();
  t.equal(res.status, status, `${code} (${param}) status`);
  t.same(schemas.error(json), []);
  t.equal(json.code, code, `code for ${JSON.stringify(body).slice(0, 120)}`);
  t.equal(json.param, param, `param for ${code}`);
  return json;
}

t.test('request validation: missing, wrong type, bad value, unsupported value', async (t) => {
  const cases: Array<[unknown, string, string | null]> = [
    [[], 'invalid_type', '(body)'],
    ['"text"', 'invalid_type', '(body)'],
    [{ messages: [user('x')] }, 'missing_required_parameter', 'model'],
    [{ model: 5, messages: [user('x')] }, 'invalid_type', 'model'],
    [{ model: '', messages: [user('x')] }, 'invalid_value', 'model'],
    [{ model: 'echo-small' }, 'missing_required_parameter', 'messages'],
    [{ model: 'echo-small', messages: 'hi' }, 'invalid_type', 'messages'],
    [{ model: 'echo-small', messages: [] }, 'invalid_value', 'messages'],
    [{ model: 'echo-small', messages: ['hi'] }, 'invalid_type', 'messages[0]'],
    [{ model: 'echo-small', messages: [{ content: 'x' }] }, 'missing_required_parameter', 'messages[0].role'],
    [{ model: 'echo-small', messages: [{ role: 1, content: 'x' }] }, 'invalid_type', 'messages[0].role'],
    [{ model: 'echo-small', messages: [user('a'), { role: 'wizard', content: 'x' }] }, 'unsupported_value', 'messages[1].role'],
    [{ model: 'echo-small', messages: [user('a'), { role: 'user' }] }, 'missing_required_parameter', 'messages[1].content'],
    [{ model: 'echo-small', messages: [user('a'), user(42)] }, 'invalid_type', 'messages[1].content'],
    [{ model: 'echo-small', messages: [user([{ type: 'audio', data: 'x' }])] }, 'unsupported_value', 'messages[0].content[0].type'],
    [{ model: 'echo-small', messages: [user([{ text: 'x' }])] }, 'missing_required_parameter', 'messages[0].content[0].type'],
    [{ model: 'echo-small', messages: [user([{ type: 'text', text: 5 }])] }, 'invalid_type', 'messages[0].content[0].text'],
    [{ model: 'echo-small', messages: [user([{ type: 'image_url' }])] }, 'missing_required_parameter', 'messages[0].content[0].image_url'],
    [{ model: 'echo-small', messages: [user([{ type: 'image_url', image_url: { url: png, detail: 'ultra' } }])] }, 'unsupported_value', 'messages[0].content[0].image_url.detail'],
    [{ model: 'echo-small', messages: [{ role: 'tool', content: 'x' }] }, 'missing_required_parameter', 'messages[0].tool_call_id'],
    [{ model: 'echo-small', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f' } }] }] }, 'missing_required_parameter', 'messages[0].tool_calls[0].function.arguments'],
    [{ model: 'echo-small', messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'custom', function: { name: 'f', arguments: '{}' } }] }] }, 'unsupported_value', 'messages[0].tool_calls[0].type'],
    [{ model: 'echo-small', messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 5, function: { name: 'f', arguments: '{}' } }] }] }, 'invalid_type', 'messages[0].tool_calls[0].type'],
    // Found by test/property/chat-body: a user or system turn's tool_calls reached the token
    // estimate unchecked, and a non-array one was a 500.
    [{ model: 'echo-small', messages: [{ role: 'system', content: '', tool_calls: [0] }, { role: 'user', content: 'hi' }] }, 'invalid_type', 'messages[0].tool_calls[0]'],
    [{ model: 'echo-small', messages: [{ role: 'user', content: 'hi', tool_calls: 'NaN' }] }, 'invalid_type', 'messages[0].tool_calls'],
    [{ ...base, max_tokens: '5' }, 'invalid_type', 'max_tokens'],
    [{ ...base, max_tokens: -1 }, 'invalid_value', 'max_tokens'],
    [{ ...base, max_tokens: 0 }, 'invalid_value', 'max_tokens'],
    [{ ...base, max_tokens: 1.5 }, 'invalid_value', 'max_tokens'],
    [{ ...base, max_completion_tokens: 0 }, 'invalid_value', 'max_completion_tokens'],
    [{ ...base, temperature: 3 }, 'invalid_value', 'temperature'],
    [{ ...base, temperature: 'hot' }, 'invalid_type', 'temperature'],
    [{ ...base, top_p: 1.5 }, 'invalid_value', 'top_p'],
    [{ ...base, n: 2 }, 'invalid_value', 'n'],
    [{ ...base, stream: 'yes' }, 'invalid_type', 'stream'],
    [{ ...base, stream: true, stream_options: [] }, 'invalid_type', 'stream_options'],
    [{ ...base, stream: true, stream_options: { include_usage: 'yes' } }, 'invalid_type', 'stream_options.include_usage'],
    [{ ...base, stop: ['a', 1] }, 'invalid_type', 'stop[1]'],
    [{ ...base, stop: 7 }, 'invalid_type', 'stop'],
    [{ ...base, tools: {} }, 'invalid_type', 'tools'],
  ];
  for (const [body, code, param] of cases) await expectError(t, body, 400, code, param);
});

t.test("how many stop sequences and top_logprobs is the upstream's to limit (CONTRACT section 10)", async (t) => {
  const res = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'x' }], stop: ['a', 'b', 'c', 'd', 'e', 'f'], top_logprobs: 21 });
  t.equal(res.status, 200);
  t.same(schemas.completion(res.json()), []);
});

t.test('numbers that JSON can carry but are not finite are invalid_value', async (t) => {
  const res = await postChat(gw.url, '{"model":"echo-small","messages":[{"role":"user","content":"x"}],"temperature":1e999}');
  t.equal(res.status, 400);
  t.equal(res.json().code, 'invalid_value');
  t.equal(res.json().param, 'temperature');
  const big = await postChat(gw.url, '{"model":"echo-small","messages":[{"role":"user","content":"x"}],"max_tokens":1e999}');
  t.equal(big.json().code, 'invalid_value');
});

t.test('unlisted fields are ignored, not rejected; nulls for optional fields are fine', async (t) => {
  const res = await postChat(gw.url, { ...base, frobnicate: { a: 1 }, metadata: 'x', temperature: null, max_tokens: null, stream: null });
  t.equal(res.status, 200);
  const ok = await postChat(gw.url, {
    model: 'echo-small',
    messages: [
      { role: 'system', content: 'be brief' }, { role: 'developer', content: [{ type: 'text', text: 'really' }] },
      user('hello'), { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'result' }, user([{ type: 'text', text: 'and now' }]),
    ],
  });
  t.equal(ok.status, 200);
  t.equal(ok.json().choices[0].message.content, 'and now');
});

t.test('images', async (t) => {
  const visionAsk = (content: unknown[]) => ({ model: 'echo-vision', messages: [user([{ type: 'text', text: 'what is this' }, ...content])] });
  for (const url of ['http://example.com/a.png', 'ftp://x/y.png', 'data:image/png;base64,not base64!', 'data:image/bmp;base64,AAAA', 'data:image/png,AAAA', 'file:///etc/passwd', 'https://']) {
    await expectError(t, visionAsk([image(url)]), 400, 'invalid_image_url', 'messages[0].content[1].image_url.url', PRO_KEY);
  }
  await expectError(t, visionAsk([image(png), image(png), image('https://example.com/c.png')]), 400, 'too_many_images', 'messages', PRO_KEY);
  await expectError(t, { model: 'echo-small', messages: [user([image(png)])] }, 422, 'model_does_not_support_images', 'messages');
  const ok = await postChat(gw.url, visionAsk([image(png), image('https://example.com/b.png')]), authHeaders(PRO_KEY));
  t.equal(ok.status, 200);
  t.equal(ok.json().model, 'echo-vision');
  await expectError(t, { model: 'echo-small', messages: [{ role: 'system', content: [image(png)] }] }, 400, 'unsupported_value', 'messages[0].content[0].type');
});

t.test('plans: a paid-only model on a free plan is 403 with suggestions the plan may use', async (t) => {
  const body = await expectError(t, { ...base, model: 'echo-vision' }, 403, 'model_requires_paid_plan', 'model');
  t.equal(body.type, 'permission_error');
  t.ok(body.suggested_models.length > 0);
  t.notOk(body.suggested_models.includes('echo-vision'), 'only models the plan may use');
  t.equal((await postChat(gw.url, { ...base, model: 'echo-vision' }, authHeaders(PRO_KEY))).status, 200);
});

t.test('unknown model: 404 with the nearest slugs first', async (t) => {
  const body = await expectError(t, { ...base, model: 'echo-smal' }, 404, 'model_not_found', 'model');
  t.equal(body.suggested_models[0], 'echo-small');
  t.ok(body.suggested_models.length <= 3);
});

t.test('auto: first candidate the plan allows, vision when needed; the answer names it', async (t) => {
  let res = await postChat(gw.url, { ...base, model: 'auto' });
  t.equal(res.json().model, 'echo-small', 'free plan skips the paid-only candidate');
  res = await postChat(gw.url, { ...base, model: 'auto' }, authHeaders(PRO_KEY));
  t.equal(res.json().model, 'echo-vision');
  res = await postChat(gw.url, { model: 'auto', messages: [user([image(png)])] }, authHeaders(PRO_KEY));
  t.equal(res.json().model, 'echo-vision');
  await expectError(t, { model: 'auto', messages: [user([image(png)])] }, 422, 'model_does_not_support_images', 'messages');
  const stream = await postChat(gw.url, { ...base, model: 'auto', stream: true });
  t.match(stream.text, /"model":"echo-small"/);
});

t.test('content policy: a match in any message is 403 content_blocked', async (t) => {
  const body = await expectError(t, { model: 'echo-small', messages: [user('ok'), { role: 'assistant', content: 'fine' }, user([{ type: 'text', text: 'tell me about secret-project-42' }])] }, 403, 'content_blocked', 'messages');
  t.equal(body.type, 'permission_error');
  t.notMatch(body.message, /secret-project/, 'the pattern is not revealed');
  await expectError(t, { model: 'echo-small', messages: [{ role: 'system', content: 'forbidden   words' }, user('x')] }, 403, 'content_blocked', 'messages');
  t.equal((await postChat(gw.url, { model: 'echo-small', messages: [user('forbidden')] })).status, 200);
});

t.test('context: prompt estimate + requested output above the window is 422 before any upstream call', async (t) => {
  await expectError(t, { model: 'tiny', messages: [user('word '.repeat(60))] }, 422, 'context_length_exceeded', 'messages');
  await expectError(t, { model: 'tiny', messages: [user('hi')], max_tokens: 100 }, 422, 'context_length_exceeded', 'messages');
  t.equal((await postChat(gw.url, { model: 'tiny', messages: [user('hi')], max_tokens: 10 })).status, 200);
});

// With quadratic tokenizing this took minutes; the test's own timeout is what catches a hang.
t.test('a hostile prompt (one 2 MB run without a break) does not stall the gateway', { timeout: 20000 }, async (t) => {
  const g = await startGateway({ ...baseConfig(), server: { port: 0, max_body_bytes: 8 * 1024 * 1024 }, models: [{ id: 'huge', provider: 'echo', context_window: 100000000, max_output_tokens: 16 }], routing: { auto: [] } });
  t.teardown(() => g.close());
  const res = await postChat(g.url, { model: 'huge', messages: [user('x'.repeat(2 * 1024 * 1024))], max_tokens: 1 });
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].finish_reason, 'length');
});
