// Issue #40 finding 3, as the attack ran it, through `tollgate serve --config FILE` (CONTRACT
// section 21, "reads are bounded"): a key with a long history (6,000 usage records over 20
// days), ten callers polling its GET /v1/usage while another account's chat runs. Before, each
// call read all 6,000 records on the event loop (265 ms of CPU) and the chat's throughput fell
// from 1,819 to 40 requests in 3 s. Now GET /v1/usage reads the key's totals per day: counted,
// not timed, through tollgate_usage_records_read_total (the records the store read back), 200
// calls read none, their answers equal the records' sums, and every chat request is answered.
// GET /admin/usage reads none either from a whole hour; a records page reads one page, and its
// limit is capped. On the memory store with a path (the history in day files, counted once on
// open) and on Redis (written by the store, as the gateway writes it).

import t from 'tap';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { UsageRecord } from '../../lib/store/types.js';
import { ADMIN, metric, operatorConfig, serveFile } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const DAY = 86_400_000;
const HEAVY_KEY = 'tg_heavy_history_key_0123456789';
const VICTIM_KEY = 'tg_victim_chat_key_0123456789ab';
const HEAVY_ID = keyIdOf(sha256Hex(HEAVY_KEY));
const RECORDS = 6000;
const OTHERS = 500;
const READS = 'tollgate_usage_records_read_total';

const redis = await startRedis();
t.teardown(() => redis.stop());

/** The history: 6,000 records of the heavy key over the last 20 days, 500 of another account's over 5. */
function history(now: number): UsageRecord[] {
  const out: UsageRecord[] = [];
  const base = (i: number, at: number, account: string, key: string): UsageRecord => ({
    request_id: `seed-${account}-${i}`, at, account, key_id: key, team: null, model: i % 3 === 0 ? 'm-b' : 'm-a', provider: 'echo', target: null,
    route: '/v1/chat/completions', status: i % 17 === 0 ? 502 : 200, prompt_tokens: 10 + (i % 50), cached_tokens: 0, completion_tokens: i % 40,
    units: i % 17 === 0 ? 0 : 100 + i, usage_source: 'upstream', duration_ms: 5, ttft_ms: null, queue_ms: 0, tags: [], end_user: null,
  });
  for (let i = 0; i < RECORDS; i++) out.push(base(i, now - 60_000 - Math.floor((i * 20 * DAY) / RECORDS), 'heavy', HEAVY_ID));
  for (let i = 0; i < OTHERS; i++) out.push(base(i, now - 60_000 - Math.floor((i * 5 * DAY) / OTHERS), 'other', 'key_other'));
  return out;
}

/** GET /v1/usage's rows of the heavy key, from the records. */
function expectedRows(records: UsageRecord[]): Array<Record<string, unknown>> {
  const rows = new Map<string, { date: string; model: string; requests: number; prompt_tokens: number; completion_tokens: number; units: number }>();
  for (const r of records) {
    if (r.key_id !== HEAVY_ID) continue;
    const date = new Date(r.at).toISOString().slice(0, 10);
    const row = rows.get(`${date} ${r.model}`) ?? { date, model: r.model, requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
    row.requests++;
    row.prompt_tokens += r.prompt_tokens;
    row.completion_tokens += r.completion_tokens;
    row.units += r.units;
    rows.set(`${date} ${r.model}`, row);
  }
  return [...rows.values()].sort((a, b) => (a.date < b.date ? -1 : a.date > b.date ? 1 : a.model < b.model ? -1 : 1));
}

function configWith(store: Record<string, unknown>): Record<string, any> {
  return operatorConfig({
    store,
    plans: { free: { paid: false, requests_per_minute: 100_000 } },
    accounts: [
      { id: 'heavy', plan: 'free', wallet_units: 1_000_000, keys: [HEAVY_KEY] },
      { id: 'victim', plan: 'free', wallet_units: 1_000_000, keys: [VICTIM_KEY] },
      { id: 'other', plan: 'free', wallet_units: 0 },
    ],
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-a', provider: 'echo', price: { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } }],
  });
}

async function get(url: string, path: string, auth: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${auth}` } });
  return { status: res.status, body: await res.json() };
}

async function attack(t: any, url: string, records: UsageRecord[], readOnOpen: number): Promise<void> {
  const want = { data: expectedRows(records) };
  t.equal(want.data.length > 20, true, 'rows over many days');
  const first = await get(url, '/v1/usage', HEAVY_KEY);
  t.equal(first.status, 200);
  t.strictSame(first.body, want, 'GET /v1/usage equals the records summed by day and model');
  const before = await metric(url, READS);
  t.equal(before, readOnOpen, `the records read so far: ${readOnOpen} (the day files counted on open, once), none since`);

  // The attack: 10 callers poll GET /v1/usage while another account chats.
  const client = new OpenAI({ apiKey: VICTIM_KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  const answers: Array<{ status: number; body: any }> = [];
  const callers = Array.from({ length: 10 }, async () => {
    for (let i = 0; i < 20; i++) answers.push(await get(url, '/v1/usage', HEAVY_KEY));
  });
  let chats = 0;
  const chat = Array.from({ length: 3 }, async (_, c) => {
    for (let i = 0; i < 20; i++) {
      const done = await client.chat.completions.create({ model: 'm-a', max_tokens: 5, messages: [{ role: 'user', content: `chat ${c}-${i}` }] });
      if (done.choices[0]!.message.content !== null) chats++;
    }
  });
  await Promise.all([...callers, ...chat]);
  t.equal(answers.length, 200);
  t.equal(answers.filter((a) => a.status === 200 && JSON.stringify(a.body) === JSON.stringify(want)).length, 200, 'every caller got the exact rows');
  t.equal(chats, 60, 'every chat request was answered meanwhile');
  t.equal(await metric(url, READS), before, '200 calls of GET /v1/usage read no record: the cost of one does not grow with the history');

  // GET /admin/usage from a whole hour: totals alone.
  const since = new Date(Date.now() - 25 * DAY).toISOString().slice(0, 10);
  const report = await get(url, `/admin/usage?account=heavy&since=${since}`, ADMIN);
  t.equal(report.status, 200);
  const heavy = records.filter((r) => r.account === 'heavy');
  t.strictSame([report.body.requests, report.body.prompt_tokens, report.body.completion_tokens, report.body.units], [
    heavy.length, heavy.reduce((n, r) => n + r.prompt_tokens, 0), heavy.reduce((n, r) => n + r.completion_tokens, 0), heavy.reduce((n, r) => n + r.units, 0),
  ], 'GET /admin/usage: the account\'s records, to the unit');
  t.strictSame(Object.keys(report.body.by_key), [HEAVY_ID]);
  let victim: any;
  for (let i = 0; i < 200; i++) {
    victim = (await get(url, `/admin/usage?account=victim&since=${new Date(Date.now() - DAY).toISOString().slice(0, 10)}`, ADMIN)).body;
    if (victim.requests === 60) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(victim.requests, 60, 'the chat\'s 60 records');
  t.equal(await metric(url, READS), before, 'GET /admin/usage since a date read no record');

  // A records page reads a page, and its limit is capped.
  const page = await get(url, '/admin/usage/records?account=heavy&limit=1000', ADMIN);
  t.equal(page.body.records.length, 1000);
  const read = (await metric(url, READS)) - before;
  t.ok(read >= 1000 && read <= 3000, `a page of 1,000 read ${read} records, not the history`);
  const over = await get(url, '/admin/usage/records?limit=1001', ADMIN);
  t.equal(over.status, 400);
  t.equal(over.body.error.code, 'invalid_value');
  t.equal(over.body.error.param, 'limit');
}

t.test('memory store with a path: the history in day files', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-reads-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const records = history(Date.now());
  const days = new Map<string, string[]>();
  for (const r of records) {
    const name = `${new Date(r.at).toISOString().slice(0, 10)}.jsonl`;
    days.set(name, [...(days.get(name) ?? []), JSON.stringify(r)]);
  }
  await mkdir(join(dir, 'store', 'usage'), { recursive: true });
  for (const [name, lines] of days) await writeFile(join(dir, 'store', 'usage', name), `${lines.join('\n')}\n`);
  const gw = await serveFile(t, configWith({ kind: 'memory', path: join(dir, 'store') }));
  await attack(t, gw.url, records, RECORDS + OTHERS);
});

t.test('redis: the history written as the gateway writes it', async (t) => {
  const prefix = `reads-op${process.pid}:`;
  const records = history(Date.now());
  const s = new RedisStore({ url: redis.url, prefix, commandTimeoutMs: 10_000 });
  await s.ready();
  for (let i = 0; i < records.length; i += 500) await Promise.all(records.slice(i, i + 500).map((r) => s.recordUsage(r)));
  await s.close();
  const gw = await serveFile(t, configWith({ kind: 'redis', url: redis.url, prefix }));
  await attack(t, gw.url, records, 0);
});
