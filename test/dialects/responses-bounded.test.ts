// Stored responses are bounded (CONTRACT section 16), on the memory store and on a real Redis.
// Found by an outside attack: one 20 MB image and fifteen 138-byte follow-ups took a 384 MB heap
// to "out of memory", as every previous_response_id continuation stored the whole conversation
// again. Now a conversation is stored once (each response its own part, and a reference to the
// one it continues), a response above responses.max_bytes or past its account's
// max_account_bytes or its conversation's max_chain_length is answered with store: false and
// not kept, and a deleted response in the middle of a conversation leaves the later ones whole.

import t from 'tap';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { DEMO_KEY, PRO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type Script } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';

const ADMIN = 'bounded-admin-token-0123';
const MB = 1024 * 1024;

let up: FakeUpstream;
let answers = 0;
/** Each answer a new text, streamed when asked. */
const answer: Script = (_req, res, body) => {
  const text = `answer ${++answers}`;
  return body.stream === true ? writeSse(res, streamFrames(['answer', text.slice(6)])) : json(res, 200, completionBody(text));
};
t.before(async () => {
  up = await startUpstream(answer);
});
t.teardown(() => up.close());

interface Rig {
  gw: TestGateway;
  demo: OpenAI;
  acme: OpenAI;
  /** Bytes the store holds for the account, as the store counts them. */
  stored(account?: string): Promise<number>;
}

let redis: TestRedis | undefined;
let raw: Redis | undefined;
let rigs = 0;

async function rig(t: any, kind: 'memory' | 'redis', responses: Record<string, number> = {}): Promise<Rig & { prefix: string }> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  const prefix = `tg-bounded-${process.pid}-${rigs++}:`;
  c.store = kind === 'memory' ? { kind: 'memory' } : { kind: 'redis', url: redis!.url, prefix };
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000 };
  c.models.push({
    id: 'gpt', provider: 'oai', supports_vision: true, max_images: 4, context_window: 2_000_000, max_output_tokens: 100,
    price: { input_per_mtok: 10, output_per_mtok: 10 },
  });
  c.responses = responses;
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  return {
    gw,
    prefix,
    demo: new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 }),
    acme: new OpenAI({ apiKey: PRO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 }),
    stored: (account = 'demo') => gw.gateway.storedResponseBytes(account),
  };
}

/** What Redis holds under a prefix: MEMORY USAGE of every key (whatever their layout). */
async function redisBytes(prefix: string): Promise<number> {
  let total = 0;
  let cursor = '0';
  do {
    const [next, keys] = await raw!.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const k of keys) total += Number(await raw!.call('MEMORY', 'USAGE', k, 'SAMPLES', '0'));
  } while (cursor !== '0');
  return total;
}

async function get(gw: TestGateway, id: string, method = 'GET', key = DEMO_KEY) {
  const res = await fetch(`${gw.url}/v1/responses/${id}`, { method, headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, headers: res.headers, body: await res.json() as any };
}

function expect404(t: any, r: Awaited<ReturnType<typeof get>>, what: string) {
  t.equal(r.status, 404, `${what}: 404`);
  t.equal(r.body.code, 'response_not_found', `${what}: response_not_found`);
  t.same(schemas.error(r.body), [], `${what}: the envelope`);
  t.equal(r.body.request_id, r.headers.get('x-request-id'));
}

const imageInput = (url: string) => [{ role: 'user' as const, content: [{ type: 'input_text' as const, text: 'Look at this.' }, { type: 'input_image' as const, image_url: url, detail: 'auto' as const }] }];
const followUp = (i: number) => `Follow-up ${String(i).padStart(2, '0')}: and what else do you see in the picture, in one short sentence please?`; // 99-100 bytes

/** The reproduction: a large image, then fifteen small follow-ups. */
async function reproduction(t: any, r: Rig, measure: () => Promise<number>) {
  const image = `data:image/png;base64,${Buffer.alloc(MB, 7).toString('base64')}`;
  const first = await r.demo.responses.create({ model: 'gpt', input: imageInput(image) });
  t.equal((first as any).store, true);
  const afterFirst = await measure();
  t.ok(afterFirst >= image.length, `the image is stored (${afterFirst} bytes)`);
  let prev = first.id;
  const expected: any[] = [
    { role: 'user', content: [{ type: 'text', text: 'Look at this.' }, { type: 'image_url', image_url: { url: image, detail: 'auto' } }] },
    { role: 'assistant', content: first.output_text },
  ];
  const ids = [first.id];
  for (let i = 1; i <= 15; i++) {
    up.requests.length = 0;
    const next = i === 15
      ? await r.demo.responses.stream({ model: 'gpt', input: followUp(i), previous_response_id: prev }).finalResponse()
      : await r.demo.responses.create({ model: 'gpt', input: followUp(i), previous_response_id: prev });
    expected.push({ role: 'user', content: followUp(i) });
    // The model gets the whole conversation, exactly: every earlier turn once, image included.
    if (i === 1 || i === 15) t.same(up.requests[0]!.body.messages, expected, `follow-up ${i}: the whole conversation reached the model`);
    else if (JSON.stringify(up.requests[0]!.body.messages) !== JSON.stringify(expected)) t.fail(`follow-up ${i}: the conversation differs`);
    expected.push({ role: 'assistant', content: next.output_text });
    t.equal((next as any).store, true);
    prev = next.id;
    ids.push(next.id);
  }
  const total = await measure();
  t.ok(total - afterFirst < 15 * 4096, `fifteen follow-ups add their own parts only: ${total - afterFirst} bytes (the whole conversation each: 15 x ${afterFirst})`);
  t.ok(total < 1.5 * afterFirst, `the conversation is stored once: ${total} bytes in all`);
  // Each is still read back as it was answered, and the last continues the whole conversation.
  const last = await get(r.gw, prev);
  t.equal(last.status, 200);
  t.equal(last.body.output[0].content[0].text, expected.at(-1).content);
  t.equal(last.body.previous_response_id, ids.at(-2));
  up.requests.length = 0;
  await r.demo.responses.create({ model: 'gpt', input: 'Done?', previous_response_id: prev });
  t.same(up.requests[0]!.body.messages, [...expected, { role: 'user', content: 'Done?' }], 'and continues it');
  up.requests.length = 0;
  return ids;
}

async function limits(t: any, r: Rig & { prefix: string }) {
  // max_bytes 20000: a response whose own part is larger is answered, not kept.
  const big = 'x'.repeat(25_000);
  const balance = async () => ((await (await fetch(`${r.gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any).balance_units;
  const before = await balance();
  const whole = await fetch(`${r.gw.url}/v1/responses`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt', input: big }),
  });
  t.equal(whole.status, 200, 'above max_bytes: answered');
  const body = await whole.json() as any;
  t.equal(body.store, false, 'its store is false');
  t.equal(body.status, 'completed');
  t.same(schemas.response(body), [], 'a valid response object');
  t.ok(Number(whole.headers.get('x-tollgate-units-charged')) > 0, 'and charged as any answer');
  t.equal(before - await balance(), Number(whole.headers.get('x-tollgate-units-charged')));
  expect404(t, await get(r.gw, body.id), 'GET of a response not kept');
  const cont = await r.demo.responses.create({ model: 'gpt', input: 'more', previous_response_id: body.id }).catch((e) => e);
  t.ok(cont instanceof OpenAI.NotFoundError, 'it cannot be continued');
  t.equal(cont.code, 'response_not_found');
  const streamed = await r.demo.responses.stream({ model: 'gpt', input: big }).finalResponse();
  t.equal((streamed as any).store, false, 'streamed: response.completed says store false');
  expect404(t, await get(r.gw, streamed.id), 'GET of a streamed response not kept');
  t.equal(await r.stored(), 0, 'nothing stored');

  // max_account_bytes 50000: responses of about 15 KB each; the fourth would pass the cap.
  const mid = (i: number) => `${i} ${'y'.repeat(14_000)}`;
  const kept: string[] = [];
  for (let i = 0; i < 3; i++) {
    const res = await r.demo.responses.create({ model: 'gpt', input: mid(i) });
    t.equal((res as any).store, true, `response ${i} kept`);
    kept.push(res.id);
  }
  const full = await r.stored();
  t.ok(full > 42_000 && full <= 50_000, `three kept: ${full} bytes`);
  const over = await r.demo.responses.create({ model: 'gpt', input: mid(3) });
  t.equal((over as any).store, false, 'the account is full: answered with store false');
  expect404(t, await get(r.gw, over.id), 'GET of the one past the account cap');
  t.equal(await r.stored(), full, 'the account holds no more');
  const other = await r.acme.responses.create({ model: 'gpt', input: mid(4) });
  t.equal((other as any).store, true, 'another account still stores');
  t.equal((await get(r.gw, kept[0]!, 'DELETE')).status, 200);
  t.ok(await r.stored() < full - 14_000, 'DELETE frees its bytes');
  const again = await r.demo.responses.create({ model: 'gpt', input: mid(5) });
  t.equal((again as any).store, true, 'then there is room again');

  // max_chain_length 4: a conversation of four responses is kept; the fifth is answered, not kept.
  let prev = (await r.acme.responses.create({ model: 'gpt', input: 'one' })).id;
  for (let i = 2; i <= 4; i++) {
    const res = await r.acme.responses.create({ model: 'gpt', input: `turn ${i}`, previous_response_id: prev });
    t.equal((res as any).store, true, `response ${i} of the conversation kept`);
    prev = res.id;
  }
  up.requests.length = 0;
  const fifth = await r.acme.responses.create({ model: 'gpt', input: 'turn 5', previous_response_id: prev });
  t.equal((fifth as any).store, false, 'the fifth would pass max_chain_length: store false');
  t.equal(up.requests[0]!.body.messages.length, 9, 'it was still answered with the whole conversation');
  expect404(t, await get(r.gw, fifth.id, 'GET', PRO_KEY), 'GET of the fifth');
}

async function deletion(t: any, r: Rig) {
  const a = await r.demo.responses.create({ model: 'gpt', input: 'A' });
  const b = await r.demo.responses.create({ model: 'gpt', input: 'B', previous_response_id: a.id });
  const c = await r.demo.responses.create({ model: 'gpt', input: 'C', previous_response_id: b.id });
  const withC = await r.stored();
  t.equal((await get(r.gw, b.id, 'DELETE')).status, 200, 'DELETE of the middle one');
  expect404(t, await get(r.gw, b.id), 'GET of the deleted one');
  expect404(t, await get(r.gw, b.id, 'DELETE'), 'DELETE again');
  const gone = await r.demo.responses.create({ model: 'gpt', input: 'x', previous_response_id: b.id }).catch((e) => e);
  t.equal(gone.status, 404, 'the deleted one cannot be continued');
  t.equal(gone.code, 'response_not_found');
  t.equal((await get(r.gw, c.id)).status, 200, 'a later one is still there');
  up.requests.length = 0;
  await r.demo.responses.create({ model: 'gpt', input: 'D', previous_response_id: c.id });
  t.same(up.requests[0]!.body.messages, [
    { role: 'user', content: 'A' }, { role: 'assistant', content: a.output_text },
    { role: 'user', content: 'B' }, { role: 'assistant', content: b.output_text },
    { role: 'user', content: 'C' }, { role: 'assistant', content: c.output_text },
    { role: 'user', content: 'D' },
  ], 'and continues the whole conversation, the deleted turn included');
  expect404(t, await get(r.gw, c.id, 'GET', PRO_KEY), "another account's GET of it");
  const foreign = await r.acme.responses.create({ model: 'gpt', input: 'x', previous_response_id: c.id }).catch((e) => e);
  t.equal(foreign.status, 404, 'another account cannot continue it');
  const stored = await r.stored();
  t.ok(stored > withC, 'D kept');
}

/** Random conversations: what is stored is at most each response's own part, read back exactly. */
async function property(t: any, r: Rig, runs: number) {
  const sizes = fc.array(fc.record({ chars: fc.integer({ min: 0, max: 6000 }), stream: fc.boolean(), wide: fc.boolean() }), { minLength: 1, maxLength: 6 });
  let run = 0;
  const client = r.acme;
  await fc.assert(fc.asyncProperty(sizes, async (turns) => {
    const start = await r.stored('acme');
    let own = 0;
    let prev: string | undefined;
    const conversation: any[] = [];
    run++;
    for (const [i, turn] of turns.entries()) {
      const input = `${run}.${i} ${(turn.wide ? 'ü€' : 'ab').repeat(turn.chars)}`;
      up.requests.length = 0;
      const params = { model: 'gpt', input, ...(prev === undefined ? {} : { previous_response_id: prev }) };
      const res = turn.stream ? await client.responses.stream(params).finalResponse() : await client.responses.create(params);
      conversation.push({ role: 'user', content: input });
      if (JSON.stringify(up.requests[0]!.body.messages) !== JSON.stringify(conversation)) throw new Error(`turn ${i}: the conversation sent differs`);
      conversation.push({ role: 'assistant', content: res.output_text });
      const got = await get(r.gw, res.id, 'GET', PRO_KEY);
      if (got.status !== 200) throw new Error(`turn ${i}: GET ${got.status}`);
      // A response's own part: the object GET answers, and its request's input.
      own += Buffer.byteLength(JSON.stringify(got.body)) + Buffer.byteLength(JSON.stringify([{ role: 'user', content: input }])) + 32;
      const stored = await r.stored('acme') - start;
      if (stored > own) throw new Error(`turn ${i}: stored ${stored} bytes, more than the parts (${own})`);
      prev = res.id;
    }
  }), { numRuns: runs });
  t.pass(`${runs} random conversations: stored bytes within their own parts, read back whole`);
}

t.test('memory store', async (t) => {
  await t.test('a large image, then fifteen small follow-ups: stored once', async (t) => {
    const r = await rig(t, 'memory');
    await reproduction(t, r, () => r.stored());
  });
  await t.test('max_bytes, max_account_bytes, max_chain_length', async (t) => {
    await limits(t, await rig(t, 'memory', { max_bytes: 20_000, max_account_bytes: 50_000, max_chain_length: 4 }));
  });
  await t.test('deleting a response in the middle of a conversation', async (t) => deletion(t, await rig(t, 'memory')));
  await t.test('property', async (t) => property(t, await rig(t, 'memory'), 12));
});

t.test('redis store', async (t) => {
  redis = await startRedis();
  t.teardown(() => redis!.stop());
  raw = new Redis(redis.url);
  t.teardown(() => raw!.quit());
  await t.test('a large image, then fifteen small follow-ups: stored once', async (t) => {
    const r = await rig(t, 'redis');
    const ids = await reproduction(t, r, () => redisBytes(r.prefix));
    // A continuation's record holds its own input only.
    const second = JSON.parse((await raw!.hget(`${r.prefix}{resp:demo}:r:${ids[1]}`, 'v'))!);
    t.same(second.input, [{ role: 'user', content: followUp(1) }], "a continuation's record: its own input");
    t.equal(second.response.id, ids[1]);
    t.equal(await raw!.hget(`${r.prefix}{resp:demo}:r:${ids[1]}`, 'p'), ids[0], 'and the one it continues');
  });
  await t.test('max_bytes, max_account_bytes, max_chain_length', async (t) => {
    await limits(t, await rig(t, 'redis', { max_bytes: 20_000, max_account_bytes: 50_000, max_chain_length: 4 }));
  });
  await t.test('deleting a response in the middle of a conversation', async (t) => deletion(t, await rig(t, 'redis')));
  await t.test('property', async (t) => property(t, await rig(t, 'redis'), 8));
});
