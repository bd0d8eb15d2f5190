// Stored responses (store: true, the default) on the memory store and on a real Redis:
// previous_response_id continues the conversation, GET returns the response, DELETE removes
// it, and another account's, a deleted or an expired id is 404 response_not_found.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { Store } from '../../lib/store/types.js';
import { DEMO_KEY, PRO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { startRedis } from '../helpers/redis.js';

async function req(url: string, method: string, key = DEMO_KEY) {
  const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, headers: res.headers, body: await res.json() as any };
}

function expect404(t: any, r: Awaited<ReturnType<typeof req>>, what: string) {
  t.equal(r.status, 404, `${what}: 404`);
  t.equal(r.body.code, 'response_not_found', `${what}: response_not_found`);
  t.same(schemas.error(r.body), [], `${what}: envelope`);
  t.equal(r.body.request_id, r.headers.get('x-request-id'));
}

async function scenario(t: any, store: Record<string, any>, up: FakeUpstream) {
  const c = baseConfig();
  c.store = store;
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 2000 };
  c.models.push({ id: 'gpt', provider: 'oai', upstream_model: 'internal/model-7b' });
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const demo = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const acme = new OpenAI({ apiKey: PRO_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });

  up.setScript((_req, res) => json(res, 200, completionBody('Hi Ada.')));
  const first = await demo.responses.create({ model: 'gpt', instructions: 'Be kind.', input: 'I am Ada.' });
  t.equal((first as any).store, true, 'store defaults to true');
  const got = await req(`${gw.url}/v1/responses/${first.id}`, 'GET');
  t.equal(got.status, 200);
  const { output_text: _sdkOnly, ...answered } = first; // the SDK adds output_text
  t.same(got.body, JSON.parse(JSON.stringify(answered)), 'GET returns the response as answered');
  t.same(schemas.response(got.body), []);
  const retrieved = await demo.responses.retrieve(first.id);
  t.equal(retrieved.output_text, 'Hi Ada.', 'the SDK retrieves it');

  up.setScript((_req, res) => json(res, 200, completionBody('You are Ada.')));
  const second = await demo.responses.create({ model: 'gpt', input: 'Who am I?', previous_response_id: first.id });
  t.equal(second.previous_response_id, first.id);
  t.same(up.requests.at(-1)!.body.messages, [
    { role: 'user', content: 'I am Ada.' },
    { role: 'assistant', content: 'Hi Ada.' },
    { role: 'user', content: 'Who am I?' },
  ], 'the earlier turns are prepended; the earlier instructions are not carried over');

  // A streamed answer is kept too, and a chain goes on from it.
  up.setScript((_req, res) => writeSse(res, streamFrames(['Still', ' Ada.'])));
  const third = await demo.responses.stream({ model: 'gpt', instructions: 'Be brief.', input: 'Sure?', previous_response_id: second.id }).finalResponse();
  t.same(up.requests.at(-1)!.body.messages, [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'I am Ada.' }, { role: 'assistant', content: 'Hi Ada.' },
    { role: 'user', content: 'Who am I?' }, { role: 'assistant', content: 'You are Ada.' },
    { role: 'user', content: 'Sure?' },
  ]);
  t.equal((await req(`${gw.url}/v1/responses/${third.id}`, 'GET')).body.output[0].content[0].text, 'Still Ada.');

  // Another account sees none of it, and cannot continue or delete it.
  expect404(t, await req(`${gw.url}/v1/responses/${first.id}`, 'GET', PRO_KEY), "another account's GET");
  expect404(t, await req(`${gw.url}/v1/responses/${first.id}`, 'DELETE', PRO_KEY), "another account's DELETE");
  const err = await acme.responses.create({ model: 'gpt', input: 'x', previous_response_id: first.id }).catch((e) => e);
  t.ok(err instanceof OpenAI.NotFoundError);
  t.equal(err.code, 'response_not_found');
  t.equal((await req(`${gw.url}/v1/responses/${first.id}`, 'GET')).status, 200, 'still there for its owner');

  // DELETE, then it is gone for every use.
  const del = await req(`${gw.url}/v1/responses/${first.id}`, 'DELETE');
  t.equal(del.status, 200);
  t.same(del.body, { id: first.id, object: 'response', deleted: true });
  expect404(t, await req(`${gw.url}/v1/responses/${first.id}`, 'GET'), 'GET after DELETE');
  expect404(t, await req(`${gw.url}/v1/responses/${first.id}`, 'DELETE'), 'DELETE twice');
  const gone = await demo.responses.create({ model: 'gpt', input: 'x', previous_response_id: first.id }).catch((e) => e);
  t.equal(gone.status, 404);
  t.equal(gone.code, 'response_not_found');
  t.equal((await req(`${gw.url}/v1/responses/${second.id}`, 'GET')).status, 200, 'later responses of the chain stay');

  // store: false keeps nothing.
  up.setScript((_req, res) => json(res, 200, completionBody('ok')));
  const unkept = await demo.responses.create({ model: 'gpt', input: 'forget me', store: false });
  t.equal((unkept as any).store, false);
  expect404(t, await req(`${gw.url}/v1/responses/${unkept.id}`, 'GET'), 'store: false');
  expect404(t, await req(`${gw.url}/v1/responses/resp_never`, 'GET'), 'an unknown id');

  const wrong = await fetch(`${gw.url}/v1/responses/${second.id}`, { method: 'PUT', headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(wrong.status, 405);
  t.equal(wrong.headers.get('allow'), 'GET, DELETE');
  const anon = await fetch(`${gw.url}/v1/responses/${second.id}`);
  t.equal(anon.status, 401);
  const nested = await fetch(`${gw.url}/v1/responses/${second.id}/input_items`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(nested.status, 404);
  t.equal(((await nested.json()) as any).code, 'unknown_url', 'paths under it are unknown_url');
  return { gw, ids: [second.id, third.id] };
}

/** Expiry at the store: a kept response is gone once its TTL passed (retention_hours x 1 h). */
async function expiry(t: any, store: Store) {
  await store.putResponse('demo', 'resp_short', '{"a":1}', null, 80);
  await store.putResponse('demo', 'resp_long', '{"b":2}', null, 60_000);
  t.equal(await store.getResponse('demo', 'resp_short'), '{"a":1}');
  t.equal(await store.getResponse('acme', 'resp_short'), undefined, 'per account');
  t.equal(await store.deleteResponse('acme', 'resp_long'), false, "another account's delete finds nothing");
  await sleep(200);
  t.equal(await store.getResponse('demo', 'resp_short'), undefined, 'expired');
  t.equal(await store.deleteResponse('demo', 'resp_short'), false, 'an expired one cannot be deleted');
  t.equal(await store.getResponse('demo', 'resp_long'), '{"b":2}');
  t.equal(await store.deleteResponse('demo', 'resp_long'), true);
  t.equal(await store.getResponse('demo', 'resp_long'), undefined);
}

let up: FakeUpstream;
t.before(async () => { up = await startUpstream((_req, res) => json(res, 200, completionBody('hi'))); });
t.teardown(() => up.close());

t.test('memory store', async (t) => {
  await scenario(t, { kind: 'memory' }, up);
  const store = await MemoryStore.open({ path: null, fsyncMs: 1000 });
  t.teardown(() => store.close());
  await expiry(t, store);
});

t.test('redis store', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const prefix = `tg-resp-${process.pid}:`;
  const { ids } = await scenario(t, { kind: 'redis', url: redis.url, prefix }, up);
  const raw = new Redis(redis.url);
  t.teardown(() => raw.quit());
  for (const [i, id] of ids.entries()) {
    const key = `${prefix}{resp:demo}:r:${id}`;
    t.equal(await raw.exists(key), 1, `kept under the account's own hash tag (${key})`);
    const ttl = await raw.pttl(key);
    if (i === ids.length - 1) t.ok(ttl > 23 * 3_600_000 && ttl <= 24 * 3_600_000, `TTL = retention_hours (${ttl} ms)`);
    // One that a later response continues lives at least as long, rounded up to 3 h (24 / 8).
    else t.ok(ttl > 24 * 3_600_000 && ttl <= 27 * 3_600_000, `an ancestor's TTL: retention_hours, rounded up (${ttl} ms)`);
  }
  const store = await RedisStore.open({ url: redis.url, prefix });
  t.teardown(() => store.close());
  await expiry(t, store);
});
