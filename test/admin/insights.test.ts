// What the operator console reads (lib/admin/insights.ts) through real sockets, on the memory
// store and on Redis: GET /admin/accounts pages accounts as GET /admin/accounts/{id} shows
// them; GET /admin/usage/hourly and /admin/usage/top answer from the totals the requests left;
// every bad parameter is a 400 naming it, an unknown account 404, and none changes anything.

import t from 'tap';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { DEMO_KEY, PRO_KEY, authHeaders, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'admin-insights-token-123';
const HOUR = 3_600_000;

const redis = await startRedis();
t.teardown(() => redis.stop());

async function call(gw: TestGateway, method: string, path: string, token = ADMIN) {
  const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) };
}

function expectError(t: any, res: { status: number; headers: Headers; text: string }, status: number, code: string, param: string | null = null) {
  t.equal(res.status, status, `${code}: status ${status}`);
  const body = JSON.parse(res.text);
  t.same(schemas.error(body), []);
  t.equal(body.code, code);
  t.equal(body.param, param);
  t.equal(body.request_id, res.headers.get('x-request-id'));
  t.notMatch(res.text, /at .*\.ts:\d+/, 'no stack trace');
}

const stores: Array<[string, () => Record<string, unknown>]> = [
  ['memory', () => ({ kind: 'memory' })],
  ['redis', () => ({ kind: 'redis', url: redis.url, prefix: `insights${Date.now()}:` })],
];

for (const [name, storeConfig] of stores) {
  t.test(name, async (t) => {
    const c = baseConfig();
    c.admin = { token: ADMIN };
    c.store = storeConfig();
    const gw = await startGateway(c);
    t.teardown(() => gw.close());

    // 3 requests of demo, 2 of acme; records are written once each answer is closed.
    for (const key of [DEMO_KEY, DEMO_KEY, DEMO_KEY, PRO_KEY, PRO_KEY]) {
      const res = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'hello there' }] }, authHeaders(key));
      t.equal(res.status, 200);
    }
    let hours: any[] = [];
    for (let i = 0; i < 100; i++) {
      hours = (await call(gw, 'GET', '/admin/usage/hourly')).json().hours;
      if (hours.reduce((n: number, h: any) => n + h.requests, 0) === 5) break;
      await new Promise((r) => setTimeout(r, 20));
    }

    t.test('hourly: the last 24 hours, the current one last, zeros included', async (t) => {
      t.equal(hours.length, 24);
      const now = Date.now();
      t.equal(hours.at(-1).hour, new Date(Math.floor(now / HOUR) * HOUR).toISOString());
      t.equal(hours[0].hour, new Date(Math.floor(now / HOUR) * HOUR - 23 * HOUR).toISOString());
      const last = hours.at(-1);
      t.equal(last.requests, 5);
      t.equal(last.errors, 0);
      t.ok(last.prompt_tokens > 0 && last.completion_tokens > 0);
      t.ok(hours.slice(0, -1).every((h: any) => h.requests === 0 && h.units === 0));
      const records = (await call(gw, 'GET', '/admin/usage/records?limit=100')).json().records;
      t.equal(last.units, records.reduce((n: number, r: any) => n + r.units, 0), 'units as the records sum them');
      const demo = (await call(gw, 'GET', '/admin/usage/hourly?account=demo')).json().hours;
      t.equal(demo.at(-1).requests, 3);
      const since = new Date(Math.floor(now / HOUR) * HOUR - 2 * HOUR).toISOString();
      const until = new Date(Math.floor(now / HOUR) * HOUR + HOUR).toISOString();
      const three = (await call(gw, 'GET', `/admin/usage/hourly?since=${since}&until=${until}`)).json().hours;
      t.strictSame(three.map((h: any) => h.requests), [0, 0, 5]);
      t.strictSame(Object.keys(three[0]), ['hour', 'requests', 'errors', 'prompt_tokens', 'completion_tokens', 'units']);
    });

    t.test('top: accounts, keys and models by units', async (t) => {
      const accounts = (await call(gw, 'GET', '/admin/usage/top?by=account')).json();
      t.equal(accounts.by, 'account');
      t.strictSame(accounts.rows.map((r: any) => [r.id, r.requests]).sort(), [['acme', 2], ['demo', 3]]);
      t.ok(accounts.rows[0].units >= accounts.rows[1].units, 'units descending');
      const keys = (await call(gw, 'GET', '/admin/usage/top?by=key&limit=1')).json();
      t.equal(keys.rows.length, 1);
      t.ok([keyIdOf(sha256Hex(DEMO_KEY)), keyIdOf(sha256Hex(PRO_KEY))].includes(keys.rows[0].id));
      const demoKeys = (await call(gw, 'GET', '/admin/usage/top?by=key&account=demo')).json();
      t.strictSame(demoKeys.rows.map((r: any) => [r.id, r.requests]), [[keyIdOf(sha256Hex(DEMO_KEY)), 3]]);
      const models = (await call(gw, 'GET', '/admin/usage/top?by=model')).json();
      t.strictSame(models.rows.map((r: any) => [r.id, r.requests]), [['echo-small', 5]]);
      const acmeModels = (await call(gw, 'GET', '/admin/usage/top?by=model&account=acme')).json();
      t.strictSame(acmeModels.rows.map((r: any) => [r.id, r.requests]), [['echo-small', 2]]);
      const old = (await call(gw, 'GET', '/admin/usage/top?by=model&since=2026-01-01T00:00:00Z&until=2026-01-31T00:00:00Z')).json();
      t.strictSame(old.rows, []);
    });

    t.test('accounts: pages of account views', async (t) => {
      for (const id of ['zeta', 'beta']) {
        const res = await fetch(`${gw.url}/admin/accounts`, {
          method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: JSON.stringify({ id, plan: 'free', wallet_units: 7 }),
        });
        t.equal(res.status, 201);
      }
      const all = (await call(gw, 'GET', '/admin/accounts')).json();
      t.strictSame(all.accounts.map((a: any) => a.id), ['acme', 'beta', 'demo', 'zeta']);
      t.equal(all.next_cursor, null);
      t.strictSame(all.accounts[2], (await call(gw, 'GET', '/admin/accounts/demo')).json(), 'as GET /admin/accounts/{id} shows it');
      const seen: string[] = [];
      let path = '/admin/accounts?limit=3';
      for (;;) {
        const page = (await call(gw, 'GET', path)).json();
        seen.push(...page.accounts.map((a: any) => a.id));
        if (page.next_cursor === null) break;
        path = `/admin/accounts?limit=3&cursor=${encodeURIComponent(page.next_cursor)}`;
      }
      t.strictSame(seen, ['acme', 'beta', 'demo', 'zeta']);
      t.strictSame((await call(gw, 'GET', '/admin/accounts?prefix=b')).json().accounts.map((a: any) => a.id), ['beta']);
      t.equal((await call(gw, 'HEAD', '/admin/accounts')).status, 200);
    });

    t.test('bad parameters: 400 naming them, unknown accounts 404', async (t) => {
      const cases: Array<[string, number, string, string | null]> = [
        ['/admin/usage/top', 400, 'missing_required_parameter', 'by'],
        ['/admin/usage/top?by=colour', 400, 'unsupported_value', 'by'],
        ['/admin/usage/top?by=', 400, 'invalid_value', 'by'],
        ['/admin/usage/top?by=key&limit=0', 400, 'invalid_value', 'limit'],
        ['/admin/usage/top?by=key&limit=101', 400, 'invalid_value', 'limit'],
        ['/admin/usage/top?by=key&limit=2.5', 400, 'invalid_value', 'limit'],
        ['/admin/usage/top?by=key&limit=ten', 400, 'invalid_type', 'limit'],
        ['/admin/usage/top?by=key&account=nobody', 404, 'account_not_found', null],
        ['/admin/usage/top?by=key&since=yesterday', 400, 'invalid_value', 'since'],
        ['/admin/usage/hourly?since=2026-13-45', 400, 'invalid_value', 'since'],
        ['/admin/usage/hourly?until=soon', 400, 'invalid_value', 'until'],
        ['/admin/usage/hourly?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z', 400, 'invalid_value', 'until'],
        ['/admin/usage/hourly?since=2026-11-02T00:00:00Z&until=2026-11-02T00:00:00Z', 400, 'invalid_value', 'until'],
        ['/admin/usage/hourly?since=2026-10-01T00:00:00Z&until=2026-11-01T00:00:01Z', 400, 'invalid_value', 'since'],
        ['/admin/usage/hourly?account=nobody', 404, 'account_not_found', null],
        [`/admin/usage/hourly?account=${'x'.repeat(300)}`, 400, 'invalid_value', 'account'],
        ['/admin/accounts?limit=0', 400, 'invalid_value', 'limit'],
        ['/admin/accounts?limit=1001', 400, 'invalid_value', 'limit'],
        ['/admin/accounts?cursor=!!', 400, 'invalid_value', 'cursor'],
        ['/admin/accounts?cursor=', 400, 'invalid_value', 'cursor'],
      ];
      for (const [path, status, code, param] of cases) {
        t.test(path.slice(0, 100), async (t) => expectError(t, await call(gw, 'GET', path), status, code, param));
      }
      t.equal((await call(gw, 'GET', '/admin/usage/hourly?since=2026-10-01T00:00:00Z&until=2026-11-01T00:00:00Z')).status, 200, '31 days exactly');
      const post = await call(gw, 'POST', '/admin/usage/hourly');
      expectError(t, post, 405, 'method_not_allowed');
      t.equal(post.headers.get('allow'), 'GET, HEAD');
      expectError(t, await call(gw, 'DELETE', '/admin/usage/top'), 405, 'method_not_allowed');
      expectError(t, await call(gw, 'GET', '/admin/usage/top?by=key', 'wrong-token'), 401, 'invalid_api_key');
      expectError(t, await call(gw, 'GET', '/admin/accounts', 'wrong-token'), 401, 'invalid_api_key');
      // Nothing changed: still the same five requests.
      const hours = (await call(gw, 'GET', '/admin/usage/hourly')).json().hours;
      t.equal(hours.reduce((n: number, h: any) => n + h.requests, 0), 5);
    });
  });
}
