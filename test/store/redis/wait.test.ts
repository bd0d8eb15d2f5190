// store.wait_replicas when the replicas do not confirm (here: a Redis with none): each waited
// write rejects within wait_timeout_ms. The write itself stays applied on the primary, once: a
// repeat (same request id, same idempotency key) never applies it twice. A request whose debit
// stays unconfirmed past store.settle_wait_ms is a 503 service_unavailable with Retry-After, its
// hold released and its debit given back (a 503 is never debited). With the server's
// min-replicas-to-write, the primary refuses instead, and nothing at all is consumed. The script
// and its WAIT leave in one write; a connection lost between their answers fails at once.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { keyIdOf, sha256Hex } from '../../../lib/store/digest.js';
import { RedisStore } from '../../../lib/store/redis/store.js';
import { ReplicaWait, ReplicaWaitError } from '../../../lib/store/redis/wait.js';
import { startGateway } from '../../helpers/gateway.js';
import { startRedis } from '../../helpers/redis.js';
import { socketWrites, storeClient } from '../../helpers/store-client.js';
import { account, accountWhenReady, chat, walletConfig } from '../../helpers/wallet-load.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

const UNAVAILABLE = { message: 'The account store is unavailable; retry shortly.', type: 'server_error', param: null, code: 'service_unavailable' };

t.test('store: a waited write no replica confirms rejects in time, applied once', async (t) => {
  const store = await RedisStore.open({ url: redis.url, prefix: `tgw:${randomUUID()}:`, commandTimeoutMs: 500, waitReplicas: 1, waitTimeoutMs: 100 });
  t.teardown(() => store.close());
  await store.createAccount({ id: 'a', plan: 'free', balance_units: 100 });
  const day = '2026-11-23';
  const month = '2026-11';
  t.ok((await store.hold({ account: 'a', requestId: 'r1', units: 30, ttlMs: 60_000, day, month, quotas: { requests_per_day: null, tokens_per_day: null, units_per_month: null } }))?.ok,
    'holds are not waited for');

  const settle = () => store.settle({ account: 'a', requestId: 'r1', units: 25, promptTokens: 1, completionTokens: 2, day, month });
  let started = Date.now();
  await t.rejects(settle(), ReplicaWaitError);
  const took = Date.now() - started;
  t.ok(took >= 90 && took < 500, `rejected after the wait timeout, within the command timeout (${took} ms)`);
  t.equal((await store.getAccount('a'))?.balance_units, 75, 'applied on the primary');
  await t.rejects(settle(), /confirmed by 0 of 1 replicas/, 'a repeat is still unconfirmed');
  t.equal((await store.getAccount('a'))?.balance_units, 75, 'and applied once');
  t.equal((await store.accountUsage('a', day, month)).day.requests, 1);

  started = Date.now();
  await t.rejects(store.addCredits('a', 10, 'k1'), ReplicaWaitError);
  await t.rejects(store.addCredits('a', 10, 'k1'), ReplicaWaitError);
  t.equal((await store.getAccount('a'))?.balance_units, 85, 'a credit retried with its idempotency key applies once');

  const d = sha256Hex('tg_wait_key');
  await store.createKey({ id: keyIdOf(d), account: 'a', digest: d });
  await t.rejects(store.revokeKey(keyIdOf(d)), ReplicaWaitError);
  t.type((await store.keyByDigest(d))?.revoked_at, 'number', 'the revocation applied on the primary');
  await t.rejects(store.revokeSession('s1'), ReplicaWaitError);
  t.equal(await store.isSessionRevoked('s1'), true);
});

t.test('store: an audited write no replica confirms: applied with its event, which the log lists once', async (t) => {
  const store = await RedisStore.open({ url: redis.url, prefix: `tgw:${randomUUID()}:`, commandTimeoutMs: 500, waitReplicas: 1, waitTimeoutMs: 100 });
  t.teardown(() => store.close());
  await store.createAccount({ id: 'a', plan: 'free', balance_units: 100 });
  const event = { at: Date.now(), actor: 'admin-token', role: 'admin', action: 'POST /admin/accounts/{id}/credits', target: 'a', ip: '', request_id: 'waited-credit' };
  await t.rejects(store.addCredits('a', 10, 'k1', event), ReplicaWaitError, 'unconfirmed: a 503 for the client');
  t.equal((await store.getAccount('a'))?.balance_units, 110, 'applied on the primary');
  for (let i = 0; i < 2; i++) {
    t.strictSame((await store.listAudit({ since: 0, limit: 10 })).events.map((e) => e.request_id), ['waited-credit'], 'with its event, listed once (its move unconfirmed too)');
  }
});

t.test('the script and its WAIT: one write on one socket; the connection lost after the script, a ReplicaWaitError at once', async (t) => {
  const { client, admin } = await storeClient(t, redis.url, 'tgw-cut');
  const key = `tgw-cut:${randomUUID()}`;
  // No replica: the WAIT blocks for its whole 2 s.
  const wait = new ReplicaWait([client], 1, 2000, 3000);
  const writes = socketWrites(client);
  const started = Date.now();
  const outcome = wait.eval('return redis.call("INCR", KEYS[1])', [key], []).then(() => 'confirmed', (err: Error) => err);
  // The script is answered (applied); the WAIT is not yet; then the connection is lost.
  while (await admin.get(key) !== '1') await new Promise((resolve) => setTimeout(resolve, 5));
  // and its answer has reached the client: only the WAIT is left in ioredis's queue.
  const queue = (client as unknown as { commandQueue: { length: number } }).commandQueue;
  while (queue.length > 1) await new Promise((resolve) => setTimeout(resolve, 1));
  t.equal(writes.count, 1, 'the script and the WAIT went out in one write');
  (client as unknown as { stream: { destroy(): void } }).stream.destroy();
  const err = await outcome;
  const took = Date.now() - started;
  t.ok(err instanceof ReplicaWaitError, `a ReplicaWaitError: ${String(err)}`);
  t.match((err as Error).message, /^applied on the primary, not confirmed by replicas: Connection lost before Redis answered$/);
  t.ok(took < 1500, `at once, not at the WAIT's or the command's timeout (${took} ms)`);
  t.equal(await admin.get(key), '1', 'applied once, never resent');
});

t.test('gateway: 503 service_unavailable with Retry-After, hold released, the unconfirmed debit given back', async (t) => {
  const gw = await startGateway(walletConfig({ url: redis.url, prefix: `tgw-gw:${randomUUID()}:`, timeout_ms: 500, wait_replicas: 1, wait_timeout_ms: 100, settle_wait_ms: 300 }));
  t.teardown(() => gw.close());
  const before = await accountWhenReady(gw);
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: 'Bearer tg_demo_0000000000000000', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'priced', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 5 }),
  });
  t.equal(res.status, 503);
  t.equal(res.headers.get('retry-after'), '1');
  t.equal(res.headers.get('retry-after-ms'), '1000');
  const id = res.headers.get('x-request-id');
  t.strictSame(await res.json(), { ...UNAVAILABLE, request_id: id, error: UNAVAILABLE }, 'the contract envelope');
  let after = await account(gw);
  for (let i = 0; i < 100 && (after.held_units !== 0 || after.balance_units !== before.balance_units); i++) {
    await new Promise((r) => setTimeout(r, 20));
    after = await account(gw);
  }
  t.equal(after.held_units, 0, 'the hold is released');
  t.equal(after.balance_units, before.balance_units, 'the debit applied on the primary is given back: a 503 is never debited');
  t.equal(after.usage.day.requests, before.usage.day.requests, 'and not counted');
});

t.test('gateway + min-replicas-to-write: the primary refuses, nothing is consumed', async (t) => {
  const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  t.teardown(async () => { await admin.config('SET', 'min-replicas-to-write', '0'); admin.disconnect(); });
  const prefix = `tgw-min:${randomUUID()}:`;
  // The account is seeded first; then the primary (without a replica) refuses writes.
  const gw = await startGateway(walletConfig({ url: redis.url, prefix, timeout_ms: 500, wait_replicas: 1, wait_timeout_ms: 100 }));
  t.teardown(() => gw.close());
  const before = await accountWhenReady(gw);
  await admin.config('SET', 'min-replicas-to-write', '1');
  const outcomes = await Promise.all([chat(gw), chat(gw), chat(gw)]);
  for (const o of outcomes) {
    t.equal(o.status, 503);
    t.equal(o.code, 'service_unavailable');
    t.equal(o.retryAfter, '1');
  }
  const after = await accountWhenReady(gw);
  t.equal(after.balance_units, before.balance_units, 'wallet unchanged');
  t.equal(after.held_units, 0, 'nothing held');
  t.equal(after.usage.day.requests, before.usage.day.requests, 'nothing debited');
});
