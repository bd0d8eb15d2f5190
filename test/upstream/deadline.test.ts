// A request's whole attempt chain (replicas, then fallbacks) never outlives its credit hold
// (CONTRACT section 16). A target's replicas share its provider's timeout_ms: a fleet whose
// replicas all stall answers 504 provider_timeout after that timeout, not after one timeout per
// replica, charged nothing and its hold released; a fallback still gets its own timeout; a
// replica that fails fast still leaves the rest of the time to the next. The hold lives for the
// chain, then store.settle_wait_ms, then slack: the settle never finds it expired. A stream that
// keeps producing is cut at the deadline, in the stream, and charged what it delivered, once.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { authHeaders, postChat, sseData } from '../helpers/gateway.js';
import { ADMIN, ask, answerAs, startFleet } from '../helpers/fleet.js';
import { startRedis } from '../helpers/redis.js';
import { chunk, json, startUpstream, streamFrames, writeSse, type Script } from '../helpers/upstream.js';

const TIMEOUT_MS = 1000;
const TIMEOUT_ERROR = { message: 'The model provider did not answer in time.', type: 'server_error', param: null, code: 'provider_timeout' };

/** Never answers a chat request; ends when the gateway gives up on it. GETs (health checks) answer at once. */
const stall: Script = async (req, res) => {
  if (req.method === 'GET') { json(res, 200, {}); return; }
  await new Promise((r) => res.once('close', r));
};

const account = async (url: string) =>
  (await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<any>;

t.test('every replica stalls: 504 provider_timeout after the timeout, not once per replica; nothing charged, hold released', async (t) => {
  const fleet = await startFleet(t, 3, { timeout_ms: TIMEOUT_MS, balance: 'round_robin' });
  t.equal((await postChat(fleet.gw.url, ask('warm up'))).status, 200, 'a first request, to time the others alone');
  for (const r of fleet.replicas) r.setScript(stall);
  const before = await account(fleet.gw.url);
  for (const stream of [false, true]) {
    const started = Date.now();
    const res = await postChat(fleet.gw.url, ask('stalls', stream ? { stream: true } : {}));
    const took = Date.now() - started;
    t.equal(res.status, 504, `stream ${stream}: 504`);
    t.strictSame(res.json(), { ...TIMEOUT_ERROR, request_id: res.headers['x-request-id'], error: TIMEOUT_ERROR }, 'the envelope');
    t.ok(took >= TIMEOUT_MS - 20 && took < 2.5 * TIMEOUT_MS, `after about one timeout_ms (${took} ms; one per replica would be ${3 * TIMEOUT_MS})`);
  }
  const tried = fleet.chats().reduce((a, b) => a + b, 0) - 1;
  t.equal(tried, 2, `each stalled request reached one replica: no time was left for another (${JSON.stringify(fleet.chats())}, the first request's included)`);
  const after = await account(fleet.gw.url);
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'the holds are released');
});

t.test('a replica that fails fast leaves the rest of the timeout to the next one', async (t) => {
  const fleet = await startFleet(t, 2, { timeout_ms: TIMEOUT_MS, balance: 'round_robin' });
  fleet.replicas[0]!.setScript((req, res) => (req.method === 'GET' ? json(res, 200, {}) : json(res, 500, { error: { message: 'down' } })));
  fleet.replicas[1]!.setScript(async (req, res, body, seen) => { await sleep(TIMEOUT_MS / 2); await answerAs('r1')(req, res, body, seen); });
  const res = await postChat(fleet.gw.url, ask('retry'));
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.content, 'r1');
});

t.test('stalled replicas, then a fallback: the fallback gets its own timeout and answers', async (t) => {
  const fb = await startUpstream(answerAs('fallback'));
  t.teardown(() => fb.close());
  const fleet = await startFleet(t, 2, { timeout_ms: TIMEOUT_MS, balance: 'round_robin' }, {
    config: (c) => {
      c.providers.fb = { kind: 'openai', base_url: fb.baseUrl, timeout_ms: TIMEOUT_MS };
      c.models.find((m: any) => m.id === 'm').fallbacks = [{ provider: 'fb', upstream_model: 'fb-7b' }];
    },
  });
  for (const r of fleet.replicas) r.setScript(stall);
  const started = Date.now();
  const res = await postChat(fleet.gw.url, ask('falls back'));
  const took = Date.now() - started;
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.content, 'fallback');
  t.ok(took < 1.8 * TIMEOUT_MS, `after one stalled replica's timeout, not both (${took} ms)`);
  t.strictSame(fleet.chats().reduce((a, b) => a + b, 0), 1, 'one replica tried');
});

t.test('a stream that keeps producing is cut at the deadline: in-stream provider_timeout, charged what it delivered, once', async (t) => {
  let sent = 0;
  const fleet = await startFleet(t, 1, { timeout_ms: TIMEOUT_MS }, { config: (c) => { c.server.sse_keepalive_ms = 50; } });
  fleet.replicas[0]!.setScript(async (req, res) => {
    if (req.method === 'GET') { json(res, 200, {}); return; }
    await writeSse(res, streamFrames([]).slice(0, 1), { end: false });
    while (!res.destroyed) {
      res.write(`data: ${JSON.stringify(chunk({ content: ' word' }))}\n\n`);
      sent++;
      await sleep(20);
    }
  });
  const before = await account(fleet.gw.url);
  const started = Date.now();
  const res = await postChat(fleet.gw.url, ask('long', { stream: true }));
  const took = Date.now() - started;
  const sse = sseData(res.text);
  t.equal(res.status, 200);
  t.notOk(sse.done, 'no [DONE]: the answer is incomplete');
  t.match(sse.events.at(-1), { code: 'provider_timeout' }, 'the deadline is told in the stream');
  t.ok(took < 2 * TIMEOUT_MS, `cut at the deadline (${took} ms)`);
  const delivered = sse.events.filter((e) => e.choices?.[0]?.delta?.content === ' word').length;
  t.ok(delivered > 0 && sent >= delivered);
  let after = await account(fleet.gw.url);
  for (let i = 0; i < 50 && after.held_units !== 0; i++) { await sleep(20); after = await account(fleet.gw.url); }
  t.equal(after.held_units, 0, 'the hold is settled');
  t.equal(after.usage.day.requests - before.usage.day.requests, 1, 'one debit');
  t.ok(before.balance_units - after.balance_units > 0, 'for the delivered words');
});

t.test('the hold lives for the chain, then store.settle_wait_ms, then slack', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const prefix = `deadline-${process.pid}:`;
  let release: () => void = () => {};
  const fleet = await startFleet(t, 3, { timeout_ms: TIMEOUT_MS }, {
    config: (c) => {
      c.store = { kind: 'redis', url: redis.url, prefix, settle_wait_ms: 120_000 };
      c.providers.fb = { kind: 'echo', timeout_ms: 700 };
      c.models.find((m: any) => m.id === 'm').fallbacks = [{ provider: 'fb', upstream_model: 'echo-small' }];
    },
  });
  for (const r of fleet.replicas) {
    r.setScript(async (req, res, body, seen) => {
      if (req.method === 'GET') { json(res, 200, {}); return; }
      await new Promise<void>((r2) => { release = r2; });
      await answerAs('r')(req, res, body, seen);
    });
  }
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  for (let i = 0; i < 200 && (await fetch(`${fleet.gw.url}/readyz`)).status !== 200; i++) await sleep(25);
  const pending = fetch(`${fleet.gw.url}/v1/chat/completions`, { method: 'POST', headers: authHeaders(), body: JSON.stringify(ask('held')) });
  while (fleet.chats().reduce((a, b) => a + b, 0) === 0) await sleep(10);
  const holds = await c.hgetall(`${prefix}{acct:demo}:holds`);
  const open = Object.entries(holds).filter(([field]) => !field.startsWith('#'));
  t.equal(open.length, 1, 'one hold open');
  const ttl = Number(open[0]![1].split(':')[1]) - Date.now();
  // timeout_ms of the fleet (its replicas share it) and of the fallback, then the settle's wait, then a minute.
  const expected = TIMEOUT_MS + 700 + 120_000 + 60_000;
  t.ok(ttl <= expected && ttl > expected - 3000, `expires in ${ttl} ms, about ${expected}`);
  release();
  t.equal((await pending).status, 200);
});
