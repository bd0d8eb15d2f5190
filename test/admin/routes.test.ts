// The admin API's route table (lib/admin/api.ts): every route answers a method it lacks with
// 405 method_not_allowed, its Allow header being the route's methods from the table (HEAD with
// GET), and a path no route names with 404 unknown_url. Through real sockets.

import t from 'tap';
import YAML from 'yaml';
import { AdminApi } from '../../lib/admin/api.js';
import { parseConfig } from '../../lib/config/load.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'admin-routes-token-0123456789';

/** Every admin route and what it answers: a new route must be added here. */
const ROUTES: Record<string, string> = {
  '/admin/accounts': 'GET, HEAD, POST',
  '/admin/accounts/{id}': 'GET, HEAD',
  '/admin/accounts/{id}/credits': 'POST',
  '/admin/accounts/{id}/keys': 'GET, HEAD, POST',
  '/admin/keys/{id}': 'GET, HEAD, PATCH, DELETE',
  '/admin/keys/{id}/rotate': 'POST',
  '/admin/accounts/{id}/teams': 'GET, HEAD, POST',
  '/admin/teams/{id}': 'GET, HEAD, PATCH, DELETE',
  '/admin/sessions/{id}/revoke': 'POST',
  '/admin/batches': 'GET, HEAD',
  '/admin/batches/{id}': 'GET, HEAD',
  '/admin/batches/{id}/cancel': 'POST',
  '/admin/upstreams': 'GET, HEAD',
  '/admin/usage': 'GET, HEAD',
  '/admin/audit': 'GET, HEAD',
  '/admin/usage/hourly': 'GET, HEAD',
  '/admin/usage/top': 'GET, HEAD',
  '/admin/usage/records': 'GET, HEAD',
  '/admin/alerts': 'GET, HEAD',
};
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

t.test('the table is the one the API answers from', async (t) => {
  const store = new MemoryStore({ path: null });
  t.teardown(() => store.close());
  const config = parseConfig(YAML.stringify({ ...baseConfig(), admin: { token: ADMIN } }));
  t.strictSame(Object.fromEntries(new AdminApi(store, config).allowed), ROUTES);
});

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

for (const [route, allow] of Object.entries(ROUTES)) {
  t.test(`${route}: 405 with Allow: ${allow} for any other method`, async (t) => {
    const path = route.replace('{id}', 'demo');
    const lacking = METHODS.filter((m) => !allow.split(', ').includes(m));
    t.ok(lacking.length > 0);
    for (const method of lacking) {
      const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}` } });
      const text = await res.text();
      t.equal(res.status, 405, `${method} ${path}: 405`);
      t.equal(res.headers.get('allow'), allow, `${method} ${path}: Allow from the table`);
      if (method === 'HEAD') {
        t.equal(text, '', 'HEAD: no body');
        continue;
      }
      const body = JSON.parse(text);
      t.strictSame(schemas.error(body), []);
      t.equal(body.code, 'method_not_allowed');
      t.equal(body.request_id, res.headers.get('x-request-id'));
    }
  });
}

t.test('a path no route names is 404 unknown_url, whatever the method', async (t) => {
  for (const path of ['/admin/nothing', '/admin/accounts/demo/nothing', '/admin/usage/demo', '/admin/keys/x/rotate/y']) {
    for (const method of ['GET', 'PUT']) {
      const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}` } });
      t.equal(res.status, 404, `${method} ${path}`);
      t.equal(JSON.parse(await res.text()).code, 'unknown_url');
      t.equal(res.headers.get('allow'), null);
    }
  }
});
