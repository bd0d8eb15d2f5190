// A Sentinel client that ioredis gives up for good comes back by itself. ioredis ends a client
// (every command then fails with "Connection is closed.", forever) when a disconnect cuts its
// connect short while it is still asking a sentinel for the primary; its own failover detector
// does that when +switch-master arrives mid-reconnect. Found in CI: after a primary was killed
// under load, both gateways answered 503 for a whole minute on a healthy new primary.
//
// Here the race is made certain instead of likely: the sentinel the store asks first is paused
// (it takes the connection and answers nothing), the primary is killed so that the store's
// connections reconnect and wait on that sentinel, the two others fail over, and the paused one
// resumes only after +switch-master went out.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { RedisStore } from '../../../lib/store/redis/store.js';
import type { Revocation } from '../../../lib/store/types.js';
import { nodeClient, startSentinel, waitFor } from '../../helpers/redis-topology.js';

const topo = await startSentinel(500);
t.teardown(async () => {
  for (let i = 0; i < topo.sentinels.length; i++) topo.resumeSentinel(i);
  await topo.stop();
});

t.test('a client given up mid-failover connects again and serves on the new primary', async (t) => {
  const errors: string[] = [];
  const store = new RedisStore({
    topology: { kind: 'sentinel', name: topo.name, sentinels: topo.sentinels },
    prefix: `revive:${randomUUID()}:`,
    // The sentinels are asked with a timeout of twice this: far wider than the failover.
    commandTimeoutMs: 15_000,
    onError: (err) => errors.push(err.message),
  });
  t.teardown(() => store.close());
  await store.ready(10_000);
  t.equal(await store.createAccount({ id: 'acct', plan: 'free', balance_units: 700 }), true, 'served on the first primary');
  await waitFor(async () => (await nodeClient(topo.replicaPort).then(async (c) => {
    try { return await c.call('EXISTS', `${store.prefix}{acct:acct}`); } finally { c.disconnect(); }
  })) === 1, 5000, 'the account to reach the replica');

  // Sentinel 0 answered the first connect, so a reconnect asks it first.
  topo.pauseSentinel(0);
  // +switch-master ends a failover (get-master-addr-by-name names the promoted replica before).
  const watcher = await nodeClient(Number(topo.sentinels[1]!.split(':')[1]));
  t.teardown(() => watcher.disconnect());
  const switched = new Promise<string>((resolve) => watcher.on('message', (_channel: string, text: string) => resolve(text)));
  await watcher.subscribe('+switch-master');
  // The store's connections close; each reconnect asks the paused sentinel and waits.
  await topo.killPrimary();
  const announced = await Promise.race([switched, sleep(20_000).then(() => 'nothing within 20 s')]);
  t.match(announced, new RegExp(`^${topo.name} 127\\.0\\.0\\.1 ${topo.primaryPort} 127\\.0\\.0\\.1 ${topo.replicaPort}$`), 'the sentinels switched to the replica');
  // The store's reconnect is still waiting on sentinel 0, and its failover detector heard that.
  topo.resumeSentinel(0);

  await waitFor(async () => store.ping().then(() => true, () => false), 15_000, 'the store to answer again');
  t.ok(errors.some((m) => m.includes('Connection is closed')), `ioredis gave the client up on the way (the race this test is for); errors: ${JSON.stringify([...new Set(errors)].slice(0, 6))}`);
  t.equal((await store.getAccount('acct'))?.balance_units, 700, 'the account, read on the new primary');
  t.equal(await store.createAccount({ id: 'later', plan: 'free', balance_units: 5 }), true, 'a write lands on the new primary');
  const onNew = await nodeClient(topo.replicaPort);
  try {
    t.equal(await onNew.call('EXISTS', `${store.prefix}{acct:later}`), 1, 'and it is there');
  } finally {
    onNew.disconnect();
  }

  // The subscriber connection was given up the same way: revocations must still be heard.
  const heard: Revocation[] = [];
  store.onRevoke((r) => heard.push(r));
  const other = new RedisStore({ topology: { kind: 'sentinel', name: topo.name, sentinels: topo.sentinels }, prefix: store.prefix, commandTimeoutMs: 3000 });
  t.teardown(() => other.close());
  await other.ready(10_000);
  const wasHeard = await waitFor(async () => {
    await other.revokeSession('sid-after-failover');
    return heard.some((r) => r.kind === 'session' && r.sid === 'sid-after-failover');
  }, 10_000, 'a revocation').then(() => true, () => false);
  t.ok(wasHeard, 'a revocation published by another instance is heard after the failover');
});
