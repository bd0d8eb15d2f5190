// An image counts toward the context by its size (CONTRACT section 16): a data URL by its
// decoded bytes (ceil(bytes / 750), never below the model's image_tokens), an https URL at the
// model's image_tokens. Before, every image cost image_tokens (85) whatever its size, so a 20 MB
// image passed an 8k context check and was sent upstream (and stored, for Responses). The same
// estimate serves every dialect: chat, Messages (count_tokens too) and Responses.

import t from 'tap';
import fc from 'fast-check';
import { IMAGE_BYTES_PER_TOKEN, imageCost } from '../../lib/tokens/count.js';
import { DEMO_KEY, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'image-admin-token-0123';
const MB = 1024 * 1024;

function dataUrl(bytes: number, type = 'png'): string {
  return `data:image/${type};base64,${Buffer.alloc(bytes, 0x5a).toString('base64')}`;
}

t.test('imageCost: decoded bytes / 750, rounded up, never below the base; https at the base', async (t) => {
  t.equal(IMAGE_BYTES_PER_TOKEN, 750);
  t.equal(imageCost('https://example.com/cat.png', 85), 85, 'an https URL is not fetched: the base');
  t.equal(imageCost(dataUrl(10), 85), 85, 'a tiny image: the base');
  t.equal(imageCost(dataUrl(750 * 200), 85), 200);
  t.equal(imageCost(dataUrl(750 * 200 + 1), 85), 201, 'rounded up');
  t.equal(imageCost(dataUrl(MB), 0), Math.ceil(MB / 750), 'base 0: the size alone');
  t.equal(imageCost(dataUrl(20 * MB), 85), 27_963, 'a 20 MB image');
  // The same for every padding (bytes % 3 = 0, 1, 2), property-checked against real base64.
  fc.assert(fc.property(fc.integer({ min: 0, max: 200_000 }), fc.integer({ min: 0, max: 500 }), fc.constantFrom('png', 'jpeg', 'gif', 'webp'),
    (bytes, base, type) => imageCost(dataUrl(bytes, type), base) === Math.max(base, Math.ceil(bytes / 750))), { numRuns: 200 });
});

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.models.push({
    id: 'vision', provider: 'echo', supports_vision: true, max_images: 4, context_window: 8192, max_output_tokens: 256,
    price: { input_per_mtok: 1000, output_per_mtok: 1000 },
  });
  c.models.push({ id: 'vision-long', provider: 'echo', supports_vision: true, max_images: 4, context_window: 100_000, max_output_tokens: 256 });
  c.routing = { auto: ['vision', 'vision-long'] };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

async function wallet(): Promise<{ balance: number; held: number }> {
  const res = await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  const body = await res.json() as any;
  return { balance: body.balance_units, held: body.held_units };
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() as any };
}

const chatImage = (url: string) => ({ model: 'vision', messages: [{ role: 'user', content: [{ type: 'text', text: 'what is it' }, { type: 'image_url', image_url: { url } }] }] });
const responsesImage = (url: string) => ({ model: 'vision', input: [{ role: 'user', content: [{ type: 'input_text', text: 'what is it' }, { type: 'input_image', image_url: url }] }] });
const messagesImage = (url: string) => {
  const [head, data] = url.split(',');
  return {
    model: 'vision', max_tokens: 64,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'what is it' }, { type: 'image', source: { type: 'base64', media_type: head!.slice(5, -7), data } }] }],
  };
};

t.test('a 20 MB image is refused by the context check (422), nothing held or charged, on chat and Responses', async (t) => {
  const before = await wallet();
  const huge = dataUrl(20 * MB);
  const chat = await postChat(gw.url, chatImage(huge));
  t.equal(chat.status, 422, 'chat: 422');
  const cb = chat.json();
  t.equal(cb.code, 'context_length_exceeded');
  t.equal(cb.type, 'invalid_request_error');
  t.equal(cb.param, 'messages');
  t.same(schemas.error(cb), [], 'chat: the envelope');
  t.equal(cb.request_id, chat.headers['x-request-id']);
  t.match(cb.message, /at least 279\d\d prompt tokens/, 'the estimate counts the image by its size');

  const resp = await post('/v1/responses', responsesImage(huge));
  t.equal(resp.status, 422, 'responses: 422');
  t.equal(resp.body.code, 'context_length_exceeded');
  t.same(schemas.error(resp.body), [], 'responses: the envelope');
  t.equal(resp.body.request_id, resp.headers.get('x-request-id'));
  t.same(await wallet(), before, 'wallet and holds unchanged');
});

t.test('Messages: an 8 MB image is refused in its own error shape; count_tokens counts it by size', async (t) => {
  const before = await wallet();
  const big = dataUrl(8 * MB, 'jpeg');
  const res = await post('/v1/messages', messagesImage(big), { 'anthropic-version': '2023-06-01' });
  t.equal(res.status, 422);
  t.equal(res.body.type, 'error');
  t.equal(res.body.error.type, 'invalid_request_error');
  t.equal(res.body.error.code, 'context_length_exceeded');
  t.equal(res.body.request_id, res.headers.get('x-request-id'));
  // count_tokens stops past the context window (CONTRACT section 16): the 8 MB image is refused there too.
  const over = await post('/v1/messages/count_tokens', messagesImage(big), { 'anthropic-version': '2023-06-01' });
  t.equal(over.status, 422);
  t.equal(over.body.error.code, 'context_length_exceeded');
  const counted = await post('/v1/messages/count_tokens', messagesImage(dataUrl(2 * MB, 'jpeg')), { 'anthropic-version': '2023-06-01' });
  const small = await post('/v1/messages/count_tokens', messagesImage(dataUrl(1000, 'jpeg')), { 'anthropic-version': '2023-06-01' });
  t.equal(counted.status, 200);
  t.equal(counted.body.input_tokens - small.body.input_tokens, Math.ceil(2 * MB / 750) - 85, 'count_tokens: the image by its size');
  t.same(await wallet(), before, 'wallet and holds unchanged');
});

t.test('a small image costs less than a big one, in every dialect, and an https image the base', async (t) => {
  const small = dataUrl(1000);
  const big = dataUrl(MB);
  const extra = Math.ceil(MB / 750) - 85;

  const chatSmall = (await postChat(gw.url, chatImage(small))).json();
  const chatBig = (await postChat(gw.url, chatImage(big))).json();
  const chatHttps = (await postChat(gw.url, chatImage('https://example.com/cat.png'))).json();
  t.equal(chatBig.usage.prompt_tokens - chatSmall.usage.prompt_tokens, extra, 'chat: the big image costs its size');
  t.equal(chatHttps.usage.prompt_tokens, chatSmall.usage.prompt_tokens, 'chat: an https image costs image_tokens, as a small one');

  const respSmall = await post('/v1/responses', responsesImage(small));
  const respBig = await post('/v1/responses', responsesImage(big));
  t.equal(respSmall.status, 200);
  t.equal(respBig.body.usage.input_tokens - respSmall.body.usage.input_tokens, extra, 'responses: the same');

  const h = { 'anthropic-version': '2023-06-01' };
  const msgSmall = await post('/v1/messages', messagesImage(small), h);
  const msgBig = await post('/v1/messages', messagesImage(big), h);
  t.equal(msgBig.body.usage.input_tokens - msgSmall.body.usage.input_tokens, extra, 'messages: the same');

  // The hold and the charge follow the estimate: the big image's request is charged more.
  const before = await wallet();
  const paid = await postChat(gw.url, chatImage(big));
  t.equal(Number(paid.headers['x-tollgate-units-charged']), Math.ceil((chatBig.usage.prompt_tokens + chatBig.usage.completion_tokens) * 1000 / 1e6));
  t.equal(before.balance - (await wallet()).balance, Number(paid.headers['x-tollgate-units-charged']));
});

t.test('auto: a big image goes to the first candidate whose context its size fits', async (t) => {
  // The quick "surely fits" bound of auto routing counts the image by its size too: 8 MB is
  // about 11,200 tokens, over vision's 8192 and under vision-long's 100,000.
  const res = await postChat(gw.url, { ...chatImage(dataUrl(8 * MB)), model: 'auto' });
  t.equal(res.status, 200);
  t.equal(res.json().model, 'vision-long');
  const small = await postChat(gw.url, { ...chatImage(dataUrl(1000)), model: 'auto' });
  t.equal(small.json().model, 'vision', 'a small one stays on the first candidate');
});
