// Team budgets raced from two gateway instances sharing one Redis, and one Redis Cluster
// (CONTRACT section 15): random interleavings of requests from several keys of one team, each
// sent to either instance, never overspend a key's budget, the team's budget or the wallet;
// afterwards each key's and the team's spent_units, and the wallet, agree to the unit with the
// usage records (each debit once), nothing stays held, and every refusal is a 402 naming the
// budget that refused. A fast-check property through the project's holds() (counted runs,
// replayable seed).

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGateway, type TestGateway } from '../../helpers/gateway.js';
import { startRedis } from '../../helpers/redis.js';
import { startCluster } from '../../helpers/redis-topology.js';
import { ADMIN, walletConfig } from '../../helpers/wallet-load.js';
import { holds } from '../../property/arbitraries.js';

interface Answer { status: number; headers: Record<string, any>; body: any }

async function call(gw: TestGateway, method: string, path: string, body: unknown, auth: string): Promise<Answer> {
  const res = await request(`${gw.url}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${auth}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, body: text === '' ? undefined : JSON.parse(text) };
}

const period = fc.constantFrom('day', 'week', 'month', null);
const scenario = fc.record({
  wallet: fc.integer({ min: 30, max: 1500 }),
  team: fc.record({ units: fc.integer({ min: 10, max: 1200 }), period }),
  keys: fc.array(fc.option(fc.record({ units: fc.integer({ min: 5, max: 700 }), period }), { nil: null }), { minLength: 2, maxLength: 4 }),
  // Each request: which key, which instance, its max_tokens (the hold), and the wave it is sent in
  // (a wave's requests at once, the waves one after another).
  requests: fc.array(fc.record({ key: fc.nat(), gw: fc.nat(1), max: fc.integer({ min: 1, max: 40 }), wave: fc.nat(2) }), { minLength: 3, maxLength: 24 }),
});

function raceSuite(t: any, name: string, store: () => Record<string, unknown>, numRuns: number): void {
  t.test(name, async (t: any) => {
    const gws: TestGateway[] = [];
    for (let i = 0; i < 2; i++) gws.push(await startGateway(walletConfig(store())));
    t.teardown(() => Promise.all(gws.map((g) => g.close())));
    const admin = (gw: TestGateway, method: string, path: string, body?: unknown) => call(gw, method, path, body, ADMIN);
    let n = 0;
    const seen = { ok: 0, key: 0, team: 0, wallet: 0 };

    await holds(t, `${name}: no key, team or wallet is overspent; spend and wallet agree with the records`, fc.asyncProperty(scenario, async (s) => {
      const run = ++n;
      const acct = `race-${process.pid}-${run}`;
      const team = `team-${process.pid}-${run}`;
      const [a, b] = gws as [TestGateway, TestGateway];
      assert.equal((await admin(a, 'POST', '/admin/accounts', { id: acct, plan: 'free', wallet_units: s.wallet })).status, 201);
      assert.equal((await admin(b, 'POST', `/admin/accounts/${acct}/teams`, { id: team, budget: s.team })).status, 201);
      const keys: Array<{ id: string; key: string }> = [];
      for (const [i, budget] of s.keys.entries()) {
        const r = await admin(gws[i % 2]!, 'POST', `/admin/accounts/${acct}/keys`, { team, ...(budget === null ? {} : { budget }) });
        assert.equal(r.status, 201);
        keys.push(r.body);
      }
      const outcomes: Answer[] = [];
      for (let wave = 0; wave < 3; wave++) {
        const batch = s.requests.filter((r) => r.wave === wave);
        outcomes.push(...await Promise.all(batch.map((r) => call(gws[r.gw]!, 'POST', '/v1/chat/completions',
          { model: 'priced', max_tokens: r.max, messages: [{ role: 'user', content: 'the same words' }] }, keys[r.key % keys.length]!.key))));
      }
      let charged = 0;
      for (const o of outcomes) {
        if (o.status === 200) {
          seen.ok++;
          const units = Number(o.headers['x-tollgate-units-charged']);
          // One unit a token: an admitted request pays its whole cost (its hold fit every budget).
          assert.equal(units, o.body.usage.prompt_tokens + o.body.usage.completion_tokens, 'an answer is charged its full cost');
          charged += units;
          continue;
        }
        assert.equal(o.status, 402, `an answer is a 200 or a 402: ${JSON.stringify(o.body)}`);
        if (o.body.code === 'insufficient_credits') { seen.wallet++; continue; }
        assert.equal(o.body.code, 'budget_exceeded');
        assert.ok(o.body.budget_scope === 'key' || o.body.budget_scope === 'team', 'budget_scope names the budget');
        assert.equal(o.body.error.budget_scope, o.body.budget_scope);
        assert.ok(Number.isSafeInteger(o.body.budget_remaining_units) && o.body.budget_remaining_units >= 0);
        seen[o.body.budget_scope as 'key' | 'team']++;
      }
      // Records are written once each answer is closed: wait for all of them.
      const admitted = outcomes.filter((o) => o.status === 200).length;
      let records: any[] = [];
      for (let i = 0; i < 200; i++) {
        records = (await admin(a, 'GET', `/admin/usage/records?account=${acct}&limit=1000`)).body.records;
        if (records.length >= admitted) break;
        await sleep(25);
      }
      assert.equal(records.length, admitted, 'one record per admitted request');
      const sum = (rs: any[]) => rs.reduce((x, r) => x + r.units, 0);
      assert.equal(sum(records), charged, "the records' units are what the answers said was charged");
      for (const r of records) assert.equal(r.team, team, 'each record names the team');

      const account = (await admin(b, 'GET', `/admin/accounts/${acct}`)).body;
      assert.equal(account.balance_units, s.wallet - charged, 'the wallet moved by exactly what was charged');
      assert.ok(account.balance_units >= 0);
      assert.equal(account.held_units, 0, 'nothing stays held');
      const t0 = (await admin(a, 'GET', `/admin/teams/${team}`)).body;
      assert.equal(t0.budget.spent_units, charged, "the team's spend is every debit of its keys, once");
      assert.ok(t0.budget.spent_units <= s.team.units, 'the team budget is never overspent');
      const listed = (await admin(b, 'GET', `/admin/accounts/${acct}/keys`)).body.keys;
      for (const [i, k] of keys.entries()) {
        const view = listed.find((x: any) => x.id === k.id);
        const own = sum(records.filter((r) => r.key_id === k.id));
        assert.equal(view.budget.spent_units, own, "a key's spend is its records'");
        const budget = s.keys[i];
        if (budget !== null && budget !== undefined) assert.ok(own <= budget.units, 'a key budget is never overspent');
      }
      const usage = (await admin(a, 'GET', `/admin/usage?account=${acct}&since=2000-01-01`)).body;
      assert.deepEqual(usage.by_team, admitted === 0 ? {} : { [team]: { requests: admitted, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, units: charged } });
    }), numRuns);
    t.comment(`${name}: ${seen.ok} answered, refused by a key budget ${seen.key}, by the team budget ${seen.team}, by the wallet ${seen.wallet}`);
    t.ok(seen.team > 0 && seen.key > 0 && seen.ok > 0, 'the runs met every budget: answers, key and team refusals');
  });
}

const redis = await startRedis();
t.teardown(() => redis.stop());
raceSuite(t, 'two instances, one Redis', () => ({ url: redis.url, prefix: `tg-teams-race-${process.pid}:` }), 25);

t.test('Redis Cluster', async (t: any) => {
  const cluster = await startCluster();
  t.teardown(() => cluster.stop());
  raceSuite(t, 'two instances, one Redis Cluster', () => ({ cluster: cluster.nodes, prefix: `tg-teams-racec-${process.pid}:` }), 15);
});
