// The alerts outbox, the same on every store (lib/store/alerts.ts): memory, memory with a path
// (across a reopen), Redis and a Redis Cluster (every script of one slot). Append-if-absent by
// id, due deliveries, updates, the lease, newest-first pages with a cursor, the wallet flag, and
// keys expiring soon.

import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AlertEvent, AlertOutbox } from '../../lib/store/alerts.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { Store } from '../../lib/store/types.js';
import { startRedis } from '../helpers/redis.js';

const T0 = Date.UTC(2026, 10, 27);

function ev(i: number): AlertEvent {
  return { id: `evt_${i}`, type: 'budget.threshold', at: new Date(T0 + i).toISOString(), subject: { account: 'a', key_id: 'key_1' }, data: { threshold: i } };
}

interface Opened { store: Store; reopen?: () => Promise<Store> }

const kinds: Record<string, (t: any) => Promise<Opened>> = {
  memory: async () => ({ store: await MemoryStore.open({ path: null }) }),
  'memory with path': async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-outbox-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    return { store: await MemoryStore.open({ path: dir, fsyncMs: 0 }), reopen: () => MemoryStore.open({ path: dir, fsyncMs: 0 }) };
  },
  redis: async (t) => {
    const redis = await startRedis();
    t.teardown(() => redis.stop());
    return { store: await RedisStore.open({ url: redis.url, prefix: 'ob:' }), reopen: () => RedisStore.open({ url: redis.url, prefix: 'ob:' }) };
  },
  'redis cluster': async (t) => {
    const redis = await startRedis({ cluster: true });
    t.teardown(() => redis.stop());
    // A one-node cluster refuses any script whose keys are in two slots (CROSSSLOT); braces in
    // the prefix must not split them either.
    const open = () => RedisStore.open({ url: redis.url, prefix: 'ob{c:' });
    return { store: await open(), reopen: open };
  },
};

for (const [name, open] of Object.entries(kinds)) {
  t.test(name, async (t) => {
    const opened = await open(t);
    let store = opened.store;
    t.teardown(() => store.close());
    let a: AlertOutbox = store.alerts;

    t.equal(await a.append(ev(1), ['http://h1', 'http://h2'], T0), true);
    t.equal(await a.append({ ...ev(1), data: { other: true } }, ['http://h3'], T0), false, 'an id appended before changes nothing');
    t.strictSame((await a.get('evt_1'))!.event, ev(1));
    t.strictSame((await a.get('evt_1'))!.deliveries, [
      { webhook: 'http://h1', state: 'pending', attempts: 0, last_status: null, next_at: T0 },
      { webhook: 'http://h2', state: 'pending', attempts: 0, last_status: null, next_at: T0 },
    ]);
    t.equal(await a.get('evt_none'), undefined);
    for (let i = 2; i <= 7; i++) await a.append(ev(i), ['http://h1'], T0 + i);

    t.strictSame(await a.due(T0 + 3, 100), ['evt_1', 'evt_2', 'evt_3'], 'due: earliest first, none later than now');
    await a.update('evt_1', { webhook: 'http://h1', state: 'delivered', attempts: 1, last_status: 200, next_at: T0 });
    t.strictSame(await a.due(T0 + 3, 100), ['evt_1', 'evt_2', 'evt_3'], 'h2 is still pending');
    await a.update('evt_1', { webhook: 'http://h2', state: 'pending', attempts: 1, last_status: 503, next_at: T0 + 1000 });
    t.strictSame(await a.due(T0 + 3, 100), ['evt_2', 'evt_3']);
    t.strictSame(await a.due(T0 + 1000, 100), ['evt_2', 'evt_3', 'evt_4', 'evt_5', 'evt_6', 'evt_7', 'evt_1']);
    await a.update('evt_1', { webhook: 'http://h2', state: 'failed', attempts: 2, last_status: 503, next_at: T0 + 1000 });
    t.notOk((await a.due(T0 + 10_000, 100)).includes('evt_1'), 'nothing pending: never due again');
    t.match((await a.get('evt_1'))!.deliveries, [{ state: 'delivered', last_status: 200 }, { state: 'failed', attempts: 2, last_status: 503 }]);

    // Pages: newest first, each event once.
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await a.list(3, cursor);
      seen.push(...page.alerts.map((x) => x.event.id));
      cursor = page.next_cursor ?? undefined;
      pages++;
    } while (cursor !== undefined && pages < 10);
    t.strictSame(seen, ['evt_7', 'evt_6', 'evt_5', 'evt_4', 'evt_3', 'evt_2', 'evt_1']);
    t.equal(pages, 3);
    t.equal((await a.list(7)).next_cursor, null, 'a page that holds the rest has no next cursor');

    // The lease: one owner at a time, its own extended, given back.
    t.equal(await a.lease('evt_2', 'one', 60_000, T0), true);
    t.equal(await a.lease('evt_2', 'two', 60_000, T0), false);
    t.equal(await a.lease('evt_2', 'one', 60_000, T0), true);
    await a.unlease('evt_2', 'two');
    t.equal(await a.lease('evt_2', 'two', 60_000, T0), false, 'only its owner gives a lease back');
    await a.unlease('evt_2', 'one');
    t.equal(await a.lease('evt_2', 'two', 60_000, T0), true);

    // The wallet flag: armed until disarmed; each call says what it was.
    t.equal(await a.armWallet('acct-1', false), true);
    t.equal(await a.armWallet('acct-1', false), false);
    t.equal(await a.armWallet('acct-2', false), true, 'per account');
    t.equal(await a.armWallet('acct-1', true), false);
    t.equal(await a.armWallet('acct-1', true), true);
    t.equal(await a.armWallet('acct-2', true), false);
    await a.armWallet('acct-3', false);

    // Keys expiring soon.
    await store.createAccount({ id: 'a', plan: 'free', balance_units: 0 });
    const controls = (expires: number | null) => ({
      name: null, models: null, expires_at: expires, budget: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null },
      priority: null, allowed_ips: null, metadata: {}, team: null, tags: [], tags_locked: false, end_user_budget: null,
    });
    const digest = (c: string) => c.repeat(64);
    await store.createKey({ id: 'key_soon', account: 'a', digest: digest('a'), controls: controls(T0 + 86400_000) });
    await store.createKey({ id: 'key_late', account: 'a', digest: digest('b'), controls: controls(T0 + 30 * 86400_000) });
    await store.createKey({ id: 'key_never', account: 'a', digest: digest('c'), controls: controls(null) });
    await store.createKey({ id: 'key_moved', account: 'a', digest: digest('d'), controls: controls(T0 + 86400_000) });
    await store.updateKey('key_moved', { expires_at: null });
    await store.createKey({ id: 'key_gone', account: 'a', digest: digest('e'), controls: controls(T0 + 86400_000) });
    await store.revokeKey('key_gone');
    t.strictSame(await a.expiringKeys(T0, T0 + 7 * 86400_000), [{ id: 'key_soon', account: 'a', expires_at: T0 + 86400_000 }]);
    t.strictSame(await a.expiringKeys(T0 + 86400_000, T0 + 7 * 86400_000), [], 'from is exclusive');

    if (opened.reopen !== undefined) {
      await store.close();
      store = await opened.reopen();
      a = store.alerts;
      t.strictSame((await a.list(100)).alerts.map((x) => x.event.id), ['evt_7', 'evt_6', 'evt_5', 'evt_4', 'evt_3', 'evt_2', 'evt_1'], 'events survive a reopen');
      t.match((await a.get('evt_1'))!.deliveries, [{ state: 'delivered' }, { state: 'failed' }], 'so do delivery states');
      t.equal(await a.armWallet('acct-3', true), false, 'and wallet flags');
      t.equal(await a.append(ev(3), ['http://h1'], T0), false, 'an id is still appended once');
      t.equal(await a.append(ev(8), ['http://h1'], T0 + 8), true);
      t.equal((await a.list(1)).alerts[0]!.event.id, 'evt_8', 'a new event goes first');
    }
  });
}

// Per webhook (CONTRACT section 21: each webhook's lane reads its own): a due set per webhook,
// ordered by that delivery's own next_at, and a lease per (event, webhook) that never blocks
// another webhook's delivery of the same event.
for (const [name, open] of Object.entries(kinds)) {
  t.test(`${name}: due per webhook, lease per delivery`, async (t) => {
    const opened = await open(t);
    let store = opened.store;
    t.teardown(() => store.close());
    let a: AlertOutbox = store.alerts;
    const h1 = 'http://h1.example/hook?token={x}';
    const h2 = 'http://h2.example/hook';
    for (let i = 1; i <= 4; i++) await a.append(ev(i), [h1, h2], T0 + i);
    await a.append(ev(5), [h2], T0 + 5);
    t.strictSame(await a.due(T0 + 10, 100, h1), ['evt_1', 'evt_2', 'evt_3', 'evt_4'], 'h1: its events, in order');
    t.strictSame(await a.due(T0 + 10, 100, h2), ['evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5']);
    t.strictSame(await a.due(T0 + 10, 2, h2), ['evt_1', 'evt_2'], 'a page');
    t.strictSame(await a.due(T0 + 10, 100, 'http://other'), [], 'a webhook with none');

    // h1 fails evt_1 (retry later) and delivers evt_2: h2 is not concerned.
    await a.update('evt_1', { webhook: h1, state: 'pending', attempts: 1, last_status: null, next_at: T0 + 1000 });
    await a.update('evt_2', { webhook: h1, state: 'delivered', attempts: 1, last_status: 204, next_at: T0 + 10 });
    t.strictSame(await a.due(T0 + 10, 100, h1), ['evt_3', 'evt_4']);
    t.strictSame(await a.due(T0 + 1000, 100, h1), ['evt_3', 'evt_4', 'evt_1'], 'by its own next_at');
    t.strictSame(await a.due(T0 + 10, 100, h2), ['evt_1', 'evt_2', 'evt_3', 'evt_4', 'evt_5'], 'h2 unchanged');
    await a.update('evt_1', { webhook: h2, state: 'failed', attempts: 30, last_status: 500, next_at: T0 + 10 });
    t.strictSame(await a.due(T0 + 10, 100, h2), ['evt_2', 'evt_3', 'evt_4', 'evt_5']);
    t.strictSame(await a.due(T0 + 10, 100), ['evt_2', 'evt_3', 'evt_4', 'evt_5'], 'the whole due set: evt_1 waits for h1 only');

    // Appended within one millisecond: taken in the order appended (ids that sort otherwise).
    const burst = ['evt_z', 'evt_y', 'evt_x', 'evt_c', 'evt_b', 'evt_a'];
    for (const id of burst) await a.append({ ...ev(9), id }, ['http://burst'], T0 + 20);
    t.strictSame(await a.due(T0 + 20, 100, 'http://burst'), burst, 'in append order, due at the time appended');
    t.strictSame(await a.due(T0 + 19, 100, 'http://burst'), [], 'not before');

    // Leases per delivery: h1's does not hold h2's, nor the event's.
    t.equal(await a.lease('evt_3', 'one', 60_000, T0, h1), true);
    t.equal(await a.lease('evt_3', 'two', 60_000, T0, h1), false);
    t.equal(await a.lease('evt_3', 'two', 60_000, T0, h2), true, 'another webhook of the same event');
    t.equal(await a.lease('evt_3', 'two', 60_000, T0), true, 'the event as a whole');
    await a.unlease('evt_3', 'one', h1);
    t.equal(await a.lease('evt_3', 'two', 60_000, T0, h1), true, 'given back');

    if (opened.reopen !== undefined) {
      await store.close();
      store = await opened.reopen();
      a = store.alerts;
      t.strictSame(await a.due(T0 + 1000, 100, h1), ['evt_3', 'evt_4', 'evt_1'], 'the per-webhook due survives a reopen');
    }
  });
}
