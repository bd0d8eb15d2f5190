// Budgets per end user (CONTRACT section 20) from a YAML file served by `tollgate serve
// --config`: a key's `end_user_budget` caps each of its end users separately, held before the
// call like the key's own budget and settled after it; the refusal is 402 budget_exceeded with
// budget_scope "end_user" (through the openai SDK and raw HTTP), and charges nothing. On the
// embedded store and on Redis; then two instances on one Redis, sent at once: the end user's
// spend never passes its cap, and equals what its answers were charged.

import t from 'tap';
import OpenAI from 'openai';
import { adminCall, drainExit, fakeOpenAI, llamaConfig, serveFile, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const upstream = await fakeOpenAI('vllm');
t.teardown(() => upstream.close());

const admin = adminCall;

const config = (store: Record<string, unknown>) => llamaConfig(upstream, store);

// The fake answers 7 completion tokens whatever max_tokens says: a request whose hold must cover
// its cost asks for more (20), as a real server's answer fits what was asked.
const ask = (url: string, key: string, user: string, headers: Record<string, string> = {}, maxTokens = 5) => fetch(`${url}/v1/chat/completions`, {
  method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
  body: JSON.stringify({ model: 'llama', max_tokens: maxTokens, user, messages: [{ role: 'user', content: 'hello' }] }),
});

async function exercise(t: any, url: string): Promise<void> {
  const made = await admin(url, 'POST', '/admin/accounts/demo/keys', { name: 'app', end_user_budget: { units: 60, period: 'day' } });
  t.equal(made.status, 201);
  const key = made.body.key;
  const listed = (await admin(url, 'GET', '/admin/accounts/demo/keys')).body.keys.find((k: any) => k.id === made.body.id);
  t.same(listed.end_user_budget, { units: 60, period: 'day' }, 'the key list shows it');
  const sdk = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const chat = (user: string) => sdk.chat.completions.create({ model: 'llama', max_tokens: 5, user, messages: [{ role: 'user', content: 'hello' }] });

  // 26 units a chat (12 prompt + 2 x 7); each holds its worst case first.
  await chat('alice');
  await chat('alice');
  const before = await wallet(url);
  const refused: any = await chat('alice').catch((e) => e);
  t.equal(refused.status, 402);
  t.equal(refused.code, 'budget_exceeded');
  t.equal(refused.type, 'insufficient_credits');
  t.equal(refused.error.budget_scope, 'end_user');
  t.equal(refused.error.budget_remaining_units, 8, '60 - 2 x 26');
  t.match(refused.error.budget_resets_at, /^\d{4}-\d{2}-\d{2}T00:00:00.000Z$/);
  t.same(await wallet(url), before, 'the refusal held and charged nothing');

  // Raw HTTP, the end user in the header: the same end user, the same refusal.
  const raw = await ask(url, key, 'someone-else', { 'x-tollgate-end-user': 'alice' });
  t.equal(raw.status, 402);
  t.match(await raw.json(), { code: 'budget_exceeded', budget_scope: 'end_user', error: { code: 'budget_exceeded' } });
  t.same(await wallet(url), before);

  // Another end user of the key has a budget of its own; a request without one is not capped.
  t.equal((await chat('bob')).usage?.total_tokens, 19, 'another end user is not refused');
  const none = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llama', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] }),
  });
  t.equal(none.status, 200, 'a request naming no end user');
  await none.text();

  // Lifting the budget lets alice in again; a bad one is refused naming the field.
  const bad = await admin(url, 'PATCH', `/admin/keys/${made.body.id}`, { end_user_budget: { units: -1, period: 'day' } });
  t.match([bad.status, bad.body.code, bad.body.param], [400, 'invalid_value', 'end_user_budget.units']);
  const badPeriod = await admin(url, 'PATCH', `/admin/keys/${made.body.id}`, { end_user_budget: { units: 5, period: 'year' } });
  t.match([badPeriod.status, badPeriod.body.code, badPeriod.body.param], [400, 'unsupported_value', 'end_user_budget.period']);
  t.equal((await admin(url, 'PATCH', `/admin/keys/${made.body.id}`, { end_user_budget: null })).status, 200);
  // Key changes reach the request path within a second.
  let status = 0;
  for (let i = 0; i < 40 && status !== 200; i++) {
    const r = await ask(url, key, 'alice');
    status = r.status;
    await r.text();
    if (status !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(status, 200, 'without the budget, alice is served');
}

t.test('end-user budgets from YAML on the embedded store', async (t) => {
  const served = await serveFile(t, config({ kind: 'memory' }));
  await exercise(t, served.url);
  await drainExit(t, served);
});

t.test('the embedded store with a path: an end user\'s spend this period survives a restart (read from its records)', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-eub-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const served = await serveFile(t, config({ kind: 'memory', path: join(dir, 'state'), fsync_ms: 0 }));
  const made = (await admin(served.url, 'POST', '/admin/accounts/demo/keys', { end_user_budget: { units: 60, period: 'month' } })).body;
  for (let i = 0; i < 2; i++) t.equal(((await (await ask(served.url, made.key, 'dave')).json()) as any).usage.total_tokens, 19);
  await drainExit(t, served);
  const again = await serveFile(t, undefined, served.file);
  const r = await ask(again.url, made.key, 'dave');
  t.equal(r.status, 402);
  t.match(await r.json(), { code: 'budget_exceeded', budget_scope: 'end_user', budget_remaining_units: 8 }, '60 - 2 x 26, as before the restart');
  t.equal((await ask(again.url, made.key, 'erin')).status, 200, 'another end user');
  await drainExit(t, again);
});

t.test('end-user budgets from YAML on Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const served = await serveFile(t, config({ kind: 'redis', url: redis.url, prefix: 'tg-eub-op:' }));
  await exercise(t, served.url);
  await drainExit(t, served);
});

t.test('two instances on one Redis, at once: an end user never spends past its cap', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const yaml = config({ kind: 'redis', url: redis.url, prefix: 'tg-eub-two:' });
  const a = await serveFile(t, yaml);
  const b = await serveFile(t, yaml);
  const cap = 26 * 7 + 10;
  const key = (await admin(a.url, 'POST', '/admin/accounts/demo/keys', { end_user_budget: { units: cap, period: 'month' } })).body.key;
  const start = await wallet(a.url);
  const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => ask(i % 2 === 0 ? a.url : b.url, key, 'carol', {}, 20)));
  const statuses = answers.map((r) => r.status);
  const bodies: any[] = await Promise.all(answers.map((r) => r.json()));
  const charged = answers.reduce((n, r) => n + Number(r.headers.get('x-tollgate-units-charged') ?? 0), 0);
  const ok = statuses.filter((s) => s === 200).length;
  t.ok(ok >= 1 && ok <= 7, `at most 7 of 26 units fit in ${cap} (${ok} served)`);
  t.ok(charged <= cap, `charged ${charged} <= ${cap}`);
  t.equal(statuses.filter((s) => s !== 200 && s !== 402).length, 0, 'every other answer is a 402');
  for (const [i, s] of statuses.entries()) if (s === 402) t.equal(bodies[i].budget_scope, 'end_user');
  t.equal(start.balance_units - (await wallet(a.url)).balance_units, charged, 'the wallet moved by exactly what the 200s charged');
  // Grouped usage agrees to the unit (records land as answers close).
  let units = -1;
  for (let i = 0; i < 50 && units !== charged; i++) {
    const g = (await admin(a.url, 'GET', '/admin/usage?account=demo&group_by=end_user')).body;
    units = g.groups.find((x: any) => x.end_user === 'carol')?.units ?? 0;
    if (units !== charged) await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(units, charged, "the end user's group holds what was charged");
  await drainExit(t, a);
  await drainExit(t, b);
});
