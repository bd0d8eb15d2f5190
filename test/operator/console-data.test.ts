// The console's data from the operator's path (CONTRACT sections 11 and 12): a YAML file served
// by `tollgate serve` as a child process, requests through the official `openai` SDK (answers,
// a stream, an upstream failure), then GET /admin/usage/hourly and /admin/usage/top show them
// (requests, errors, tokens and units to the unit, as the wallet and the records say), and
// GET /admin/accounts lists the account. On the memory store with a path the totals outlive a
// restart (rebuilt from the day files); on Redis they are read from its hashes.

import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { ADMIN, KEY, PRICE, WALLET, drainExit, operatorConfig, serveFile, statusOf, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';
import { json, startUpstream } from '../helpers/upstream.js';

const HOUR = 3_600_000;

const broken = await startUpstream(async (_req, res) => json(res, 500, { error: { message: 'boom' } }));
t.teardown(() => broken.close());
const redis = await startRedis();
t.teardown(() => redis.stop());

async function admin(url: string, path: string): Promise<any> {
  const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

function configWith(store: Record<string, unknown>): Record<string, any> {
  return operatorConfig({
    store,
    providers: { echo: { kind: 'echo' }, broken: { kind: 'openai', base_url: `${broken.url}/v1`, api_key: 'x' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }, { id: 'm-broken', provider: 'broken', price: PRICE }],
  });
}

/** Three answers and a stream on m-echo, one failure on m-broken, through the openai SDK. */
async function traffic(t: any, url: string): Promise<void> {
  const client = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  for (let i = 0; i < 3; i++) {
    const c = await client.chat.completions.create({ model: 'm-echo', messages: [{ role: 'user', content: `Say hello ${i}` }] });
    t.match(c.choices[0]!.message.content, /^Say hello/);
  }
  const stream = await client.chat.completions.create({ model: 'm-echo', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Say hello again' }] });
  for await (const _ of stream) { /* read it all */ }
  await t.rejects(client.chat.completions.create({ model: 'm-broken', messages: [{ role: 'user', content: 'fail' }] }), { status: 502 });
}

/** What the console shows of the current hour, once the five records are written. */
async function shown(url: string): Promise<{ hour: any; top: Record<string, any> }> {
  let hour: any;
  for (let i = 0; i < 200; i++) {
    hour = (await admin(url, '/admin/usage/hourly')).hours.at(-1);
    if (hour.requests >= 5) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  const top: Record<string, any> = {};
  for (const by of ['account', 'key', 'model']) top[by] = (await admin(url, `/admin/usage/top?by=${by}`)).rows;
  return { hour, top };
}

async function check(t: any, url: string): Promise<{ hour: any; top: Record<string, any> }> {
  const seen = await shown(url);
  const { hour, top } = seen;
  t.equal(hour.hour, new Date(Math.floor(Date.now() / HOUR) * HOUR).toISOString(), 'the current hour, last');
  t.equal(hour.requests, 5, 'five requests');
  t.equal(hour.errors, 1, 'the upstream failure is an error');
  const spent = WALLET - (await wallet(url)).balance_units;
  t.ok(spent > 0);
  t.equal(hour.units, spent, 'units: what the wallet was debited');
  const records = (await admin(url, '/admin/usage/records?limit=100')).records;
  t.equal(records.length, 5);
  t.equal(hour.prompt_tokens, records.reduce((n: number, r: any) => n + r.prompt_tokens, 0));
  t.equal(hour.completion_tokens, records.reduce((n: number, r: any) => n + r.completion_tokens, 0));
  t.strictSame(top.account, [{ id: 'demo', requests: 5, units: spent }]);
  t.strictSame(top.key, [{ id: keyIdOf(sha256Hex(KEY)), requests: 5, units: spent }]);
  t.strictSame(top.model, [{ id: 'm-echo', requests: 4, units: spent }, { id: 'm-broken', requests: 1, units: 0 }]);
  const accounts = await admin(url, '/admin/accounts');
  t.strictSame(accounts.accounts.map((a: any) => a.id), ['demo']);
  t.equal(accounts.accounts[0].balance_units, WALLET - spent);
  return seen;
}

t.test('memory store with a path: the console data, and after a restart', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-op-console-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const first = await serveFile(t, configWith({ kind: 'memory', path: join(dir, 'store'), fsync_ms: 0 }));
  await traffic(t, first.url);
  const before = await check(t, first.url);
  await drainExit(t, first); // a slow stream drained on SIGTERM: one more record
  const second = await serveFile(t, undefined, first.file);
  t.equal(await statusOf(`${second.url}/readyz`, 200), 200);
  const after = await shown(second.url);
  t.equal(after.hour.requests, 6, 'the five requests and the drained stream, rebuilt from the day files');
  t.equal(after.hour.units, WALLET - (await wallet(second.url)).balance_units);
  t.strictSame(after.top.model.find((r: any) => r.id === 'm-broken'), before.top.model.find((r: any) => r.id === 'm-broken'));
  await drainExit(t, second);
});

t.test('redis store: the console data', async (t) => {
  const served = await serveFile(t, configWith({ kind: 'redis', url: redis.url, prefix: `op-console-${Date.now()}:` }));
  await traffic(t, served.url);
  await check(t, served.url);
  await drainExit(t, served);
});
