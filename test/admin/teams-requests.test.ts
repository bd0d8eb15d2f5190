// A team's controls on the request path (CONTRACT section 15), on the embedded store and on
// two gateways sharing Redis: 402 budget_exceeded names the budget that refused (the key's
// before the team's) with that budget's remaining units and reset, and a refusal leaves the
// wallet, the holds and every spend as they were; the team's models narrow its keys' (403
// model_not_allowed, /v1/models); its limits count over all its keys (429), on top of the
// plan's and the key's; a PATCH of the team is in force on every instance at once; usage
// records and GET /admin/usage carry the team.

import t from 'tap';
import { request } from 'undici';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'teams-requests-admin';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };

interface Answer { status: number; headers: Record<string, any>; body: any }

async function call(url: string, method: string, path: string, body: unknown, auth: string): Promise<Answer> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${auth}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  let parsed: any;
  try { parsed = text === '' ? undefined : JSON.parse(text); } catch { parsed = text; } // a stream
  return { status: res.statusCode, headers: res.headers, body: parsed };
}

function suite(t: any, name: string, store: () => Record<string, unknown>, instances: number): void {
  t.test(name, async (t: any) => {
    const gws: TestGateway[] = [];
    for (let i = 0; i < instances; i++) {
      const c = baseConfig();
      c.admin = { token: ADMIN };
      c.store = store();
      c.plans.free = { paid: false, requests_per_minute: 1000, tokens_per_minute: 1_000_000, max_concurrent: 100 };
      c.providers.slow = { kind: 'echo', chunk_delay_ms: 200 };
      c.models = [
        { id: 'echo-small', provider: 'echo', max_output_tokens: 50, price: PRICE },
        { id: 'llama-a', provider: 'echo', max_output_tokens: 50, price: PRICE },
        { id: 'llama-slow', provider: 'slow', max_output_tokens: 50, price: PRICE },
      ];
      c.routing = { auto: ['echo-small'] };
      gws.push(await startGateway(c));
    }
    t.teardown(() => Promise.all(gws.map((g) => g.close())));
    const [a, b] = [gws[0]!, gws[gws.length - 1]!];
    const admin = (method: string, path: string, body?: unknown, gw = a) => call(gw.url, method, path, body, ADMIN);
    const chat = (key: string, body: Record<string, unknown> = {}, gw = a) =>
      call(gw.url, 'POST', '/v1/chat/completions', { model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'hello there' }], ...body }, key);
    const tag = `${name.replace(/\W/g, '')}-${process.pid}`;
    let n = 0;
    const setup = async (team: Record<string, unknown>, keys: Array<Record<string, unknown>>, wallet = 100_000) => {
      const acct = `${tag}-a${++n}`;
      const id = `${tag}-t${n}`;
      t.equal((await admin('POST', '/admin/accounts', { id: acct, plan: 'free', wallet_units: wallet })).status, 201);
      t.equal((await admin('POST', `/admin/accounts/${acct}/teams`, { id, ...team })).status, 201);
      const issued = [];
      for (const k of keys) issued.push((await admin('POST', `/admin/accounts/${acct}/keys`, { team: id, ...k }, b)).body as { id: string; key: string });
      return { acct, team: id, keys: issued };
    };
    /** Wallet, holds, and every spend: what a refusal must leave as it was. */
    const ledger = async (acct: string, team: string) => {
      const account = (await admin('GET', `/admin/accounts/${acct}`)).body;
      const keys = (await admin('GET', `/admin/accounts/${acct}/keys`)).body.keys.map((k: any) => [k.id, k.budget.spent_units]);
      return { balance: account.balance_units, held: account.held_units, team: (await admin('GET', `/admin/teams/${team}`)).body.budget.spent_units, keys };
    };
    const envelope = (r: Answer, status: number, code: string, extras: Record<string, unknown>) => {
      t.equal(r.status, status, `${code}: status`);
      t.match(r.body, { code, error: { code, ...extras }, ...extras, request_id: r.headers['x-request-id'] }, `${code}: envelope`);
    };

    t.test('402 budget_exceeded names the key before the team; nothing is held, charged or spent', async (t: any) => {
      const { acct, team, keys: [small, member] } = await setup({ budget: { units: 60, period: 'week' } }, [{ budget: { units: 20, period: 'day' } }, {}]);
      const ok = await chat(member!.key, { max_tokens: 5 });
      t.equal(ok.status, 200);
      const spent = Number(ok.headers['x-tollgate-units-charged']);
      const before = await ledger(acct, team);
      t.equal(before.team, spent, "the team's spend is its keys' charges");

      const byKey = await chat(small!.key, { max_tokens: 40 }, b);
      const midnight = new Date(); midnight.setUTCHours(24, 0, 0, 0);
      envelope(byKey, 402, 'budget_exceeded', { type: 'insufficient_credits', budget_scope: 'key', budget_remaining_units: 20, budget_resets_at: midnight.toISOString() });
      t.strictSame(await ledger(acct, team), before, 'the key refused: wallet, holds, key and team spend unchanged');

      const byTeam = await chat(member!.key, { max_tokens: 60 });
      const monday = new Date(); monday.setUTCHours(0, 0, 0, 0); monday.setUTCDate(monday.getUTCDate() - ((monday.getUTCDay() + 6) % 7) + 7);
      envelope(byTeam, 402, 'budget_exceeded', { type: 'insufficient_credits', budget_scope: 'team', budget_remaining_units: 60 - spent, budget_resets_at: monday.toISOString() });
      t.match(byTeam.body.message, /team/);
      t.strictSame(await ledger(acct, team), before, 'the team refused: nothing changed');
      // Both would refuse: the key's budget is named first.
      const both = await chat(small!.key, { max_tokens: 100 });
      t.equal(both.body.budget_scope, 'key');
      const stream = await chat(member!.key, { max_tokens: 60, stream: true }, b);
      envelope(stream, 402, 'budget_exceeded', { budget_scope: 'team' });

      // Raised by a PATCH on one instance: in force on the other at once; the spend is kept.
      const raised = await admin('PATCH', `/admin/teams/${team}`, { budget: { units: 1000, period: 'week' } }, b);
      t.match(raised.body.budget, { units: 1000, period: 'week', spent_units: spent });
      t.equal((await chat(member!.key, { max_tokens: 60 })).status, 200);
    });

    t.test("the team's models narrow its keys'; /v1/models shows what plan, team and key allow", async (t: any) => {
      const { keys: [k] } = await setup({ models: ['llama-*'] }, [{ models: ['llama-a', 'echo-small'] }]);
      const refused = await chat(k!.key, { model: 'echo-small' });
      envelope(refused, 403, 'model_not_allowed', { type: 'permission_error', param: 'model' });
      t.strictSame(refused.body.suggested_models, ['llama-a']);
      t.equal((await chat(k!.key, { model: 'llama-a' })).status, 200);
      const models = await call(a.url, 'GET', '/v1/models', undefined, k!.key);
      t.strictSame(models.body.data.map((m: any) => m.id), ['llama-a']);
    });

    t.test("the team's limits count over all its keys, on top of the plan's and each key's", async (t: any) => {
      const { team, keys: [k1, k2] } = await setup({ limits: { requests_per_minute: 3 } }, [{}, {}]);
      t.equal((await chat(k1!.key)).status, 200);
      t.equal((await chat(k2!.key, {}, b)).status, 200);
      const third = await chat(k1!.key, {}, b);
      t.equal(third.status, 200);
      t.equal(third.headers['x-ratelimit-limit-requests'], '3', "the team's limit is the tighter");
      const refused = await chat(k2!.key);
      envelope(refused, 429, 'rate_limit_exceeded', { type: 'rate_limit_error' });
      t.match(refused.body.message, /team/);
      t.ok(Number(refused.headers['retry-after']) >= 1);
      // Out of the team, the key is bounded by the plan alone again.
      const k2id = k2!.id;
      await admin('PATCH', `/admin/keys/${k2id}`, { team: null });
      await sleep(50);
      t.equal((await chat(k2!.key)).status, 200, 'a key taken out of the team is not held to its limit');
      t.equal((await admin('GET', `/admin/teams/${team}`)).status, 200);

      const { acct: acct2, keys: [c1, c2] } = await setup({ limits: { max_concurrent: 1 } }, [{}, {}]);
      const slow = chat(c1!.key, { model: 'llama-slow', stream: true, max_tokens: 20, messages: [{ role: 'user', content: 'one two three four five six' }] });
      const slotTeam = (await admin('GET', `/admin/accounts/${acct2}/keys`)).body.keys[0].team;
      const deadline = Date.now() + 3000;
      while (await a.gateway.slotsInUse(`team:${slotTeam}`) === 0 && Date.now() < deadline) await sleep(10);
      t.equal(await a.gateway.slotsInUse(`team:${slotTeam}`), 1, "the stream holds the team's slot");
      const busy = await chat(c2!.key, {}, b);
      envelope(busy, 429, 'too_many_concurrent', { type: 'rate_limit_error' });
      t.match(busy.body.message, /team/);
      t.equal((await slow).status, 200);
      t.equal((await chat(c2!.key)).status, 200, 'the slot is free again');
    });

    t.test('usage records and GET /admin/usage carry the team', async (t: any) => {
      const { acct, team, keys: [k] } = await setup({}, [{}]);
      const plain = (await admin('POST', `/admin/accounts/${acct}/keys`, {})).body;
      t.equal((await chat(k!.key)).status, 200);
      t.equal((await chat(plain.key)).status, 200);
      let records: any[] = [];
      for (let i = 0; i < 100 && records.length < 2; i++) {
        records = (await admin('GET', `/admin/usage/records?account=${acct}`)).body.records;
        await sleep(20);
      }
      t.strictSame(records.map((r) => [r.key_id, r.team]).sort(), [[k!.id, team], [plain.id, null]].sort());
      const filtered = (await admin('GET', `/admin/usage/records?account=${acct}&team=${team}`, undefined, b)).body;
      t.strictSame(filtered.records.map((r: any) => r.key_id), [k!.id], 'team= filters');
      t.equal(filtered.next_cursor, null);
      t.strictSame((await admin('GET', `/admin/usage/records?team=`)).body.code, 'invalid_value');
      const usage = (await admin('GET', `/admin/usage?account=${acct}&since=2000-01-01`)).body;
      const mine = records.find((r) => r.team === team);
      t.strictSame(usage.by_team, { [team]: { requests: 1, prompt_tokens: mine.prompt_tokens, completion_tokens: mine.completion_tokens, units: mine.units } });
    });
  });
}

suite(t, 'memory', () => ({ kind: 'memory' }), 1);

t.test('redis', async (t: any) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  suite(t, 'two instances on redis', () => ({ kind: 'redis', url: redis.url, prefix: `tg-teams-req-${process.pid}:` }), 2);
});
