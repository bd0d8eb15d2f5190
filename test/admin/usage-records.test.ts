// Usage records end to end (CONTRACT section 8), on the memory store and on Redis: mixed
// requests (answers, streams, upstream errors, clients leaving mid-stream, and requests refused
// before metering) leave exactly one record per metered request, with the right fields and the
// debited figures; GET /admin/usage/records pages through them and refuses bad parameters;
// GET /admin/usage gains by_key.

import t from 'tap';
import { request as httpRequest } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { DEMO_KEY, PRO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { schemas } from '../helpers/schemas.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';

const ADMIN = 'admin-usage-token-123';
const BROKE_KEY = 'tg_broke_2222222222222222';
const DEMO_ID = keyIdOf(sha256Hex(DEMO_KEY));
const PRO_ID = keyIdOf(sha256Hex(PRO_KEY));

const upstream: FakeUpstream = await startUpstream(async (_req, res, body) => {
  const text = String(body.messages?.at(-1)?.content ?? '');
  if (text.startsWith('fail')) return json(res, 500, { error: { message: 'boom' } });
  if (text.startsWith('slow')) {
    // Words keep coming until the client leaves.
    const frames = streamFrames(Array.from({ length: 200 }, (_, i) => `w${i} `));
    return writeSse(res, frames, { pauseMs: 20 });
  }
  if (body.stream === true) return writeSse(res, streamFrames(['a ', 'b ', 'c']));
  return json(res, 200, completionBody('hello there'));
});
t.teardown(() => upstream.close());

const redis = await startRedis();
t.teardown(() => redis.stop());

function config(store: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = store;
  c.accounts.push({ id: 'broke', plan: 'free', wallet_units: 0, keys: [BROKE_KEY] });
  c.providers.up = { kind: 'openai', base_url: upstream.baseUrl, stream_usage: true };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'internal/m', price: { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 } });
  return c;
}

async function admin(gw: TestGateway, path: string, method = 'GET') {
  const res = await fetch(`${gw.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}` } });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) };
}

async function post(gw: TestGateway, path: string, id: string, body: unknown, key = DEMO_KEY) {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-request-id': id },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A streamed request whose client leaves after the first bytes of content. */
function leaveMidStream(gw: TestGateway, id: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'x-request-id': id },
    }, (res) => {
      let seen = '';
      res.on('data', (d) => {
        seen += d;
        if (seen.includes('w2')) { req.destroy(); resolve(); }
      });
      res.on('error', () => undefined);
    });
    req.on('error', () => undefined);
    req.setTimeout(10_000, () => reject(new Error('no stream')));
    req.end(JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'slow please' }] }));
  });
}

async function allRecords(gw: TestGateway, query: string, limit: number): Promise<{ records: any[]; pages: number }> {
  const records: any[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await admin(gw, `/admin/usage/records?${query}&limit=${limit}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
    if (res.status !== 200) throw new Error(`records: ${res.status} ${res.text}`);
    const page = res.json();
    t.strictSame(Object.keys(page), ['records', 'next_cursor']);
    records.push(...page.records);
    cursor = page.next_cursor;
    pages++;
  } while (cursor !== null);
  return { records, pages };
}

const stores: Array<[string, () => Promise<Record<string, unknown>>]> = [
  ['memory store', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-records-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    return { kind: 'memory', path: dir, fsync_ms: 0 };
  }],
  ['redis store', async () => ({ kind: 'redis', url: redis.url, prefix: `records${Date.now()}:` })],
];

for (const [name, store] of stores) {
  t.test(`${name}: one record per metered request, with the debited figures`, async (t) => {
    const gw = await startGateway(config(await store()));
    t.teardown(() => gw.close());
    const since = new Date(Date.now() - 1000).toISOString();
    const balanceBefore = (await admin(gw, '/admin/accounts/demo')).json().balance_units;
    const run = `${name === 'redis store' ? 'R' : 'M'}${Date.now()}`;
    const expected = new Map<string, Record<string, unknown>>();

    // Metered: answers, streams, upstream failures, a client that leaves, another route and key.
    const calls: Array<Promise<unknown>> = [];
    for (let i = 0; i < 6; i++) {
      const id = `${run}-ok-${i}`;
      calls.push(post(gw, '/v1/chat/completions', id, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }).then((r) => {
        t.equal(r.status, 200);
        expected.set(id, { status: 200, prompt_tokens: 12, completion_tokens: 7, units: Number(r.headers.get('x-tollgate-units-charged')), usage_source: 'upstream' });
      }));
    }
    for (let i = 0; i < 4; i++) {
      const id = `${run}-stream-${i}`;
      calls.push(post(gw, '/v1/chat/completions', id, { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }).then((r) => {
        t.equal(r.status, 200);
        t.ok(r.text.endsWith('data: [DONE]\n\n'));
        expected.set(id, { status: 200, prompt_tokens: 12, completion_tokens: 3, units: 12 + 2 * 3, usage_source: 'upstream' });
      }));
    }
    for (let i = 0; i < 3; i++) {
      const id = `${run}-fail-${i}`;
      calls.push(post(gw, '/v1/chat/completions', id, { model: 'm', messages: [{ role: 'user', content: 'fail now' }] }).then((r) => {
        t.equal(r.status, 502);
        expected.set(id, { status: 502, prompt_tokens: 0, completion_tokens: 0, units: 0, usage_source: 'none', ttft_ms: null });
      }));
    }
    for (let i = 0; i < 2; i++) {
      const id = `${run}-leave-${i}`;
      // Its status line (200) went out before it left: that is the status it got.
      calls.push(leaveMidStream(gw, id).then(() => { expected.set(id, { status: 200, usage_source: 'counted' }); }));
    }
    const msgId = `${run}-messages`;
    calls.push(post(gw, '/v1/messages', msgId, { model: 'm', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }, PRO_KEY).then((r) => {
      t.equal(r.status, 200);
      expected.set(msgId, { status: 200, account: 'acme', key_id: PRO_ID, route: '/v1/messages', prompt_tokens: 12, completion_tokens: 7, units: 26 });
    }));
    // Refused before metering: no record.
    const refused = [
      post(gw, '/v1/chat/completions', `${run}-badkey`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, 'tg_nope_000000000000'),
      post(gw, '/v1/chat/completions', `${run}-badjson`, '{"model":'),
      post(gw, '/v1/chat/completions', `${run}-nomodel`, { model: 'nope', messages: [{ role: 'user', content: 'hi' }] }),
      post(gw, '/v1/chat/completions', `${run}-broke`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, BROKE_KEY),
      post(gw, '/v1/chat/completions', `${run}-temp`, { model: 'm', temperature: 9, messages: [{ role: 'user', content: 'hi' }] }),
    ];
    t.strictSame((await Promise.all(refused)).map((r) => r.status), [401, 400, 404, 402, 400]);
    await Promise.all(calls);

    // Records are written once each answer is closed and its debit landed.
    let records: any[] = [];
    for (let i = 0; i < 200; i++) {
      records = (await allRecords(gw, `since=${since}`, 1000)).records.filter((r) => r.request_id.startsWith(run));
      if (records.length >= expected.size) break;
      await sleep(25);
    }
    await sleep(200);
    records = (await allRecords(gw, `since=${since}`, 1000)).records.filter((r) => r.request_id.startsWith(run));
    t.equal(records.length, 16, 'one record per metered request, none for the refused ones');
    t.strictSame([...new Set(records.map((r) => r.request_id))].sort(), [...expected.keys()].sort(), 'each metered request exactly once');

    for (const r of records) {
      const want = expected.get(r.request_id)!;
      t.strictSame(Object.keys(r), [
        'request_id', 'at', 'account', 'key_id', 'team', 'model', 'provider', 'target', 'route', 'status', 'prompt_tokens', 'cached_tokens',
        'completion_tokens', 'units', 'usage_source', 'duration_ms', 'ttft_ms', 'queue_ms', 'tags', 'end_user',
      ], `${r.request_id}: the contract's fields`);
      t.match(r, {
        account: 'demo', key_id: DEMO_ID, model: 'm', provider: 'up', target: upstream.baseUrl, route: '/v1/chat/completions', cached_tokens: 0,
        queue_ms: 0, // a provider without a queue
        ...want,
      }, r.request_id);
      t.match(r.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      t.ok(Date.parse(r.at) >= Date.parse(since) && Date.parse(r.at) <= Date.now());
      t.ok(typeof r.duration_ms === 'number' && r.duration_ms > 0);
      if (want.ttft_ms === undefined) t.ok(typeof r.ttft_ms === 'number' && r.ttft_ms > 0 && r.ttft_ms <= r.duration_ms, `${r.request_id}: ttft_ms`);
      if (r.request_id.includes('-leave-')) t.ok(r.completion_tokens >= 3 && r.units === r.prompt_tokens + 2 * r.completion_tokens, 'a client that left is charged what it got');
    }
    const balanceAfter = (await admin(gw, '/admin/accounts/demo')).json().balance_units;
    const demoUnits = records.filter((r) => r.account === 'demo').reduce((s, r) => s + r.units, 0);
    t.equal(balanceBefore - balanceAfter, demoUnits, 'records and ledger agree to the unit');

    const usage = (await admin(gw, `/admin/usage?since=${since}`)).json();
    t.strictSame(usage.by_key[DEMO_ID], {
      requests: 15, prompt_tokens: records.filter((r) => r.account === 'demo').reduce((s, r) => s + r.prompt_tokens, 0),
      completion_tokens: records.filter((r) => r.account === 'demo').reduce((s, r) => s + r.completion_tokens, 0), units: demoUnits,
    }, 'by_key sums the key\'s records');
    t.strictSame(usage.by_key[PRO_ID], { requests: 1, prompt_tokens: 12, completion_tokens: 7, units: 26 });
    t.equal(usage.requests, 16);

    // Filters and pages through the API.
    const paged = await allRecords(gw, `since=${since}`, 3);
    t.equal(paged.pages, 6, 'sixteen records in pages of three');
    t.strictSame(paged.records.map((r) => r.request_id), (await allRecords(gw, `since=${since}`, 1000)).records.map((r) => r.request_id), 'the same stable order');
    t.strictSame((await allRecords(gw, `since=${since}&account=acme`, 10)).records.map((r) => r.request_id), [msgId]);
    t.strictSame((await allRecords(gw, `since=${since}&key=${PRO_ID}`, 10)).records.map((r) => r.request_id), [msgId]);
    t.equal((await allRecords(gw, `since=${since}&model=m&account=demo`, 10)).records.length, 15);
    t.equal((await allRecords(gw, `since=${since}&model=echo-small`, 10)).records.length, 0);
    t.equal((await allRecords(gw, `since=${since}&until=${encodeURIComponent(new Date(Date.parse(since) + 1).toISOString())}`, 10)).records.length, 0, 'until excludes later records');
  });
}

t.test('records query parameters: each bad one is a 400 with its code and param, an unknown account 404', async (t) => {
  const gw = await startGateway(config({ kind: 'memory' }));
  t.teardown(() => gw.close());
  const cases: Array<[string, number, string, string | null]> = [
    ['limit=0', 400, 'invalid_value', 'limit'],
    ['limit=1001', 400, 'invalid_value', 'limit'],
    ['limit=2.5', 400, 'invalid_value', 'limit'],
    ['limit=1e2', 400, 'invalid_value', 'limit'],
    ['limit=-3', 400, 'invalid_value', 'limit'],
    ['limit=ten', 400, 'invalid_type', 'limit'],
    ['since=yesterday', 400, 'invalid_value', 'since'],
    ['until=2026-13-45', 400, 'invalid_value', 'until'],
    ['since=2026-11-02&until=2026-11-01', 400, 'invalid_value', 'until'],
    ['since=2026-11-01&until=2026-11-01', 400, 'invalid_value', 'until'],
    ['cursor=not-a-cursor', 400, 'invalid_value', 'cursor'],
    ['account=', 400, 'invalid_value', 'account'],
    ['key=', 400, 'invalid_value', 'key'],
    [`model=${'x'.repeat(300)}`, 400, 'invalid_value', 'model'],
    ['account=nobody', 404, 'account_not_found', null],
  ];
  for (const [query, status, code, param] of cases) {
    const res = await admin(gw, `/admin/usage/records?${query}`);
    t.equal(res.status, status, query);
    const body = res.json();
    t.same(schemas.error(body), [], query);
    t.equal(body.code, code, query);
    t.equal(body.param, param, query);
    t.equal(body.request_id, res.headers.get('x-request-id'));
    t.ok(body.message.length < 400, 'the message does not echo a long input');
  }
  const post = await admin(gw, '/admin/usage/records', 'POST');
  t.equal(post.status, 405);
  t.equal(post.headers.get('allow'), 'GET, HEAD');
  t.equal(post.json().code, 'method_not_allowed');
  const unauthorized = await fetch(`${gw.url}/admin/usage/records`);
  t.equal(unauthorized.status, 401);
  t.strictSame((await admin(gw, '/admin/usage/records')).json(), { records: [], next_cursor: null }, 'no records yet: an empty last page');
});

t.test('a dashboard session\'s request: key_id null, counted in the totals but in no by_key entry; echo has no target', async (t) => {
  const { SignJWT } = await import('jose');
  const secret = 'a-dashboard-secret-of-enough-length-0123456789';
  const c = config({ kind: 'memory' });
  c.auth = { jwt: { secret } };
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const jwt = await new SignJWT({ type: 'access', sid: 'sess-1' }).setProtectedHeader({ alg: 'HS256' }).setSubject('demo')
    .setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(new TextEncoder().encode(secret));
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json', 'x-request-id': 'jwt-1' },
    body: JSON.stringify({ model: 'echo-small', messages: [{ role: 'user', content: 'hello' }] }),
  });
  t.equal(res.status, 200);
  const charged = Number(res.headers.get('x-tollgate-units-charged'));
  let page: any;
  for (let i = 0; i < 100; i++) {
    page = (await admin(gw, '/admin/usage/records')).json();
    if (page.records.length > 0) break;
    await sleep(20);
  }
  t.match(page.records, [{ request_id: 'jwt-1', account: 'demo', key_id: null, provider: 'echo', target: null, model: 'echo-small', units: charged }]);
  const usage = (await admin(gw, '/admin/usage?since=2000-01-01')).json();
  t.equal(usage.requests, 1);
  t.strictSame(usage.by_key, {});
});
