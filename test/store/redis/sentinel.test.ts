// The Redis store behind Redis Sentinel (store.sentinel): a primary, its replica and three
// sentinels on loopback. Two gateways with store.wait_replicas: 1 share one wallet exactly; then
// the primary is killed under load: the sentinels promote the replica, the gateways follow by
// themselves, every request in between is a 200 or a contract 503 (none hangs), and no debit a
// 200 reported is lost: the wallet after the failover moved by exactly the debits that landed,
// every 200's among them, each once.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { startGateway, type TestGateway } from '../../helpers/gateway.js';
import { startSentinel, waitFor } from '../../helpers/redis-topology.js';
import { account, accountWhenReady, burst, chat, isStoreFault, walletConfig, type Outcome } from '../../helpers/wallet-load.js';

// min-replicas-to-write 1, as the README advises beside wait_replicas 1: a primary left without
// a replica refuses writes, so a debit it could never have confirmed is not applied at all.
const topo = await startSentinel(500, ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10']);
t.teardown(() => topo.stop());

async function gateways(t: any, store: Record<string, unknown>, n = 2): Promise<TestGateway[]> {
  const gws: TestGateway[] = [];
  for (let i = 0; i < n; i++) gws.push(await startGateway(walletConfig(store)));
  t.teardown(() => Promise.all(gws.map((g) => g.close())));
  for (const g of gws) await accountWhenReady(g);
  return gws;
}

const sentinelStore = (prefix: string) => ({
  sentinel: { name: topo.name, sentinels: topo.sentinels }, prefix, timeout_ms: 1000, wait_replicas: 1, wait_timeout_ms: 400,
  // A debit in flight at the switch is asked again for at most this long, then answered 503 and
  // undone (store.settle_wait_ms; its 10 s default would outlast the 6 s "none hangs" bound).
  settle_wait_ms: 3000,
});

/**
 * The account once its holds are released: every hold a request left behind at the switch is
 * released by the gateway (its release retried until it lands), not left to its TTL. The holds
 * still there and what the gateway said of its retries are told when that fails. (A flood of
 * releases for holds Redis had refused once overflowed the retry queue and pushed out the
 * releases that mattered: lib/store/guard.ts, test/store/guard.test.ts.)
 */
async function released(t: any, gw: TestGateway, prefix: string): Promise<any> {
  let after: any;
  const ok = await waitFor(async () => { after = await account(gw).catch(() => undefined); return after?.held_units === 0; }, 10_000, 'the holds to be released')
    .then(() => true, () => false);
  if (!ok) {
    const c = new Redis({ port: await topo.currentPrimary(), host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await c.connect();
      t.comment(`holds left: ${JSON.stringify(await c.hgetall(`${prefix}{acct:demo}:holds`))}`);
    } finally {
      c.disconnect();
    }
    t.comment(gw.logs().split('\n').filter((l) => /too many store writes|deferred release/.test(l)).join('\n'));
  }
  t.ok(ok, `the holds left at the switch are released (held: ${after?.held_units})`);
  return after;
}

t.test('two gateways behind Sentinel, wait_replicas 1: one wallet, exactly', async (t) => {
  const gws = await gateways(t, sentinelStore(`tgs-share:${randomUUID()}:`));
  const before = await accountWhenReady(gws[0]!);
  const outcomes = await burst(gws, 40);
  t.strictSame(outcomes.filter((o) => o.status !== 200), [], 'every request answered 200');
  const charged = outcomes.reduce((s, o) => s + o.charged, 0);
  t.ok(charged > 0, `the requests cost something (${charged} units)`);
  const after = await accountWhenReady(gws[1]!);
  t.equal(before.balance_units - after.balance_units, charged, 'Σ charged = Δ balance');
  t.equal(after.usage.day.requests - before.usage.day.requests, 40, 'each request debited once');
});

/** How long a load loop runs at most: far past a failover (about 2 s here), short of tap's timeout. */
const LOAD_MS = 60_000;

/** Outcomes counted by status and code, for a failure's message. */
function tally(outcomes: readonly Outcome[]): string {
  const n = new Map<string, number>();
  for (const o of outcomes) {
    const k = o.code === undefined ? String(o.status) : `${o.status} ${o.code}`;
    n.set(k, (n.get(k) ?? 0) + 1);
  }
  return JSON.stringify(Object.fromEntries(n));
}

/** What the gateways logged about the store, for a failure's diagnosis: the last few lines of each. */
function storeLog(gws: readonly TestGateway[]): string {
  return gws.map((g, i) => {
    const lines = g.logs().split('\n').filter((l) => /store/.test(l)).slice(-6);
    return `gateway ${i}:\n${lines.map((l) => `  ${l}`).join('\n')}`;
  }).join('\n');
}

t.test('the primary killed under load: the gateways follow the failover; no acknowledged debit lost', async (t) => {
  const prefix = `tgs-failover:${randomUUID()}:`;
  const gws = await gateways(t, sentinelStore(prefix));
  const before = await accountWhenReady(gws[0]!);
  const unit = await chat(gws[0]!);
  t.equal(unit.status, 200);
  t.ok(unit.charged > 0, `each request costs the same: ${unit.charged} units`);

  type Timed = Outcome & { at: number };
  const outcomes: Timed[] = [unit].map((o) => ({ ...o, at: Date.now() }));
  let phase: 'before' | 'failover' | 'after' = 'before';
  let afterOk = 0;
  // Bounded: gateways that never serve again fail the test below instead of looping forever.
  const stopAt = Date.now() + LOAD_MS;
  t.teardown(() => { phase = 'after'; afterOk = Infinity; });
  const load = Promise.all(gws.map(async (gw) => {
    while ((phase !== 'after' || afterOk < 20) && Date.now() < stopAt) {
      const batch = await Promise.all([chat(gw), chat(gw)]);
      for (const o of batch) {
        outcomes.push({ ...o, at: Date.now() });
        if (phase === 'after' && o.status === 200) afterOk++;
      }
      if (phase === 'failover') await sleep(20);
    }
  }));
  await sleep(300);
  const killedAt = Date.now();
  await topo.killPrimary();
  phase = 'failover';
  await waitFor(async () => (await topo.currentPrimary()) === topo.replicaPort, 15_000, 'the sentinels to promote the replica');
  const promotedAt = Date.now();
  // wait_replicas 1 needs a replica of the new primary: the old one comes back as that, empty.
  await topo.restartPrimaryAsReplicaOf(topo.replicaPort);
  phase = 'after';
  await load;
  t.comment(`promoted ${promotedAt - killedAt} ms after the kill; ${outcomes.length} requests`);

  const odd = outcomes.filter((o) => o.status !== 200 && !isStoreFault(o));
  t.strictSame(odd, [], 'every request a 200 or a 503 service_unavailable with Retry-After');
  const slowest = Math.max(...outcomes.map((o) => o.ms));
  t.ok(slowest < 6000, `none hangs (slowest ${slowest} ms)`);
  t.ok(outcomes.some((o) => o.status === 200 && o.at < killedAt), 'served before the kill');
  t.ok(outcomes.some(isStoreFault), 'refused while there was no primary (or no replica to confirm)');
  t.ok(afterOk >= 20, `both gateways serve again on the new primary (${afterOk} answers; after the promotion: ${tally(outcomes.filter((o) => o.at >= promotedAt))})`);
  if (afterOk < 20) t.comment(storeLog(gws));
  t.ok(outcomes.every((o) => o.status !== 200 || o.charged === unit.charged), 'every 200 charged the same');

  // Releases of holds that failed meanwhile land by themselves once the store is back.
  const after = await released(t, gws[1]!, prefix);
  const acked = outcomes.filter((o) => o.status === 200).length;
  const landed = after.usage.day.requests - before.usage.day.requests;
  const refused = outcomes.filter(isStoreFault).length;
  t.equal(before.balance_units - after.balance_units, landed * unit.charged, 'Δ balance = the debits that landed, each once');
  t.ok(landed >= acked, `no acknowledged debit lost: ${landed} debits landed, ${acked} were acknowledged`);
  // A debit can land unacknowledged only as a 503: in flight when the primary died, or (on a
  // loaded host, at any moment) its WAIT outlasting wait_timeout_ms while the write stays
  // applied, as the contract says. Never more of them than 503s; never one twice (the balance
  // moved by exactly the landed debits above).
  t.ok(landed - acked <= refused, `debits that landed unacknowledged: ${landed - acked}, each a 503 (of ${refused})`);
});

t.test('a manual failover (the primary demoted, not dead) under load: followed, nothing lost', async (t) => {
  // After the test above, the first replica is primary and the old primary its replica.
  const prefix = `tgs-switch:${randomUUID()}:`;
  const gws = await gateways(t, sentinelStore(prefix));
  const before = await accountWhenReady(gws[0]!);
  const primaryBefore = await topo.currentPrimary();
  const outcomes: Outcome[] = [];
  let switched = false;
  let afterOk = 0;
  const stopAt = Date.now() + LOAD_MS;
  t.teardown(() => { switched = true; afterOk = Infinity; });
  const load = Promise.all(gws.map(async (gw) => {
    while ((!switched || afterOk < 20) && Date.now() < stopAt) {
      for (const o of await Promise.all([chat(gw), chat(gw)])) {
        outcomes.push(o);
        if (switched && o.status === 200) afterOk++;
      }
    }
  }));
  await sleep(200);
  await topo.sentinelCommand('FAILOVER', topo.name);
  await waitFor(async () => (await topo.currentPrimary()) !== primaryBefore, 15_000, 'the sentinels to switch the primary');
  switched = true;
  await load;

  t.strictSame(outcomes.filter((o) => o.status !== 200 && !isStoreFault(o)), [], 'every request a 200 or a contract 503');
  t.ok(Math.max(...outcomes.map((o) => o.ms)) < 6000, 'none hangs');
  t.ok(afterOk >= 20, `served on the new primary (${afterOk} answers after the switch; all: ${tally(outcomes)})`);
  if (afterOk < 20) t.comment(storeLog(gws));
  const after = await released(t, gws[1]!, prefix);
  const acked = outcomes.filter((o) => o.status === 200);
  const landed = after.usage.day.requests - before.usage.day.requests;
  const refused = outcomes.filter(isStoreFault).length;
  t.ok(landed >= acked.length, `every acknowledged debit kept (${landed} landed, ${acked.length} acknowledged)`);
  // As above: each unacknowledged one is a 503 (in flight at the switch, or a WAIT that outlasted wait_timeout_ms).
  t.ok(landed - acked.length <= refused, `debits that landed unacknowledged: ${landed - acked.length}, each a 503 (of ${refused})`);
  t.equal(before.balance_units - after.balance_units, landed * acked[0]!.charged, 'Δ balance = the debits that landed, each once');
});
