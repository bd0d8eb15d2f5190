// The Redis store on a real 3-primary Redis Cluster (store.cluster): the store and metering
// contracts; every account's keys on one node (hash tags), accounts spread over the nodes; a
// loop turn's commands to a node in one write;
// two gateways sharing one wallet exactly; a slot moved under load (each request a 200 or a
// contract 503, the wallet moved by exactly what the 200s charged); store.wait_replicas
// sending WAIT to the primary that owns the account's slot; a script that empties a key while
// its slot migrates; and a primary killed under load, its replica promoted.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { RedisStore } from '../../../lib/store/redis/store.js';
import { connect, retire } from '../../../lib/store/redis/connect.js';
import { startGateway, type TestGateway } from '../../helpers/gateway.js';
import { nodeClient, startCluster } from '../../helpers/redis-topology.js';
import { readsAt } from '../../helpers/store-client.js';
import { accountWhenReady, burst, chat, isStoreFault, walletConfig, type Outcome } from '../../helpers/wallet-load.js';
import { storeContract } from '../contract.js';
import { meteringContract } from '../metering-contract.js';
import { teamsContract } from '../teams-contract.js';
import { auditContract } from '../audit-contract.js';

const cluster = await startCluster();
t.teardown(() => cluster.stop());
const topology = { kind: 'cluster' as const, nodes: cluster.nodes };

async function openFresh() {
  const prefix = `tgc:${randomUUID()}:`;
  let current = await RedisStore.open({ topology, prefix });
  return {
    store: current,
    reopen: async () => {
      await current.close();
      current = await RedisStore.open({ topology, prefix });
      return current;
    },
  };
}

storeContract(t, 'redis cluster', openFresh);
meteringContract(t, 'redis cluster', openFresh);
teamsContract(t, 'redis cluster', openFresh);
auditContract(t, 'redis cluster', openFresh);

async function gateways(t: any, store: Record<string, unknown>, n = 2): Promise<TestGateway[]> {
  const gws: TestGateway[] = [];
  for (let i = 0; i < n; i++) gws.push(await startGateway(walletConfig(store)));
  t.teardown(() => Promise.all(gws.map((g) => g.close())));
  await accountWhenReady(gws[0]!);
  return gws;
}

function sumCharged(outcomes: Outcome[]): number {
  return outcomes.reduce((s, o) => s + (o.status === 200 ? o.charged : 0), 0);
}

t.test('each account keeps all its keys on one node; accounts spread over the three', async (t) => {
  const prefix = `tgc-spread:${randomUUID()}:`;
  const store = await RedisStore.open({ topology, prefix });
  t.teardown(() => store.close());
  const ids = Array.from({ length: 24 }, (_, i) => `acct-${i}`);
  await store.seed(ids.map((id, i) => ({ id, plan: i % 2 === 0 ? 'free' : 'pro', wallet_units: 100, keys: [`tg_spread_${i}`], key_sha256: [] })));
  const day = '2026-11-23';
  for (const id of ids) {
    t.ok((await store.hold({ account: id, requestId: `r-${id}`, units: 5, ttlMs: 60_000, day, month: '2026-11', quotas: { requests_per_day: 10, tokens_per_day: null, units_per_month: null } }))?.ok);
    t.equal((await store.settle({ account: id, requestId: `r-${id}`, units: 3, promptTokens: 1, completionTokens: 2, day, month: '2026-11' }))!.charged_units, 3);
    t.equal((await store.addCredits(id, 1, `k-${id}`))!.balance_units, 98);
    await store.putResponse(id, 'resp_1', '{}', null, 60_000);
  }
  t.equal((await store.accountsOnPlans(['free', 'pro'])).size, 2, 'the plan indexes answer on a cluster');

  // Every key of the prefix, node by node: an account's keys (its `{acct:ID}` tag) on one node.
  const nodeOf = new Map<string, Set<number>>();
  const perNode: number[] = [];
  for (const port of cluster.ports) {
    const c = await nodeClient(port);
    let cursor = '0';
    let count = 0;
    do {
      const [next, keys] = await c.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      for (const k of keys) {
        count++;
        const tag = /\{acct:([^}]*)\}/.exec(k)?.[1];
        if (tag === undefined) continue;
        const set = nodeOf.get(tag) ?? new Set<number>();
        set.add(port);
        nodeOf.set(tag, set);
      }
    } while (cursor !== '0');
    c.disconnect();
    perNode.push(count);
  }
  t.equal(nodeOf.size, ids.length, 'every account has keys');
  t.strictSame([...nodeOf.values()].filter((s) => s.size !== 1), [], 'no account has keys on two nodes');
  t.ok(perNode.every((n) => n > 0), `every node holds some keys (${perNode.join(', ')})`);
});

t.test('two gateways on the cluster share one wallet exactly', async (t) => {
  const gws = await gateways(t, { cluster: cluster.nodes, prefix: `tgc-gw:${randomUUID()}:`, timeout_ms: 1000 });
  const before = await accountWhenReady(gws[1]!);
  const outcomes = await burst(gws, 40);
  t.strictSame(outcomes.filter((o) => o.status !== 200), [], 'every request answered 200');
  const after = await accountWhenReady(gws[1]!);
  const charged = sumCharged(outcomes);
  t.ok(charged > 0, `the requests cost something (${charged} units)`);
  t.equal(before.balance_units - after.balance_units, charged, 'Σ charged = Δ balance, on both instances\' view');
  t.equal(after.usage.day.requests - before.usage.day.requests, 40, 'each request debited once');
  t.equal(after.held_units, 0, 'no hold left');
});

t.test('commands sent to one node in one turn of the event loop leave in one write', async (t) => {
  const client = connect(topology, { connectionName: 'tg-batch', commandTimeout: 2000, connectTimeout: 2000 });
  t.teardown(() => { retire(client); client.disconnect(); });
  const tag = `{tgc-batch:${randomUUID()}}`;
  const { port: owner } = await cluster.ownerOf(tag);
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  t.equal(await client.set(`${tag}:n`, '0'), 'OK', 'the client reaches the cluster');
  const admins = await Promise.all(cluster.ports.map((port) => nodeClient(port)));
  t.teardown(() => admins.forEach((a) => a.disconnect()));
  const reads = () => Promise.all(admins.map(readsAt));
  const before = await reads();
  const replies = await Promise.all([...Array.from({ length: 8 }, () => client.incr(`${tag}:n`)), client.get(`${tag}:n`)]);
  const after = await reads();
  t.same(replies, [1, 2, 3, 4, 5, 6, 7, 8, '8'], 'each its own reply, in the order sent');
  // Each node's delta less the INFO asking for it.
  const delta = Object.fromEntries(cluster.ports.map((port, i) => [port, after[i]! - before[i]! - 1]));
  t.same(delta, Object.fromEntries(cluster.ports.map((port) => [port, port === owner ? 1 : 0])), 'one read, at the slot\'s owner');
});

t.test('a slot moved under load: each request a 200 or a contract 503, the wallet exact', async (t) => {
  const prefix = `tgc-move:${randomUUID()}:`;
  const gws = await gateways(t, { cluster: cluster.nodes, prefix, timeout_ms: 1000 });
  const before = await accountWhenReady(gws[0]!);
  const { port: from, slot } = await cluster.ownerOf(`${prefix}{acct:demo}`);
  const to = cluster.ports.find((p) => p !== from)!;

  const outcomes: Outcome[] = [];
  let moving = true;
  const load = Promise.all(gws.map(async (gw) => {
    // Requests keep coming until the move is over, and a few after.
    for (let after = 0; moving || after < 5; after += moving ? 0 : 1) {
      outcomes.push(...await Promise.all([chat(gw), chat(gw), chat(gw)]));
    }
  }));
  await new Promise((r) => setTimeout(r, 150));
  const moved = await cluster.moveSlot(slot, from, to);
  moving = false;
  await load;
  t.ok(moved > 0, `the account's ${moved} keys moved from ${from} to ${to}`);
  t.equal((await cluster.ownerOf(`${prefix}{acct:demo}`)).port, to, 'the slot is served by the other node now');

  const odd = outcomes.filter((o) => o.status !== 200 && !isStoreFault(o));
  t.strictSame(odd, [], 'nothing but 200 and 503 service_unavailable with Retry-After');
  t.ok(outcomes.every((o) => o.ms < 5000), `none hangs (slowest ${Math.max(...outcomes.map((o) => o.ms))} ms)`);
  const ok = outcomes.filter((o) => o.status === 200).length;
  // How many land in the move's short window depends on the host's load (under CPU contention
  // about half were 503s): that some are served throughout is what the test can hold to.
  t.ok(ok > 0, `served during the move (${ok} of ${outcomes.length})`);
  const after = await accountWhenReady(gws[1]!);
  t.equal(before.balance_units - after.balance_units, sumCharged(outcomes), 'Σ charged by the 200s = Δ balance');
  t.equal(after.usage.day.requests - before.usage.day.requests, ok, 'one debit per 200, none for a 503');
  t.equal(after.held_units, 0, 'no hold left');
  // The first request after the move may still meet the old slot map (a fast 503); within a
  // moment the gateway serves from the new node.
  let late = await chat(gws[0]!);
  for (let i = 0; i < 20 && late.status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
    late = await chat(gws[0]!);
  }
  t.equal(late.status, 200, 'served on the new node after the move');
});

t.test('wait_replicas on a cluster: WAIT goes to the primary owning the account\'s slot', async (t) => {
  const prefix = `tgc-wait:${randomUUID()}:`;
  const { port: owner } = await cluster.ownerOf(`${prefix}{acct:demo}`);
  // The owner of demo's slot gets a replica; the owner of acme's slot, if another node, none.
  await cluster.addReplica(owner);
  // A WAIT window wide enough for a replica on a loaded host (300 ms was not, under CI's load).
  const gws = await gateways(t, { cluster: cluster.nodes, prefix, timeout_ms: 3000, wait_replicas: 1, wait_timeout_ms: 2000 });
  const before = await accountWhenReady(gws[0]!);
  const outcomes = await burst(gws, 10);
  t.strictSame(outcomes.filter((o) => o.status !== 200), [], 'settlements on the replicated primary are confirmed: 200');
  const after = await accountWhenReady(gws[1]!);
  t.equal(before.balance_units - after.balance_units, sumCharged(outcomes), 'Σ charged = Δ balance');

  // Another account whose slot sits on a primary without a replica: its debit cannot be confirmed.
  let other = '';
  for (let i = 0; other === ''; i++) {
    if ((await cluster.ownerOf(`${prefix}{acct:x${i}}`)).port !== owner) other = `x${i}`;
  }
  const admin = { authorization: 'Bearer scale-admin-token', 'content-type': 'application/json' };
  const made = await fetch(`${gws[0]!.url}/admin/accounts`, { method: 'POST', headers: admin, body: JSON.stringify({ id: other, plan: 'free', wallet_units: 100 }) });
  t.equal(made.status, 201);
  const started = Date.now();
  const credit = await fetch(`${gws[0]!.url}/admin/accounts/${other}/credits`, { method: 'POST', headers: admin, body: JSON.stringify({ units: 5, idempotency_key: 'c1' }) });
  t.equal(credit.status, 503, 'a credit no replica confirmed is not reported as done');
  t.equal(((await credit.json()) as any).code, 'service_unavailable');
  t.equal(credit.headers.get('retry-after'), '1');
  t.ok(Date.now() - started < 3000, `within store.timeout_ms (${Date.now() - started} ms)`);
  const again = await fetch(`${gws[1]!.url}/admin/accounts/${other}/credits`, { method: 'POST', headers: admin, body: JSON.stringify({ units: 5, idempotency_key: 'c1' }) });
  t.equal(again.status, 503, 'still unconfirmed on a retry');
  const shown: any = await (await fetch(`${gws[1]!.url}/admin/accounts/${other}`, { headers: admin })).json();
  t.equal(shown.balance_units, 105, 'applied once on the primary, not twice by the retry (idempotency key)');
});

t.test('while its slot migrates, a settle or hold that empties the holds key still applies whole', async (t) => {
  // Regression: a script that deleted a key's last field and touched the key again failed
  // mid-way on a migrating slot ("non local key"), its debit applied and the request a 503.
  const prefix = `tgc-migrating:${randomUUID()}:`;
  const store = await RedisStore.open({ topology, prefix });
  t.teardown(() => store.close());
  const day = '2026-11-23';
  const month = '2026-11';
  const quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
  await store.createAccount({ id: 'mig', plan: 'free', balance_units: 1000 });
  // Every key the scripts touch exists (else Redis answers TRYAGAIN before running them).
  t.ok((await store.hold({ account: 'mig', requestId: 'r0', units: 10, ttlMs: 60_000, day, month, quotas }))?.ok);
  await store.settle({ account: 'mig', requestId: 'r0', units: 10, promptTokens: 1, completionTokens: 1, day, month });
  t.ok((await store.hold({ account: 'mig', requestId: 'short', units: 10, ttlMs: 1, day, month, quotas }))?.ok);

  const { port: from, slot } = await cluster.ownerOf(`${prefix}{acct:mig}`);
  const to = cluster.ports.find((p) => p !== from)!;
  const [src, dst] = [await nodeClient(from), await nodeClient(to)];
  t.teardown(async () => {
    for (const c of [src, dst]) await c.call('CLUSTER', 'SETSLOT', slot, 'STABLE');
    src.disconnect();
    dst.disconnect();
  });
  await dst.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', await src.call('CLUSTER', 'MYID') as string);
  await src.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', await dst.call('CLUSTER', 'MYID') as string);
  await new Promise((r) => setTimeout(r, 5)); // 'short' has expired

  // The holds key holds one expired hold only: purging it empties the key before the new hold lands.
  const held = await store.hold({ account: 'mig', requestId: 'r1', units: 5, ttlMs: 60_000, day, month, quotas });
  t.strictSame(held, { ok: true, available_units: 985 }, 'a hold that purges the only (expired) hold applies');
  t.strictSame((await src.hkeys(`${prefix}{acct:mig}:holds`)).filter((f) => !f.startsWith('#')), ['r1'], 'the expired hold is gone, the new one there');
  const settled = await store.settle({ account: 'mig', requestId: 'r1', units: 7, promptTokens: 1, completionTokens: 1, day, month });
  t.strictSame(settled, { applied: true, charged_units: 7, balance_units: 983, available_units: 983 }, 'the settle that drops the last hold applied whole');
  t.equal((await store.getAccount('mig'))?.balance_units, 983);
});

t.test('a primary killed under load, its replica promoted: followed, no acknowledged debit lost', async (t) => {
  const prefix = `tgc-kill:${randomUUID()}:`;
  const { port: owner } = await cluster.ownerOf(`${prefix}{acct:demo}`);
  const info = async (port: number) => { const c = await nodeClient(port); try { return await c.info('replication'); } finally { c.disconnect(); } };
  let replica = Number(/slave0:ip=[^,]+,port=(\d+)/.exec(await info(owner))?.[1] ?? 0);
  if (replica === 0) replica = await cluster.addReplica(owner);
  // As the README advises beside wait_replicas: a primary without a replica refuses writes.
  for (const port of [owner, replica]) {
    const c = await nodeClient(port);
    await c.config('SET', 'min-replicas-to-write', '1');
    c.disconnect();
  }
  t.teardown(async () => {
    for (const port of [owner, replica]) {
      const c = await nodeClient(port).catch(() => undefined);
      await c?.config('SET', 'min-replicas-to-write', '0').catch(() => undefined);
      c?.disconnect();
    }
  });
  // settle_wait_ms: a debit in flight when the primary dies is asked again for at most 3 s, then
  // answered 503 and undone (its 10 s default would outlast the 6 s "none hangs" bound).
  const gws = await gateways(t, { cluster: cluster.nodes, prefix, timeout_ms: 1000, wait_replicas: 1, wait_timeout_ms: 300, settle_wait_ms: 3000 });
  const before = await accountWhenReady(gws[0]!);

  const outcomes: Outcome[] = [];
  let phase: 'before' | 'failover' | 'after' = 'before';
  let afterOk = 0;
  const load = Promise.all(gws.map(async (gw) => {
    while (phase !== 'after' || afterOk < 20) {
      for (const o of await Promise.all([chat(gw), chat(gw)])) {
        outcomes.push(o);
        if (phase === 'after' && o.status === 200) afterOk++;
      }
      if (phase === 'failover') await new Promise((r) => setTimeout(r, 20));
    }
  }));
  await new Promise((r) => setTimeout(r, 300));
  await cluster.kill(owner);
  phase = 'failover';
  const deadline = Date.now() + 20_000;
  while (!(await info(replica)).includes('role:master')) {
    if (Date.now() > deadline) throw new Error('the replica was not promoted');
    await new Promise((r) => setTimeout(r, 100));
  }
  // The old primary comes back as the new one's replica, so debits can be confirmed again.
  await cluster.restart(owner);
  const synced = Date.now() + 20_000;
  while (!(await info(owner)).includes('master_link_status:up')) {
    if (Date.now() > synced) throw new Error('the old primary did not rejoin as a replica');
    await new Promise((r) => setTimeout(r, 100));
  }
  phase = 'after';
  await load;

  t.strictSame(outcomes.filter((o) => o.status !== 200 && !isStoreFault(o)), [], 'every request a 200 or a contract 503');
  t.ok(Math.max(...outcomes.map((o) => o.ms)) < 6000, `none hangs (slowest ${Math.max(...outcomes.map((o) => o.ms))} ms)`);
  t.ok(afterOk >= 20, `served on the promoted replica (${afterOk} answers)`);
  let after: any;
  const released = Date.now() + 5000;
  for (;;) {
    after = await accountWhenReady(gws[1]!);
    if (after.held_units === 0 || Date.now() > released) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(after.held_units, 0, 'no hold left');
  const acked = outcomes.filter((o) => o.status === 200);
  const landed = after.usage.day.requests - before.usage.day.requests;
  t.ok(landed >= acked.length && landed - acked.length <= 4, `every acknowledged debit kept (${landed} landed, ${acked.length} acknowledged)`);
  t.equal(before.balance_units - after.balance_units, landed * acked[0]!.charged, 'Δ balance = the debits that landed, each once');
});
