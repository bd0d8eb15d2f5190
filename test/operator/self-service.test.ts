// Self-service (GET /v1/key, GET /v1/usage; CONTRACT section 15) from a YAML file served by
// `tollgate serve --config`, on the embedded store with a path (usage records in day files),
// behind a fake OpenAI-compatible model server whose usage is known (12 prompt, 7 completion
// tokens: 26 units). The openai SDK's generic client.get on its baseURL /v1 and raw HTTP: the
// key's budget and its usage to the unit, usage.retention_days bounding the range (400 through
// the SDK as err.status / err.code / err.param), a key's requests_per_minute spent by the GETs
// (429), the config's own key, and the wallet charged for the chat only.

import t from 'tap';
import OpenAI from 'openai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ADMIN, KEY, PRICE, drainExit, fakeOpenAI, operatorConfig, serveFile, wallet } from '../helpers/operator.js';

const upstream = await fakeOpenAI('vllm');
t.teardown(() => upstream.close());

const adminGet = async (url: string, path: string) => (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<any>;

t.test('GET /v1/key and /v1/usage from YAML', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-self-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const served = await serveFile(t, operatorConfig({
    store: { kind: 'memory', path: join(dir, 'state') },
    usage: { retention_days: 7 },
    providers: { vllm: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [{ id: 'llama', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  }));
  const made = await fetch(`${served.url}/admin/accounts/demo/keys`, {
    method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'ci', budget: { units: 1000, period: 'week' }, limits: { requests_per_minute: 8 } }),
  });
  t.equal(made.status, 201);
  const issued = await made.json() as { id: string; key: string };
  const client = new OpenAI({ apiKey: issued.key, baseURL: `${served.url}/v1`, maxRetries: 0 });

  const before = await wallet(served.url);
  const done = await client.chat.completions.create({ model: 'llama', max_tokens: 10, messages: [{ role: 'user', content: 'hello' }] });
  t.same(done.usage, { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });
  await client.chat.completions.create({ model: 'llama', max_tokens: 10, messages: [{ role: 'user', content: 'again' }] });
  const after = await wallet(served.url);
  t.equal(before.balance_units - after.balance_units, 52, 'two chats at 12 + 2 x 7 = 26 units each');

  const me: any = await client.get('/key');
  const now = new Date();
  const monday = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - ((now.getUTCDay() + 6) % 7) + 7)).toISOString();
  t.strictSame(me, {
    id: issued.id, name: 'ci', account: 'demo', team: null, models: null, expires_at: null,
    budget: { units: 1000, period: 'week', spent_units: 52, remaining_units: 948, resets_at: monday },
    limits: { requests_per_minute: 8, tokens_per_minute: null, max_concurrent: null },
  });

  // Records are written once each answer has closed.
  let records: any[] = [];
  for (let i = 0; i < 100 && records.length < 2; i++) {
    records = (await adminGet(served.url, `/admin/usage/records?key=${issued.id}`)).records;
    if (records.length < 2) await sleep(20);
  }
  const today = now.toISOString().slice(0, 10);
  const rows = { data: [{ date: today, model: 'llama', requests: 2, prompt_tokens: 24, completion_tokens: 14, units: 52 }] };
  t.strictSame(await client.get('/usage'), rows, 'the default range: the last 30 days, at most usage.retention_days (7)');
  const raw = await fetch(`${served.url}/v1/usage?since=${today}&until=${today}`, { headers: { authorization: `Bearer ${issued.key}` } });
  t.equal(raw.status, 200);
  t.match(raw.headers.get('content-type'), /^application\/json/);
  t.equal(raw.headers.get('x-ratelimit-limit-requests'), '8');
  t.strictSame(await raw.json(), rows, 'raw HTTP, the same rows');
  t.equal(records.reduce((s, r) => s + r.units, 0), 52, 'the admin records say the same');

  const week = new Date(Date.now() - 7 * 86_400_000).toISOString().slice(0, 10);
  const tooLong: any = await client.get('/usage', { query: { since: week } }).catch((e) => e);
  t.equal(tooLong.status, 400);
  t.equal(tooLong.code, 'invalid_value');
  t.equal(tooLong.param, 'since');
  t.equal(tooLong.error.message, "Invalid value for 'since': the range covers at most 7 days (usage.retention_days), this one 8.");

  // The config's own key has a record in the store like any other: no controls, no budget.
  const config = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const own: any = await config.get('/key');
  t.equal(own.account, 'demo');
  t.equal(own.budget, null);
  t.strictSame(await config.get('/usage'), { data: [] }, 'the config key made no requests: nothing of the other key shows');

  // 8 requests a minute for the issued key: 2 chats, /key, 2 x /usage, the 400: 6 spent so far.
  t.equal(((await client.get('/key')) as any).id, issued.id);
  t.strictSame(await client.get('/usage'), rows);
  const over: any = await client.get('/key').catch((e) => e);
  t.equal(over.status, 429);
  t.equal(over.code, 'rate_limit_exceeded');
  t.ok(Number(over.headers.get('retry-after')) >= 1);
  t.same(await wallet(served.url), after, 'the GETs held and charged nothing');
  await drainExit(t, served);
});
