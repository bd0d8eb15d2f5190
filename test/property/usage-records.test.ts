// Boundary: generated query strings to GET /admin/usage/records, through the real socket. Every
// answer is a page (records within the asked window, at most `limit` of them, next_cursor a
// string or null) when no parameter has a problem, else a 400 naming one parameter that has
// one, with that problem's code, or 404 account_not_found for an unknown account: never a 500.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { DEMO_KEY, authHeaders, baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { holds } from './arbitraries.js';
import { assertEnvelope } from './invariants.js';

const ADMIN = 'admin-token-records-props-0123456789';

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
  for (let i = 0; i < 5; i++) {
    const r = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: `hello ${i}` }] }, authHeaders(DEMO_KEY));
    assert.equal(r.status, 200);
  }
});
t.teardown(() => gw.close());

const PARAMS = ['account', 'key', 'model', 'since', 'until', 'limit', 'cursor'] as const;
type Param = typeof PARAMS[number];

const value = fc.oneof(
  fc.constantFrom('', 'demo', 'acme', 'nobody', 'echo-small', '2026-11-01', '2026-11-01T00:00:00Z', '1999-01-01', '2999-01-01', 'yesterday',
    '2026-13-45', '0', '1', '100', '1000', '1001', '-1', '2.5', '1e2', 'abc', ' 7', '0x10', '5:0', '5:12-0', '99999999:1', 'x'.repeat(300)),
  fc.string({ maxLength: 12 }),
  fc.integer({ min: -5, max: 2000 }).map(String),
  fc.date({ min: new Date('1970-01-01'), max: new Date('2100-01-01'), noInvalidDate: true }).map((d) => d.toISOString()),
);

const query = fc.array(fc.tuple(fc.constantFrom(...PARAMS, 'other'), value), { maxLength: 5 });

/** The problem of one parameter's value (the first occurrence counts), or undefined when fine. */
function problem(name: Param, v: string): string | undefined {
  if (v === '' || v.length > 256) return 'invalid_value';
  if (name === 'since' || name === 'until') return /^\d{4}-\d{2}-\d{2}/.test(v) && Number.isFinite(Date.parse(v)) ? undefined : 'invalid_value';
  if (name === 'limit') {
    if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(v)) return 'invalid_type';
    return /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 1000 ? undefined : 'invalid_value';
  }
  if (name === 'cursor') return /^\d{1,12}:\d{1,20}(-\d{1,20})?$/.test(v) ? undefined : 'invalid_value';
  return undefined;
}

t.test('GET /admin/usage/records: a page, or the error of a parameter that has one; never a 500', async (t) => {
  await holds(t, 'records queries', fc.asyncProperty(query, async (pairs) => {
    const qs = new URLSearchParams(pairs).toString();
    const res = await request(`${gw.url}/admin/usage/records?${qs}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    const text = await res.body.text();
    const given = new Map<string, string>();
    for (const [k, v] of pairs) if (!given.has(k)) given.set(k, v);
    const problems = new Map<string, string>();
    for (const p of PARAMS) {
      const v = given.get(p);
      const why = v === undefined ? undefined : problem(p, v);
      if (why !== undefined) problems.set(p, why);
    }
    const since = given.has('since') && !problems.has('since') ? Date.parse(given.get('since')!) : 0;
    const until = given.has('until') && !problems.has('until') ? Date.parse(given.get('until')!) : undefined;
    if (until !== undefined && until <= since && !problems.has('since')) problems.set('until', 'invalid_value');
    if (res.statusCode === 200) {
      assert.equal(problems.size, 0, `200 despite ${[...problems].join(', ')}: ${qs}`);
      const page = JSON.parse(text);
      assert.deepEqual(Object.keys(page), ['records', 'next_cursor']);
      assert.ok(page.next_cursor === null || typeof page.next_cursor === 'string');
      const limit = given.has('limit') ? Number(given.get('limit')) : 100;
      assert.ok(page.records.length <= limit);
      for (const r of page.records) {
        assert.ok(Number.isSafeInteger(r.queue_ms) && r.queue_ms >= 0, `queue_ms ${r.queue_ms}: whole ms, never absent`);
        const at = Date.parse(r.at);
        assert.ok(at >= since && (until === undefined || at < until), `${r.at} within the window`);
        for (const [p, f] of [['account', 'account'], ['key', 'key_id'], ['model', 'model']] as const) {
          if (given.has(p)) assert.equal(r[f], given.get(p));
        }
      }
      return;
    }
    const e = assertEnvelope({ status: res.statusCode, headers: res.headers, text });
    if (res.statusCode === 404) {
      assert.equal(e.code, 'account_not_found');
      assert.ok(given.has('account') && !['demo', 'acme'].includes(given.get('account')!));
      return;
    }
    assert.equal(res.statusCode, 400, text);
    assert.ok(e.param !== null && problems.get(e.param) === e.code, `${e.code}:${e.param} for ${qs}; problems ${[...problems].join(', ')}`);
  }), 300);
});
