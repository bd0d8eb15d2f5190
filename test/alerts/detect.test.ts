// Each alert event triggered for real (CONTRACT section 15), on both stores: a key's budget
// spent past 50/80/100% through real requests (each threshold once per period, re-armed by a
// budget change), the wallet falling below alerts.wallet_low_units (once per crossing, re-armed
// by a top-up), a key expiring within 7 days (the sweep, once), and a replica ejected by the
// health checker; each delivered signed to a real receiver.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { SECRET, admin, alertsConfig, spend, startAlertsGateway, startReceiver, until, type AlertsGateway } from '../helpers/alerts.js';
import { startRedis } from '../helpers/redis.js';

const DEMO = 'tg_demo_0000000000000000';

async function events(g: AlertsGateway, type?: string): Promise<any[]> {
  const res = await admin(g.url, 'GET', '/admin/alerts?limit=1000');
  const all = res.json.events as any[];
  return type === undefined ? all : all.filter((e) => e.type === type);
}

async function flush(g: AlertsGateway): Promise<void> {
  await (await g.gateway.alerts).flush();
}

type StoreKind = 'memory' | 'redis';

async function storeConfig(t: any, kind: StoreKind): Promise<Record<string, any>> {
  if (kind === 'memory') return { kind: 'memory' };
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  return { kind: 'redis', url: redis.url, prefix: `detect${Date.now()}:` };
}

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind}: budget.threshold at 50, 80 and 100% of a key's budget, once each, re-armed by a budget change`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const g = await startAlertsGateway(alertsConfig({ webhooks: [{ url: rx.url, secret: SECRET }] }, { store: await storeConfig(t, kind) }), { background: false });
    t.teardown(() => g.close());
    const created = await admin(g.url, 'POST', '/admin/accounts/demo/keys', { budget: { units: 100, period: 'month' } });
    t.equal(created.status, 201);
    const { id, key } = created.json;
    const seen: number[][] = [];
    for (let i = 1; i <= 10; i++) {
      const r = await spend(g.url, key, 10);
      t.equal(r.status, 200, `request ${i} served`);
      t.equal(r.headers['x-tollgate-units-charged'], '10', `request ${i} costs 10 units`);
      await flush(g);
      seen.push((await events(g, 'budget.threshold')).map((e) => e.data.threshold).sort((a, b) => a - b));
    }
    t.strictSame(seen[3], [], 'nothing before 50%');
    t.strictSame(seen[4], [50], '50% crossed at 50 of 100 units');
    t.strictSame(seen[6], [50], 'nothing new at 70%');
    t.strictSame(seen[7], [50, 80], '80% crossed at 80 units');
    t.strictSame(seen[9], [50, 80, 100], '100% crossed at 100 units');
    const over = await spend(g.url, key, 10);
    t.equal(over.status, 402);
    t.equal(over.json.code, 'budget_exceeded');
    await flush(g);
    const list = await events(g, 'budget.threshold');
    t.equal(list.length, 3, 'a refused request adds nothing');
    for (const e of list) {
      t.strictSame(e.subject, { account: 'demo', key_id: id });
      t.match(e.id, /^evt_[0-9a-f]{32}$/);
      t.equal(e.data.budget_units, 100);
      t.equal(e.data.period, 'month');
    }
    // Newest first.
    t.strictSame(list.map((e) => e.data.threshold), [100, 80, 50]);

    // A new budget is a new version: its thresholds are armed again.
    t.equal((await admin(g.url, 'PATCH', `/admin/keys/${id}`, { budget: { units: 150, period: 'month' } })).status, 200);
    // Some instance may still hold the old controls for up to a second (CONTRACT section 8).
    t.ok(await until(async () => (await spend(g.url, key, 10)).status === 200, 3000));
    await flush(g);
    t.equal((await events(g, 'budget.threshold')).length, 3, '110 of 150 units crosses nothing: 50% (75) was passed before the change, by no request');
    t.equal((await spend(g.url, key, 10)).status, 200);
    await flush(g);
    const after = await events(g, 'budget.threshold');
    t.strictSame(after.map((e) => [e.data.budget_units, e.data.threshold]), [[150, 80], [100, 100], [100, 80], [100, 50]],
      '120 of 150 units: the new budget\'s 80% is crossed, a new event though 80% of the old one was sent');

    // Each is delivered, signed.
    await (await g.gateway.alerts).worker.tick();
    t.equal(rx.delivered().length, 4);
    t.ok(rx.delivered().every((r) => r.signed && r.body.type === 'budget.threshold'));
    t.strictSame(new Set(rx.delivered().map((r) => r.headers['x-tollgate-event-id'])), new Set(after.map((e) => e.id)));
    const res = await admin(g.url, 'GET', '/admin/alerts');
    t.ok(res.json.events.every((e: any) => e.delivery.state === 'delivered' && e.delivery.attempts === 1 && e.delivery.last_status === 204));
  });

  t.test(`${kind}: wallet.low once per crossing, re-armed when the balance rises above the mark`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const g = await startAlertsGateway(alertsConfig({ wallet_low_units: 500, webhooks: [{ url: rx.url, secret: SECRET, events: ['wallet.low'] }] }, { store: await storeConfig(t, kind) }), { background: false });
    t.teardown(() => g.close());
    const balances: number[] = [];
    const counts: number[] = [];
    for (let i = 0; i < 7; i++) {
      const r = await spend(g.url, DEMO, 100);
      t.equal(r.status, 200);
      balances.push(Number(r.headers['x-tollgate-wallet-balance-units']));
      await flush(g);
      counts.push((await events(g, 'wallet.low')).length);
    }
    t.strictSame(balances, [900, 800, 700, 600, 500, 400, 300]);
    t.strictSame(counts, [0, 0, 0, 0, 0, 1, 1], 'at 500 the balance is not below the mark; at 400 it is, once');
    const first = (await events(g, 'wallet.low'))[0];
    t.strictSame(first.subject, { account: 'demo' });
    t.strictSame(first.data, { available_units: 400, wallet_low_units: 500 });

    t.equal((await admin(g.url, 'POST', '/admin/accounts/demo/credits', { units: 1000, idempotency_key: 'top-up-1' })).status, 200);
    for (const want of [1200, 1100, 1000, 900, 800, 700, 600, 500, 400, 300]) {
      const r = await spend(g.url, DEMO, 100);
      t.equal(Number(r.headers['x-tollgate-wallet-balance-units']), want);
    }
    await flush(g);
    const both = await events(g, 'wallet.low');
    t.equal(both.length, 2, 'a second crossing after the top-up: a second event');
    t.not(both[0].id, both[1].id);
    t.equal(both[0].data.available_units, 400);
    await (await g.gateway.alerts).worker.tick();
    t.equal(rx.delivered().length, 2);
    t.ok(rx.delivered().every((r) => r.signed));
  });

  t.test(`${kind}: key.expiring for a key expiring within 7 days, once`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const g = await startAlertsGateway(alertsConfig({ webhooks: [{ url: rx.url, secret: SECRET }] }, { store: await storeConfig(t, kind) }), { background: false });
    t.teardown(() => g.close());
    const soon = new Date(Date.now() + 3 * 86400_000).toISOString();
    const later = new Date(Date.now() + 10 * 86400_000).toISOString();
    const a = (await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: soon })).json;
    const b = (await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: later })).json;
    const c = (await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: later })).json;
    await admin(g.url, 'PATCH', `/admin/keys/${c.id}`, { expires_at: soon });
    const revoked = (await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: soon })).json;
    await admin(g.url, 'DELETE', `/admin/keys/${revoked.id}`);
    const alerts = await g.gateway.alerts;
    t.equal(await alerts.sweep(), 2, 'the key expiring in 3 days and the one patched to do so; not the 10-day one nor the revoked one');
    t.equal(await alerts.sweep(), 0, 'a second sweep finds them sent');
    const list = await events(g, 'key.expiring');
    t.strictSame(new Set(list.map((e) => e.subject.key_id)), new Set([a.id, c.id]));
    t.notOk(list.some((e) => e.subject.key_id === b.id));
    t.ok(list.every((e) => e.data.expires_at === new Date(Date.parse(soon)).toISOString() && e.subject.account === 'demo'));
    await alerts.worker.tick();
    t.equal(rx.delivered().length, 2);
  });
}

t.test('upstream.ejected: a replica failing its health check', async (t) => {
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const dead = await startReceiver();
  await dead.down();
  const cfg = alertsConfig({ webhooks: [{ url: rx.url, secret: SECRET, events: ['upstream.ejected'] }] }, {
    providers: {
      echo: { kind: 'echo' },
      fleet: {
        kind: 'openai', targets: [{ url: `http://127.0.0.1:${dead.port}/v1` }],
        health_check: { path: '/models', interval_ms: 200 },
      },
    },
    models: [
      { id: 'echo-small', provider: 'echo' },
      { id: 'remote', provider: 'fleet' },
    ],
  });
  const g = await startAlertsGateway(cfg, { background: false });
  t.teardown(() => g.close());
  const alerts = await g.gateway.alerts;
  t.ok(await until(async () => { await alerts.flush(); return (await events(g, 'upstream.ejected')).length > 0; }), 'the ejection is an event');
  // Failing again and again within the window is the same event.
  await sleep(600);
  await alerts.flush();
  const list = await events(g, 'upstream.ejected');
  t.equal(list.length, 1);
  t.strictSame(list[0].subject, { provider: 'fleet', target: `http://127.0.0.1:${dead.port}/v1` });
  t.equal(list[0].data.reason, 'health_check');
  await alerts.worker.tick();
  t.equal(rx.delivered().length, 1);
  t.ok(rx.delivered()[0]!.signed);
  t.equal(rx.delivered()[0]!.body.subject.provider, 'fleet');
});

