// Metering through real sockets: exact debits, races, disconnects, rejections, quotas, usage
// records, on the memory store and on Redis.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { cost } from '../../lib/billing/meter.js';
import { DEMO_KEY, baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { chunk, completionBody, json, startUpstream, streamFrames, writeSse } from '../helpers/upstream.js';

const ADMIN = 'metering-admin-token-0123';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };

async function setup(t: any, over: { store?: Record<string, unknown>; wallet?: number; quotas?: Record<string, number | null> } = {}) {
  const up = await startUpstream((_req, res) => json(res, 200, completionBody('ok')));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.server.max_body_bytes = 1024 * 1024;
  if (over.store) c.store = over.store;
  c.plans.free = { paid: false, quotas: { requests_per_day: null, tokens_per_day: null, units_per_month: null, ...over.quotas } };
  c.accounts[0].wallet_units = over.wallet ?? 1_000_000;
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 3000 };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'm-7b', context_window: 32768, max_output_tokens: 1000, price: PRICE });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  return { up, gw };
}

async function account(gw: TestGateway, id = 'demo'): Promise<any> {
  return (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

const ask = (extra: Record<string, any> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'price me' }], max_tokens: 100, ...extra });

t.test('cost is ceil((p x in + c x out) / 1e6) in exact integers', async (t) => {
  t.equal(cost(1234, 567, PRICE), 3n);
  t.equal(cost(1000, 0, { input_per_mtok: 1000, output_per_mtok: 0 }), 1n, 'exactly 1 unit');
  t.equal(cost(1001, 0, { input_per_mtok: 1000, output_per_mtok: 0 }), 2n, 'a hair over rounds up');
  t.equal(cost(0, 0, PRICE), 0n);
  t.equal(cost(3_000_000_000, 1, { input_per_mtok: 1_000_000, output_per_mtok: 1 }), 3_000_000_001n, '3e15 + 1 before the division, exact');
  t.equal(cost(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, { input_per_mtok: 1e300, output_per_mtok: 7 }),
    (BigInt(Number.MAX_SAFE_INTEGER) * BigInt(1e300) + BigInt(Number.MAX_SAFE_INTEGER) * 7n + 999_999n) / 1_000_000n,
    'past 2^53: every digit kept');
});

t.test('exact arithmetic: N non-streaming and N streaming requests, to the unit', async (t) => {
  const { up, gw } = await setup(t);
  const usages: Array<[number, number]> = [[1234, 567], [1, 1], [999_999, 1], [50, 0], [0, 333]];
  let expected = 0;
  let reported = 0;
  for (const [p, c] of usages) {
    up.setScript((_req, res) => json(res, 200, completionBody('answer', { usage: { prompt_tokens: p, completion_tokens: c, total_tokens: p + c } })));
    const res = await postChat(gw.url, ask(), { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' });
    t.equal(res.status, 200);
    const units = Number(cost(p, c, PRICE));
    expected += units;
    t.equal(res.headers['x-tollgate-units-charged'], String(units), `charged ${units} for ${p}/${c}`);
    reported = Number(res.headers['x-tollgate-wallet-balance-units']);
    t.equal(reported, 1_000_000 - expected, 'the header is the available balance after the debit');
  }
  for (const [p, c] of usages) {
    up.setScript((_req, res) => writeSse(res, streamFrames(['a', 'b'], { prompt_tokens: p, completion_tokens: c, total_tokens: p + c }), { split: 5 }));
    const res = await postChat(gw.url, ask({ stream: true }));
    t.ok(sseData(res.text).done);
    expected += Number(cost(p, c, PRICE));
  }
  const acct = await account(gw);
  t.equal(acct.balance_units, 1_000_000 - expected, 'final balance = initial - sum of costs');
  t.equal(acct.held_units, 0, 'no hold left');
  t.equal(acct.usage.day.requests, 10);
  t.equal(acct.usage.day.units, expected);
  t.equal(acct.usage.day.tokens, 2 * usages.reduce((s, [p, c]) => s + p + c, 0));
  const metrics = await fetch(`${gw.url}/metrics`).then((r) => r.text());
  t.match(metrics, new RegExp(`^tollgate_units_charged_total ${expected}$`, 'm'));

  const report: any = await (await fetch(`${gw.url}/admin/usage?account=demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  t.match(report, { account: 'demo', requests: 10, units: expected });
  t.equal(report.by_model.m.requests, 10);
  t.equal(report.prompt_tokens, 2 * usages.reduce((s, [p]) => s + p, 0));
});

t.test('an upstream without usage is charged by counted tokens', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript((_req, res) => json(res, 200, completionBody('four words right here', { usage: undefined })));
  const res = await postChat(gw.url, ask());
  const body = res.json();
  t.equal(body.usage.completion_tokens, 4);
  t.equal(res.headers['x-tollgate-units-charged'], String(cost(body.usage.prompt_tokens, 4, PRICE)));
});

async function race(t: any, store: Record<string, unknown> | undefined) {
  // Each request holds cost(prompt, 1000 output) = ~3 units + prompt; the wallet affords few.
  const { up, gw } = await setup(t, { store, wallet: 40 });
  up.setScript(async (_req, res) => { await sleep(30); json(res, 200, completionBody('x', { usage: { prompt_tokens: 10, completion_tokens: 500, total_tokens: 510 } })); });
  const results = await Promise.all(Array.from({ length: 50 }, () => postChat(gw.url, ask({ max_tokens: 1000 }))));
  const ok = results.filter((r) => r.status === 200);
  const refused = results.filter((r) => r.status === 402);
  t.equal(ok.length + refused.length, 50, 'every request either served or refused with 402');
  t.ok(ok.length > 0 && refused.length > 0, `${ok.length} served, ${refused.length} refused`);
  for (const r of refused) {
    const b = r.json();
    t.equal(b.code, 'insufficient_credits');
    t.ok(b.wallet_balance_units >= 0);
  }
  const charged = ok.reduce((s, r) => s + Number(r.headers['x-tollgate-units-charged']), 0);
  const acct = await account(gw);
  t.ok(acct.balance_units >= 0, 'never below zero');
  t.equal(40 - acct.balance_units, charged, 'the drop in balance is the sum of debits');
  t.equal(acct.held_units, 0);
}

t.test('race: 50 concurrent requests against a wallet that affords fewer (memory store)', async (t) => race(t, undefined));

t.test('race on Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  await race(t, { kind: 'redis', url: redis.url, prefix: `race-${process.pid}:` });
});

t.test('insufficient credits: 402 with the available balance, nothing held or charged', async (t) => {
  const { up, gw } = await setup(t, { wallet: 2 });
  const res = await postChat(gw.url, ask({ max_tokens: 1000 }));
  t.equal(res.status, 402);
  const body = res.json();
  t.equal(body.code, 'insufficient_credits');
  t.equal(body.type, 'insufficient_credits');
  t.equal(body.wallet_balance_units, 2);
  t.equal(body.error.wallet_balance_units, 2);
  t.equal(up.requests.length, 0, 'the upstream was never called');
  t.match(await account(gw), { balance_units: 2, held_units: 0 });
});

t.test('disconnect mid-stream: upstream aborted within 1 s, one debit for the delivered part, no hold left', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript(async (_req, res) => {
    await writeSse(res, streamFrames([]).slice(0, 1), { end: false });
    for (let i = 0; i < 200 && !res.destroyed; i++) {
      res.write(`data: ${JSON.stringify(chunk({ content: ' word' }))}\n\n`);
      await sleep(20);
    }
    res.end();
  });
  const ac = new AbortController();
  const r = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(ask({ stream: true, max_tokens: 1000 })),
  });
  const reader = r.body!.getReader();
  let got = '';
  while ((got.match(/ word/g) ?? []).length < 5) got += new TextDecoder().decode((await reader.read()).value);
  const during = await account(gw);
  t.ok(during.held_units > 0, `a hold is open during the stream (${during.held_units})`);
  const leftAt = Date.now();
  ac.abort();
  while (!up.requests[0]!.aborted && Date.now() - leftAt < 1000) await sleep(10);
  t.ok(up.requests[0]!.aborted && up.requests[0]!.abortedAt! - leftAt < 1000, 'the upstream saw the abort within 1 s');
  let acct = await account(gw);
  for (let i = 0; i < 50 && acct.usage.day.requests === 0; i++) { await sleep(20); acct = await account(gw); }
  t.equal(acct.held_units, 0, 'no hold left');
  t.equal(acct.usage.day.requests, 1, 'one debit');
  const charged = 1_000_000 - acct.balance_units;
  t.ok(charged > 0 && charged < cost(100, 1000, PRICE), `charged ${charged}: the delivered part, not the worst case`);
});

t.test('a non-streaming client gone before the answer is charged nothing', async (t) => {
  const { up, gw } = await setup(t);
  up.setScript(async (_req, res) => { await sleep(2000); if (!res.destroyed) json(res, 200, completionBody('late')); });
  const ac = new AbortController();
  const pending = fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(ask()),
  }).catch(() => undefined);
  while (up.requests.length === 0) await sleep(10);
  ac.abort();
  await pending;
  await sleep(100);
  t.match(await account(gw), { balance_units: 1_000_000, held_units: 0 });
});

t.test('every rejection leaves the wallet and quotas untouched and no hold open', async (t) => {
  const { up, gw } = await setup(t, { quotas: { requests_per_day: 100 } });
  const before = await account(gw);
  t.equal((await postChat(gw.url, ask(), { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' })).status, 200, 'served once');
  const baseline = await account(gw);
  t.same(await account(gw), baseline);
  const cases: Array<[string, () => Promise<{ status: number }>, number]> = [
    ['401', () => postChat(gw.url, ask(), { authorization: 'Bearer tg_nope', 'content-type': 'application/json' }), 401],
    ['403', () => postChat(gw.url, { ...ask(), model: 'echo-vision' }), 403],
    ['404', () => postChat(gw.url, { ...ask(), model: 'nope' }), 404],
    ['413', () => postChat(gw.url, ask({ pad: 'x'.repeat(2 * 1024 * 1024) })), 413],
    ['422', () => postChat(gw.url, ask({ max_tokens: 40000 })), 422],
    ['400', () => postChat(gw.url, ask({ temperature: 9 })), 400],
  ];
  for (const [name, send, status] of cases) {
    const res = await send();
    t.equal(res.status, status, name);
  }
  for (const script of [
    (_req: any, res: any) => json(res, 500, { error: { message: 'boom' } }),
    (_req: any, res: any) => json(res, 429, { error: { message: 'slow' } }),
    (req: any) => req.socket.destroy(),
    (_req: any, res: any) => writeSse(res, [`data: ${JSON.stringify({ error: { message: 'first event' } })}\n\n`]),
  ]) {
    up.setScript(script);
    t.ok((await postChat(gw.url, ask())).status >= 500, 'an upstream failure');
    t.ok((await postChat(gw.url, ask({ stream: true }))).status >= 500, 'an upstream failure before the first byte');
  }
  const after = await account(gw);
  t.same(after, baseline, 'balance, holds and usage are exactly as after the one served request');
  t.equal(before.usage.day.requests + 1, after.usage.day.requests);
});

t.test('quotas: requests_per_day, tokens_per_day, units_per_month -> 402 quota_exceeded; a refusal consumes nothing', async (t) => {
  for (const [quota, limit] of [['requests_per_day', 3], ['tokens_per_day', 1000], ['units_per_month', 10]] as const) {
    const { up, gw } = await setup(t, { quotas: { [quota]: limit } });
    up.setScript((_req, res) => json(res, 200, completionBody('x', { usage: { prompt_tokens: 400, completion_tokens: 1000, total_tokens: 1400 } })));
    let served = 0;
    let refused: any;
    for (let i = 0; i < 10 && refused === undefined; i++) {
      const res = await postChat(gw.url, ask());
      if (res.status === 200) served++;
      else refused = { status: res.status, body: res.json() };
    }
    t.ok(served >= 1, `${quota}: ${served} served first`);
    t.equal(refused?.status, 402, `${quota}: then 402`);
    t.equal(refused?.body.code, 'quota_exceeded');
    t.equal(refused?.body.quota_code, quota);
    t.type(refused?.body.wallet_balance_units, 'number');
    const a1 = await account(gw);
    t.equal((await postChat(gw.url, ask())).status, 402);
    t.same(await account(gw), a1, `${quota}: the refusal consumed nothing`);
  }
});

t.test('usage CLI and account view', async (t) => {
  const { gw } = await setup(t);
  await postChat(gw.url, ask());
  const { execFile } = await import('node:child_process');
  const { promisify } = await import('node:util');
  const bin = new URL('../../bin/tollgate.js', import.meta.url).pathname;
  const out = await promisify(execFile)(process.execPath, [bin, 'usage', '--account', 'demo', '--url', gw.url], { env: { ...process.env, TOLLGATE_ADMIN_TOKEN: ADMIN } });
  t.match(out.stdout, /^usage since \d{4}-\d\d-01T00:00:00\.000Z for demo: 1 requests, 12 prompt \+ 7 completion tokens, 1 units\n {2}m: 1 requests/);
  const bad = await fetch(`${gw.url}/admin/usage?since=yesterday-ish`, { headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(bad.status, 400);
  t.equal(((await bad.json()) as any).param, 'since');
});
