// Wrong admin tokens are counted per client address (lib/admin/token-guard.ts) when the YAML sets
// admin.max_token_failures, against `tollgate serve --config FILE` over real HTTP: after 20 wrong tokens (Bearer on /admin, or the
// console's token sign-in, one count) the address gets 429 rate_limit_exceeded with Retry-After
// for any token, the right one included; another address still signs in; requests with no token
// are not counted; nothing was written meanwhile (the audit log holds no sign-in). Without the
// setting, every wrong token is 401 as CONTRACT section 5 says, however many.

import t from 'tap';
import { Agent, request } from 'undici';
import { ADMIN_TOKEN, startConsole } from '../helpers/console.js';
import { WINDOW_S } from '../../lib/admin/token-guard.js';

const MAX_FAILURES = 20;

const rig = await startConsole(t, { admin: { token: ADMIN_TOKEN, max_token_failures: MAX_FAILURES } });
const unlimited = await startConsole(t);
const { url } = rig;
const other = new Agent({ localAddress: '127.0.0.2' });
t.teardown(() => other.close());

const adminGet = (token: string | undefined, dispatcher?: Agent) =>
  request(`${url}/admin/accounts`, { headers: token === undefined ? {} : { authorization: `Bearer ${token}` }, dispatcher });
const login = (token: string, dispatcher?: Agent) =>
  request(`${url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }), dispatcher });

t.test('requests with no token are not counted', async (t) => {
  for (let i = 0; i < MAX_FAILURES + 5; i++) {
    const res = await adminGet(undefined);
    t.equal(res.statusCode, 401);
    await res.body.dump();
  }
  const ok = await adminGet(ADMIN_TOKEN);
  t.equal(ok.statusCode, 200, 'the right token still opens /admin');
  await ok.body.dump();
});

t.test('20 wrong tokens from one address: then 429 for any token from it, until the window ends', async (t) => {
  for (let i = 0; i < MAX_FAILURES; i++) {
    // Both doors count against one budget: half by Bearer, half by the sign-in form.
    const res = i % 2 === 0 ? await adminGet(`wrong-${i}`) : await login(`wrong-${i}`);
    t.equal(res.statusCode, 401, `wrong token ${i + 1}: 401`);
    t.equal(((await res.body.json()) as any).error.code, 'invalid_api_key');
  }
  for (const [name, send] of [['Bearer, right token', () => adminGet(ADMIN_TOKEN)], ['sign-in, right token', () => login(ADMIN_TOKEN)], ['Bearer, wrong token', () => adminGet('wrong')]] as const) {
    const res = await send();
    t.equal(res.statusCode, 429, `${name}: 429`);
    const retryAfter = Number(res.headers['retry-after']);
    t.ok(retryAfter >= 1 && retryAfter <= WINDOW_S, `${name}: Retry-After ${retryAfter} s, within the ${WINDOW_S} s window`);
    t.ok(Number(res.headers['retry-after-ms']) > 0, 'retry-after-ms');
    t.match(res.headers['x-request-id'], /\S/);
    t.equal(res.headers['set-cookie'], undefined, 'no session cookie');
    const body = (await res.body.json()) as any;
    t.same(Object.keys(body).sort(), ['code', 'error', 'message', 'param', 'request_id', 'type'].sort(), 'the envelope');
    t.equal(body.error.code, 'rate_limit_exceeded');
    t.equal(body.code, 'rate_limit_exceeded');
    t.equal(body.type, 'rate_limit_error');
    t.match(body.message, /^Too many wrong admin tokens from this address; retry in \d+ s\.$/);
    t.notMatch(JSON.stringify(body), ADMIN_TOKEN, 'the token is not echoed');
  }

  const fromOther = await login(ADMIN_TOKEN, other);
  t.equal(fromOther.statusCode, 200, 'another address signs in with the right token');
  await fromOther.body.dump();
  const bearerOther = await adminGet(ADMIN_TOKEN, other);
  t.equal(bearerOther.statusCode, 200, 'and opens /admin');
  await bearerOther.body.dump();

  const events = await request(`${url}/admin/audit?limit=100`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, dispatcher: other });
  const logged = ((await events.body.json()) as { events: Array<{ action: string; ip: string }> }).events;
  t.same(logged.filter((e) => e.action === 'POST /console/api/login').map((e) => e.ip), ['127.0.0.2'], 'the one sign-in audited is the other address\'s');
});

t.test('without admin.max_token_failures: every wrong token is 401, however many, and the right one still opens', async (t) => {
  for (let i = 0; i < 3 * MAX_FAILURES; i++) {
    const res = i % 2 === 0
      ? await request(`${unlimited.url}/admin/accounts`, { headers: { authorization: `Bearer wrong-${i}` } })
      : await request(`${unlimited.url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: `wrong-${i}` }) });
    t.equal(res.statusCode, 401);
    await res.body.dump();
  }
  const ok = await request(`${unlimited.url}/admin/accounts`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  t.equal(ok.statusCode, 200);
  await ok.body.dump();
});
