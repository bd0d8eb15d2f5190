// The guarded store's release of failed holds (lib/store/guard.ts), against a real Redis: a hold
// Redis refused outright is not released (nothing to release, and during a failover under load
// those releases, by the ten thousand, overflowed the retry queue and pushed out the releases
// of holds that had landed: CI found holds still held after a Sentinel failover); a hold whose
// fate is unknown (a timeout) is released, and the release lands once Redis answers again.

import t from 'tap';
import { Redis } from 'ioredis';
import { StoreUnavailableError } from '../../lib/errors.js';
import { GuardedStore } from '../../lib/store/guard.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { notApplied, RetryQueue } from '../../lib/store/retry.js';
import type { Quotas } from '../../lib/store/types.js';
import { startRedis } from '../helpers/redis.js';

const NONE: Quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const DAY = new Date().toISOString().slice(0, 10);
const hold = (requestId: string) => ({ account: 'acme', requestId, units: 31, ttlMs: 60_000, day: DAY, month: DAY.slice(0, 7), quotas: NONE });

t.test('which failures prove the hold was not applied', async (t) => {
  const refusals = [
    'NOREPLICAS Not enough good replicas to write. script: a1de965f42e177aa339706bd580f049065eca79a, on @user_script:1.',
    "READONLY You can't write against a read only replica.",
    'MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to \'no\'.',
    'LOADING Redis is loading the dataset in memory',
    'CLUSTERDOWN The cluster is down', 'TRYAGAIN Multiple keys request during rehashing of slot', 'MOVED 3999 127.0.0.1:6381',
    'ASK 3999 127.0.0.1:6381', 'BUSY Redis is busy running a script.', "OOM command not allowed when used memory > 'maxmemory'.",
    'NOSCRIPT No matching script.', "Stream isn't writeable and enableOfflineQueue options is false",
  ];
  for (const m of refusals) {
    t.ok(notApplied(new StoreUnavailableError(new Error(m))), m.slice(0, 20));
    t.ok(notApplied(new Error('wrapped', { cause: new Error(m) })), `${m.slice(0, 20)}, as a cause`);
  }
  for (const m of ['Command timed out', 'store command timed out after 1000 ms', 'Connection is closed.', 'ERR Error running script: attempt to index a nil value',
    'the pipeline was discarded', 'read ECONNRESET', 'NOREPLICASX', ' READONLY', 'EXECABORT Transaction discarded']) {
    t.notOk(notApplied(new StoreUnavailableError(new Error(m))), `unknown fate: ${m}`);
  }
  t.notOk(notApplied(new StoreUnavailableError('NOREPLICAS as a string')), 'not an error');
  t.notOk(notApplied(undefined));
});

t.test('against Redis: a refused hold queues no release; a timed-out one does, and it lands', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const inner = new RedisStore({ url: redis.url, prefix: 'guard:', commandTimeoutMs: 1500 });
  t.teardown(() => inner.close());
  await inner.ready();
  const retries = new RetryQueue({ minDelayMs: 20, maxDelayMs: 100 });
  t.teardown(() => retries.close());
  const store = new GuardedStore(inner, retries);
  await store.createAccount({ id: 'acme', plan: 'free', balance_units: 1_000_000 });
  const admin = new Redis(redis.url);
  t.teardown(() => admin.disconnect());
  const held = async () => (await store.accountUsage('acme', DAY, DAY.slice(0, 7))).held_units;

  // A primary without the replica min-replicas-to-write asks for refuses every write.
  await admin.config('SET', 'min-replicas-to-write', '1');
  const n = 12_000; // more than the retry queue keeps (10,000)
  let refused = 0;
  for (let i = 0; i < n; i += 500) {
    const batch = await Promise.allSettled(Array.from({ length: Math.min(500, n - i) }, (_, j) => store.hold(hold(`r${i + j}`))));
    for (const r of batch) {
      if (r.status === 'rejected' && r.reason instanceof StoreUnavailableError && /^NOREPLICAS /.test((r.reason.cause as Error).message)) refused++;
    }
  }
  t.equal(refused, n, 'every hold refused with NOREPLICAS, a 503');
  t.equal(retries.size, 0, 'and no release queued for any of them');
  await admin.config('SET', 'min-replicas-to-write', '0');
  t.equal(await held(), 0, 'nothing was held');

  // A hold that times out may still be applied: its release is queued and lands.
  redis.freeze();
  const late = store.hold(hold('late'));
  await t.rejects(late, StoreUnavailableError);
  // The release is tried at once, times out in turn, and then waits in the queue.
  for (let i = 0; i < 200 && retries.size === 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 1, 'the timed-out hold is released once Redis answers');
  redis.thaw();
  for (let i = 0; i < 200 && retries.size > 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 0, 'the release landed');
  t.equal(await held(), 0, 'the hold Redis applied late is gone');
});

t.test("against Redis: a concurrency slot Redis refused queues no release; a timed-out one's lands", async (t) => {
  const { RedisSlots } = await import('../../lib/limits/slots.js');
  const pino = (await import('pino')).default;
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const client = new Redis(redis.url, { commandTimeout: 1500, maxRetriesPerRequest: 1, enableOfflineQueue: false });
  t.teardown(() => client.disconnect());
  await new Promise((r) => client.once('ready', r));
  const retries = new RetryQueue({ minDelayMs: 20, maxDelayMs: 100 });
  t.teardown(() => retries.close());
  const slots = new RedisSlots(client as any, 'guard:', false, pino({ level: 'silent' }), 30_000, retries);
  const admin = new Redis(redis.url);
  t.teardown(() => admin.disconnect());
  await admin.config('SET', 'min-replicas-to-write', '1');
  const n = 12_000;
  let refused = 0;
  for (let i = 0; i < n; i += 500) {
    const batch = await Promise.allSettled(Array.from({ length: Math.min(500, n - i) }, () => slots.acquire('acme', 1_000_000)));
    refused += batch.filter((r) => r.status === 'rejected' && /^NOREPLICAS /.test((r.reason as Error).message)).length;
  }
  t.equal(refused, n, 'every acquire refused with NOREPLICAS');
  t.equal(retries.size, 0, 'and no release queued for any of them');
  await admin.config('SET', 'min-replicas-to-write', '0');
  t.equal(await slots.inUse('acme'), 0);

  redis.freeze();
  await t.rejects(slots.acquire('acme', 10));
  for (let i = 0; i < 200 && retries.size === 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 1, 'a timed-out acquire is released once Redis answers');
  redis.thaw();
  for (let i = 0; i < 200 && retries.size > 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 0, 'the release landed');
  t.equal(await slots.inUse('acme'), 0, 'the lease Redis added late is gone');
});

/** A store on its own Redis, guarded as the gateway guards it, with account acme holding 1000. */
async function settling(t: any, settleWaitMs: number) {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const inner = new RedisStore({ url: redis.url, prefix: 'guard-settle:', commandTimeoutMs: 300 });
  t.teardown(() => inner.close());
  await inner.ready();
  const retries = new RetryQueue({ minDelayMs: 20, maxDelayMs: 100 });
  t.teardown(() => retries.close());
  const store = new GuardedStore(inner, retries, { settleWaitMs });
  await store.createAccount({ id: 'acme', plan: 'free', balance_units: 1000 });
  await store.hold(hold('r1'));
  const settlement = { account: 'acme', requestId: 'r1', units: 120, promptTokens: 40, completionTokens: 60, day: DAY, month: DAY.slice(0, 7) };
  const ledger = async () => {
    const usage = await store.accountUsage('acme', DAY, DAY.slice(0, 7));
    return { balance: (await store.getAccount('acme'))!.balance_units, held: usage.held_units, requests: usage.day.requests, units: usage.day.units };
  };
  return { redis, inner, retries, store, settlement, ledger };
}

t.test('a settle Redis stalls on is asked again until Redis answers: applied once, its charge reported', async (t) => {
  const { redis, store, settlement, ledger } = await settling(t, 5000);
  redis.freeze();
  const started = Date.now();
  const settled = store.settle(settlement);
  await new Promise((r) => setTimeout(r, 1500)); // five store timeouts
  redis.thaw();
  const result = await settled;
  t.ok(Date.now() - started >= 1400, 'it waited for Redis');
  t.match(result, { charged_units: 120, balance_units: 880, available_units: 880 }, 'with what the store applied (the first settle, run when Redis resumed)');
  t.strictSame(await ledger(), { balance: 880, held: 0, requests: 1, units: 120 }, 'debited once, hold gone');
});

t.test('a settle whose connection is lost in flight is asked again on the next one: applied once', async (t) => {
  const { redis, inner, store, settlement, ledger } = await settling(t, 5000);
  redis.freeze();
  const settled = store.settle(settlement);
  await new Promise((r) => setTimeout(r, 100));
  (inner.client as unknown as { stream: { destroy(): void } }).stream.destroy();
  await new Promise((r) => setTimeout(r, 200));
  redis.thaw();
  t.match(await settled, { charged_units: 120, balance_units: 880 });
  t.strictSame(await ledger(), { balance: 880, held: 0, requests: 1, units: 120 }, 'debited once');
});

t.test('past settleWaitMs: a 503 (StoreUnavailableError), and the debit Redis applies late is given back', async (t) => {
  const { redis, retries, store, settlement, ledger } = await settling(t, 400);
  redis.freeze();
  const started = Date.now();
  await t.rejects(store.settle(settlement), StoreUnavailableError);
  const took = Date.now() - started;
  t.ok(took >= 400 && took < 1500, `within settleWaitMs and a store timeout (${took} ms)`);
  // The undoing is tried at once, times out in turn, and then waits in the queue.
  for (let i = 0; i < 200 && retries.size === 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 1, 'its undoing waits for Redis');
  await store.release('acme', 'r1');
  redis.thaw();
  for (let i = 0; i < 200 && retries.size > 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 0, 'and lands');
  t.strictSame(await ledger(), { balance: 1000, held: 0, requests: 0, units: 0 }, 'nothing debited in the end, nothing counted, no hold');
  t.match(await store.settle(settlement), { applied: false, charged_units: 0, balance_units: 1000 }, 'the request id stays settled with nothing');
});

t.test('a settle Redis refuses outright is a 503 at once, with nothing to undo', async (t) => {
  const { redis, retries, store, settlement, ledger } = await settling(t, 5000);
  const admin = new Redis(redis.url);
  t.teardown(() => admin.disconnect());
  await admin.config('SET', 'min-replicas-to-write', '1');
  const started = Date.now();
  await t.rejects(store.settle(settlement), StoreUnavailableError);
  t.ok(Date.now() - started < 250, 'not asked again: NOREPLICAS proves it was not applied');
  t.equal(retries.size, 0, 'nothing queued');
  await admin.config('SET', 'min-replicas-to-write', '0');
  t.match(await ledger(), { balance: 1000, requests: 0 });
});
