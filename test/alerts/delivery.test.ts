// The delivery worker against real receivers (CONTRACT section 15), on both stores: a receiver
// that fails (500), hangs (no answer: the timeout), answers slowly, restarts; signatures checked
// with a reference HMAC; one hour of simulated downtime (the attempts and the backoff schedule),
// then delivered; 24 simulated hours of failures, then `failed`; two workers on one Redis
// deliver each event once per webhook (the lease); a lease left by a crashed instance is waited
// out; a gateway restarted between an event and its delivery still delivers it.

import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeliveryWorker, FIRST_DELAY_MS, MAX_DELAY_MS, RETRY_WINDOW_MS } from '../../lib/alerts/deliver.js';
import type { AlertEvent, AlertOutbox } from '../../lib/store/alerts.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { FakeClock, SECRET, admin, alertsConfig, spend, startAlertsGateway, startReceiver, until, type Receiver } from '../helpers/alerts.js';
import { startRedis } from '../helpers/redis.js';

let n = 0;
function event(clock: FakeClock, type: AlertEvent['type'] = 'wallet.low'): AlertEvent {
  n++;
  return { id: `evt_test${String(n).padStart(4, '0')}`, type, at: new Date(clock.now()).toISOString(), subject: { account: 'demo' }, data: { available_units: n, wallet_low_units: 1000 } };
}

function worker(outbox: AlertOutbox, clock: FakeClock, hooks: Receiver[], timeoutMs = 2000): DeliveryWorker {
  const w = new DeliveryWorker(outbox, { clock, random: () => 0.5 });
  w.configure(hooks.map((h) => ({ url: h.url, secret: SECRET, events: ['budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected'] })), timeoutMs);
  return w;
}

type Kind = 'memory' | 'redis';

async function outboxOf(t: any, kind: Kind): Promise<AlertOutbox> {
  if (kind === 'memory') {
    const store = await MemoryStore.open({ path: null });
    t.teardown(() => store.close());
    return store.alerts;
  }
  const redis = await startRedis();
  const store = await RedisStore.open({ url: redis.url, prefix: 'deliv:' });
  t.teardown(async () => { await store.close(); await redis.stop(); });
  return store.alerts;
}

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind}: failing, hanging, slow and restarting receivers`, async (t) => {
    const outbox = await outboxOf(t, kind);
    const clock = new FakeClock();
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    // Long enough for a loaded machine to connect and answer; the hang waits it out once.
    const w = worker(outbox, clock, [rx], 2000);
    t.teardown(() => w.stop());

    // 500: pending, retried after the first delay (jitter fixed at its middle).
    rx.mode = 'fail';
    const e1 = event(clock);
    t.equal(await outbox.append(e1, [rx.url], clock.now()), true);
    t.equal(await outbox.append(e1, [rx.url], clock.now()), false, 'the same id is appended once');
    await w.tick();
    let d = (await outbox.get(e1.id))!.deliveries[0]!;
    t.strictSame(d, { webhook: rx.url, state: 'pending', attempts: 1, last_status: 500, next_at: clock.now() + FIRST_DELAY_MS });
    await w.tick();
    t.equal(rx.received.length, 1, 'not retried before it is due');
    t.strictSame(await outbox.due(clock.now(), 10), []);

    // Hanging: no answer within delivery_timeout_ms is a failed attempt with no status.
    rx.mode = 'hang';
    clock.advance(FIRST_DELAY_MS);
    await w.tick();
    d = (await outbox.get(e1.id))!.deliveries[0]!;
    t.match(d, { state: 'pending', attempts: 2, last_status: null, next_at: clock.now() + 2 * FIRST_DELAY_MS });
    t.equal(rx.received.length, 2);

    // Down (connection refused), then back on the same port: delivered at the next attempt.
    await rx.down();
    clock.advance(2 * FIRST_DELAY_MS);
    await w.tick();
    d = (await outbox.get(e1.id))!.deliveries[0]!;
    t.match(d, { state: 'pending', attempts: 3, last_status: null });
    await rx.up();
    rx.mode = { slowMs: 100 };
    clock.advance(4 * FIRST_DELAY_MS);
    await w.tick();
    d = (await outbox.get(e1.id))!.deliveries[0]!;
    t.match(d, { state: 'delivered', attempts: 4, last_status: 204 }, 'a slow answer within the timeout is a delivery');
    t.strictSame(await outbox.due(clock.now() + RETRY_WINDOW_MS, 10), [], 'nothing left to deliver');

    // What arrived: the exact body, signed with the secret, with the event's id.
    const got = rx.delivered();
    t.equal(got.length, 1);
    const r = got[0]!;
    t.equal(r.signed, true, 'x-tollgate-signature is sha256=<hex HMAC-SHA256 of the body bytes>');
    t.equal(r.headers['content-type'], 'application/json');
    t.equal(r.headers['x-tollgate-event-id'], e1.id);
    t.strictSame(r.body, e1);
    t.ok(rx.received.every((x) => x.signed), 'every attempt was signed alike');
  });

  t.test(`${kind}: down for an hour of simulated time: the backoff schedule, then delivered`, async (t) => {
    const outbox = await outboxOf(t, kind);
    const clock = new FakeClock();
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const w = worker(outbox, clock, [rx]);
    t.teardown(() => w.stop());
    await rx.down();
    const start = clock.now();
    const e = event(clock);
    await outbox.append(e, [rx.url], clock.now());
    const times: number[] = [];
    const statuses: Array<number | null> = [];
    for (let i = 0; i < 20; i++) {
      const cur = (await outbox.get(e.id))!.deliveries[0]!;
      if (cur.state !== 'pending') break;
      clock.t = cur.next_at;
      if (clock.now() - start >= 3600_000 && !(await portOpen(rx))) await rx.up();
      times.push((clock.now() - start) / 1000);
      await w.tick();
      statuses.push((await outbox.get(e.id))!.deliveries[0]!.last_status);
    }
    t.strictSame(times, [0, 30, 90, 210, 450, 930, 1890, 3810], 'attempts at 0, then after 30 s doubling (jitter at its middle)');
    t.strictSame(statuses, [null, null, null, null, null, null, null, 204]);
    t.match((await outbox.get(e.id))!.deliveries[0], { state: 'delivered', attempts: 8, last_status: 204 });
    t.equal(rx.delivered().length, 1);
  });

  t.test(`${kind}: failing for 24 hours of simulated time: failed`, async (t) => {
    const outbox = await outboxOf(t, kind);
    const clock = new FakeClock();
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    rx.mode = 'fail';
    const w = worker(outbox, clock, [rx]);
    t.teardown(() => w.stop());
    const start = clock.now();
    const e = event(clock);
    await outbox.append(e, [rx.url], clock.now());
    let last = start;
    for (let i = 0; i < 100; i++) {
      const cur = (await outbox.get(e.id))!.deliveries[0]!;
      if (cur.state !== 'pending') break;
      t.ok(cur.next_at - last <= MAX_DELAY_MS * 1.2, 'no wait longer than the cap');
      clock.t = cur.next_at;
      last = clock.now();
      await w.tick();
    }
    const d = (await outbox.get(e.id))!.deliveries[0]!;
    // 8 attempts to 3810 s, then one an hour while within 24 h: 22 more.
    t.match(d, { state: 'failed', attempts: 30, last_status: 500 });
    t.equal(rx.received.length, 30);
    t.ok(last - start <= RETRY_WINDOW_MS, 'no attempt after 24 hours');
    t.ok(last - start > RETRY_WINDOW_MS - MAX_DELAY_MS * 1.2, 'attempts went on until the 24 hours were nearly out');
    t.strictSame(await outbox.due(clock.now() + 10 * RETRY_WINDOW_MS, 10), []);
  });

  t.test(`${kind}: a lease left by a crashed instance is waited out, then another delivers`, async (t) => {
    const outbox = await outboxOf(t, kind);
    const clock = new FakeClock();
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const e = event(clock);
    await outbox.append(e, [rx.url], clock.now());
    // The crashed instance took the lease of the delivery and never gave it back.
    t.equal(await outbox.lease(e.id, 'crashed-instance', 3000, clock.now(), rx.url), true);
    const w = worker(outbox, clock, [rx]);
    t.teardown(() => w.stop());
    await w.tick();
    t.equal(rx.received.length, 0, 'nobody delivers while the lease holds');
    t.equal(await outbox.lease(e.id, 'third', 3000, clock.now(), rx.url), false);
    // Redis counts a lease in its own time; the memory store in the worker's clock.
    clock.advance(3100);
    if (kind === 'redis') await new Promise((r) => setTimeout(r, 3100));
    await w.tick();
    t.equal(rx.delivered().length, 1, 'delivered once the lease ran out');
    t.match((await outbox.get(e.id))!.deliveries[0], { state: 'delivered', attempts: 1 });
  });
}

async function portOpen(rx: Receiver): Promise<boolean> {
  const { createConnection } = await import('node:net');
  return new Promise((resolve) => {
    const s = createConnection(rx.port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

t.test('redis: two instances deliver each event once per webhook', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const a = await RedisStore.open({ url: redis.url, prefix: 'two:' });
  const b = await RedisStore.open({ url: redis.url, prefix: 'two:' });
  t.teardown(async () => { await a.close(); await b.close(); });
  const rx1 = await startReceiver();
  const rx2 = await startReceiver();
  t.teardown(async () => { await rx1.close(); await rx2.close(); });
  rx1.mode = { slowMs: 30 };
  rx2.mode = { slowMs: 30 };
  const clock = new FakeClock();
  const ids: string[] = [];
  for (let i = 0; i < 12; i++) {
    const e = event(clock);
    ids.push(e.id);
    await a.alerts.append(e, [rx1.url, rx2.url], clock.now());
  }
  const wa = worker(a.alerts, clock, [rx1, rx2]);
  const wb = worker(b.alerts, clock, [rx1, rx2]);
  t.teardown(async () => { await wa.stop(); await wb.stop(); });
  // Both at once, both up the whole time.
  await Promise.all([wa.tick(), wb.tick(), wa.tick(), wb.tick()]);
  for (const rx of [rx1, rx2]) {
    const got = rx.delivered().map((r) => r.headers['x-tollgate-event-id']).sort();
    t.strictSame(got, [...ids].sort(), 'each event exactly once at this webhook');
  }
  for (const id of ids) t.ok((await a.alerts.get(id))!.deliveries.every((d) => d.state === 'delivered' && d.attempts === 1));
});

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind}: a gateway restarted between an event and its delivery still delivers it`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    let store: Record<string, any>;
    if (kind === 'memory') {
      const dir = await mkdtemp(join(tmpdir(), 'tollgate-alerts-'));
      t.teardown(() => rm(dir, { recursive: true, force: true }));
      store = { kind: 'memory', path: dir, fsync_ms: 0 };
    } else {
      const redis = await startRedis();
      t.teardown(() => redis.stop());
      store = { kind: 'redis', url: redis.url, prefix: 'restart:' };
    }
    const config = alertsConfig({ wallet_low_units: 950, webhooks: [{ url: rx.url, secret: SECRET }] }, { store });
    // The first instance detects the event but never delivers it (its worker does not run).
    const g1 = await startAlertsGateway(config, { background: false });
    t.equal((await spend(g1.url, 'tg_demo_0000000000000000', 100)).status, 200);
    await (await g1.gateway.alerts).flush();
    const listed = (await admin(g1.url, 'GET', '/admin/alerts')).json.events;
    t.equal(listed.length, 1);
    t.match(listed[0].delivery, { state: 'pending', attempts: 0, last_status: null });
    await g1.close();
    t.equal(rx.received.length, 0);

    // The restarted one (its worker running) delivers it.
    const g2 = await startAlertsGateway(config, { pollMs: 50 });
    t.teardown(() => g2.close());
    t.ok(await until(() => rx.delivered().length === 1, 5000), 'delivered after the restart');
    t.equal(rx.delivered()[0]!.headers['x-tollgate-event-id'], listed[0].id);
    t.ok(rx.delivered()[0]!.signed);
    t.ok(await until(async () => (await admin(g2.url, 'GET', '/admin/alerts')).json.events[0].delivery.state === 'delivered'));
  });
}

t.test('stop() (the SIGTERM drain) lets the attempt in flight finish and records it, then starts nothing', async (t) => {
  const store = await MemoryStore.open({ path: null });
  t.teardown(() => store.close());
  const clock = new FakeClock();
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  rx.mode = { slowMs: 300 };
  const w = worker(store.alerts, clock, [rx]);
  const first = event(clock);
  const second = event(clock);
  await store.alerts.append(first, [rx.url], clock.now());
  await store.alerts.append(second, [rx.url], clock.now());
  const pass = w.tick();
  t.ok(await until(() => rx.received.length === 1), 'the first attempt is in flight');
  await w.stop();
  await pass;
  t.match((await store.alerts.get(first.id))!.deliveries[0], { state: 'delivered', attempts: 1, last_status: 204 }, 'its outcome was recorded');
  t.match((await store.alerts.get(second.id))!.deliveries[0], { state: 'pending', attempts: 0 }, 'the next one was left for whoever runs next');
  await w.tick();
  t.equal(rx.received.length, 1, 'a stopped worker sends nothing');
  t.equal(await store.alerts.lease(first.id, 'other', 1000, clock.now(), rx.url), true, 'its leases were given back');
});

t.test('redis: two gateways, both delivering: each event once per webhook', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const rx1 = await startReceiver();
  const rx2 = await startReceiver();
  t.teardown(async () => { await rx1.close(); await rx2.close(); });
  rx1.mode = { slowMs: 20 };
  const config = alertsConfig({ wallet_low_units: 950, webhooks: [{ url: rx1.url, secret: SECRET }, { url: rx2.url, secret: SECRET }] },
    { store: { kind: 'redis', url: redis.url, prefix: 'twogw:' } });
  const g1 = await startAlertsGateway(config, { pollMs: 10 });
  const g2 = await startAlertsGateway(config, { pollMs: 10 });
  t.teardown(async () => { await g1.close(); await g2.close(); });
  // Events detected on both: the wallet on one, expiring keys swept by both (appended once).
  t.equal((await spend(g1.url, 'tg_demo_0000000000000000', 100)).status, 200);
  for (let i = 1; i <= 6; i++) {
    const g = i % 2 === 0 ? g1 : g2;
    await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: new Date(Date.now() + i * 3600_000).toISOString() });
  }
  await Promise.all([(await g1.gateway.alerts).sweep(), (await g2.gateway.alerts).sweep()]);
  const ids = (await admin(g1.url, 'GET', '/admin/alerts')).json.events.map((e: any) => e.id).sort();
  t.equal(ids.length, 7, 'one wallet.low and six key.expiring, each once though both swept');
  t.ok(await until(() => rx1.delivered().length >= 7 && rx2.delivered().length >= 7, 10_000));
  await new Promise((r) => setTimeout(r, 300));
  for (const rx of [rx1, rx2]) t.strictSame(rx.delivered().map((r) => r.headers['x-tollgate-event-id']).sort(), ids, 'each event once at this webhook');
});
