// GET /admin/alerts (CONTRACT section 15): pages newest first with next_cursor, the delivery
// taken across webhooks, and every bad query a 400 in the envelope (never a 500).

import t from 'tap';
import fc from 'fast-check';
import { request } from 'undici';
import { SECRET, admin, alertsConfig, startAlertsGateway, startReceiver } from '../helpers/alerts.js';
import { aggregate } from '../../lib/admin/alerts.js';
import { holds } from '../property/arbitraries.js';

t.test('pages newest first; delivery across two webhooks', async (t) => {
  const ok = await startReceiver();
  const failing = await startReceiver();
  failing.mode = 'fail';
  t.teardown(async () => { await ok.close(); await failing.close(); });
  const g = await startAlertsGateway(alertsConfig({
    webhooks: [{ url: ok.url, secret: SECRET }, { url: failing.url, secret: SECRET, events: ['wallet.low'] }],
  }), { background: false });
  t.teardown(() => g.close());
  const ids: string[] = [];
  for (let i = 1; i <= 5; i++) {
    const expires = new Date(Date.now() + i * 86400_000).toISOString();
    ids.push((await admin(g.url, 'POST', '/admin/accounts/demo/keys', { expires_at: expires })).json.id);
  }
  const alerts = await g.gateway.alerts;
  t.equal(await alerts.sweep(), 5);
  const seen: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await admin(g.url, 'GET', `/admin/alerts?limit=2${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
    t.equal(res.status, 200);
    t.ok(res.json.events.length <= 2);
    for (const e of res.json.events) {
      t.strictSame(Object.keys(e).sort(), ['at', 'data', 'delivery', 'id', 'subject', 'type']);
      t.strictSame(e.delivery, { state: 'pending', attempts: 0, last_status: null });
      seen.push(e.subject.key_id);
    }
    cursor = res.json.next_cursor;
    pages++;
  } while (cursor !== null && pages < 10);
  t.equal(pages, 3);
  t.equal(new Set(seen).size, 5, 'each event once');
  t.strictSame(new Set(seen), new Set(ids));

  await alerts.worker.tick();
  const after = (await admin(g.url, 'GET', '/admin/alerts')).json.events;
  t.ok(after.every((e: any) => e.delivery.state === 'delivered' && e.delivery.last_status === 204), 'key.expiring goes to the first webhook only');
  t.equal(failing.received.length, 0);
});

t.test('delivery taken across webhooks: pending while any is, then failed if any gave up, else delivered', async (t) => {
  const d = (state: 'pending' | 'delivered' | 'failed', attempts: number, last_status: number | null) => ({ webhook: `h${attempts}${state}`, state, attempts, last_status, next_at: 0 });
  t.strictSame(aggregate([d('delivered', 1, 200), d('pending', 3, 500)]), { state: 'pending', attempts: 3, last_status: 500 });
  t.strictSame(aggregate([d('failed', 30, 503), d('delivered', 2, 204)]), { state: 'failed', attempts: 30, last_status: 503 });
  t.strictSame(aggregate([d('delivered', 1, 200), d('delivered', 2, 204)]), { state: 'delivered', attempts: 2, last_status: 204 });
  t.strictSame(aggregate([d('failed', 5, null), d('pending', 1, 500)]), { state: 'pending', attempts: 5, last_status: 500 });
});

t.test('bad queries and methods: 4xx in the envelope', async (t) => {
  const g = await startAlertsGateway(alertsConfig({}), { background: false });
  t.teardown(() => g.close());
  const cases: Array<[string, number, string, string | null]> = [
    ['/admin/alerts?limit=0', 400, 'invalid_value', 'limit'],
    ['/admin/alerts?limit=1001', 400, 'invalid_value', 'limit'],
    ['/admin/alerts?limit=1.5', 400, 'invalid_value', 'limit'],
    ['/admin/alerts?limit=abc', 400, 'invalid_type', 'limit'],
    ['/admin/alerts?limit=', 400, 'invalid_type', 'limit'],
    ['/admin/alerts?cursor=not-a-cursor!', 400, 'invalid_value', 'cursor'],
    ['/admin/alerts?cursor=' + 'A'.repeat(100), 400, 'invalid_value', 'cursor'],
    ['/admin/alerts/x', 404, 'unknown_url', null],
  ];
  for (const [path, status, code, param] of cases) {
    const res = await admin(g.url, 'GET', path);
    t.equal(res.status, status, path);
    t.equal(res.json.code, code, path);
    t.equal(res.json.error.code, code);
    t.equal(res.json.param, param);
    t.equal(res.json.type, 'invalid_request_error');
    t.match(res.headers['x-request-id'], /.+/);
    t.match(String(res.headers['content-type']), /application\/json/);
  }
  const post = await admin(g.url, 'POST', '/admin/alerts', {});
  t.equal(post.status, 405);
  t.equal(post.json.code, 'method_not_allowed');
  t.equal(post.headers.allow, 'GET, HEAD');
  const anon = await request(`${g.url}/admin/alerts`);
  t.equal(anon.statusCode, 401);
  t.equal((await anon.body.json() as any).code, 'invalid_api_key');
  const empty = await admin(g.url, 'GET', '/admin/alerts?limit=1000');
  t.strictSame(empty.json, { events: [], next_cursor: null });
});

t.test('generated limit and cursor values: a page or a 400, never a 500', async (t) => {
  const g = await startAlertsGateway(alertsConfig({}), { background: false });
  t.teardown(() => g.close());
  const value = fc.oneof(fc.string({ maxLength: 40 }), fc.integer({ min: -5, max: 2000 }).map(String), fc.constantFrom('1e3', '0x10', ' 7', '+5', '50.0', 'MTA', 'MA', '%00', '%ZZ'));
  await holds(t, 'GET /admin/alerts?limit=&cursor=', fc.asyncProperty(fc.option(value), fc.option(value), async (limit, cursor) => {
    const q = new URLSearchParams();
    if (limit !== null) q.set('limit', limit);
    if (cursor !== null) q.set('cursor', cursor);
    const res = await admin(g.url, 'GET', `/admin/alerts?${q.toString()}`);
    if (res.status === 200) return Array.isArray(res.json.events) && (res.json.next_cursor === null || typeof res.json.next_cursor === 'string');
    return res.status === 400 && ['invalid_value', 'invalid_type'].includes(res.json.code) && ['limit', 'cursor'].includes(res.json.param);
  }), 150);
});
