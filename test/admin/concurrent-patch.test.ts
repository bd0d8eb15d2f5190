// Concurrent PATCHes of one key never lose a change, on every store (CONTRACT section 16),
// through the real admin API: the embedded store (in memory, and durable with a journal), one
// gateway on a real redis-server, and two gateways sharing it. Regression: the Redis store read
// the key, applied the patch in the gateway and wrote all the controls back, so of
// `{"allowed_ips":[...]}` racing `{"name":"x"}` both answered 200 and the key ended with
// `allowed_ips: null`, usable from anywhere. Also: a PATCH racing a rotation or a revocation
// neither undoes the rotation nor brings the revoked key back.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { holds } from '../property/arbitraries.js';

const ADMIN = 'concurrent-patch-admin-token';

interface Answer { status: number; body: any }

async function call(gw: TestGateway, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await request(`${gw.url}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, body: text === '' ? undefined : JSON.parse(text) };
}

async function chat(gw: TestGateway, key: string): Promise<Answer> {
  const res = await request(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo-small', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const text = await res.body.text();
  return { status: res.statusCode, body: JSON.parse(text) };
}

// ---- patches and what the key list shows for them ------------------------------------------

/** One member of a patch: its value in the body and how GET /admin/keys/{id} shows it. */
interface Member { path: string; value: unknown; shown: unknown }
/** A patch: its body and the members it sets (each limit a member of its own). */
interface Patch { body: Record<string, unknown>; members: Member[] }

const plain = fc.stringMatching(/^[A-Za-z0-9 _.-]{1,12}$/);
const cidr = fc.tuple(fc.integer({ min: 1, max: 223 }), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 8, max: 32 })).map(([a, b, p]) => `${a}.${b}.0.0/${p}`);
const nullable = <T>(arb: fc.Arbitrary<T>) => fc.oneof({ weight: 4, arbitrary: arb }, fc.constant(null));
const limit = nullable(fc.integer({ min: 1, max: 1e9 }));

/** Each control: absent, or a value with its shown form. */
const controls = {
  name: nullable(plain).map((v) => [{ path: 'name', value: v, shown: v }]),
  models: nullable(fc.array(fc.stringMatching(/^[a-z0-9*-]{1,10}$/), { minLength: 1, maxLength: 3 })).map((v) => [{ path: 'models', value: v, shown: v }]),
  expires_at: nullable(fc.integer({ min: Date.parse('2030-01-01'), max: Date.parse('2090-01-01') }).map((ms) => new Date(ms).toISOString()))
    .map((v) => [{ path: 'expires_at', value: v, shown: v }]),
  budget: nullable(fc.record({ units: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), period: fc.constantFrom('day', 'week', 'month', null) }))
    .map((v) => [{ path: 'budget', value: v, shown: v === null ? { units: null, period: null } : v }]),
  limits: fc.record({ requests_per_minute: limit, tokens_per_minute: limit, max_concurrent: limit }, { requiredKeys: [] })
    .filter((l) => Object.keys(l).length > 0)
    .map((l) => Object.entries(l).map(([k, v]) => ({ path: `limits.${k}`, value: v, shown: v }))),
  priority: nullable(fc.constantFrom('high', 'normal', 'low')).map((v) => [{ path: 'priority', value: v, shown: v }]),
  allowed_ips: nullable(fc.array(cidr, { minLength: 1, maxLength: 3 })).map((v) => [{ path: 'allowed_ips', value: v, shown: v }]),
  metadata: nullable(fc.dictionary(fc.stringMatching(/^[a-z]{1,6}$/), plain, { maxKeys: 3 }).map((d) => ({ ...d }))).map((v) => [{ path: 'metadata', value: v, shown: v ?? {} }]),
};

/** JSON text with object members sorted: what two values are compared by. */
function canon(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x !== null && typeof x === 'object' && !Array.isArray(x)
    ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x));
}

const patchArb: fc.Arbitrary<Patch> = fc.record(controls, { requiredKeys: [] })
  .filter((p) => Object.keys(p).length > 0)
  .map((p) => {
    const members = (Object.values(p).flat() as Member[]).map((m) => ({ ...m, value: JSON.parse(JSON.stringify(m.value)), shown: JSON.parse(JSON.stringify(m.shown)) }));
    const body: Record<string, unknown> = {};
    for (const m of members) {
      if (m.path.startsWith('limits.')) body.limits = { ...(body.limits as object), [m.path.slice(7)]: m.value };
      else body[m.path] = m.value;
    }
    return { body, members };
  });

const DEFAULTS: Record<string, unknown> = {
  name: null, models: null, expires_at: null, budget: { units: null, period: null }, 'limits.requests_per_minute': null,
  'limits.tokens_per_minute': null, 'limits.max_concurrent': null, priority: null, allowed_ips: null, metadata: {},
};

/** The members of a key as the admin API shows it. */
function shownMembers(view: any): Record<string, unknown> {
  return {
    name: view.name, models: view.models, expires_at: view.expires_at, budget: { units: view.budget.units, period: view.budget.period },
    'limits.requests_per_minute': view.limits.requests_per_minute, 'limits.tokens_per_minute': view.limits.tokens_per_minute,
    'limits.max_concurrent': view.limits.max_concurrent, priority: view.priority, allowed_ips: view.allowed_ips, metadata: view.metadata,
  };
}

/** The members after `patches` applied one after the other, in this order. */
function serially(patches: readonly Patch[]): Record<string, unknown> {
  const out = { ...DEFAULTS };
  for (const p of patches) for (const m of p.members) out[m.path] = m.shown;
  return out;
}

function* permutations<T>(items: readonly T[]): Generator<T[]> {
  if (items.length <= 1) { yield [...items]; return; }
  for (let i = 0; i < items.length; i++) {
    for (const rest of permutations([...items.slice(0, i), ...items.slice(i + 1)])) yield [items[i]!, ...rest];
  }
}

/**
 * The final key is every patch applied in some serial order: each member's value is that of
 * the last patch in that order that set it, and none any patch set is lost to its default.
 */
function assertSerializable(patches: readonly Patch[], final: Record<string, unknown>): void {
  for (const [path, value] of Object.entries(final)) {
    const setters = patches.flatMap((p) => p.members.filter((m) => m.path === path).map((m) => m.shown));
    if (setters.length === 0) assert.equal(canon(value), canon(DEFAULTS[path]), `${path}: no patch set it, so it is unchanged`);
    else assert.ok(setters.some((s) => canon(s) === canon(value)), `${path}: ${JSON.stringify(value)} is the value of a patch that set it (${JSON.stringify(setters)})`);
  }
  for (const order of permutations(patches)) {
    if (canon(serially(order)) === canon(final)) return;
  }
  assert.fail(`no serial order of the ${patches.length} patches gives ${JSON.stringify(final)}`);
}

// ---- the stores ----------------------------------------------------------------------------

function config(store: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = store;
  c.plans.free = { paid: false, requests_per_minute: 100000, tokens_per_minute: 100000000, max_concurrent: 100 };
  return c;
}

const redis = await startRedis();
t.teardown(() => redis.stop());
const dir = await mkdtemp(join(tmpdir(), 'tollgate-patch-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const PREFIX = `tg-patch-${process.pid}:`;
const setups: Array<{ name: string; start: () => Promise<TestGateway[]> }> = [
  { name: 'memory store', start: async () => [await startGateway(config({ kind: 'memory' }))] },
  { name: 'memory store with a journal', start: async () => [await startGateway(config({ kind: 'memory', path: dir, fsync_ms: 0 }))] },
  { name: 'redis, one gateway', start: async () => [await startGateway(config({ kind: 'redis', url: redis.url, prefix: `${PREFIX}one:` }))] },
  {
    name: 'redis, two gateways',
    start: async () => [
      await startGateway(config({ kind: 'redis', url: redis.url, prefix: `${PREFIX}two:` })),
      await startGateway(config({ kind: 'redis', url: redis.url, prefix: `${PREFIX}two:` })),
    ],
  },
];

let accounts = 0;
async function freshKey(gw: TestGateway): Promise<{ account: string; id: string; key: string }> {
  const account = `patch-${++accounts}`;
  assert.equal((await call(gw, 'POST', '/admin/accounts', { id: account, plan: 'free', wallet_units: 100_000 })).status, 201);
  const issued = await call(gw, 'POST', `/admin/accounts/${account}/keys`);
  assert.equal(issued.status, 201);
  return { account, id: issued.body.id, key: issued.body.key };
}

for (const setup of setups) {
  t.test(setup.name, async (t) => {
    const gws = await setup.start();
    t.teardown(() => Promise.all(gws.map((g) => g.close())));
    const on = (i: number) => gws[i % gws.length]!;

    t.test('allowed_ips racing name: both land, every time', async (t) => {
      for (let round = 0; round < 20; round++) {
        const k = await freshKey(on(0));
        const [ips, name] = await Promise.all([
          call(on(round), 'PATCH', `/admin/keys/${k.id}`, { allowed_ips: ['10.9.0.0/16'] }),
          call(on(round + 1), 'PATCH', `/admin/keys/${k.id}`, { name: 'x' }),
        ]);
        t.equal(ips.status, 200);
        t.equal(name.status, 200);
        const view = (await call(on(round), 'GET', `/admin/keys/${k.id}`)).body;
        t.strictSame([view.allowed_ips, view.name], [['10.9.0.0/16'], 'x'], `round ${round}: neither change lost`);
        const used = await chat(on(round + 1), k.key);
        t.equal(used.status, 403, 'the key is refused from an address outside allowed_ips');
        t.equal(used.body.code, 'ip_not_allowed');
      }
    });

    t.test('random concurrent PATCHes: the key is every patch applied in some serial order', async (t) => {
      await holds(t, `concurrent patches (${setup.name})`, fc.asyncProperty(fc.array(patchArb, { minLength: 2, maxLength: 6 }), async (patches) => {
        const k = await freshKey(on(0));
        const answers = await Promise.all(patches.map((p, i) => call(on(i), 'PATCH', `/admin/keys/${k.id}`, p.body)));
        for (const a of answers) assert.equal(a.status, 200, JSON.stringify(a.body));
        // Each answer is the key as it stood after that patch, that patch's members included.
        answers.forEach((a, i) => {
          const shown = shownMembers(a.body);
          for (const m of patches[i]!.members) assert.equal(canon(shown[m.path]), canon(m.shown), `answer ${i} shows its own ${m.path}`);
        });
        for (let i = 0; i < gws.length; i++) {
          const view = await call(on(i), 'GET', `/admin/keys/${k.id}`);
          assert.equal(view.status, 200);
          assertSerializable(patches, shownMembers(view.body));
        }
      }), 25);
    });

    t.test('a PATCH racing a rotation: neither undoes the other', async (t) => {
      for (let round = 0; round < 10; round++) {
        const k = await freshKey(on(0));
        const [patched, rotated] = await Promise.all([
          call(on(round), 'PATCH', `/admin/keys/${k.id}`, { name: `r${round}`, limits: { max_concurrent: 7 } }),
          call(on(round + 1), 'POST', `/admin/keys/${k.id}/rotate`, { grace_seconds: 0 }),
        ]);
        t.equal(patched.status, 200);
        t.equal(rotated.status, 200);
        for (let i = 0; i < gws.length; i++) {
          const view = (await call(on(i), 'GET', `/admin/keys/${k.id}`)).body;
          t.equal(view.hint, `tg_…${rotated.body.key.slice(-4)}`, 'the rotation stands');
          t.strictSame([view.name, view.limits.max_concurrent], [`r${round}`, 7], 'the patch stands');
          t.equal((await chat(on(i), rotated.body.key)).status, 200, 'the new plaintext works');
          t.equal((await chat(on(i), k.key)).status, 401, 'the old one (no grace) does not');
        }
      }
    });

    t.test('a PATCH racing a revocation never brings the key back', async (t) => {
      for (let round = 0; round < 10; round++) {
        const k = await freshKey(on(0));
        t.equal((await chat(on(round + 1), k.key)).status, 200, 'the key is cached where it will be patched');
        const [patched, revoked] = await Promise.all([
          call(on(round + 1), 'PATCH', `/admin/keys/${k.id}`, { name: 'after', models: null }),
          call(on(round), 'DELETE', `/admin/keys/${k.id}`),
        ]);
        t.equal(revoked.status, 204);
        t.ok(patched.status === 200 || (patched.status === 404 && patched.body.error.code === 'key_not_found'), `PATCH ${patched.status}`);
        for (let i = 0; i < gws.length; i++) {
          t.equal((await call(on(i), 'GET', `/admin/keys/${k.id}`)).status, 404, 'revoked');
          t.strictSame((await call(on(i), 'GET', `/admin/accounts/${k.account}/keys`)).body.keys, [], 'not listed');
          const used = await chat(on(i), k.key);
          t.equal(used.status, 401);
          t.equal(used.body.error.code, 'invalid_api_key');
          t.equal((await call(on(i), 'PATCH', `/admin/keys/${k.id}`, { name: 'later' })).status, 404, 'a later PATCH finds no key');
        }
      }
    });
  });
}
