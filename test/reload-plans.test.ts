// Plans that stored accounts use (CONTRACT sections 2 and 10): a reload that removes one is
// rejected like an invalid file and the old config stays in force; a store that cannot say
// whether one is used rejects the reload too. An account whose plan the config lacks (a fresh
// start without it) answers 503 service_unavailable with Retry-After, never 500, and the log
// names the plan. Memory (durable) and Redis stores, through the real gateway; SIGHUP too.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { serveChild } from './helpers/child.js';
import { baseConfig, postChat, startGateway, type TestGateway } from './helpers/gateway.js';
import { startRedis, type TestRedis } from './helpers/redis.js';

const ADMIN = 'admin-plans-token-0123456789';
const GOLD_KEY = 'tg_gold_2222222222222222';

const redis = await startRedis();
t.teardown(() => redis.stop());

function config(store: Record<string, unknown>, plans: string[]): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = store;
  c.plans = Object.fromEntries(plans.map((p) => [p, { paid: p !== 'free' }]));
  return c;
}

async function admin(gw: TestGateway, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${gw.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

const models = (gw: TestGateway, key: string) => fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });

type StoreFactory = () => Promise<{ store: Record<string, unknown>; done: () => Promise<void> }>;

const kinds: Array<[string, StoreFactory]> = [
  ['memory', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-plans-'));
    return { store: { kind: 'memory', path: dir, fsync_ms: 0 }, done: () => rm(dir, { recursive: true, force: true }) };
  }],
  ['redis', async () => ({ store: { kind: 'redis', url: redis.url, prefix: `tgplans:${randomUUID()}:` }, done: async () => {} })],
];

for (const [kind, factory] of kinds) {
  t.test(`${kind}: a reload may not remove a plan a stored account uses`, async (t) => {
    const { store, done } = await factory();
    t.teardown(done);
    const gw = await startGateway(config(store, ['free', 'pro', 'gold', 'silver']));
    t.teardown(() => gw.close());
    // 'g1' exists only in the store (created through the admin API), not in the config.
    t.equal((await admin(gw, 'POST', '/admin/accounts', { id: 'g1', plan: 'gold', wallet_units: 500 })).status, 201);
    const key = (await admin(gw, 'POST', '/admin/accounts/g1/keys')).json.key;
    t.equal((await models(gw, key)).status, 200);

    await gw.gateway.reload(config(store, ['free', 'pro', 'gold']));
    t.equal((await admin(gw, 'POST', '/admin/accounts', { id: 's1', plan: 'silver' })).json.code, 'unsupported_value', 'an unused plan may go');

    await t.rejects(gw.gateway.reload(config(store, ['free', 'pro'])), {
      name: 'ConfigError', problems: ['plans.gold: removed, but stored accounts still use it (account "g1", maybe others)'],
    });
    t.equal((await models(gw, key)).status, 200, 'the old config stays in force');
    const chat = await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'still gold' }] }, { authorization: `Bearer ${key}`, 'content-type': 'application/json' });
    t.equal(chat.status, 200);
    t.equal(chat.json().choices[0].message.content, 'still gold');

    // Seeded accounts count too, and every removed plan in use is named.
    const err = await gw.gateway.reload({ ...config(store, ['gold']), accounts: [] }).catch((e: unknown) => e) as { problems: string[] };
    t.strictSame([...err.problems].sort(), [
      'plans.free: removed, but stored accounts still use it (account "demo", maybe others)',
      'plans.pro: removed, but stored accounts still use it (account "acme", maybe others)',
    ]);
    t.equal((await admin(gw, 'POST', '/admin/accounts', { id: 'f2', plan: 'free' })).status, 201, 'free is still configured');
  });

  t.test(`${kind}: an account whose plan the config lacks answers 503, never 500`, async (t) => {
    const { store, done } = await factory();
    t.teardown(done);
    const first = config(store, ['free', 'pro', 'gold']);
    first.accounts.push({ id: 'gold-co', plan: 'gold', wallet_units: 1000, keys: [GOLD_KEY] });
    let gw = await startGateway(first);
    t.equal((await models(gw, GOLD_KEY)).status, 200);
    await gw.close();

    // A fresh start with a config that no longer has the plan (nor the account).
    gw = await startGateway(config(store, ['free', 'pro']));
    t.teardown(() => gw.close());
    for (const res of [
      await models(gw, GOLD_KEY).then(async (r) => ({ status: r.status, headers: r.headers, text: await r.text() })),
      await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'x' }] }, { authorization: `Bearer ${GOLD_KEY}`, 'content-type': 'application/json' })
        .then((r) => ({ status: r.status, headers: new Headers(r.headers as Record<string, string>), text: r.text })),
    ]) {
      t.equal(res.status, 503);
      const body = JSON.parse(res.text);
      t.equal(body.code, 'service_unavailable');
      t.equal(body.type, 'server_error');
      t.strictSame(body.error, { message: body.message, type: 'server_error', param: null, code: 'service_unavailable' });
      t.equal(body.request_id, res.headers.get('x-request-id'));
      t.match(res.headers.get('retry-after'), /^[1-9]\d*$/, 'Retry-After in whole seconds');
      t.match(res.headers.get('retry-after-ms'), /^[1-9]\d*$/);
      t.notMatch(body.message, /gold/, 'the plan is for the operator\'s log, not the client');
    }
    t.match(gw.logs(), /"level":50[^\n]*"account":"gold-co"[^\n]*"plan":"gold"[^\n]*on plan 'gold', which the config does not define/, 'the log names the account and the plan');
    t.notMatch(gw.logs(), /"level":50[^\n]*unhandled error/, 'no internal error');
    t.notMatch(gw.logs(), new RegExp(GOLD_KEY), 'nor the key');
    t.equal((await admin(gw, 'GET', '/admin/accounts/gold-co')).json.balance_units, 1000, 'nothing was held or charged');
    t.equal((await models(gw, 'tg_demo_0000000000000000')).status, 200, 'other accounts are served');

    // Putting the plan back (a reload) serves the account again.
    await gw.gateway.reload(config(store, ['free', 'pro', 'gold']));
    t.equal((await models(gw, GOLD_KEY)).status, 200);
  });
}

t.test('redis: a store that cannot answer rejects a reload that removes plans', async (t) => {
  const own: TestRedis = await startRedis();
  t.teardown(() => own.stop());
  const store = { kind: 'redis', url: own.url, prefix: `tgplans:${randomUUID()}:` };
  const gw = await startGateway(config(store, ['free', 'pro', 'spare']));
  t.teardown(() => gw.close());
  await own.stop();
  const err = await gw.gateway.reload(config(store, ['free', 'pro'])).catch((e: unknown) => e) as { name: string; problems: string[] };
  t.equal(err.name, 'ConfigError');
  t.equal(err.problems.length, 1);
  t.match(err.problems[0], /^plans: cannot check whether stored accounts still use the removed plan\(s\) "spare": the store did not answer \(.+\)$/);
  t.equal(gw.gateway.config!.plans.spare !== undefined, true, 'the old config stays in force');
});

t.test('SIGHUP: removing a plan in use is logged as a rejected reload; the old config serves', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-plans-hup-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  const yaml = (plans: string, accounts: string) => `server: {port: 0}
store: {kind: memory, path: ${JSON.stringify(join(dir, 'state'))}, fsync_ms: 0}
plans:
${plans}
accounts:
${accounts}
providers: {echo: {kind: echo}}
models: [{id: echo-small, provider: echo}]
`;
  await writeFile(file, yaml('  free: {}\n  gold: {paid: true}', `  - {id: gold-co, plan: gold, keys: [${GOLD_KEY}]}`));
  const child = await serveChild(t, file);
  const ok = () => fetch(`${child.url}/v1/models`, { headers: { authorization: `Bearer ${GOLD_KEY}` } }).then((r) => r.status);
  t.equal(await ok(), 200);

  await writeFile(file, yaml('  free: {}', '  []'));
  child.proc.kill('SIGHUP');
  for (let i = 0; i < 200 && !/reload rejected/.test(child.output()); i++) await sleep(25);
  t.match(child.output(), /config reload rejected/);
  t.match(child.output(), /plans\.gold: removed, but stored accounts still use it \(account \\"gold-co\\", maybe others\)/);
  t.equal(await ok(), 200, 'the old config stays in force');
  child.proc.kill('SIGTERM');
});
