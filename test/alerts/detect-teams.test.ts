// budget.threshold for a team's budget (CONTRACT section 15), through real requests from two
// keys of the team, on both stores: 50/80/100% of the team's budget crossed once each (subject
// {account, team, key_id}: the key whose request crossed), beside a key's own budget's events; a
// team budget PATCH arms the thresholds again; each delivered signed. On Redis, the two keys'
// requests go concurrently to two gateways sharing one Redis: still one event per threshold.

import t from 'tap';
import { SECRET, admin, alertsConfig, spend, startAlertsGateway, startReceiver, until, type AlertsGateway } from '../helpers/alerts.js';
import { startRedis } from '../helpers/redis.js';

async function events(g: AlertsGateway, type = 'budget.threshold'): Promise<any[]> {
  const res = await admin(g.url, 'GET', '/admin/alerts?limit=1000');
  return (res.json.events as any[]).filter((e) => e.type === type);
}

async function flush(...gs: AlertsGateway[]): Promise<void> {
  for (const g of gs) await (await g.gateway.alerts).flush();
}

/** Team events as [threshold, budget units, key id], oldest first. */
const teamRows = (list: any[]) => list.filter((e) => e.data.scope === 'team').reverse().map((e) => [e.data.threshold, e.data.budget_units, e.subject.key_id]);

/** A team `core` of 100 units a month, key A (with 100 units of its own) and key B in it. */
async function setUp(g: AlertsGateway): Promise<{ a: { id: string; key: string }; b: { id: string; key: string } }> {
  const team = await admin(g.url, 'POST', '/admin/accounts/demo/teams', { id: 'core', budget: { units: 100, period: 'month' } });
  if (team.status !== 201) throw new Error(`team: ${team.status} ${JSON.stringify(team.json)}`);
  const a = await admin(g.url, 'POST', '/admin/accounts/demo/keys', { team: 'core', budget: { units: 100, period: 'month' } });
  const b = await admin(g.url, 'POST', '/admin/accounts/demo/keys', { team: 'core' });
  if (a.status !== 201 || b.status !== 201) throw new Error('keys not created');
  return { a: a.json, b: b.json };
}

t.test('memory: a team\'s budget at 50, 80 and 100% through requests of two keys, once each; a team PATCH re-arms', async (t) => {
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const g = await startAlertsGateway(alertsConfig({ webhooks: [{ url: rx.url, secret: SECRET }] }), { background: false });
  t.teardown(() => g.close());
  const { a, b } = await setUp(g);
  const seen: unknown[][] = [];
  for (let i = 0; i < 10; i++) {
    const k = i % 2 === 0 ? a : b;
    const r = await spend(g.url, k.key, 10);
    t.equal(r.status, 200, `request ${i + 1} served`);
    t.equal(r.headers['x-tollgate-units-charged'], '10');
    await flush(g);
    seen.push(teamRows(await events(g)));
  }
  t.strictSame(seen[3], [], 'nothing before 50% of the team\'s budget');
  t.strictSame(seen[4], [[50, 100, a.id]], '50 of 100 units: crossed by key A\'s request');
  t.strictSame(seen[6], seen[4], 'nothing new at 70%');
  t.strictSame(seen[7], [[50, 100, a.id], [80, 100, b.id]], '80 units: crossed by key B\'s request');
  t.strictSame(seen[9], [[50, 100, a.id], [80, 100, b.id], [100, 100, b.id]], '100 units');

  const refused = await spend(g.url, b.key, 10);
  t.equal(refused.status, 402);
  t.equal(refused.json.code, 'budget_exceeded');
  t.equal(refused.json.budget_scope, 'team');
  t.equal(refused.json.error.budget_scope, 'team');
  await flush(g);
  const list = await events(g);
  const team = list.filter((e) => e.data.scope === 'team');
  t.equal(team.length, 3, 'a refused request adds nothing');
  for (const e of team) {
    t.match(e.id, /^evt_[0-9a-f]{32}$/);
    t.equal(e.subject.account, 'demo');
    t.equal(e.subject.team, 'core');
    t.strictSame(Object.keys(e.subject).sort(), ['account', 'key_id', 'team']);
    t.match(e.data, { scope: 'team', budget_units: 100, period: 'month', period_id: /^m:\d{4}-\d{2}$/ });
  }
  t.strictSame(team.map((e) => e.data.spent_units), [100, 80, 50]);
  // Key A's own budget (100 units, 50 spent by its 5 requests): its own event, its own subject.
  const own = list.filter((e) => e.data.scope === 'key');
  t.strictSame(own.map((e) => [e.data.threshold, e.subject]), [[50, { account: 'demo', key_id: a.id }]], 'key A\'s own 50%, apart from the team\'s');

  // A new team budget is a new version: its thresholds are armed again.
  t.equal((await admin(g.url, 'PATCH', '/admin/teams/core', { budget: { units: 150, period: 'month' } })).status, 200);
  t.ok(await until(async () => (await spend(g.url, b.key, 10)).status === 200, 3000), 'the new team budget is in force');
  await flush(g);
  t.equal(teamRows(await events(g)).length, 3, '110 of 150: 50% (75) was passed before the change, by no request');
  t.equal((await spend(g.url, b.key, 10)).status, 200);
  await flush(g);
  t.strictSame(teamRows(await events(g)), [[50, 100, a.id], [80, 100, b.id], [100, 100, b.id], [80, 150, b.id]],
    '120 of 150: the new budget\'s 80%, a new event though 80% of the old one was sent');

  const alerts = await g.gateway.alerts;
  await alerts.worker.tick();
  const all = await admin(g.url, 'GET', '/admin/alerts?limit=1000');
  const ids = all.json.events.map((e: any) => e.id);
  t.equal(rx.delivered().length, ids.length, 'every event delivered once');
  t.ok(rx.delivered().every((r) => r.signed), 'signed with the secret');
  t.strictSame(new Set(rx.delivered().map((r) => r.headers['x-tollgate-event-id'])), new Set(ids));
  const delivered = rx.delivered().filter((r) => r.body.subject.team === 'core');
  t.equal(delivered.length, 4);
  t.ok(delivered.every((r) => r.body.type === 'budget.threshold' && r.body.data.scope === 'team'));
});

t.test('memory: concurrent requests of the team\'s keys: one event per threshold', async (t) => {
  const g = await startAlertsGateway(alertsConfig({ webhooks: [{ url: 'http://127.0.0.1:9/never', secret: SECRET }] }), { background: false });
  t.teardown(() => g.close());
  const { a, b } = await setUp(g);
  const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => spend(g.url, (i % 2 === 0 ? a : b).key, 10)));
  t.strictSame(answers.map((r) => r.status), Array(10).fill(200));
  await flush(g);
  const rows = teamRows(await events(g));
  t.strictSame(rows.map((r) => r[0]).sort((x, y) => (x as number) - (y as number)), [50, 80, 100]);
  t.ok(rows.every((r) => r[2] === a.id || r[2] === b.id));
});

t.test('redis: two gateways on one Redis, the team\'s two keys on each, concurrently: one event per threshold, re-armed by a PATCH, delivered signed', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const store = { kind: 'redis', url: redis.url, prefix: `teams${Date.now()}:` };
  const cfg = alertsConfig({ webhooks: [{ url: rx.url, secret: SECRET }] }, { store });
  const g1 = await startAlertsGateway(cfg, { background: false });
  t.teardown(() => g1.close());
  const g2 = await startAlertsGateway(cfg, { background: false });
  t.teardown(() => g2.close());
  const { a, b } = await setUp(g1);
  // Each key on both gateways, all at once: every settle is one script, so one of them crosses each threshold.
  const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => spend(i % 4 < 2 ? g1.url : g2.url, (i % 2 === 0 ? a : b).key, 10)));
  t.strictSame(answers.map((r) => r.status), Array(10).fill(200));
  await flush(g1, g2);
  const first = await events(g2);
  const rows = teamRows(first);
  t.strictSame(rows.map((r) => [r[0], r[1]]).sort((x, y) => (x[0] as number) - (y[0] as number)), [[50, 100], [80, 100], [100, 100]], 'each threshold once, from either gateway');
  t.ok(rows.every((r) => r[2] === a.id || r[2] === b.id), 'each names a key of the team');
  t.ok(first.filter((e) => e.data.scope === 'team').every((e) => e.subject.team === 'core' && e.subject.account === 'demo' && e.data.spent_units >= e.data.threshold));
  const refused = await spend(g2.url, a.key, 10);
  t.equal(refused.status, 402, 'the team\'s budget is spent');

  t.equal((await admin(g2.url, 'PATCH', '/admin/teams/core', { budget: { units: 150, period: 'month' } })).status, 200);
  t.ok(await until(async () => (await spend(g1.url, b.key, 10)).status === 200, 3000), 'the new team budget is in force on the other gateway');
  t.equal((await spend(g1.url, b.key, 10)).status, 200);
  await flush(g1, g2);
  t.strictSame(teamRows(await events(g1)).filter((r) => r[1] === 150), [[80, 150, b.id]], '120 of 150: the new budget\'s 80%');

  await (await g1.gateway.alerts).worker.tick();
  await (await g2.gateway.alerts).worker.tick();
  const all = (await admin(g1.url, 'GET', '/admin/alerts?limit=1000')).json.events;
  t.equal(rx.delivered().length, all.length, 'each event delivered once, by one of the two');
  t.ok(rx.delivered().every((r) => r.signed));
  t.equal(rx.delivered().filter((r) => r.body.subject.team === 'core').length, 4);
});
