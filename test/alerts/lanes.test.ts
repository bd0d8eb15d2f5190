// Webhooks are delivered independently (CONTRACT section 21, issue #40 finding 7): one lane per
// webhook, on real sockets. A receiver that accepts the connection and never answers (or answers
// slowly) does not delay a healthy one: the healthy receiver gets every event, in order, while
// the hanging one still holds its first (its delivery timeout has not elapsed: its attempt is
// still in flight, unrecorded). A lane's queue is bounded and drops nothing (what does not fit
// waits in the outbox). A reload stops the lane of a removed webhook (its pending deliveries
// fail; its attempt in flight is recorded when it ends) and starts lanes for added ones.

import t from 'tap';
import { Writable } from 'node:stream';
import pino from 'pino';
import { DeliveryWorker } from '../../lib/alerts/deliver.js';
import { LANE_QUEUE_MAX } from '../../lib/alerts/lane.js';
import type { AlertEvent, AlertOutbox } from '../../lib/store/alerts.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { SECRET, startReceiver, until, type Receiver } from '../helpers/alerts.js';
import { startRedis } from '../helpers/redis.js';

const ALL = ['budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected'] as const;
/** Far longer than any test waits: a hanging attempt never ends by its timeout here. */
const TIMEOUT_MS = 120_000;

let n = 0;
function event(): AlertEvent {
  n++;
  return { id: `evt_lane${String(n).padStart(5, '0')}`, type: 'wallet.low', at: new Date().toISOString(), subject: { account: 'demo' }, data: { available_units: n } };
}

function hooks(...rx: Receiver[]) {
  return rx.map((r) => ({ url: r.url, secret: SECRET, events: [...ALL] }));
}

async function outboxOf(t: any, kind: 'memory' | 'redis'): Promise<AlertOutbox> {
  if (kind === 'memory') {
    const store = await MemoryStore.open({ path: null });
    t.teardown(() => store.close());
    return store.alerts;
  }
  const redis = await startRedis();
  const store = await RedisStore.open({ url: redis.url, prefix: 'lanes:' });
  t.teardown(async () => { await store.close(); await redis.stop(); });
  return store.alerts;
}

async function append(outbox: AlertOutbox, count: number, to: Receiver[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const e = event();
    ids.push(e.id);
    await outbox.append(e, to.map((r) => r.url), Date.now());
  }
  return ids;
}

const idsAt = (rx: Receiver): string[] => rx.delivered().map((r) => r.headers['x-tollgate-event-id'] as string);

async function deliveryTo(outbox: AlertOutbox, id: string, rx: Receiver) {
  return (await outbox.get(id))!.deliveries.find((d) => d.webhook === rx.url)!;
}

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind}: a hanging receiver does not delay a healthy one`, async (t) => {
    const outbox = await outboxOf(t, kind);
    const hang = await startReceiver();
    const ok = await startReceiver();
    hang.mode = 'hang';
    const w = new DeliveryWorker(outbox, { pollMs: 20 });
    w.configure(hooks(hang, ok), TIMEOUT_MS);
    w.start();

    const first = await append(outbox, 12, [hang, ok]);
    t.ok(await until(() => ok.delivered().length === 12, 20_000), 'the healthy receiver got every event');
    t.strictSame(idsAt(ok), first, 'in order, each once');
    t.equal(hang.received.length, 1, 'the hanging receiver holds the first event');
    t.match(await deliveryTo(outbox, first[0]!, hang), { state: 'pending', attempts: 0 }, 'its attempt is still in flight: its timeout has not elapsed');

    // More events while it still hangs: the healthy lane goes on.
    const more = await append(outbox, 12, [hang, ok]);
    t.ok(await until(() => ok.delivered().length === 24, 20_000));
    t.strictSame(idsAt(ok), [...first, ...more], 'in order');
    t.ok(ok.received.every((r) => r.signed && r.headers['content-type'] === 'application/json'), 'signed like any delivery');
    t.equal(hang.received.length, 1, 'still hanging on the first');
    // The receiver counts an event once it answered; the lane records it just after: wait for that.
    const recorded = async () => (await Promise.all([...first, ...more].map((id) => deliveryTo(outbox, id, ok)))).every((d) => d?.state === 'delivered');
    t.ok(await until(recorded, 10_000), 'every delivery to the healthy receiver recorded');
    for (const id of [...first, ...more]) t.match(await deliveryTo(outbox, id, ok), { state: 'delivered', attempts: 1, last_status: 204 });

    // The hanging receiver goes away: its lane records the attempt (no answer), then shutdown.
    await hang.close();
    t.ok(await until(async () => (await deliveryTo(outbox, first[0]!, hang)).attempts === 1, 10_000));
    t.match(await deliveryTo(outbox, first[0]!, hang), { state: 'pending', attempts: 1, last_status: null });
    await w.stop();
    await ok.close();
  });
}

t.test('memory: a slow receiver does not delay a healthy one', async (t) => {
  const outbox = await outboxOf(t, 'memory');
  const slow = await startReceiver();
  const ok = await startReceiver();
  slow.mode = { slowMs: 5000 };
  const w = new DeliveryWorker(outbox, { pollMs: 20 });
  w.configure(hooks(slow, ok), TIMEOUT_MS);
  w.start();
  const ids = await append(outbox, 5, [slow, ok]);
  t.ok(await until(() => ok.delivered().length === 5, 20_000));
  t.strictSame(idsAt(ok), ids);
  t.ok(slow.delivered().length <= 1, `the slow receiver answered at most its first meanwhile (${slow.delivered().length})`);
  await slow.close();
  await w.stop();
  await ok.close();
});

t.test('memory: a lane\'s queue is bounded and drops nothing: the rest waits in the outbox', async (t) => {
  const outbox = await outboxOf(t, 'memory');
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, new Writable({ write(c, _e, cb) { lines.push(String(c)); cb(); } }));
  // Slack's shape: the secret is the path; the log shows the origin alone (as the console does).
  const hang = await startReceiver(undefined, '/services/T000/B000/SLACKPATHSECRET');
  const ok = await startReceiver();
  hang.mode = 'hang';
  const w = new DeliveryWorker(outbox, { pollMs: 20, logger });
  w.configure(hooks(hang, ok), TIMEOUT_MS);
  w.start();
  const count = 2 * LANE_QUEUE_MAX + 10;
  const ids = await append(outbox, count, [hang, ok]);
  t.ok(await until(() => ok.delivered().length === count, 30_000), 'the healthy lane took them all, page by page');
  t.strictSame(idsAt(ok), ids, 'in order');
  t.equal(hang.received.length, 1);
  t.ok(w.lane(hang.url)!.queued <= LANE_QUEUE_MAX, `the hanging lane holds at most ${LANE_QUEUE_MAX} (${w.lane(hang.url)!.queued})`);
  t.equal((await outbox.due(Date.now(), 10 * count, hang.url)).length, count, 'every delivery to it is still due in the outbox: none dropped');
  t.ok(await until(() => lines.some((l) => l.includes('webhook behind')), 5000), 'the backlog is logged');
  const behind = JSON.parse(lines.find((l) => l.includes('webhook behind'))!);
  t.equal(behind.webhook, `http://127.0.0.1:${hang.port}/***`, 'the origin alone');
  t.notMatch(lines.join(''), /SLACKPATHSECRET/, 'no log line holds the path');
  t.equal(behind.level, 40);
  await hang.close();
  await w.stop();
  await ok.close();
});

t.test('memory: a reload stops a removed webhook\'s lane and starts an added one\'s', async (t) => {
  const outbox = await outboxOf(t, 'memory');
  const hang = await startReceiver();
  const ok = await startReceiver();
  const added = await startReceiver();
  hang.mode = 'hang';
  const w = new DeliveryWorker(outbox, { pollMs: 20 });
  w.configure(hooks(hang, ok), TIMEOUT_MS);
  w.start();
  const before = await append(outbox, 4, [hang, ok]);
  t.ok(await until(() => ok.delivered().length === 4 && hang.received.length === 1, 20_000));

  w.configure(hooks(ok, added), TIMEOUT_MS);
  t.equal(w.lane(hang.url), undefined, 'the removed webhook has no lane');
  t.ok(w.lane(added.url), 'the added one has');
  const after = await append(outbox, 4, [ok, added]);
  t.ok(await until(() => ok.delivered().length === 8 && added.delivered().length === 4, 20_000));
  t.strictSame(idsAt(ok), [...before, ...after], 'the kept webhook: every event in order, across the reload');
  t.strictSame(idsAt(added), after, 'the added webhook: the events since');

  // The removed webhook's due deliveries fail (nobody to deliver to); the one in flight is let finish.
  t.ok(await until(async () => {
    for (const id of before.slice(1)) if ((await deliveryTo(outbox, id, hang)).state !== 'failed') return false;
    return true;
  }, 10_000), 'its other due deliveries failed');
  for (const id of before.slice(1)) t.match(await deliveryTo(outbox, id, hang), { state: 'failed', attempts: 0, last_status: null });
  t.match(await deliveryTo(outbox, before[0]!, hang), { state: 'pending', attempts: 0 }, 'its attempt in flight is not cut short');
  await hang.close();
  t.ok(await until(async () => (await deliveryTo(outbox, before[0]!, hang)).attempts === 1, 10_000), 'and is recorded when it ends');
  t.equal(hang.received.length, 1, 'nothing more was sent to it');
  await w.stop();
  await Promise.all([ok.close(), added.close()]);
});
