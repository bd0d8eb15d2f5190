// RedisStore against a real redis-server: the shared Store and metering contracts, then what
// only Redis has to get right: revocations across instances, prefixes, atomic idempotent credits,
// holds and settlements from two instances, key expiry and pruning, the capped usage stream,
// hash-tagged keys (checked on a one-node cluster), and outages.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import fc from 'fast-check';
import { keyIdOf, sha256Hex } from '../../../lib/store/digest.js';
import { RedisStore } from '../../../lib/store/redis/store.js';
import { SETTLED_KEEP_MS } from '../../../lib/store/redis/metering.js';
import { totalsKeys } from '../../../lib/store/redis/totals-hours.js';
import type { Revocation, UsageRecord } from '../../../lib/store/types.js';
import { startRedis } from '../../helpers/redis.js';
import { storeContract } from '../contract.js';
import { meteringContract } from '../metering-contract.js';
import { teamsContract } from '../teams-contract.js';
import { keyContract } from '../key-contract.js';
import { auditContract } from '../audit-contract.js';
import { defaultControls } from '../../../lib/store/types.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

const prefixes: string[] = [];
/** A prefix of its own for each store family; an external Redis is cleaned up afterwards. */
function freshPrefix(): string {
  const p = `tgtest:${randomUUID()}:`;
  prefixes.push(p);
  return p;
}

/** A plain client for looking at what the store wrote. */
function inspector(url = redis.url): Redis {
  return new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
}

async function keysOf(client: Redis, match = '*'): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', match, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys.sort();
}

if (redis.external) {
  t.teardown(async () => {
    const c = inspector();
    for (const p of prefixes) {
      const keys = await keysOf(c, `${p}*`);
      if (keys.length > 0) await c.del(...keys);
    }
    c.disconnect();
  });
}

/** Opens stores and closes whatever is still open when the subtest ends. */
function opener(t: any, url = redis.url) {
  const opened: RedisStore[] = [];
  t.teardown(() => Promise.all(opened.map((s) => s.close())));
  return async (prefix: string, commandTimeoutMs?: number) => {
    const s = await RedisStore.open({ url, prefix, commandTimeoutMs });
    opened.push(s);
    return s;
  };
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

/** A fresh store (and prefix) that reopen() closes and opens again on the same data. */
async function openFresh() {
  const prefix = freshPrefix();
  let current = await RedisStore.open({ url: redis.url, prefix });
  return {
    store: current,
    reopen: async () => {
      await current.close();
      current = await RedisStore.open({ url: redis.url, prefix });
      return current;
    },
  };
}

storeContract(t, 'redis', openFresh);
meteringContract(t, 'redis', openFresh);
teamsContract(t, 'redis', openFresh);
keyContract(t, 'redis', openFresh);
auditContract(t, 'redis', openFresh);

t.test('a revocation by one instance reaches the other within 1 s, and each listener once', async (t) => {
  const open = opener(t);
  const prefix = freshPrefix();
  const [a, b] = [await open(prefix), await open(prefix)];
  const d = sha256Hex('tg_cross_1');
  await a.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
  await a.createKey({ id: keyIdOf(d), account: 'acme', digest: d });

  const heardA: Revocation[] = [];
  const heardB: Revocation[] = [];
  let at = 0;
  a.onRevoke((r) => heardA.push(r));
  b.onRevoke((r) => { heardB.push(r); at = Date.now(); });

  const started = Date.now();
  t.ok(await a.revokeKey(keyIdOf(d)));
  t.strictSame(heardA, [{ kind: 'key', digest: d }], 'the revoking instance has heard it when revokeKey resolves');
  await until(() => heardB.length > 0, 'the other instance', 1000);
  t.ok(at - started < 1000, `the other instance heard it after ${at - started} ms`);
  t.strictSame(heardB, [{ kind: 'key', digest: d }]);

  await b.revokeSession('sid-1');
  await until(() => heardA.length > 1, 'the session revocation', 1000);
  await a.revokeKey(keyIdOf(d)); // already revoked: no new event
  await b.revokeSession('sid-1'); // likewise
  await b.revokeSession('marker');
  await until(() => heardA.length > 2 && heardB.length > 2, 'the marker', 1000);
  await sleep(50); // a duplicate of its own message would arrive about now
  const expected = [{ kind: 'key', digest: d }, { kind: 'session', sid: 'sid-1' }, { kind: 'session', sid: 'marker' }];
  t.strictSame(heardA, expected, 'instance A heard each revocation once');
  t.strictSame(heardB, expected, 'instance B heard each revocation once, its own included');
});

t.test('a subscription cut and re-established tells the listeners that announcements may have been missed', { skip: redis.external ? 'kills every subscriber of its Redis' : false }, async (t) => {
  const open = opener(t);
  const prefix = freshPrefix();
  const [a, b] = [await open(prefix), await open(prefix)];
  const heard: Revocation[] = [];
  b.onRevoke((r) => heard.push(r));
  const c = inspector();
  t.teardown(() => c.disconnect());
  await sleep(50);
  t.strictSame(heard, [], 'nothing on the first connect');
  await c.client('KILL', 'TYPE', 'pubsub');
  await until(() => heard.length > 0, 'the listeners told', 3000);
  await sleep(200); // subscribed again
  t.strictSame(heard, [{ kind: 'missed' }], 'told once');
  heard.length = 0;
  await a.revokeSession('after-the-cut');
  await until(() => heard.length > 0, 'an announcement after it', 1000);
  t.strictSame(heard, [{ kind: 'session', sid: 'after-the-cut' }], 'announcements flow again');
});

t.test('two prefixes on one Redis do not see each other', async (t) => {
  const open = opener(t);
  const [p1, p2] = [freshPrefix(), freshPrefix()];
  const [s1, s2] = [await open(p1), await open(p2)];
  const d = sha256Hex('tg_prefix_1');

  t.equal(await s1.createAccount({ id: 'acme', plan: 'pro', balance_units: 10 }), true);
  t.equal(await s2.getAccount('acme'), undefined, 'an account of one prefix is unknown to the other');
  t.equal(await s2.createAccount({ id: 'acme', plan: 'free', balance_units: 99 }), true, 'and the same id can be created there');
  t.strictSame(await s1.addCredits('acme', 5, 'k'), { applied: true, balance_units: 15 });
  t.strictSame(await s2.addCredits('acme', 5, 'k'), { applied: true, balance_units: 104 }, 'idempotency keys are per prefix');
  t.equal((await s1.getAccount('acme'))!.plan, 'pro');

  t.equal(await s1.createKey({ id: keyIdOf(d), account: 'acme', digest: d }), true);
  t.equal(await s2.keyByDigest(d), undefined, 'keys too');
  t.equal(await s2.revokeKey(keyIdOf(d)), undefined);
  await s1.revokeSession('sid');
  t.equal(await s2.isSessionRevoked('sid'), false, 'and session revocations');

  const heard2: Revocation[] = [];
  s2.onRevoke((r) => heard2.push(r));
  await s1.revokeKey(keyIdOf(d));
  await s2.revokeSession('marker');
  await until(() => heard2.length > 0, 'the marker');
  await sleep(50);
  t.strictSame(heard2, [{ kind: 'session', sid: 'marker' }], 'revocations stay on their prefix\'s channel');
});

t.test('an idempotent credit applies exactly once under concurrency from two instances', async (t) => {
  const open = opener(t);
  const prefix = freshPrefix();
  const [a, b] = [await open(prefix), await open(prefix)];
  await a.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });

  const calls = Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? a : b).addCredits('acme', 37, 'same-key'));
  const results = await Promise.all(calls);
  t.equal(results.filter((r) => r!.applied).length, 1, '50 calls from each instance: applied once');
  t.strictSame(new Set(results.map((r) => r!.balance_units)), new Set([1037]), 'every call reports the one credited balance');
  t.equal((await b.getAccount('acme'))!.balance_units, 1037);

  const distinct = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? a : b).addCredits('acme', -3, `k-${i}`)));
  t.equal(distinct.filter((r) => r!.applied).length, 100, 'distinct keys: every one applies');
  t.equal((await a.getAccount('acme'))!.balance_units, 1037 - 300, 'and no update is lost');
});

const NO_QUOTAS = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const DAY = '2031-05-06';
const MONTH = '2031-05';
function holdOf(account: string, requestId: string, units: number, ttlMs = 60_000) {
  return { account, requestId, units, ttlMs, day: DAY, month: MONTH, quotas: NO_QUOTAS };
}
function settlementOf(account: string, requestId: string, units: number, promptTokens = 1, completionTokens = 2) {
  return { account, requestId, units, promptTokens, completionTokens, day: DAY, month: MONTH };
}
function usageRecord(i: number, account: string, model: string, at = Date.now()): UsageRecord {
  return {
    request_id: `req-${i}`, at, account, key_id: 'key_0123456789abcdef', team: null, model, provider: 'local', target: null, route: '/v1/chat/completions',
    status: 200, prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 5, ttft_ms: null, queue_ms: 0, tags: [], end_user: null,
  };
}

t.test('holds from two instances never overdraw; a settle from both applies once', async (t) => {
  const open = opener(t);
  const prefix = freshPrefix();
  const [a, b] = [await open(prefix), await open(prefix)];
  const K = 13;
  const N = 7;
  await a.createAccount({ id: 'acme', plan: 'pro', balance_units: K * N + N - 1 });
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? a : b).hold(holdOf('acme', `race-${i}`, N))));
  const won = results.flatMap((r, i) => (r!.ok ? [i] : []));
  t.equal(won.length, K, `exactly ${K} of 50 holds (25 from each instance) succeed`);
  t.ok(results.every((r) => r!.ok || (r!.code === 'insufficient_credits' && r!.available_units === N - 1)), 'the rest are refused for credits');
  t.equal((await b.accountUsage('acme', DAY, MONTH)).held_units, K * N, 'both instances see the same holds');

  const first = won[0]!;
  const settles = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).settle(settlementOf('acme', `race-${first}`, 5))));
  t.equal(settles.filter((r) => r!.applied).length, 1, '40 settles of one id from two instances: applied once');
  t.strictSame(new Set(settles.map((r) => r!.charged_units)), new Set([5]), 'the repeats report the first charge');
  t.strictSame(new Set(settles.map((r) => r!.balance_units)), new Set([K * N + N - 1 - 5]), 'and the one debited balance');
  t.equal((await a.getAccount('acme'))!.balance_units, K * N + N - 1 - 5);
  const usage = await a.accountUsage('acme', DAY, MONTH);
  t.strictSame(usage, { held_units: (K - 1) * N, day: { requests: 1, tokens: 3, units: 5 }, month: { requests: 1, tokens: 3, units: 5 } });
});

t.test('metering keeps every digit, expires its keys and prunes old settlements', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  const big = Number.MAX_SAFE_INTEGER - 10;
  await s.createAccount({ id: 'big', plan: 'pro', balance_units: big });
  t.strictSame(await s.hold(holdOf('big', 'h1', big - 3)), { ok: true, available_units: 3 });
  t.strictSame(await s.settle(settlementOf('big', 'h1', big - 4)), { applied: true, charged_units: big - 4, balance_units: 4, available_units: 4 });
  t.strictSame(await s.settle(settlementOf('big', 'h2', 9)), { applied: true, charged_units: 4, balance_units: 0, available_units: 0 }, 'a charge above the balance takes the balance');
  t.strictSame((await s.accountUsage('big', DAY, MONTH)).month, { requests: 2, tokens: 6, units: big });

  const acct = `${s.prefix}{acct:big}`;
  const ttl = async (key: string) => Number(await c.pttl(key));
  await s.hold(holdOf('big', 'h3', 0, 5_000));
  // The key (with the sums of its holds) was made by h1's hold (60 s): it outlives the longest
  // hold it has held by a minute at most.
  t.ok(await ttl(`${acct}:holds`) > 5_000 && await ttl(`${acct}:holds`) <= 120_000, 'the holds key outlives its longest hold by a minute at most');
  await s.hold(holdOf('big', 'h4', 0, 600_000));
  t.ok(await ttl(`${acct}:holds`) > 600_000, 'a longer hold extends it');
  await s.hold(holdOf('big', 'h5', 0, 5_000));
  t.ok(await ttl(`${acct}:holds`) > 600_000, 'and a shorter one after it does not shorten it');
  const days = (ms: number) => ms / 86_400_000;
  t.ok(days(await ttl(`${acct}:usage:D:${DAY}`)) > 39.9 && days(await ttl(`${acct}:usage:D:${DAY}`)) <= 40, 'day usage is kept 40 days');
  t.ok(days(await ttl(`${acct}:usage:M:${MONTH}`)) > 399.9 && days(await ttl(`${acct}:usage:M:${MONTH}`)) <= 400, 'month usage 400 days');
  t.ok(await ttl(`${acct}:settled`) > SETTLED_KEEP_MS, 'settled ids are kept over their hour');
  t.ok(await ttl(`${acct}:settled:at`) > SETTLED_KEEP_MS);

  // Settlements older than an hour are pruned by the next settle: their ids apply again.
  const old = Date.now() - SETTLED_KEEP_MS - 60_000;
  await c.zadd(`${acct}:settled:at`, old, 'h1', old, 'ancient');
  await c.hset(`${acct}:settled`, 'ancient', '1');
  await s.addCredits('big', 100, 'refill');
  t.equal((await s.settle(settlementOf('big', 'h5', 1)))!.applied, true);
  t.strictSame(await c.zrange(`${acct}:settled:at`, 0, -1), ['h2', 'h5'], 'old entries leave the index');
  t.strictSame((await c.hkeys(`${acct}:settled`)).sort(), ['h2', 'h5'], 'and the results');
  t.equal((await s.settle(settlementOf('big', 'h1', 1)))!.applied, true, 'a request id settled over an hour ago applies again');
  t.equal((await s.settle(settlementOf('big', 'h2', 1)))!.applied, false, 'a recent one does not');

  // Expired holds are purged by the next hold, not just ignored.
  await s.hold(holdOf('big', 'short', 1, 20));
  await sleep(60);
  await s.hold(holdOf('big', 'h6', 1));
  t.notOk(await c.hexists(`${acct}:holds`, 'short'), 'an expired hold is deleted by the next hold');

  await t.rejects(s.hold(holdOf('big', 'x', -1)), RangeError);
  await t.rejects(s.hold(holdOf('big', 'x', 1.5)), RangeError);
  await t.rejects(s.hold(holdOf('big', '', 1)), TypeError);
  await t.rejects(s.hold({ ...holdOf('big', 'x', 1), day: '2031-5-6' }), TypeError);
  await t.rejects(s.hold({ ...holdOf('big', 'x', 1), quotas: { ...NO_QUOTAS, tokens_per_day: -1 } }), RangeError);
  await t.rejects(s.settle({ ...settlementOf('big', 'x', 1), month: 'May' }), TypeError);
  await t.rejects(s.settle(settlementOf('big', 'x', 1, -1)), RangeError);
  await t.rejects(s.usageReport(undefined, Number.NaN), TypeError);
  t.notOk(await c.hexists(`${acct}:holds`, 'x'), 'bad input never reaches Redis');
});

/** The holds hash's sums, and the same recomputed from its holds (unexpired at `now`). */
async function sumsOf(c: Redis, holdsKey: string, now = Date.now()) {
  const h = await c.hgetall(holdsKey);
  const kept = { u: h['#u'] ?? null, n: h['#n'] ?? null, byKey: {} as Record<string, string> };
  const real = { u: 0, n: 0, byKey: {} as Record<string, number> };
  let earliest = Infinity;
  for (const [f, v] of Object.entries(h)) {
    if (f.startsWith('#k:') && v !== '0') kept.byKey[f.slice(3)] = v; // absent or 0: nothing held
    if (f.startsWith('#')) continue;
    const [u, e, k] = v.split(':');
    if (Number(e) <= now) continue;
    real.u += Number(u);
    real.n++;
    if (k && Number(u) > 0) real.byKey[k] = (real.byKey[k] ?? 0) + Number(u);
    earliest = Math.min(earliest, Number(e));
  }
  return { kept, real, e: h['#e'] === undefined ? null : Number(h['#e']), earliest };
}

t.test('a hold and a settle take as many commands with 500 holds open as with none: the holds are summed as they change', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  await s.createAccount({ id: 'busy', plan: 'pro', balance_units: 10_000_000 });
  const commands = async () => Number(/total_commands_processed:(\d+)/.exec(await c.info('stats'))![1]);
  const hgetalls = async () => Number(/cmdstat_hgetall:calls=(\d+)/.exec(await c.info('commandstats'))?.[1] ?? 0);
  /** Commands Redis ran (in scripts too) for one hold and its settle, less the INFO asking. */
  const pair = async (id: string) => {
    const before = await commands();
    t.ok((await s.hold(holdOf('busy', id, 10, 600_000)))?.ok);
    await s.settle(settlementOf('busy', id, 10));
    return await commands() - before - 1;
  };
  await pair('warm');
  const alone = await pair('alone');
  for (let i = 0; i < 500; i += 100) {
    await Promise.all(Array.from({ length: 100 }, (_, k) => s.hold(holdOf('busy', `open-${i + k}`, 7, 600_000))));
  }
  const scans = await hgetalls();
  const crowded = await pair('crowded');
  t.equal(crowded, alone, `the same commands with 500 holds open (${crowded})`);
  t.equal(await hgetalls(), scans, 'and no read of the whole holds hash');
  const usage = await s.accountUsage('busy', DAY, MONTH);
  t.equal(usage.held_units, 3500, 'the 500 holds are held');
  t.equal((await s.hold(holdOf('busy', 'last', 1)))!.available_units, 10_000_000 - 30 - 3500 - 1, 'and count against the balance');
  const sums = await sumsOf(c, `${s.prefix}{acct:busy}:holds`);
  t.strictSame(sums.kept, { u: String(sums.real.u), n: String(sums.real.n), byKey: {} }, 'the sums are those of the holds');
});

t.test('a release sent to a replica fails (READONLY) even with no hold there to drop: it is retried on the primary', async (t) => {
  const replica = await startRedis();
  t.teardown(() => replica.stop());
  const c = new Redis(replica.url);
  t.teardown(() => c.disconnect());
  await c.replicaof('127.0.0.1', redis.port);
  const prefix = freshPrefix();
  const primary = await opener(t)(prefix);
  await primary.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
  t.ok((await primary.hold(holdOf('acme', 'there', 10)))?.ok);
  const deadline = Date.now() + 10_000;
  while (await c.hexists(`${prefix}{acct:acme}:holds`, 'there') === 0 && Date.now() < deadline) await sleep(20);
  t.equal(await c.hexists(`${prefix}{acct:acme}:holds`, 'there'), 1, 'the hold reached the replica');
  const onReplica = await opener(t, replica.url)(prefix);
  /** What a release on the replica comes to (after a refusal the client reconnects: waited for). */
  const outcome = async (id: string): Promise<string> => {
    for (let i = 0; i < 100; i++) {
      try {
        await onReplica.release('acme', id);
        return 'released';
      } catch (err) {
        if (/READONLY/.test((err as Error).message)) return 'READONLY';
        await sleep(50);
      }
    }
    return 'never answered';
  };
  t.equal(await outcome('not-there-yet'), 'READONLY', 'no hold on the replica: refused all the same');
  t.equal(await outcome('there'), 'READONLY', 'a hold there: refused');
  t.equal((await primary.accountUsage('acme', DAY, MONTH)).held_units, 10, 'the primary still holds it, for the release to land there');
});

t.test('property: after any holds, settles, releases and expiries the sums are those of the holds in the hash', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  const units = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 1000 }));
  const op = fc.oneof(
    fc.record({ kind: fc.constant('hold' as const), id: fc.integer({ min: 0, max: 5 }), units,
      short: fc.boolean(), key: fc.constantFrom('', 'key_a', 'key_b') }),
    fc.record({ kind: fc.constantFrom('settle' as const, 'release' as const), id: fc.integer({ min: 0, max: 5 }), units }),
    fc.constant({ kind: 'wait' as const }),
  );
  let run = 0;
  await fc.assert(fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 14 }), async (ops) => {
    const account = `p${run++}`;
    await s.createAccount({ id: account, plan: 'pro', balance_units: 1_000_000_000 });
    const holds = `${s.prefix}{acct:${account}}:holds`;
    const open = new Map<number, { units: number; short: boolean }>();
    const settled = new Set<number>();
    for (const o of ops) {
      if (o.kind === 'hold') {
        const r = await s.hold({ ...holdOf(account, `r${o.id}`, o.units, o.short ? 5 : 600_000), ...(o.key ? { key: { id: o.key, periods: { day: 'd', week: 'w', month: 'm' } } } : {}) });
        if (!r?.ok) return false;
        open.set(o.id, { units: o.units, short: o.short });
      } else if (o.kind === 'settle') {
        await s.settle(settlementOf(account, `r${o.id}`, o.units));
        if (!settled.has(o.id)) open.delete(o.id);
        settled.add(o.id);
      } else if (o.kind === 'release') {
        await s.release(account, `r${o.id}`);
        open.delete(o.id);
      } else {
        await sleep(10);
        for (const [id, h] of open) if (h.short) open.delete(id);
      }
      const sums = await sumsOf(c, holds, 0); // every hold in the hash, expired or not
      if (sums.kept.u === null && sums.real.n > 0) return false;
      if (sums.kept.u !== null && (sums.kept.u !== String(sums.real.u) || sums.kept.n !== String(sums.real.n))) return false;
      if (sums.kept.u !== null && !(sums.e !== null && sums.e <= sums.earliest)) return false;
      const byKey = Object.fromEntries(Object.entries(sums.real.byKey).map(([k, u]) => [k, String(u)]));
      if (sums.kept.u !== null && JSON.stringify(Object.entries(sums.kept.byKey).sort()) !== JSON.stringify(Object.entries(byKey).sort())) return false;
      // Held: every long hold the model has open, and none or some of its short ones.
      const held = (await s.accountUsage(account, DAY, MONTH)).held_units;
      const long = [...open.values()].filter((h) => !h.short).reduce((a, h) => a + h.units, 0);
      const all = [...open.values()].reduce((a, h) => a + h.units, 0);
      if (held < long || held > all) return false;
    }
    return true;
  }), { numRuns: 40 });
  t.equal(run, 40, '40 runs of up to 14 operations, each keeping the sums');
});

t.test('holds summed across replacement, release, keys and expiry; a hash written before the sums is summed once', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
  const holds = `${s.prefix}{acct:acme}:holds`;
  const key = (id: string) => ({ id, periods: { day: 'd1', week: 'w1', month: 'm1' } });
  const check = async (what: string) => {
    const sums = await sumsOf(c, holds);
    const byKey = Object.fromEntries(Object.entries(sums.real.byKey).map(([k, u]) => [k, String(u)]));
    t.strictSame(sums.kept, { u: String(sums.real.u), n: String(sums.real.n), byKey }, `${what}: the sums are the holds'`);
    t.ok(sums.e !== null && sums.e <= sums.earliest, `${what}: '#e' is at or before the earliest expiry`);
    t.equal((await s.accountUsage('acme', DAY, MONTH)).held_units, sums.real.u, `${what}: held as summed`);
  };
  t.strictSame(await s.hold(holdOf('acme', 'r1', 50)), { ok: true, available_units: 950 });
  t.strictSame(await s.hold({ ...holdOf('acme', 'r1', 30), key: key('key_a') }), { ok: true, available_units: 970 }, 'a repeated hold replaces the first');
  await check('replaced');
  t.ok((await s.hold({ ...holdOf('acme', 'r2', 20), key: key('key_a') }))?.ok);
  t.ok((await s.hold({ ...holdOf('acme', 'r3', 5), key: key('key_b') }))?.ok);
  await check('three holds, two keys');
  await s.release('acme', 'r3');
  t.notOk(await c.hexists(holds, '#k:key_b'), "a key's sum goes with its last hold");
  await s.release('acme', 'r3');
  await check('released (twice)');
  await s.settle({ ...settlementOf('acme', 'r1', 12), key: key('key_a') });
  await check('settled');
  t.ok((await s.hold(holdOf('acme', 'short', 100, 20)))?.ok);
  await check('a short hold');
  await sleep(60);
  t.strictSame(await s.hold(holdOf('acme', 'r4', 1)), { ok: true, available_units: 1000 - 12 - 20 - 1 }, 'an expired hold is not held');
  t.notOk(await c.hexists(holds, 'short'), 'and is dropped');
  await check('after the expiry');

  // A hash as an older gateway wrote it: holds only, no sums.
  const now = Date.now();
  await s.createAccount({ id: 'old', plan: 'pro', balance_units: 1000 });
  const oldHolds = `${s.prefix}{acct:old}:holds`;
  // Unreadable: not this store's writing (a leading zero, more digits than a safe integer has),
  // so never handed to HINCRBY (which refuses '007'): a rebuild cut short would leave sums trusted.
  await c.hset(oldHolds, 'o1', `100:${now + 60_000}`, 'o2', `50:${now - 1}`, 'o3', `7:${now + 60_000}:key_x`, 'o4', 'garbled',
    'o5', `007:${now + 60_000}`, 'o6', `12345678901234567:${now + 60_000}`, 'o7', `5:0${now + 60_000}`);
  t.strictSame(await s.hold(holdOf('old', 'n1', 1)), { ok: true, available_units: 1000 - 107 - 1 }, 'its open holds are held, its expired and unreadable ones not');
  t.strictSame((await c.hkeys(oldHolds)).filter((f) => !f.startsWith('#')).sort(), ['n1', 'o1', 'o3']);
  const sums = await sumsOf(c, oldHolds);
  t.strictSame(sums.kept, { u: '108', n: '3', byKey: { key_x: '7' } }, 'and summed');
  // Released from a hash without sums: no sums made up; the next hold sums it.
  await s.createAccount({ id: 'old2', plan: 'pro', balance_units: 1000 });
  const old2 = `${s.prefix}{acct:old2}:holds`;
  await c.hset(old2, 'o1', `100:${now + 60_000}`, 'o2', `40:${now + 60_000}`);
  await s.release('old2', 'o1');
  t.strictSame(await c.hgetall(old2), { o2: `40:${now + 60_000}` }, 'a release on a hash without sums only drops the hold');
  t.strictSame(await s.hold(holdOf('old2', 'n1', 1)), { ok: true, available_units: 1000 - 40 - 1 });
  t.strictSame((await sumsOf(c, old2)).kept, { u: '41', n: '2', byKey: {} });

  // A settle whose hold is gone with its key (it outlived the hold's TTL) makes no holds key.
  await s.createAccount({ id: 'late', plan: 'pro', balance_units: 1000 });
  t.strictSame(await s.settle(settlementOf('late', 'gone', 5)), { applied: true, charged_units: 5, balance_units: 995, available_units: 995 });
  t.equal(await c.exists(`${s.prefix}{acct:late}:holds`), 0, 'no holds key made by a settle');

  await t.rejects(s.hold(holdOf('old', '#u', 1)), TypeError, "a request id may not begin with '#'");
  await t.rejects(s.release('old', '#n'), TypeError);
  t.equal(await c.hget(oldHolds, '#u'), '108', 'the sums are untouched');
});

t.test('settled ids are aged by Redis\'s clock: a gateway whose clock runs two hours ahead prunes nothing recent', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  await s.createAccount({ id: 'skew', plan: 'pro', balance_units: 1000 });
  t.equal((await s.settle(settlementOf('skew', 'recent', 5)))!.applied, true);
  const realNow = Date.now;
  Date.now = () => realNow() + 2 * SETTLED_KEEP_MS;
  try {
    t.equal((await s.settle(settlementOf('skew', 'from-the-future', 5)))!.applied, true, 'a settle from the skewed gateway');
  } finally {
    Date.now = realNow;
  }
  const idx = `${s.prefix}{acct:skew}:settled:at`;
  t.strictSame((await c.zrange(idx, 0, -1)).sort(), ['from-the-future', 'recent'], 'it pruned nothing');
  const [score] = (await c.zmscore(idx, 'from-the-future')) as Array<string | null>;
  t.ok(Math.abs(Number(score) - Date.now()) < 60_000, 'scored by the server\'s time, not the gateway\'s');
  t.strictSame(await s.settle(settlementOf('skew', 'recent', 5)), { applied: false, charged_units: 5, balance_units: 990, available_units: 990 },
    'a repeat of the recent one still changes nothing');
});

t.test('usage reports read every hourly stream; records are trimmed by time only, never by count', async (t) => {
  const open = opener(t);
  const prefix = freshPrefix();
  const s = await open(prefix);
  const since = Date.now();
  for (let i = 0; i < 2500; i += 250) {
    await Promise.all(Array.from({ length: 250 }, (_, j) => s.recordUsage(usageRecord(i + j, (i + j) % 5 === 0 ? 'five' : 'other', `m${(i + j) % 3}`, since + 1))));
  }
  const all = await s.usageReport(undefined, since);
  t.equal(all.requests, 2500, 'all 2500 records, read in batches');
  t.strictSame([all.prompt_tokens, all.completion_tokens, all.units], [2500, 5000, 7500]);
  t.strictSame(Object.keys(all.by_model).sort(), ['m0', 'm1', 'm2']);
  t.equal(all.by_model.m0!.requests, 834);
  t.strictSame(all.by_key, { key_0123456789abcdef: { requests: 2500, prompt_tokens: 2500, completion_tokens: 5000, units: 7500 } });
  t.equal((await s.usageReport('five', since)).requests, 500, 'filtered by account');
  t.equal((await s.usageReport(undefined, since + 2)).requests, 0, 'and by time');

  const c = inspector();
  t.teardown(() => c.disconnect());
  const hour = Math.floor((since + 1) / 3_600_000);
  const key = `${prefix}{usage:${hour}}`;
  t.equal(await c.xlen(key), 2500, 'one stream for the hour, holding every record (no length cap)');
  const expireAt = await c.pexpiretime(key);
  t.equal(expireAt, (hour + 1) * 3_600_000 + 90 * 86_400_000, 'it expires at the end of its hour plus the retention (90 days)');
  t.strictSame(await c.zrange(`${prefix}{usage:index}`, 0, -1), [String(hour)], 'the index names the hour');
});

t.test('balances keep every digit; bad input is refused before Redis sees it', async (t) => {
  const s = await opener(t)(freshPrefix());
  const big = Number.MAX_SAFE_INTEGER - 10;
  await s.createAccount({ id: 'big', plan: 'pro', balance_units: big });
  t.strictSame(await s.addCredits('big', 7, 'k1'), { applied: true, balance_units: big + 7 });
  t.strictSame(await s.addCredits('big', 7, 'k1'), { applied: false, balance_units: big + 7 });
  t.equal((await s.getAccount('big'))!.balance_units, big + 7);

  await t.rejects(s.addCredits('big', 1.5, 'k2'), RangeError);
  await t.rejects(s.addCredits('big', 1, ''), TypeError);
  await t.rejects(s.createAccount({ id: '', plan: 'pro', balance_units: 0 }), TypeError);
  await t.rejects(s.createKey({ id: 'key_x', account: 'big', digest: 'ABC' }), TypeError);
  await t.rejects(s.revokeSession(''), TypeError);
  t.equal((await s.getAccount('big'))!.balance_units, big + 7, 'nothing changed');
});

t.test("a key's last use the store did not write (not a number) fails neither a hold nor a touch: it is replaced", async (t) => {
  const prefix = freshPrefix();
  const s = await opener(t)(prefix);
  const c = inspector();
  t.teardown(() => c.disconnect());
  await s.createAccount({ id: 'lu', plan: 'pro', balance_units: 100 });
  const d = sha256Hex('tg_lu_key');
  const id = keyIdOf(d);
  t.equal(await s.createKey({ id, account: 'lu', digest: d }), true);
  const hash = `${prefix}{acct:lu}:key:${id}`;
  await c.hset(hash, 'lu', 'yesterday');
  const now = new Date();
  const periods = { day: `d:${now.toISOString().slice(0, 10)}`, week: 'w:x', month: `m:${now.toISOString().slice(0, 7)}` };
  const before = Date.now();
  const held = await s.hold({ account: 'lu', requestId: 'r1', units: 5, ttlMs: 60_000, day: now.toISOString().slice(0, 10),
    month: now.toISOString().slice(0, 7), quotas: { requests_per_day: null, tokens_per_day: null, units_per_month: null }, key: { id, periods } });
  t.strictSame(held, { ok: true, available_units: 95 }, 'held');
  t.ok(Number(await c.hget(hash, 'lu')) >= before, 'the hold wrote its time over it');
  await c.hset(hash, 'lu', '');
  await s.touchKeys([{ account: 'lu', id, at: 1234 }]);
  t.equal(await c.hget(hash, 'lu'), '1234', 'and so does a touch');
});

t.test("controls written before keys had a queue priority read as the plan's (null); a PATCH sets it as a field of its own", async (t) => {
  const prefix = freshPrefix();
  const s = await opener(t)(prefix);
  const c = inspector();
  t.teardown(() => c.disconnect());
  await s.createAccount({ id: 'qp', plan: 'pro', balance_units: 100 });
  const d = sha256Hex('tg_qp_key');
  const id = keyIdOf(d);
  t.equal(await s.createKey({ id, account: 'qp', digest: d, controls: { ...defaultControls(), name: 'old', priority: 'high' } }), true);
  const hash = `${prefix}{acct:qp}:key:${id}`;
  const stored = JSON.parse((await c.hget(hash, 'c'))!);
  t.equal(stored.priority, 'high', 'this version writes it into c');
  delete stored.priority;
  await c.hset(hash, 'c', JSON.stringify(stored));
  t.strictSame((await s.getKey(id))!.controls, { ...defaultControls(), name: 'old' }, 'an older c: priority null, the rest as written');
  t.equal((await s.keyWithAccount(d))!.key.controls.priority, null, 'so on the request path too');
  const patched = await s.updateKey(id, { priority: 'low' });
  t.equal(patched!.controls.priority, 'low');
  t.equal(await c.hget(hash, 'c:priority'), '"low"', 'merged in Redis as c:priority');
  await s.updateKey(id, { priority: null });
  t.equal(await c.hget(hash, 'c:priority'), 'null', 'a null field overrides what c holds');
  t.equal((await s.getKey(id))!.controls.priority, null);
  await c.hset(hash, 'c:priority', '"urgent"');
  t.equal((await s.getKey(id))!.revoked_at, 0, 'a priority this store never writes makes the controls unreadable: the key is refused, not served unrestricted');
});

t.test('the plan index skips ids whose account does not exist and drops ids on another plan', async (t) => {
  const s = await opener(t)(freshPrefix());
  const c = inspector();
  t.teardown(() => c.disconnect());
  const index = `${s.prefix}{plan:gold}`;
  // A creation that crashed between its two steps, and a seed of an account that is on another plan.
  await c.sadd(index, 'never-created');
  await s.createAccount({ id: 'silver-1', plan: 'silver', balance_units: 0 });
  await s.seed([{ id: 'silver-1', plan: 'gold', wallet_units: 0, keys: [], key_sha256: [] }]);
  t.strictSame((await c.smembers(index)).sort(), ['never-created', 'silver-1']);
  t.strictSame(await s.accountsOnPlans(['gold']), new Map(), 'neither counts as a gold account');
  t.strictSame(await c.smembers(index), ['never-created'], 'the id on another plan is gone for good; the other may still be created');
  t.strictSame(await s.accountsOnPlans(['silver']), new Map([['silver', 'silver-1']]));

  // Many ids: the scan pages through the index until it meets a real one.
  await c.sadd(index, ...Array.from({ length: 500 }, (_, i) => `ghost-${i}`));
  await s.createAccount({ id: 'gold-1', plan: 'gold', balance_units: 0 });
  t.strictSame(await s.accountsOnPlans(['gold']), new Map([['gold', 'gold-1']]));
});

t.test('every key the store writes starts with its prefix', async (t) => {
  // A server of its own (unless external), so any key outside the prefix would show.
  const own = redis.external ? redis : await startRedis();
  if (own !== redis) t.teardown(() => own.stop());
  const c = inspector(own.url);
  t.teardown(() => c.disconnect());
  const before = new Set(await keysOf(c));
  const open = opener(t, own.url);
  const prefix = freshPrefix();
  const s = await open(prefix);
  const d = sha256Hex('tg_scan_1');

  await s.seed([{ id: 'seeded', plan: 'free', wallet_units: 5, keys: ['tg_scan_2'], key_sha256: [] }]);
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
  await s.addCredits('acme', 5, 'k');
  await s.createKey({ id: keyIdOf(d), account: 'acme', digest: d });
  await s.revokeKey(keyIdOf(d));
  await s.revokeSession('sid');
  await s.hold(holdOf('acme', 'r1', 1));
  await s.hold(holdOf('acme', 'r2', 1));
  await s.settle(settlementOf('acme', 'r1', 1));
  await s.release('acme', 'r2');
  await s.hold(holdOf('acme', 'r3', 1));
  await s.accountUsage('acme', DAY, MONTH);
  const at = Date.now();
  const record = usageRecord(1, 'acme', 'm', at);
  await s.recordUsage(record);
  await s.usageReport('acme', 0);
  const today = Math.floor(at / 86_400_000) * 86_400_000;
  await s.usageTotals({ by: ['model'], account: 'acme', key: record.key_id!, since: today, until: today + 86_400_000, daily: true });
  await s.usageRecords({ since: 0, limit: 10 });
  await s.usageHourly({ since: at - 3_600_000, until: at + 1 });
  await s.usageTop({ by: 'model', since: at - 3_600_000, until: at + 1, limit: 5, account: 'acme' });
  await s.listAccounts({ limit: 10 });

  const written = (await keysOf(c)).filter((k) => !before.has(k));
  t.strictSame(written.filter((k) => !k.startsWith(prefix)), [], 'nothing outside the prefix');
  const d2 = sha256Hex('tg_scan_2');
  // A usage record's write mark (lib/store/redis/records.ts) is named by its write id: one, beside its hour's stream.
  const hourKey = `{usage:${Math.floor(at / 3_600_000)}}`;
  const marks = written.filter((k) => k.startsWith(`${prefix}${hourKey}:w:`));
  t.equal(marks.length, 1, "the record's write mark");
  // Its totals (lib/store/redis/totals-hours.ts): hashes beside its hour's stream, in its slot,
  // and the hour's count of the records they hold.
  const totals = written.filter((k) => k.startsWith(`${prefix}${hourKey}:t`));
  t.ok(totals.length >= 6, "the record's totals and its hour's count");
  t.strictSame(totals.filter((k) => !totalsKeys(`${prefix}${hourKey}`, record).includes(k)), [], 'only the documented totals keys');
  t.strictSame(written.filter((k) => !marks.includes(k) && !totals.includes(k)).map((k) => k.slice(prefix.length)).sort(), [
    '{acct:acme}', '{acct:acme}:credits', '{acct:seeded}',
    `{key:${d2}}`, `{key:${d}}`, `{keyid:${keyIdOf(d2)}}`, `{keyid:${keyIdOf(d)}}`, '{sess:sid}', '{plan:free}', '{plan:pro}',
    '{acct:acme}:holds', '{acct:acme}:settled', '{acct:acme}:settled:at', `{acct:acme}:usage:D:${DAY}`, `{acct:acme}:usage:M:${MONTH}`,
    `{usage:${Math.floor(at / 3_600_000)}}`, '{usage:index}', '{accounts}', '{accounts}:filled',
    `{acct:acme}:key:${keyIdOf(d)}`, '{acct:acme}:keys', `{acct:seeded}:key:${keyIdOf(d2)}`, '{acct:seeded}:keys',
  ].sort(), 'the documented layout');
});

t.test('on a one-node Redis Cluster no script touches two slots', { skip: redis.external ? 'needs a local redis-server' : false }, async (t) => {
  const cluster = await startRedis({ cluster: true });
  t.teardown(() => cluster.stop());
  const open = opener(t, cluster.url);
  // Braces in the prefix and the ids must not split one script's keys across slots.
  const prefix = `tg{${randomUUID()}:`;
  const [a, b] = [await open(prefix), await open(prefix)];
  const heard: Revocation[] = [];
  b.onRevoke((r) => heard.push(r));
  const d = sha256Hex('tg_cluster_1');
  for (const id of ['acme', 'a}b{c', '{x}']) {
    t.equal(await a.createAccount({ id, plan: 'pro', balance_units: 1 }), true, `account ${id}`);
    t.strictSame(await a.addCredits(id, 2, 'k'), { applied: true, balance_units: 3 });
    t.strictSame(await a.addCredits(id, 2, 'k'), { applied: false, balance_units: 3 });
  }
  t.equal(await a.createKey({ id: keyIdOf(d), account: 'a}b{c', digest: d }), true);
  t.equal((await a.keyByDigest(d))!.account, 'a}b{c');
  t.ok((await a.revokeKey(keyIdOf(d)))!.revoked_at);
  await a.revokeSession('s}i{d');
  t.equal(await a.isSessionRevoked('s}i{d'), true);
  await a.seed([{ id: 'seeded', plan: 'free', wallet_units: 5, keys: ['tg_cluster_2'], key_sha256: [] }]);
  t.equal((await a.keyByDigest(sha256Hex('tg_cluster_2')))!.account, 'seeded');
  await until(() => heard.length === 2, 'both revocations on the other instance');
  t.strictSame(heard, [{ kind: 'key', digest: d }, { kind: 'session', sid: 's}i{d' }]);
  t.equal(await a.createAccount({ id: 'braced', plan: 'p}l{an', balance_units: 1 }), true);
  const users = await b.accountsOnPlans(['pro', 'free', 'p}l{an', 'gold']);
  t.strictSame([...users.keys()].sort(), ['free', 'pro', 'p}l{an'], 'the plan index works on a cluster');
  t.ok(['acme', 'a}b{c', '{x}'].includes(users.get('pro')!));
  t.strictSame((await a.addCredits('acme', -4, 'over')), { applied: false, balance_units: 3, refused: 'below_zero' }, 'refusals too');

  // Metering: every script's keys share the account's slot, whatever braces the ids hold.
  for (const id of ['acme', 'a}b{c', '{x}']) {
    t.strictSame(await a.hold(holdOf(id, 'r}1{', 2)), { ok: true, available_units: 1 }, `hold on ${id}`);
    t.strictSame(await b.hold({ ...holdOf(id, 'r2', 1), quotas: { requests_per_day: 5, tokens_per_day: 5, units_per_month: 5 } }), { ok: true, available_units: 0 });
    t.strictSame(await b.settle(settlementOf(id, 'r}1{', 2)), { applied: true, charged_units: 2, balance_units: 1, available_units: 0 });
    t.equal((await a.settle(settlementOf(id, 'r}1{', 2)))!.applied, false);
    await a.release(id, 'r2');
    t.strictSame(await b.accountUsage(id, DAY, MONTH), { held_units: 0, day: { requests: 1, tokens: 3, units: 2 }, month: { requests: 1, tokens: 3, units: 2 } });
    await a.recordUsage(usageRecord(1, id, 'm'));
  }
  t.equal((await b.usageReport(undefined, 0)).requests, 3, 'usage records too');
  t.equal((await b.usageReport('a}b{c', 0)).requests, 1);
  // Records of another hour go to another stream, in another slot.
  await a.recordUsage(usageRecord(2, 'acme', 'm', Date.now() - 3 * 3_600_000));
  const first = await b.usageRecords({ since: 0, limit: 2 });
  const rest = await b.usageRecords({ since: 0, limit: 10, cursor: first.next_cursor! });
  t.strictSame([...first.records, ...rest.records].map((r) => r.account), ['acme', 'acme', 'a}b{c', '{x}'], 'paged across hours, oldest hour first');
  t.equal(rest.next_cursor, null);

  // Per-key controls: the key's hash is in its account's slot, so its budget is held and
  // debited in the wallet's scripts; every key script is atomic on a cluster too.
  const kd = sha256Hex('tg_cluster_budget');
  const kid = keyIdOf(kd);
  await a.addCredits('a}b{c', 100, 'budget');
  t.equal(await a.createKey({ id: kid, account: 'a}b{c', digest: kd, last4: 'aaaa', controls: { ...defaultControls(), budget: { units: 5, period: 'day' } } }), true);
  const periods = { day: 'd:2031-05-06', week: 'w:2031-05-05', month: 'm:2031-05' };
  t.match(await b.hold({ ...holdOf('a}b{c', 'kb1', 4), key: { id: kid, periods } }), { ok: true });
  t.match(await b.hold({ ...holdOf('a}b{c', 'kb2', 4), key: { id: kid, periods } }), { ok: false, code: 'budget_exceeded', budget_remaining_units: 1 });
  t.match(await a.settle({ ...settlementOf('a}b{c', 'kb1', 9), key: { id: kid, periods } }), { applied: true, charged_units: 5 });
  t.ok(await b.updateKey(kid, { name: 'n}a{me' }));
  t.ok(await b.rotateKey(kid, sha256Hex('tg_cluster_rotated'), 'bbbb', Date.now() + 1000));
  // Later than the hold above, which recorded the key's use too.
  const usedAt = Date.now() + 60_000;
  await b.touchKeys([{ account: 'a}b{c', id: kid, at: usedAt }]);
  t.match(await a.getKey(kid), { controls: { name: 'n}a{me' }, spent: { period: periods.day, units: 5 }, last_used_at: usedAt, last4: 'bbbb' });
  t.equal((await a.listKeys('a}b{c'))!.length, 1, 'listed (the other key is revoked)');
});

t.test('while Redis is down calls fail fast; afterwards the same store works again', { skip: redis.external ? 'needs a redis-server this test can stop' : false }, async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const open = opener(t, server.url);
  const prefix = freshPrefix();
  const [a, b] = [await open(prefix), await open(prefix)];
  t.equal(await a.createAccount({ id: 'acme', plan: 'pro', balance_units: 1 }), true);
  await a.ping();

  await server.stop();
  const d = sha256Hex('tg_down_1');
  const calls: Array<[string, () => Promise<unknown>]> = [
    ['ping', () => a.ping()],
    ['getAccount', () => a.getAccount('acme')],
    ['createAccount', () => a.createAccount({ id: 'x', plan: 'free', balance_units: 0 })],
    ['addCredits', () => a.addCredits('acme', 1, 'k')],
    ['createKey', () => a.createKey({ id: keyIdOf(d), account: 'acme', digest: d })],
    ['keyByDigest', () => a.keyByDigest(d)],
    ['revokeKey', () => a.revokeKey(keyIdOf(d))],
    ['revokeSession', () => a.revokeSession('sid')],
    ['isSessionRevoked', () => a.isSessionRevoked('sid')],
    ['seed', () => a.seed([{ id: 'y', plan: 'free', wallet_units: 0, keys: ['tg_down_2'], key_sha256: [] }])],
    ['hold', () => a.hold(holdOf('acme', 'r1', 1))],
    ['settle', () => a.settle(settlementOf('acme', 'r1', 1))],
    ['release', () => a.release('acme', 'r1')],
    ['accountUsage', () => a.accountUsage('acme', DAY, MONTH)],
    ['recordUsage', () => a.recordUsage(usageRecord(1, 'acme', 'm'))],
    ['usageReport', () => a.usageReport(undefined, 0)],
  ];
  for (const [name, call] of calls) {
    const started = Date.now();
    await t.rejects(call(), `${name} rejects`);
    const took = Date.now() - started;
    t.ok(took < 2000, `${name} rejected after ${took} ms`);
  }
  // Again, in parallel and after a pause: still bounded while ioredis keeps reconnecting.
  await sleep(300);
  const started = Date.now();
  const settled = await Promise.allSettled(calls.map(([, call]) => call()));
  t.ok(settled.every((r) => r.status === 'rejected'), 'all reject');
  t.ok(Date.now() - started < 2000, `all rejected within ${Date.now() - started} ms`);

  await server.restart();
  const back = Date.now();
  for (;;) {
    try { await a.ping(); await b.ping(); break; } catch { /* still reconnecting */ }
    if (Date.now() - back > 5000) throw new Error('the stores did not reconnect within 5 s');
    await sleep(50);
  }
  t.ok(Date.now() - back <= 5000, `both stores answer again after ${Date.now() - back} ms`);
  // The restarted server lost its data and its script cache (--save ''): scripts load again.
  t.equal(await a.getAccount('acme'), undefined, 'the data went with the old server');
  t.equal(await a.createAccount({ id: 'acme', plan: 'pro', balance_units: 1 }), true);
  t.strictSame(await a.addCredits('acme', 4, 'k'), { applied: true, balance_units: 5 });
  t.equal(await a.createKey({ id: keyIdOf(d), account: 'acme', digest: d }), true);
  t.strictSame(await a.hold(holdOf('acme', 'r1', 5)), { ok: true, available_units: 0 }, 'metering scripts load again too');
  t.strictSame(await b.settle(settlementOf('acme', 'r1', 3)), { applied: true, charged_units: 3, balance_units: 2, available_units: 2 });
  await b.release('acme', 'r1');
  t.equal((await a.accountUsage('acme', DAY, MONTH)).day.units, 3);
  await a.recordUsage(usageRecord(1, 'acme', 'm'));
  t.equal((await b.usageReport('acme', 0)).requests, 1);

  // The subscriber connection has subscribed again, too.
  const heard: Revocation[] = [];
  b.onRevoke((r) => heard.push(r));
  const deadline = Date.now() + 5000;
  await a.revokeKey(keyIdOf(d));
  // Resubscribing may lag the command connection; later revocations must get through.
  for (let i = 0; !heard.some((r) => r.kind === 'session') && Date.now() < deadline; i++) {
    await a.revokeSession(`probe-${i}`);
    await sleep(50);
  }
  t.ok(heard.some((r) => r.kind === 'session'), 'revocations reach the other instance again');
});

t.test('a hung Redis (connections open, no answers) cannot hang a call', { skip: redis.external ? 'needs a redis-server this test can freeze' : false }, async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const open = opener(t, server.url);
  const s = await open(freshPrefix()); // the default command timeout, 1000 ms
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1 });
  const d = sha256Hex('tg_hung_1');

  server.freeze();
  t.teardown(() => server.thaw());
  const started = Date.now();
  const settled = await Promise.allSettled([
    s.ping(),
    s.getAccount('acme'),
    s.addCredits('acme', 1, 'k'),
    s.createKey({ id: keyIdOf(d), account: 'acme', digest: d }),
    s.revokeKey(keyIdOf(d)),
    s.revokeSession('sid'),
    s.isSessionRevoked('sid'),
    s.hold(holdOf('acme', 'r1', 1)),
    s.settle(settlementOf('acme', 'r1', 1)),
    s.accountUsage('acme', DAY, MONTH),
  ]);
  const took = Date.now() - started;
  t.strictSame(settled.map((r) => r.status), Array(10).fill('rejected'), 'every call rejects');
  t.ok(took < 2000, `within ${took} ms`);

  server.thaw();
  t.equal((await s.getAccount('acme'))!.plan, 'pro', 'once it answers again, so does the store');
  await s.ping();
});

t.test('close() quits both connections, also while Redis is down', async (t) => {
  const server = redis.external ? undefined : await startRedis();
  if (server !== undefined) t.teardown(() => server.stop());
  const url = server?.url ?? redis.url;
  const c = inspector(url);
  t.teardown(() => c.disconnect());
  const clients = async () => (await c.client('LIST') as string).split('\n').filter((l) => /name=tollgate/.test(l)).length;

  const s = await RedisStore.open({ url, prefix: freshPrefix() });
  if (server !== undefined) t.equal(await clients(), 2, 'a command and a subscriber connection');
  await s.close();
  if (server !== undefined) {
    const end = Date.now() + 2000;
    while ((await clients()) !== 0 && Date.now() < end) await sleep(20);
    t.equal(await clients(), 0, 'both are gone');
  }
  await t.rejects(s.ping(), 'a closed store rejects');

  if (server !== undefined) {
    const s2 = await RedisStore.open({ url, prefix: freshPrefix() });
    await server.stop();
    const started = Date.now();
    await s2.close();
    t.ok(Date.now() - started < 2000, 'close() does not wait for a dead server');
  }
});

t.test('a store created while Redis is unreachable fails fast and connects later', { skip: redis.external ? 'needs a local redis-server' : false }, async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  await server.stop();
  const s = new RedisStore({ url: server.url, prefix: freshPrefix(), commandTimeoutMs: 500 });
  t.teardown(() => s.close());
  const started = Date.now();
  await t.rejects(s.ping(), 'ping rejects');
  t.ok(Date.now() - started < 2000, `within ${Date.now() - started} ms`);
  await server.restart();
  await s.ready();
  t.equal(await s.createAccount({ id: 'late', plan: 'free', balance_units: 0 }), true, 'works once Redis is up');
});

t.test('a call that failed before the first connect is never sent later (no offline queue)', { skip: redis.external ? 'needs a redis-server this test can freeze' : false }, async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  // Frozen: the kernel accepts the connection, nothing answers, so the store is "connecting".
  server.freeze();
  t.teardown(() => server.thaw());
  const s = new RedisStore({ url: server.url, prefix: freshPrefix(), commandTimeoutMs: 300 });
  t.teardown(() => s.close());
  await t.rejects(s.createAccount({ id: 'early', plan: 'free', balance_units: 5 }), 'rejects while connecting');
  await t.rejects(s.hold(holdOf('early', 'r1', 1)));
  await t.rejects(s.ready(300), { message: 'Redis did not answer within 300 ms' }, 'ready(ms) gives up in time');
  server.thaw();
  await s.ready(5000);
  t.equal(await s.getAccount('early'), undefined, 'the rejected createAccount never ran once Redis answered');
  t.equal(await s.createAccount({ id: 'early', plan: 'free', balance_units: 5 }), true);
});
