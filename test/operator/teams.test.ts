// Teams (CONTRACT section 15) from a YAML file served by `tollgate serve --config` as a child
// process, behind a fake OpenAI-compatible model server whose usage is known (12 prompt, 7
// completion tokens: 26 units a chat): a team made through the admin API, two keys in it, chats
// through the official openai SDK until first the key's budget and then the team's refuses,
// each 402 surfaced by the SDK as err.status / err.code with budget_scope and what that budget
// has left, the wallet charged for the answers only; on the embedded store with a path (the team
// and its spend survive a restart) and on Redis (store.url).

import t from 'tap';
import OpenAI from 'openai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { adminCall, drainExit, fakeOpenAI, llamaConfig, serveFile, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const upstream = await fakeOpenAI('vllm');
t.teardown(() => upstream.close());

const admin = adminCall;

const model = (store: Record<string, unknown>) => llamaConfig(upstream, store);

/** A team of two keys with 60 units a month; the first key has 30 of its own. Returns the team's id. */
async function exercise(t: any, url: string, team: string): Promise<void> {
  const made = await admin(url, 'POST', '/admin/accounts/demo/teams', { id: team, name: 'Search', budget: { units: 60, period: 'month' }, models: ['llama'] });
  t.equal(made.status, 201);
  t.match(made.body, { id: team, account: 'demo', name: 'Search', budget: { units: 60, period: 'month', spent_units: 0 }, models: ['llama'] });
  const k1 = (await admin(url, 'POST', '/admin/accounts/demo/keys', { name: 'indexer', team, budget: { units: 30, period: null } })).body;
  const k2 = (await admin(url, 'POST', '/admin/accounts/demo/keys', { name: 'ranker', team })).body;
  const sdk = (key: string) => new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const ask = (key: string) => sdk(key).chat.completions.create({ model: 'llama', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }] });

  const start = await wallet(url);
  t.same((await ask(k1.key)).usage, { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 });
  const afterFirst = await wallet(url);
  t.equal(start.balance_units - afterFirst.balance_units, 26);

  const byKey: any = await ask(k1.key).catch((e) => e);
  t.equal(byKey.status, 402);
  t.equal(byKey.code, 'budget_exceeded');
  t.equal(byKey.type, 'insufficient_credits');
  t.equal(byKey.error.budget_scope, 'key', 'the key budget refuses first');
  t.equal(byKey.error.budget_remaining_units, 4);
  t.equal(byKey.error.budget_resets_at, null);
  t.same(await wallet(url), afterFirst, 'the refusal held and charged nothing');

  await ask(k2.key);
  const afterSecond = await wallet(url);
  t.equal(afterFirst.balance_units - afterSecond.balance_units, 26);
  const byTeam: any = await ask(k2.key).catch((e) => e);
  t.equal(byTeam.status, 402);
  t.equal(byTeam.code, 'budget_exceeded');
  t.equal(byTeam.error.budget_scope, 'team');
  t.equal(byTeam.error.budget_remaining_units, 8, '60 - 2 x 26');
  t.match(byTeam.error.budget_resets_at, /^\d{4}-\d{2}-01T00:00:00.000Z$/);
  t.same(await wallet(url), afterSecond, 'the refusal held and charged nothing');

  const notAllowed: any = await sdk(k2.key).chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.equal(notAllowed.status, 403);
  t.equal(notAllowed.code, 'model_not_allowed', "the team's models narrow its keys'");
  t.equal(((await sdk(k2.key).get('/key')) as any).team, team, 'GET /v1/key shows the team');

  const teams = (await admin(url, 'GET', '/admin/accounts/demo/teams')).body.teams;
  t.match(teams, [{ id: team, budget: { units: 60, spent_units: 52 } }]);
  const inUse = await admin(url, 'DELETE', `/admin/teams/${team}`);
  t.equal(inUse.status, 409);
  t.equal(inUse.body.code, 'team_in_use');
}

t.test('teams from YAML on the embedded store with a path: a restart keeps the team and its spend', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-teams-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const served = await serveFile(t, model({ kind: 'memory', path: join(dir, 'state'), fsync_ms: 0 }));
  await exercise(t, served.url, 'search');
  await drainExit(t, served);
  const again = await serveFile(t, undefined, served.file);
  t.match((await admin(again.url, 'GET', '/admin/teams/search')).body, { id: 'search', budget: { units: 60, spent_units: 52 } });
  await drainExit(t, again);
});

t.test('teams from YAML on Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const served = await serveFile(t, model({ kind: 'redis', url: redis.url, prefix: 'tg-teams-op:' }));
  await exercise(t, served.url, 'search-redis');
  await drainExit(t, served);
});
