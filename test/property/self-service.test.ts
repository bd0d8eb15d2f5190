// Boundary: generated query strings to GET /v1/usage (CONTRACT section 15), through the real
// socket. Every answer is 200 with well-formed rows or 400 invalid_value naming `since` or
// `until`, never a 500; which one, and the rows, agree with an oracle written here from the
// rules (UTC dates YYYY-MM-DD, each at most once, until defaults to today, since to the 30
// days ending at until, since <= until, at most usage.retention_days days). GET /v1/key with
// generated query strings (which it ignores) always answers the same key.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { holds, oddString } from './arbitraries.js';
import { assertEnvelope, type Answer } from './invariants.js';

const ADMIN = 'admin-token-self-service-props';
const RETENTION = 40;
const DAY = 86_400_000;

let gw: TestGateway;
let key = '';
let keyId = '';
/** The key's one usage row (today's), as the admin records say it. */
let row: Record<string, unknown> = {};

async function call(path: string, auth: string): Promise<Answer> {
  const res = await request(`${gw.url}${path}`, { headers: { authorization: `Bearer ${auth}` }, headersTimeout: 10_000, bodyTimeout: 10_000 });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans.free = { paid: false, requests_per_minute: 1_000_000 };
  c.models = [{ id: 'echo-small', provider: 'echo', max_output_tokens: 20, price: { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } }];
  c.routing = { auto: ['echo-small'] };
  c.usage = { retention_days: RETENTION };
  gw = await startGateway(c);
  const made = await request(`${gw.url}/admin/accounts/demo/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: '{}' });
  const k = await made.body.json() as { id: string; key: string };
  key = k.key;
  keyId = k.id;
  const chat = await request(`${gw.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'one record' }] }),
  });
  assert.equal(chat.statusCode, 200);
  await chat.body.text();
  for (;;) {
    const r = await request(`${gw.url}/admin/usage/records?key=${keyId}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    const recs = ((await r.body.json()) as { records: any[] }).records;
    if (recs.length === 1) {
      const x = recs[0];
      row = { date: x.at.slice(0, 10), model: x.model, requests: 1, prompt_tokens: x.prompt_tokens, completion_tokens: x.completion_tokens, units: x.units };
      break;
    }
    await sleep(20);
  }
});
t.teardown(() => gw.close());

/** A UTC date's midnight in ms, built from its parts (years below 100 too); undefined when not a real date. */
function oracleDate(text: string): number | undefined {
  const m = /^(\d\d\d\d)-(\d\d)-(\d\d)$/.exec(text);
  if (m === null) return undefined;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  if (date.getUTCFullYear() !== y || date.getUTCMonth() !== mo - 1 || date.getUTCDate() !== d) return undefined;
  return date.getTime();
}

/** What the rules say a query answers: the range, or the parameter a 400 names. */
function oracle(query: string, now: number): { since: number; until: number } | { param: string } {
  const p = new URLSearchParams(query);
  const read = (name: string): number | undefined | { param: string } => {
    const all = p.getAll(name);
    if (all.length === 0) return undefined;
    if (all.length > 1) return { param: name };
    return oracleDate(all[0]!) ?? { param: name };
  };
  const s = read('since');
  if (typeof s === 'object') return s;
  const u = read('until');
  if (typeof u === 'object') return u;
  const until = u ?? Math.floor(now / DAY) * DAY;
  const since = s ?? until - 29 * DAY;
  if (since > until) return { param: u === undefined ? 'since' : 'until' };
  if ((until - since) / DAY + 1 > RETENTION) return { param: s === undefined ? 'until' : 'since' };
  return { since, until };
}

const pad = (n: number, w: number) => String(n).padStart(w, '0');
const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** Dates: real ones around today, impossible ones of the right shape, and anything else. */
const dateText: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.integer({ min: -60, max: 10 }).map((d) => iso(Date.now() + d * DAY)) },
  { weight: 2, arbitrary: fc.tuple(fc.integer({ min: 0, max: 9999 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 })).map(([y, m, d]) => `${pad(y, 4)}-${pad(m, 2)}-${pad(d, 2)}`) },
  { weight: 1, arbitrary: fc.constantFrom('', '2026-11-01T00:00:00Z', '+2026-11-01', '2026-11-1', '２０２６-１１-０１', '2026/11/01', '0000-01-01', '9999-12-31', '1970-01-01', 'null', '[]') },
  // Odd strings, short enough that the request line stays within node's header limit (16 KiB).
  { weight: 1, arbitrary: oddString.map((x) => x.slice(0, 200)) },
);
const name = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('since', 'until') }, fc.constantFrom('Since', 'since[]', 'until ', 'x', '', '__proto__', 'limit'));
/** Percent-encoded as UTF-8 bytes (a lone surrogate as U+FFFD's); `raw` leaves more of URL's sub-delimiters as they are. */
const encode = (s: string, raw: boolean) => s.replace(raw ? /[^!$'()*+,\-./0-9:;=?@A-Z_a-z~]/g : /[^\-.0-9A-Z_a-z~]/g,
  (c) => [...Buffer.from(c, 'utf8')].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join(''));
const structured = fc.tuple(fc.array(fc.tuple(name, dateText, fc.boolean()), { maxLength: 4 }), fc.constantFrom('&', '&&', ';'))
  .map(([pairs, sep]) => pairs.map(([k, v, raw]) => `${encode(k, raw)}=${encode(v, raw)}`).join(sep));
/** Any printable ASCII (a `#` would end the URL's query: sent encoded), and stray percent signs. */
const rawQuery = fc.stringMatching(/^[!-~]{0,60}$/).map((s) => s.replace(/#/g, '%23').replace(/[\\^`{|}"<>]/g, (c) => encodeURIComponent(c)));
const query = fc.oneof({ weight: 4, arbitrary: structured }, { weight: 1, arbitrary: rawQuery });

t.test('GET /v1/usage: generated query strings are 200 or 400 naming since/until, as the rules say; never a 500', async (t) => {
  const seen = new Map<string, number>();
  await holds(t, 'usage queries', fc.asyncProperty(query, async (q) => {
    const now = Date.now();
    const a = await call(`/v1/usage?${q}`, key);
    const outcome = a.status === 200 ? (a.text.includes('"date"') ? '200 rows' : '200 empty') : `${a.status} ${JSON.parse(a.text).param}`;
    seen.set(outcome, (seen.get(outcome) ?? 0) + 1);
    const want = oracle(q, now);
    // A query sent across a UTC midnight may be read on either side of it.
    if ('param' in want && a.status === 200 && Math.floor(Date.now() / DAY) !== Math.floor(now / DAY)) return;
    if ('param' in want) {
      const e = assertEnvelope(a);
      assert.equal(a.status, 400, a.text);
      assert.equal(e.code, 'invalid_value');
      assert.equal(e.param, want.param, `${q}: ${a.text}`);
      return;
    }
    assert.equal(a.status, 200, `${q}: ${a.text}`);
    const body = JSON.parse(a.text);
    assert.deepEqual(Object.keys(body), ['data']);
    const today = oracleDate(row.date as string)!;
    assert.deepEqual(body.data, today >= want.since && today <= want.until ? [row] : [], q);
  }), 300);
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(seen))}`);
  for (const o of ['200 rows', '200 empty', '400 since', '400 until']) t.ok(seen.has(o), `the generated queries reach ${o}`);
});

t.test('GET /v1/key ignores its query string: the same key, whatever follows the ?', async (t) => {
  const first = await call('/v1/key', key);
  assert.equal(first.status, 200);
  await holds(t, 'key queries', fc.asyncProperty(query, async (q) => {
    const a = await call(`/v1/key?${q}`, key);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.text, first.text);
    assert.equal(JSON.parse(a.text).id, keyId);
  }), 100);
});
