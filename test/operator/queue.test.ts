// The queue in front of a full fleet (CONTRACT section 13), served from a YAML file by
// `tollgate serve`: one replica at max_outstanding 1 holding its requests, plans with priority
// and fair_weight, providers.NAME.queue. Through the openai SDK: a queued request answered once
// the replica has room (x-tollgate-queue-ms), a queued stream, 503 model_overloaded as
// err.status / err.code with Retry-After, max_queued, and the wallet untouched by refusals;
// raw HTTP for the exact envelope; /metrics and /admin/upstreams show the queue. A key's own
// priority, set with `tollgate keys create/update --priority` against the served gateway, puts
// its requests ahead of its low plan's; each usage record's queue_ms is the wait its answer
// showed (GET /admin/usage/records and `tollgate usage export`, JSONL and CSV).

import t from 'tap';
import OpenAI from 'openai';
import { execFile } from 'node:child_process';
import { BIN } from '../helpers/child.js';
import { ADMIN, KEY, PRICE, metric, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { holding, until } from '../helpers/fleet.js';
import { startUpstream } from '../helpers/upstream.js';

const hold = holding('replica');
const replica = await startUpstream(hold.script);
t.teardown(() => replica.close());

const VIP = 'tg_vip_00000000000000000000';

t.test('a full replica: requests wait, go in order, and are refused 503 model_overloaded past max_wait_ms', async (t) => {
  const served = await serveFile(t, operatorConfig({
    plans: { free: { paid: false, requests_per_minute: 1000, priority: 'low' }, vip: { paid: true, priority: 'high', fair_weight: 4 } },
    accounts: [
      { id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEY] },
      { id: 'vip', plan: 'vip', wallet_units: 1_000_000, keys: [VIP] },
    ],
    providers: {
      vllm: {
        kind: 'openai', targets: [{ url: replica.baseUrl }], max_outstanding: 1,
        queue: { max_wait_ms: 1500, max_queued: 2, fairness: 'account' },
      },
    },
    models: [{ id: 'm-queue', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  }));
  const upstreams = async () => (await (await fetch(`${served.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as any).providers.vllm;
  const demo = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const vip = new OpenAI({ apiKey: VIP, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const ask = (content: string) => ({ model: 'm-queue', messages: [{ role: 'user' as const, content }], max_tokens: 8 });

  const first = demo.chat.completions.create(ask('first')).withResponse();
  t.ok(await until(() => hold.waiting() === 1, 10_000), 'the first holds the replica');
  const lowQueued = demo.chat.completions.create(ask('low')).withResponse();
  t.ok(await until(async () => (await upstreams()).queued === 1), 'the second waits in the queue');
  const highQueued = vip.chat.completions.create({ ...ask('high'), stream: true });
  t.ok(await until(async () => (await upstreams()).queued === 2), 'a stream waits too');
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'low' }), 1);
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'high' }), 1);

  // max_queued 2: refused at once, through the SDK and raw.
  const before = await wallet(served.url);
  const full = await demo.chat.completions.create(ask('no room')).catch((e: unknown) => e);
  t.ok(full instanceof OpenAI.APIError);
  const err = full as InstanceType<typeof OpenAI.APIError>;
  t.equal(err.status, 503);
  t.equal(err.code, 'model_overloaded');
  t.equal(err.type, 'server_error');
  t.match(err.headers?.get('retry-after'), /^[1-9]\d*$/);
  const raw = await fetch(`${served.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(ask('no room')),
  });
  t.equal(raw.status, 503);
  t.match(raw.headers.get('content-type'), /application\/json/);
  t.ok(Number(raw.headers.get('retry-after')) >= 1);
  t.ok(Number(raw.headers.get('retry-after-ms')) >= 1);
  t.equal(raw.headers.get('x-tollgate-queue-ms'), '0');
  const body: any = await raw.json();
  t.strictSame(Object.keys(body).sort(), ['code', 'error', 'message', 'param', 'request_id', 'type']);
  t.match(body, { code: 'model_overloaded', type: 'server_error', param: null, error: { code: 'model_overloaded', type: 'server_error', param: null } });

  // The replica frees: the high-priority stream goes first, then the low one.
  hold.release();
  t.ok(await until(() => hold.waiting() === 1), 'the next one took the replica');
  t.equal(replica.requests.at(-1)!.body.messages[0].content, 'high', 'priority high before low');
  hold.release();
  t.ok(await until(() => hold.waiting() === 1));
  t.equal(replica.requests.at(-1)!.body.messages[0].content, 'low');
  hold.release();
  const one = await first;
  t.equal(one.response.headers.get('x-tollgate-queue-ms'), '0');
  const low = await lowQueued;
  t.equal(low.data.choices[0]!.message.content, 'replica');
  t.ok(Number(low.response.headers.get('x-tollgate-queue-ms')) > 0, `the low one waited ${low.response.headers.get('x-tollgate-queue-ms')} ms`);
  let text = '';
  for await (const chunk of await highQueued) text += chunk.choices[0]?.delta.content ?? '';
  t.equal(text, 'replica', 'the queued stream is answered in full');

  // max_wait_ms: a request that finds the replica held past it is refused; nothing is charged.
  const busy = demo.chat.completions.create(ask('busy again'));
  t.ok(await until(() => hold.waiting() === 1));
  const settled = await wallet(served.url);
  const started = Date.now();
  const late = await demo.chat.completions.create(ask('too late')).catch((e: unknown) => e) as InstanceType<typeof OpenAI.APIError>;
  t.equal(late.status, 503);
  t.equal(late.code, 'model_overloaded');
  t.ok(Date.now() - started >= 1400, `refused after max_wait_ms (${Date.now() - started} ms)`);
  t.ok(Number(late.headers?.get('x-tollgate-queue-ms')) >= 1400);
  const after = await wallet(served.url);
  t.equal(after.balance_units, settled.balance_units, 'nothing charged for the refusals');
  t.equal(after.held_units, settled.held_units, 'no hold left by them');
  t.ok(before.balance_units >= settled.balance_units);
  t.equal(await metric(served.url, 'tollgate_queue_wait_seconds_count', { provider: 'vllm', outcome: 'refused' }), 3);
  hold.release();
  await busy;
  t.equal((await upstreams()).queued, 0);
  t.equal((await wallet(served.url)).held_units, 0);
});

/** `tollgate ARGS` against the served gateway (admin sub-commands), as an operator runs it. */
function cli(url: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args, '--url', url], { env: { PATH: process.env.PATH, TOLLGATE_ADMIN_TOKEN: ADMIN }, timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : Number((err as any).code ?? 1), stdout, stderr });
    });
  });
}

t.test("a key's own priority (tollgate keys create --priority high) goes before its low plan's; cleared with null", async (t) => {
  const STD = 'tg_std_00000000000000000000';
  const served = await serveFile(t, operatorConfig({
    plans: { free: { paid: false, requests_per_minute: 1000, priority: 'low' }, std: { paid: true } },
    accounts: [
      { id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEY] },
      { id: 'std', plan: 'std', wallet_units: 1_000_000, keys: [STD] },
    ],
    providers: {
      vllm: { kind: 'openai', targets: [{ url: replica.baseUrl }], max_outstanding: 1, queue: { max_wait_ms: 10_000, fairness: 'account' } },
    },
    models: [{ id: 'm-queue', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  }));
  const admin = async (path: string) => (await fetch(`${served.url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<any>;
  const created = await cli(served.url, ['keys', 'create', 'demo', '--name', 'support bot', '--priority', 'high', '--json']);
  t.equal(created.code, 0, created.stderr);
  const bot = JSON.parse(created.stdout) as { id: string; key: string };
  t.equal((await admin(`/keys/${bot.id}`)).priority, 'high', 'stored as the CLI said');
  t.equal((await admin('/accounts/demo/keys')).keys.find((k: any) => k.id === bot.id).priority, 'high', 'and listed');

  const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const ask = (content: string) => ({ model: 'm-queue', messages: [{ role: 'user' as const, content }], max_tokens: 8 });
  const queued = async () => (await admin('/upstreams')).providers.vllm.queued as number;
  const seen = () => replica.requests.filter((r) => r.method === 'POST').map((r) => r.body.messages[0].content);
  const from = seen().length;

  const first = client(STD).chat.completions.create(ask('busy')).withResponse();
  t.ok(await until(() => hold.waiting() === 1, 10_000), 'the first holds the replica');
  const answers = [
    client(KEY).chat.completions.create(ask('plan-low')).withResponse(),
  ];
  t.ok(await until(async () => (await queued()) === 1));
  answers.push(client(STD).chat.completions.create(ask('normal')).withResponse());
  t.ok(await until(async () => (await queued()) === 2));
  answers.push(client(bot.key).chat.completions.create(ask('key-high')).withResponse());
  t.ok(await until(async () => (await queued()) === 3));
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'high' }), 1, 'the bot waits in the high band');
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'low' }), 1);
  for (let i = 0; i < 3; i++) {
    hold.release();
    t.ok(await until(() => hold.waiting() === 1 && seen().length === from + i + 2), `the next one took the replica (${i + 2})`);
  }
  t.strictSame(seen().slice(from), ['busy', 'key-high', 'normal', 'plan-low'], 'the high key of the low plan first, then normal, then the plan\'s low');
  hold.release();
  const one = await first;
  t.equal(one.response.headers.get('x-tollgate-queue-ms'), '0');
  const waits: Record<string, number> = {};
  const byId = new Map<string, number>([[one.response.headers.get('x-request-id')!, 0]]);
  for (const [i, a] of answers.entries()) {
    const r = await a;
    t.equal(r.data.choices[0]!.message.content, 'replica');
    waits[['plan-low', 'normal', 'key-high'][i]!] = Number(r.response.headers.get('x-tollgate-queue-ms'));
    byId.set(r.response.headers.get('x-request-id')!, Number(r.response.headers.get('x-tollgate-queue-ms')));
  }
  t.ok(waits['plan-low']! > waits['key-high']!, `the low one waited longest (${JSON.stringify(waits)})`);

  // The waits in the usage records: the admin API, and the CLI's export in both formats.
  let records: any[] = [];
  for (let i = 0; i < 150; i++) {
    records = (await admin('/usage/records?since=2000-01-01&limit=1000')).records.filter((r: any) => byId.has(r.request_id));
    if (records.length === byId.size) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(records.length, 4, 'a record for each request');
  for (const r of records) t.equal(r.queue_ms, byId.get(r.request_id), `${r.request_id}: queue_ms as its answer showed`);
  const jsonl = await cli(served.url, ['usage', 'export', '--since', '2000-01-01', '--format', 'jsonl']);
  t.equal(jsonl.code, 0, jsonl.stderr);
  const exported = jsonl.stdout.trim().split('\n').map((l) => JSON.parse(l)).filter((r) => byId.has(r.request_id));
  t.strictSame(exported.map((r) => [r.request_id, r.queue_ms]).sort(), [...byId].sort(), 'jsonl export carries queue_ms');
  const csv = await cli(served.url, ['usage', 'export', '--since', '2000-01-01', '--format', 'csv']);
  t.equal(csv.code, 0, csv.stderr);
  const [header, ...rows] = csv.stdout.trim().split('\r\n').map((l) => l.split(','));
  const col = header!.indexOf('queue_ms');
  t.ok(col > 0, 'csv: a queue_ms column');
  const idCol = header!.indexOf('request_id');
  for (const row of rows.filter((r) => byId.has(r[idCol]!))) t.equal(Number(row[col]), byId.get(row[idCol]!), `csv ${row[idCol]}: queue_ms`);

  const cleared = await cli(served.url, ['keys', 'update', bot.id, '--priority', 'null']);
  t.equal(cleared.code, 0, cleared.stderr);
  t.match(cleared.stdout, /\n  priority: the plan's\n/);
  t.equal((await admin(`/keys/${bot.id}`)).priority, null, 'null: the plan\'s again');
  t.equal((await cli(served.url, ['keys', 'update', bot.id, '--priority', 'top'])).code, 1, 'a priority the API does not know is refused');
});
