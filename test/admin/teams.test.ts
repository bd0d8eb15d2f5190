// Teams through the real gateway's admin API (CONTRACT section 15), on the embedded store and on
// Redis: every route's answer and every error's exact status, code, param and envelope, bodies
// with unknown members refused, a key's team in key create, PATCH, list and GET, and nothing
// changed by a refused call.

import t from 'tap';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'teams-admin-token';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };

interface Answer { status: number; headers: Record<string, any>; text: string; body: any }

async function call(url: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  let parsed: any;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.statusCode, headers: res.headers, text, body: parsed };
}

/** The error envelope: the fields at the top and again under `error`, request_id = x-request-id. */
function assertError(t: any, r: Answer, status: number, code: string, param: string | null = null): void {
  const type = status === 402 ? 'insufficient_credits' : status === 403 ? 'permission_error' : 'invalid_request_error';
  t.equal(r.status, status, `${code}: status`);
  t.match(r.headers['content-type'], /application\/json/);
  t.strictSame(Object.keys(r.body).sort(), ['code', 'error', 'message', 'param', 'request_id', 'type'], `${code}: the envelope's members`);
  t.match(r.body, { code, type, param, request_id: r.headers['x-request-id'], error: { code, type, param, message: r.body.message } }, `${code}: envelope`);
  t.type(r.body.message, 'string');
}

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function suite(t: any, name: string, store: () => Record<string, unknown>): void {
  t.test(name, async (t: any) => {
    const c = baseConfig();
    c.admin = { token: ADMIN };
    c.store = store();
    c.models = [{ id: 'echo-small', provider: 'echo', max_output_tokens: 50, price: PRICE }];
    c.routing = { auto: ['echo-small'] };
    const gw: TestGateway = await startGateway(c);
    t.teardown(() => gw.close());
    const admin = (method: string, path: string, body?: unknown) => call(gw.url, method, path, body, { authorization: `Bearer ${ADMIN}` });
    const tag = name.replace(/\W/g, '');
    let n = 0;
    const account = async () => {
      const id = `${tag}-acct-${++n}`;
      t.equal((await admin('POST', '/admin/accounts', { id, plan: 'free', wallet_units: 1000 })).status, 201);
      return id;
    };

    t.test('create, list, get, PATCH, DELETE', async (t: any) => {
      const acct = await account();
      const red = `${tag}-red`;
      const created = await admin('POST', `/admin/accounts/${acct}/teams`, {
        id: red, name: 'Red team', budget: { units: 500, period: 'month' }, limits: { requests_per_minute: 10, max_concurrent: 3 }, models: ['echo-*'],
      });
      t.equal(created.status, 201);
      t.equal(created.headers['x-request-id'] !== undefined, true);
      t.strictSame(Object.keys(created.body), ['id', 'account', 'name', 'budget', 'limits', 'models', 'mcp_tools', 'created_at']);
      t.match(created.body, {
        id: red, account: acct, name: 'Red team', budget: { units: 500, period: 'month', spent_units: 0 },
        limits: { requests_per_minute: 10, tokens_per_minute: null, max_concurrent: 3 }, models: ['echo-*'],
      });
      t.match(created.body.budget.resets_at, /^\d{4}-\d{2}-01T00:00:00.000Z$/);
      t.match(created.body.created_at, ISO);
      const bare = await admin('POST', `/admin/accounts/${acct}/teams`, { id: `${tag}-bare` });
      t.equal(bare.status, 201);
      t.strictSame(bare.body.budget, { units: null, period: null, spent_units: 0, resets_at: null }, 'a team without a budget');
      t.strictSame(bare.body.limits, { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null });
      t.equal(bare.body.models, null);
      t.equal(bare.body.name, null);

      const list = await admin('GET', `/admin/accounts/${acct}/teams`);
      t.equal(list.status, 200);
      t.strictSame(list.body, { teams: [created.body, bare.body] }, '{teams: [...]}, oldest first');
      t.strictSame((await admin('GET', `/admin/teams/${red}`)).body, created.body);

      const patched = await admin('PATCH', `/admin/teams/${red}`, { name: 'Reds', limits: { tokens_per_minute: 1000 }, budget: { units: 600, period: 'month' } });
      t.equal(patched.status, 200);
      t.match(patched.body, { id: red, name: 'Reds', limits: { requests_per_minute: 10, tokens_per_minute: 1000, max_concurrent: 3 }, budget: { units: 600, period: 'month', spent_units: 0 }, models: ['echo-*'] });
      const empty = await call(gw.url, 'PATCH', `/admin/teams/${red}`, undefined, { authorization: `Bearer ${ADMIN}` });
      t.equal(empty.status, 200, 'a PATCH without a body changes nothing');
      t.strictSame(empty.body, patched.body);
      t.match((await admin('PATCH', `/admin/teams/${red}`, { models: null, limits: null, budget: null })).body,
        { models: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, budget: { units: null, period: null } });

      const del = await admin('DELETE', `/admin/teams/${red}`);
      t.equal(del.status, 204);
      t.equal(del.text, '');
      assertError(t, await admin('GET', `/admin/teams/${red}`), 404, 'team_not_found');
      assertError(t, await admin('DELETE', `/admin/teams/${red}`), 404, 'team_not_found');
      assertError(t, await admin('PATCH', `/admin/teams/${red}`, { name: 'x' }), 404, 'team_not_found');
      t.strictSame((await admin('GET', `/admin/accounts/${acct}/teams`)).body, { teams: [bare.body] });
    });

    t.test('errors: unknown account, taken ids, bad bodies; nothing made', async (t: any) => {
      const acct = await account();
      const other = await account();
      const id = `${tag}-blue`;
      assertError(t, await admin('POST', '/admin/accounts/nobody-here/teams', { id }), 404, 'account_not_found');
      assertError(t, await admin('GET', '/admin/accounts/nobody-here/teams'), 404, 'account_not_found');
      t.equal((await admin('POST', `/admin/accounts/${acct}/teams`, { id })).status, 201);
      assertError(t, await admin('POST', `/admin/accounts/${acct}/teams`, { id, name: 'again' }), 409, 'team_exists', 'id');
      assertError(t, await admin('POST', `/admin/accounts/${other}/teams`, { id }), 409, 'team_exists', 'id');
      t.strictSame((await admin('GET', `/admin/accounts/${other}/teams`)).body, { teams: [] }, 'team ids are unique across the gateway');
      const bad: Array<[unknown, string, string]> = [
        [{}, 'missing_required_parameter', 'id'],
        [{ id: 7 }, 'invalid_type', 'id'],
        [{ id: 'has:colon' }, 'invalid_value', 'id'],
        [{ id: '' }, 'invalid_value', 'id'],
        [{ id: 'x'.repeat(129) }, 'invalid_value', 'id'],
        [{ id: `${tag}-x`, budget: { units: -1 } }, 'invalid_value', 'budget.units'],
        [{ id: `${tag}-x`, budget: { units: 9007199254740992 } }, 'invalid_value', 'budget.units'],
        [{ id: `${tag}-x`, budget: { period: 'day' } }, 'missing_required_parameter', 'budget.units'],
        [{ id: `${tag}-x`, budget: { units: 5, period: 'year' } }, 'unsupported_value', 'budget.period'],
        [{ id: `${tag}-x`, budget: { units: 5, perod: 'day' } }, 'unsupported_value', 'budget.perod'],
        [{ id: `${tag}-x`, limits: { requests_per_minute: 0 } }, 'invalid_value', 'limits.requests_per_minute'],
        [{ id: `${tag}-x`, limits: { max_concurent: 2 } }, 'unsupported_value', 'limits.max_concurent'],
        [{ id: `${tag}-x`, models: [] }, 'invalid_value', 'models'],
        [{ id: `${tag}-x`, models: 'echo-*' }, 'invalid_type', 'models'],
        [{ id: `${tag}-x`, name: 5 }, 'invalid_type', 'name'],
        [{ id: `${tag}-x`, budgets: { units: 5 } }, 'unsupported_value', 'budgets'],
        [{ id: `${tag}-x`, allowed_ips: ['10.0.0.0/8'] }, 'unsupported_value', 'allowed_ips'],
        [[{ id: `${tag}-x` }], 'invalid_type', '(body)'],
      ];
      for (const [body, code, param] of bad) {
        assertError(t, await admin('POST', `/admin/accounts/${acct}/teams`, body), 400, code, param);
        if (param === 'id') continue;
        // The same settings refused by PATCH alike.
        const patch = Array.isArray(body) ? body : Object.fromEntries(Object.entries(body as object).filter(([k]) => k !== 'id'));
        assertError(t, await admin('PATCH', `/admin/teams/${id}`, patch), 400, code, param);
      }
      const text = await call(gw.url, 'POST', `/admin/accounts/${acct}/teams`, 'id=x', { authorization: `Bearer ${ADMIN}`, 'content-type': 'text/plain' });
      assertError(t, text, 415, 'unsupported_media_type');
      assertError(t, await admin('PATCH', `/admin/teams/${id}`, { id: 'renamed' }), 400, 'unsupported_value', 'id');
      t.strictSame((await admin('GET', `/admin/accounts/${acct}/teams`)).body.teams.map((x: any) => x.id), [id], 'no refused body made a team');
      t.match((await admin('GET', `/admin/teams/${id}`)).body, { name: null, budget: { units: null }, models: null }, 'no refused PATCH changed it');
      const put = await admin('PUT', `/admin/teams/${id}`, {});
      assertError(t, put, 405, 'method_not_allowed');
      t.equal(put.headers.allow, 'GET, HEAD, PATCH, DELETE');
      const del = await admin('DELETE', `/admin/accounts/${acct}/teams`);
      assertError(t, del, 405, 'method_not_allowed');
      t.equal(del.headers.allow, 'GET, HEAD, POST');
      assertError(t, await call(gw.url, 'GET', `/admin/teams/${id}`, undefined, { authorization: 'Bearer wrong' }), 401, 'invalid_api_key');
    });

    t.test("a key's team: in create, PATCH, list and GET; only its own account's; a team in use is kept", async (t: any) => {
      const acct = await account();
      const other = await account();
      const team = `${tag}-green`;
      const theirs = `${tag}-theirs`;
      t.equal((await admin('POST', `/admin/accounts/${acct}/teams`, { id: team })).status, 201);
      t.equal((await admin('POST', `/admin/accounts/${other}/teams`, { id: theirs })).status, 201);
      assertError(t, await admin('POST', `/admin/accounts/${acct}/keys`, { team: theirs }), 404, 'team_not_found', 'team');
      assertError(t, await admin('POST', `/admin/accounts/${acct}/keys`, { team: 'no-such-team' }), 404, 'team_not_found', 'team');
      assertError(t, await admin('POST', `/admin/accounts/${acct}/keys`, { team: 5 }), 400, 'invalid_type', 'team');
      assertError(t, await admin('POST', `/admin/accounts/${acct}/keys`, { team: 'a:b' }), 400, 'invalid_value', 'team');
      t.strictSame((await admin('GET', `/admin/accounts/${acct}/keys`)).body.keys, [], 'no key was issued by a refused create');

      const k = await admin('POST', `/admin/accounts/${acct}/keys`, { name: 'member', team });
      t.equal(k.status, 201);
      const plain = await admin('POST', `/admin/accounts/${acct}/keys`, {});
      const keys = (await admin('GET', `/admin/accounts/${acct}/keys`)).body.keys;
      t.equal(keys.find((x: any) => x.id === k.body.id).team, team, 'the list shows the team');
      t.equal(keys.find((x: any) => x.id === plain.body.id).team, null, 'and null for a key without one');
      t.equal((await admin('GET', `/admin/keys/${k.body.id}`)).body.team, team);
      const self = await call(gw.url, 'GET', '/v1/key', undefined, { authorization: `Bearer ${k.body.key}` });
      t.equal(self.status, 200);
      t.equal(self.body.team, team, 'GET /v1/key shows the team');

      assertError(t, await admin('PATCH', `/admin/keys/${plain.body.id}`, { team: theirs, name: 'x' }), 404, 'team_not_found', 'team');
      t.match((await admin('GET', `/admin/keys/${plain.body.id}`)).body, { team: null, name: null }, 'a refused PATCH changes nothing');
      t.equal((await admin('PATCH', `/admin/keys/${plain.body.id}`, { team })).body.team, team);

      const inUse = await admin('DELETE', `/admin/teams/${team}`);
      assertError(t, inUse, 409, 'team_in_use');
      t.equal((await admin('GET', `/admin/teams/${team}`)).status, 200, 'still there');
      t.equal((await admin('PATCH', `/admin/keys/${plain.body.id}`, { team: null })).body.team, null, 'team: null removes it');
      t.equal((await admin('DELETE', `/admin/keys/${k.body.id}`)).status, 204);
      t.equal((await admin('DELETE', `/admin/teams/${team}`)).status, 204, 'no live key names it now');
    });
  });
}

suite(t, 'memory store', () => ({ kind: 'memory' }));

t.test('redis store', async (t: any) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  suite(t, 'redis', () => ({ kind: 'redis', url: redis.url, prefix: `tg-teams-admin-${process.pid}:` }));
});
