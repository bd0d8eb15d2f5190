// Rate limits and concurrency caps through real sockets: exact 429s with Retry-After, headers,
// one view across two instances on Redis, nothing left behind after mixed load, Redis outages.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY, baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { serveChild } from '../helpers/child.js';
import { startRedis } from '../helpers/redis.js';
import { completionBody, json, startUpstream, streamFrames, writeSse } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'limits-admin-token-0123';

function config(plan: Record<string, unknown>, store?: Record<string, unknown>) {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans.free = { paid: false, ...plan };
  if (store) c.store = store;
  return c;
}

const ask = (extra: Record<string, any> = {}) => ({ model: 'echo-small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, ...extra });

async function account(gw: TestGateway): Promise<any> {
  return (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

t.test('requests_per_minute: 429 rate_limit_exceeded with Retry-After and headers on every answer', async (t) => {
  const gw = await startGateway(config({ requests_per_minute: 3 }));
  t.teardown(() => gw.close());
  for (let i = 0; i < 3; i++) {
    const res = await postChat(gw.url, ask());
    t.equal(res.status, 200);
    t.equal(res.headers['x-ratelimit-limit-requests'], '3');
    t.equal(res.headers['x-ratelimit-remaining-requests'], String(2 - i));
    t.match(res.headers['x-ratelimit-reset-requests'], /^(\d+ms|\d+s|\d+m\d+s)$/);
  }
  const wallet = await account(gw);
  const res = await postChat(gw.url, ask());
  t.equal(res.status, 429);
  t.same(await account(gw), wallet, 'a 429 leaves the wallet, holds and usage untouched');
  const body = res.json();
  t.same(schemas.error(body), []);
  t.equal(body.code, 'rate_limit_exceeded');
  t.equal(body.type, 'rate_limit_error');
  const seconds = Number(res.headers['retry-after']);
  t.ok(seconds >= 1 && seconds <= 60, `Retry-After ${seconds}`);
  t.ok(Number(res.headers['retry-after-ms']) <= seconds * 1000);
  t.equal(res.headers['x-ratelimit-remaining-requests'], '0');
  const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(models.headers.get('x-ratelimit-limit-requests'), '3', 'the models endpoint reports the limit');
  t.equal(models.headers.get('x-ratelimit-remaining-requests'), '0', 'without consuming');
});

t.test('a 429 shows every limit, as it stands with the refused request\'s points given back', async (t) => {
  const gw = await startGateway(config({ requests_per_minute: 2, tokens_per_minute: 100_000 }));
  t.teardown(() => gw.close());
  for (let i = 0; i < 2; i++) t.equal((await postChat(gw.url, ask())).status, 200);
  // The answers' corrections land with their last writes: wait until the limiter is still.
  let before = '';
  for (let i = 0; i < 50; i++) {
    await sleep(20);
    const peek = (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } })).headers.get('x-ratelimit-remaining-tokens')!;
    if (peek === before) break;
    before = peek;
  }
  const refused = await postChat(gw.url, ask({ max_tokens: 500 }));
  t.equal(refused.status, 429);
  t.equal(refused.json().error.message.startsWith('Rate limit reached: 2 requests per minute'), true, refused.text);
  t.equal(refused.headers['x-ratelimit-limit-requests'], '2');
  t.equal(refused.headers['x-ratelimit-remaining-requests'], '0');
  t.equal(refused.headers['x-ratelimit-limit-tokens'], '100000', 'the limit that did not refuse is shown too');
  t.equal(refused.headers['x-ratelimit-remaining-tokens'], before, 'without the refused request\'s estimate (500+), which it did not keep');
  t.match(refused.headers['x-ratelimit-reset-tokens'], /^(\d+ms|\d+s|\d+m\d+s)$/);
  const now = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(now.headers.get('x-ratelimit-remaining-tokens'), before, 'the limiter agrees');
});

t.test('a client that waits exactly Retry-After gets through', async (t) => {
  const gw = await startGateway(config({ requests_per_minute: 1 }));
  t.teardown(() => gw.close());
  t.equal((await postChat(gw.url, ask())).status, 200);
  const refused = await postChat(gw.url, ask());
  t.equal(refused.status, 429);
  const waitMs = Number(refused.headers['retry-after-ms']);
  t.ok(waitMs > 0 && waitMs <= 60000);
  // Waiting the exact milliseconds the answer named is enough (no need to round up to seconds).
  await sleep(waitMs);
  t.equal((await postChat(gw.url, ask())).status, 200, `through after ${waitMs} ms`);
});

t.test('tokens_per_minute: the estimate is taken at admission and corrected after the answer', async (t) => {
  const gw = await startGateway(config({ tokens_per_minute: 100 }));
  t.teardown(() => gw.close());
  // Each request is estimated at prompt (~9) + max_tokens 40, then corrected to ~9 + 1.
  for (let i = 0; i < 6; i++) t.equal((await postChat(gw.url, ask({ max_tokens: 40 }))).status, 200, `request ${i + 1}`);
  const res = await postChat(gw.url, ask({ max_tokens: 90 }));
  t.equal(res.status, 429, 'the corrected usage still counts');
  t.equal(res.json().code, 'rate_limit_exceeded');
  t.match(res.json().message, /tokens per minute/);
  t.equal(res.headers['x-ratelimit-limit-tokens'], '100');
});

t.test('max_concurrent: 429 too_many_concurrent; slots come back on every path', async (t) => {
  const up = await startUpstream(async (_req, res, body) => {
    if (body.messages[0].content === 'slow') { await writeSse(res, streamFrames(['a']).slice(0, 2), { end: false }); await sleep(400); await writeSse(res, streamFrames(['a']).slice(2)); return; }
    json(res, 200, completionBody('fast'));
  });
  const c = config({ max_concurrent: 2 });
  c.providers.up = { kind: 'openai', base_url: up.baseUrl };
  c.models.push({ id: 'm', provider: 'up' });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  const slow = () => postChat(gw.url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'slow' }] });
  const open = [slow(), slow()];
  while (up.requests.length < 2) await sleep(10);
  const res = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'fast' }] });
  t.equal(res.status, 429);
  t.equal(res.json().code, 'too_many_concurrent');
  t.equal(res.headers['retry-after'], '1');
  for (const r of await Promise.all(open)) t.ok(sseData(r.text).done, 'the streams in flight finished');
  t.equal((await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'fast' }] })).status, 200, 'slots released');
});

async function mixedLoad(t: any, store?: Record<string, unknown>) {
  let n = 0;
  const up = await startUpstream(async (req, res, body) => {
    const kind = n++ % 5;
    if (kind === 0) return json(res, 500, { error: { message: 'boom' } });
    if (kind === 1) { await sleep(300); if (!res.destroyed) json(res, 200, completionBody('late')); return; }
    if (body.stream) return writeSse(res, streamFrames(['s', 't']));
    return json(res, 200, completionBody('ok'));
  });
  const c = config({ max_concurrent: 8, requests_per_minute: 100000, tokens_per_minute: 100000000 }, store);
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 150, circuit_failures: 100000 };
  c.models.push({ id: 'm', provider: 'up' });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  const statuses = new Map<number, number>();
  const one = async (i: number) => {
    const ac = new AbortController();
    if (i % 7 === 0) setTimeout(() => ac.abort(), 5 + (i % 20));
    try {
      const r = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: i % 2 === 0, messages: [{ role: 'user', content: `q${i}` }] }),
      });
      await r.text();
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    } catch {
      statuses.set(0, (statuses.get(0) ?? 0) + 1);
    }
  };
  for (let i = 0; i < 1000; i += 25) await Promise.all(Array.from({ length: 25 }, (_, j) => one(i + j)));
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`);
  t.ok((statuses.get(200) ?? 0) > 0 && (statuses.get(429) ?? 0) > 0 && (statuses.get(502) ?? 0) + (statuses.get(504) ?? 0) > 0, 'a real mix of outcomes');
  let acct = await account(gw);
  for (let i = 0; i < 50 && acct.held_units !== 0; i++) { await sleep(20); acct = await account(gw); }
  t.equal(acct.held_units, 0, 'zero open holds');
  let slots = -1;
  for (let i = 0; i < 50 && slots !== 0; i++) { await sleep(20); slots = await gw.gateway.slotsInUse('demo'); }
  t.equal(slots, 0, 'zero slots in use');
}

t.test('1,000 mixed requests leave zero slots and zero holds (memory)', async (t) => mixedLoad(t));

t.test('1,000 mixed requests leave zero slots and zero holds (Redis)', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  await mixedLoad(t, { kind: 'redis', url: redis.url, prefix: `mixed-${process.pid}:` });
});

t.test('two instances on one Redis share every limit', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const store = { kind: 'redis', url: redis.url, prefix: `shared-limits-${process.pid}:` };
  const a = await startGateway(config({ requests_per_minute: 10 }, store));
  const b = await startGateway(config({ requests_per_minute: 10 }, store));
  t.teardown(async () => { await a.close(); await b.close(); });
  const results = await Promise.all(Array.from({ length: 30 }, (_, i) => postChat(i % 2 === 0 ? a.url : b.url, ask())));
  t.equal(results.filter((r) => r.status === 200).length, 10, 'exactly 10 of 30 across both instances, not 20');
  t.equal(results.filter((r) => r.status === 429).length, 20);

  const c1 = await startGateway(config({ max_concurrent: 1 }, { ...store, prefix: `shared-slots-${process.pid}:` }));
  const c2 = await startGateway(config({ max_concurrent: 1 }, { ...store, prefix: `shared-slots-${process.pid}:` }));
  t.teardown(async () => { await c1.close(); await c2.close(); });
  const ac = new AbortController();
  const r1 = await fetch(`${c1.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo-small', stream: true, messages: [{ role: 'user', content: 'one two three four five six seven eight nine ten' }] }),
  });
  t.equal(r1.status, 200);
  // echo streams instantly; hold the slot by not finishing to read: the response is done only at its last byte.
  const r2 = await postChat(c2.url, ask());
  t.ok(r2.status === 429 || r2.status === 200, 'the other instance sees the slot while the first answer is open');
  await r1.text();
});

t.test('Redis down: closed answers 503 at once; open serves unmetered on per-instance limits; both exact again after', async (t) => {
  for (const mode of ['closed', 'open'] as const) {
    const redis = await startRedis();
    t.teardown(() => redis.stop());
    const store = { kind: 'redis', url: redis.url, prefix: `outage-${mode}-${process.pid}:`, on_error: mode };
    const gw = await startGateway(config({ requests_per_minute: 5, max_concurrent: 10 }, store));
    t.teardown(() => gw.close());
    t.equal((await postChat(gw.url, ask())).status, 200);
    await redis.stop();
    await sleep(1100); // past the key cache's TTL: the store is asked again
    const started = Date.now();
    const during = await Promise.all(Array.from({ length: 6 }, () => postChat(gw.url, ask())));
    t.ok(Date.now() - started < 5000, `${mode}: no hang`);
    if (mode === 'closed') {
      for (const r of during) {
        t.equal(r.status, 503, 'closed: refused');
        t.equal(r.json().code, 'service_unavailable');
        t.ok(Number(r.headers['retry-after']) >= 1);
      }
      t.equal((await fetch(`${gw.url}/readyz`)).status, 503);
    } else {
      t.same(during.map((r) => r.status).sort(), [200, 200, 200, 200, 200, 429], 'open: served on per-instance limits (5 per minute, counted afresh)');
      t.match(gw.logs(), /UNMETERED/, 'open: said loudly');
      t.equal(gw.logs().match(/UNMETERED/g)!.length, 1, 'once per outage');
    }
    await redis.restart();
    let ready = 0;
    for (let i = 0; i < 100 && ready !== 200; i++) { await sleep(50); ready = (await fetch(`${gw.url}/readyz`)).status; }
    t.equal(ready, 200, `${mode}: ready again by itself`);
    // Redis ran with --save '': its data is gone; a reload seeds the config's accounts again.
    await gw.gateway.reload(config({ requests_per_minute: 5, max_concurrent: 10 }, store));
    const after = await Promise.all(Array.from({ length: 6 }, () => postChat(gw.url, ask())));
    t.equal(after.filter((r) => r.status === 200).length, 5, `${mode}: limits exact again (5 per minute)`);
  }
});

t.test("a crashed instance's Redis leases expire by themselves; live ones are renewed", async (t) => {
  const { Redis } = await import('ioredis');
  const { RedisSlots } = await import('../../lib/limits/slots.js');
  const pino = (await import('pino')).default;
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const crashed = new Redis(redis.url);
  const alive = new Redis(redis.url);
  t.teardown(() => { crashed.disconnect(); alive.disconnect(); });
  const log = pino({ level: 'silent' });
  const a = new RedisSlots(crashed, 'lease-test:', false, log, 300);
  const b = new RedisSlots(alive, 'lease-test:', false, log, 300);
  const held = await a.acquire('acct', 1);
  t.type(held, 'function');
  t.equal(await b.acquire('acct', 1), undefined, 'the slot is taken');
  crashed.disconnect(); // the instance dies without releasing: no more renewals
  await sleep(450);
  const mine = await b.acquire('acct', 1);
  t.type(mine, 'function', 'the dead lease expired and the slot came back');
  await sleep(700); // more than two lease lifetimes: renewals keep it
  t.equal(await b.inUse('acct'), 1, 'a live lease is renewed past its lifetime');
  mine!();
  await sleep(50);
  t.equal(await b.inUse('acct'), 0);
});

t.test('only leases held for a while are renewed: a short request sends no renewal', async (t) => {
  const { Redis } = await import('ioredis');
  const { RedisSlots } = await import('../../lib/limits/slots.js');
  const pino = (await import('pino')).default;
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  const slots = new RedisSlots(client, 'renew-test:', false, pino({ level: 'silent' }), 400);
  const renewed: string[] = [];
  const scripted = client as unknown as { tgSlotRenew(key: string, now: number, ttl: number, id: string): Promise<number> };
  const renew = scripted.tgSlotRenew;
  scripted.tgSlotRenew = function (key, now, ttl, id) { renewed.push(key); return renew.call(this, key, now, ttl, id); };
  const long = await slots.acquire('long', 10); // keeps the renewal timer ticking (every 100 ms)
  const started = Date.now();
  while (Date.now() - started < 600) {
    const release = await slots.acquire('short', 10);
    await sleep(10);
    release!();
  }
  long!();
  t.ok(renewed.length >= 2, `the long lease was renewed (${renewed.length} times in 600 ms of a 400 ms lease)`);
  t.same([...new Set(renewed)], ['renew-test:{acct:long}:leases'], 'and no short one ever was');
  await sleep(250);
  t.equal(await slots.inUse('short') + await slots.inUse('long'), 0, 'all released');
});

t.test('two gateway processes on one Redis share the rate limit; Redis stopped mid-load hangs nothing', async (t) => {
  const { mkdtemp, writeFile, rm } = await import('node:fs/promises');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-limits-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server: { port: 0 }
store: { kind: redis, url: "${redis.url}", prefix: "procs-${process.pid}:" }
plans: { free: { paid: false, requests_per_minute: 12 } }
accounts: [{ id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}] }]
providers: { echo: { kind: echo } }
models: [{ id: echo-small, provider: echo }]
`);
  const urls = [(await serveChild(t, file)).url, (await serveChild(t, file)).url];
  const results = await Promise.all(Array.from({ length: 30 }, (_, i) => postChat(urls[i % 2]!, ask())));
  t.equal(results.filter((r) => r.status === 200).length, 12, 'exactly 12 of 30 across two processes, not 24');

  // Redis goes away while requests are in flight: every one of them ends, none hangs.
  const started = Date.now();
  const inflight = Promise.all(Array.from({ length: 40 }, (_, i) => postChat(urls[i % 2]!, ask()).then((r) => r.status, () => 0)));
  await redis.stop();
  const statuses = await inflight;
  t.ok(Date.now() - started < 10000, 'all ended');
  t.ok(statuses.every((s) => s === 200 || s === 429 || s === 503), `only served, limited or 503: ${[...new Set(statuses)].join(',')}`);
});

t.test('a request refused at the hold (402) gives back its points, and its headers say so', async (t) => {
  const c = config({ requests_per_minute: 10, tokens_per_minute: 100_000 });
  // A price at which the wallet pays for small requests only.
  c.models[0].price = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };
  c.accounts[0].wallet_units = 400;
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const ok = await postChat(gw.url, ask());
  t.equal(ok.status, 200);
  const requests = Number(ok.headers['x-ratelimit-remaining-requests']);
  t.equal(requests, 9);
  const refused = await postChat(gw.url, ask({ max_tokens: 1000 }));
  t.equal(refused.status, 402);
  t.equal(refused.json().error.code, 'insufficient_credits');
  t.equal(refused.headers['x-ratelimit-remaining-requests'], String(requests), 'requests: as before the refused request');
  // What the limiter holds now (GET /v1/models reads it without consuming): nothing of the
  // refused request's estimate is in it, and its answer said so.
  const now = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(now.status, 200);
  t.equal(refused.headers['x-ratelimit-remaining-tokens'], now.headers.get('x-ratelimit-remaining-tokens'), 'tokens: as the limiter holds them after the refusal');
  t.ok(Number(refused.headers['x-ratelimit-remaining-tokens']) >= Number(ok.headers['x-ratelimit-remaining-tokens']), 'no estimate of the refused request taken');
  const next = await postChat(gw.url, ask());
  t.equal(next.status, 200);
  t.equal(next.headers['x-ratelimit-remaining-requests'], String(requests - 1), 'the refused request took nothing');
});
