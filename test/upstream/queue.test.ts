// The queue in front of a full fleet (lib/upstream/balance/fair-queue.ts, queue.ts) on its own:
// the order (priority bands, then start-time fair queueing across flows by tokens over weight),
// timeouts, max_queued, a client gone, work conservation, affinity's bounded wait, the
// Retry-After estimate, and the cost of enqueue and dispatch with 10,000 waiting, counted in
// comparisons (and CPU time per operation, reported, not asserted). The gateway-level behaviour
// is pinned in test/upstream/fleet-queue.test.ts.

import t from 'tap';
import fc from 'fast-check';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PlanConfig, QueuePriority } from '../../lib/config/types.js';
import type { KeyPolicy } from '../../lib/auth/controls.js';
import { queuePriority, type Principal } from '../../lib/auth/principal.js';
import { FairQueue, type QueueEntry } from '../../lib/upstream/balance/fair-queue.js';
import { AFFINITY_WAIT_MS, ProviderQueue, type WaitResult } from '../../lib/upstream/balance/queue.js';
import { Replica } from '../../lib/upstream/balance/replica.js';
import { holds } from '../property/arbitraries.js';

interface E extends QueueEntry { name: string }

function entry(name: string, flow: string, cost = 100, weight = 1, priority: QueuePriority = 'normal'): E {
  return { name, flow, cost, weight, priority, start: 0, finish: 0, seq: 0, index: -1 };
}

function drainAll(q: FairQueue<E>): string[] {
  const out: string[] = [];
  for (let e = q.peek(); e !== undefined; e = q.peek()) {
    q.take(e);
    out.push(e.name);
  }
  return out;
}

t.test('one flow is first come, first served; a flood does not starve a trickle', async (t) => {
  const q = new FairQueue<E>();
  for (let i = 0; i < 5; i++) q.push(entry(`a${i}`, 'a'));
  t.strictSame(drainAll(q), ['a0', 'a1', 'a2', 'a3', 'a4']);

  // The flood was served already: the trickle's first goes ahead of the flood's next.
  q.push(entry('a5', 'a'));
  q.push(entry('b0', 'b'));
  t.strictSame(drainAll(q), ['b0', 'a5']);

  // The flood is queued first; the trickle's requests interleave with it from the start.
  const fresh = new FairQueue<E>();
  for (let i = 0; i < 6; i++) fresh.push(entry(`a${i}`, 'a'));
  fresh.push(entry('b0', 'b'));
  fresh.push(entry('b1', 'b'));
  t.strictSame(drainAll(fresh), ['a0', 'b0', 'a1', 'b1', 'a2', 'a3', 'a4', 'a5']);
});

t.test('shares by tokens: a request twice as large takes two turns', async (t) => {
  const q = new FairQueue<E>();
  for (let i = 0; i < 4; i++) q.push(entry(`big${i}`, 'big', 200));
  for (let i = 0; i < 8; i++) q.push(entry(`small${i}`, 'small', 100));
  const order = drainAll(q);
  // Over any prefix, tokens served per flow stay within one request of each other.
  let big = 0;
  let small = 0;
  for (const name of order) {
    if (name.startsWith('big')) big += 200; else small += 100;
    t.ok(Math.abs(big - small) <= 200, `after ${name}: ${big} vs ${small}`);
  }
});

t.test('shares by weight: fair_weight 3 gets three times the tokens', async (t) => {
  const q = new FairQueue<E>();
  for (let i = 0; i < 40; i++) q.push(entry(`h${i}`, 'heavy', 100, 3));
  for (let i = 0; i < 40; i++) q.push(entry(`l${i}`, 'light', 100, 1));
  const first40 = drainAll(q).slice(0, 40);
  const heavy = first40.filter((n) => n.startsWith('h')).length;
  t.ok(heavy >= 29 && heavy <= 31, `heavy took ${heavy} of the first 40 (30 expected)`);
});

t.test("a request's band: its key's priority, else its plan's (a high key of a low plan goes ahead of normal)", async (t) => {
  const plan = (priority: QueuePriority): PlanConfig => ({
    paid: false, requests_per_minute: null, tokens_per_minute: null, max_concurrent: null, priority, fair_weight: 1,
    quotas: { requests_per_day: null, tokens_per_day: null, units_per_month: null },
  });
  const key = (priority: QueuePriority | null): KeyPolicy => ({
    id: 'key_x', expiresAt: null, models: null, patterns: null, ips: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, priority, team: null, tags: [], tagsLocked: false, endUserBudget: null,
  });
  const who = (p: QueuePriority, k?: QueuePriority | null): Principal =>
    ({ accountId: 'a', planName: p, plan: plan(p), credentialId: 'key_x', ...(k === undefined ? {} : { key: key(k) }) });
  t.equal(queuePriority(who('low')), 'low', 'a session (no key): the plan\'s');
  t.equal(queuePriority(who('low', null)), 'low', 'a key without one: the plan\'s');
  t.equal(queuePriority(who('low', 'high')), 'high', 'the key\'s own');
  t.equal(queuePriority(who('high', 'low')), 'low', 'also downwards');
  const q = new FairQueue<E>();
  q.push(entry('plan-low', 'cheap', 100, 1, queuePriority(who('low'))));
  q.push(entry('normal', 'other', 100, 1, queuePriority(who('normal'))));
  q.push(entry('key-high', 'cheap', 100, 1, queuePriority(who('low', 'high'))));
  t.strictSame(drainAll(q), ['key-high', 'normal', 'plan-low']);
});

t.test('priority bands are strict; fairness holds within each', async (t) => {
  const q = new FairQueue<E>();
  q.push(entry('low0', 'x', 1, 1, 'low'));
  q.push(entry('n0', 'a', 100, 1, 'normal'));
  q.push(entry('n1', 'a', 100, 1, 'normal'));
  q.push(entry('high0', 'a', 100000, 1, 'high'));
  q.push(entry('n2', 'b', 100, 1, 'normal'));
  q.push(entry('high1', 'a', 100000, 1, 'high'));
  t.equal(q.depth('high'), 2);
  t.equal(q.depth('normal'), 3);
  t.equal(q.depth('low'), 1);
  t.strictSame(drainAll(q), ['high0', 'high1', 'n0', 'n2', 'n1', 'low0']);
});

t.test('a request that leaves unserved costs its flow nothing', async (t) => {
  const q = new FairQueue<E>();
  const a0 = entry('a0', 'a', 1000);
  q.push(a0);
  q.push(entry('b0', 'b'));
  q.drop(a0);
  t.equal(q.size, 1);
  q.push(entry('a1', 'a'));
  q.push(entry('b1', 'b'));
  t.strictSame(drainAll(q), ['b0', 'a1', 'b1'], 'a1 starts where a0 did, not after it');
  t.throws(() => q.drop(a0), /not queued/);
});

t.test('property: every entry comes out once, bands in order, starts non-decreasing within a band', async (t) => {
  const op = fc.oneof(
    fc.record({ kind: fc.constant('push' as const), flow: fc.constantFrom('a', 'b', 'c', 'd'), cost: fc.integer({ min: 1, max: 5000 }),
      weight: fc.constantFrom(0.5, 1, 2, 7), priority: fc.constantFrom<QueuePriority>('high', 'normal', 'low') }),
    fc.record({ kind: fc.constant('take' as const) }),
    fc.record({ kind: fc.constant('drop' as const), at: fc.nat() }),
  );
  await holds(t, 'fair queue order', fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
    const q = new FairQueue<E>();
    const live: E[] = [];
    const out: E[] = [];
    let n = 0;
    for (const o of ops) {
      if (o.kind === 'push') {
        const e = entry(`e${n++}`, o.flow, o.cost, o.weight, o.priority);
        q.push(e);
        live.push(e);
      } else if (o.kind === 'take') {
        const e = q.peek();
        if (e === undefined) continue;
        // The first is the highest band's smallest start tag.
        const rank = (x: E) => ['high', 'normal', 'low'].indexOf(x.priority);
        for (const other of live) {
          if (rank(other) < rank(e) || (rank(other) === rank(e) && other.start < e.start)) return false;
        }
        q.take(e);
        live.splice(live.indexOf(e), 1);
        out.push(e);
      } else if (live.length > 0) {
        const e = live.splice(o.at % live.length, 1)[0]!;
        q.drop(e);
      }
      if (q.size !== live.length) return false;
    }
    return new Set(out).size === out.length;
  }), 200);
});

t.test('enqueue and dispatch cost O(log n): comparisons per operation with 10,000 waiting', async (t) => {
  const perOp = (n: number) => {
    const q = new FairQueue<E>();
    const flows = 100;
    for (let i = 0; i < n; i++) q.push(entry(`e${i}`, `f${i % flows}`, 50 + (i % 7) * 100, 1 + (i % 3)));
    // Steady state at n waiting: one in, one out.
    const before = q.compares;
    const ops = 2000;
    const t0 = process.cpuUsage();
    for (let i = 0; i < ops; i++) {
      q.push(entry(`x${i}`, `f${i % flows}`, 100));
      q.take(q.peek()!);
    }
    const cpu = process.cpuUsage(t0);
    return { compares: (q.compares - before) / ops, cpuUs: (cpu.user + cpu.system) / ops };
  };
  const small = perOp(100);
  const large = perOp(10_000);
  // log2(10,000) ~ 13.3: a push sifts up at most that far, a take sifts down with two
  // comparisons a level. 100x the requests must cost about +6.6 levels, not 100x.
  t.ok(large.compares <= 3 * Math.log2(10_000) + 4, `${large.compares.toFixed(1)} comparisons per push + take at 10,000 waiting`);
  t.ok(large.compares <= small.compares + 3 * Math.log2(100) + 4, `grows as log n: ${small.compares.toFixed(1)} at 100, ${large.compares.toFixed(1)} at 10,000`);
  t.comment(`CPU per push + take: ${small.cpuUs.toFixed(2)} us at 100 waiting, ${large.cpuUs.toFixed(2)} us at 10,000`);

  // Removal from the middle (a timeout, a client gone) is a heap delete too.
  const q = new FairQueue<E>();
  const all: E[] = [];
  for (let i = 0; i < 10_000; i++) { const e = entry(`e${i}`, `f${i % 100}`); q.push(e); all.push(e); }
  const before = q.compares;
  for (let i = 0; i < 1000; i++) q.drop(all[(i * 7919) % 10_000]!);
  t.ok((q.compares - before) / 1000 <= 3 * Math.log2(10_000) + 4, 'a drop is O(log n)');
});

/** A provider queue over `n` replicas with max_outstanding `max`, and a picker like least_outstanding's. */
function setup(n: number, max: number, config: Partial<ProviderQueue['config']> = {}) {
  const replicas = Array.from({ length: n }, (_v, i) => {
    const r = new Replica(`http://r${i}/v1`);
    r.maxOutstanding = max;
    return r;
  });
  const q = new ProviderQueue('p');
  q.config = { max_wait_ms: 5000, max_queued: 100, fairness: 'account', ...config };
  const pick = () => replicas.filter((r) => r.usable(Date.now())).sort((a, b) => a.outstanding - b.outstanding)[0];
  const end = (r: Replica) => { r.end(0, 'success', false, null); q.drain(); };
  return { replicas, q, pick, end };
}

function waitFor(q: ProviderQueue, pick: () => Replica | undefined, flow: string, extra: Partial<Parameters<ProviderQueue['wait']>[0]> = {}) {
  const w = q.wait({ flow, priority: 'normal', cost: 100, weight: 1, home: undefined, pick, waitMs: 5000, ...extra });
  return { done: w.result, abort: () => w.leave() };
}

t.test('work-conserving: a replica that ends a request takes the next in line at once', async (t) => {
  const { replicas, q, pick, end } = setup(2, 1);
  const first = [waitFor(q, pick, 'x'), waitFor(q, pick, 'x')];
  const r0 = await first[0]!.done as Extract<WaitResult, { slot: unknown }>;
  const r1 = await first[1]!.done as Extract<WaitResult, { slot: unknown }>;
  t.ok('slot' in r0 && 'slot' in r1, 'both went at once');
  t.not(r0.slot.replica, r1.slot.replica);
  t.strictSame(replicas.map((r) => r.outstanding), [1, 1], 'a slot is begun when given');
  const order: string[] = [];
  const waiting = ['a', 'a', 'b'].map((flow, i) => {
    const w = waitFor(q, pick, flow);
    void w.done.then(() => order.push(`${flow}${i}`));
    return w;
  });
  t.equal(q.size, 3);
  end(r0.slot.replica);
  await sleep(0);
  t.strictSame(order, ['a0'], 'dispatched the moment the replica ended one');
  t.equal(q.size, 2);
  end(r1.slot.replica);
  await sleep(0);
  t.strictSame(order, ['a0', 'b2'], 'the other account goes before the flood\'s second');
  for (const r of replicas) end(r);
  await Promise.all(waiting.map((w) => w.done));
  t.equal(q.size, 0);
  t.equal(q.dispatched, 5, 'the two that went at once came through the queue too');
});

t.test('max_wait_ms: refused with a Retry-After from the drain rate; max_queued: refused at once', async (t) => {
  const { q, pick, end, replicas } = setup(1, 1, { max_wait_ms: 80, max_queued: 2 });
  const busy = await waitFor(q, pick, 'a').done;
  t.ok('slot' in busy);
  t.equal(q.retryAfterMs(), 80, 'nothing has left the queue yet: max_wait_ms');
  const late = waitFor(q, pick, 'a', { waitMs: 80 });
  const later = waitFor(q, pick, 'b', { waitMs: 80 });
  const full = await waitFor(q, pick, 'c').done;
  t.match(full, { refused: 'full', waitedMs: 0 });
  const timedOut = await late.done;
  t.match(timedOut, { refused: 'timeout' });
  t.ok(timedOut.waitedMs >= 70, `waited ${timedOut.waitedMs.toFixed(0)} ms`);
  await later.done;
  t.equal(q.size, 0, 'timed-out requests are gone from the queue');
  t.equal(q.refused, 3);
  t.equal(replicas[0]!.outstanding, 1, 'a refused request took no slot');

  // A drain rate of one every ~20 ms: 10 waiting are told about 220 ms, rounded up to 1 s.
  const { q: q2, pick: pick2, end: end2, replicas: rs } = setup(1, 1, { max_wait_ms: 60_000 });
  await waitFor(q2, pick2, 'a').done;
  const ws = Array.from({ length: 20 }, () => waitFor(q2, pick2, 'a'));
  for (let i = 0; i < 10; i++) { await sleep(20); end2(rs[0]!); }
  const est = q2.retryAfterMs();
  t.ok(est >= 1000 && est <= 5000, `estimate ${est} ms with ${q2.size} waiting`);
  for (let i = 0; i < 11; i++) end2(rs[0]!);
  await Promise.all(ws.map((w) => w.done));
  end(replicas[0]!);
});

t.test('a client that leaves while queued leaves at once; its flow is not charged', async (t) => {
  const { q, pick, end, replicas } = setup(1, 1);
  await waitFor(q, pick, 'a').done;
  const gone = waitFor(q, pick, 'a', { cost: 100000 });
  const next = waitFor(q, pick, 'b');
  gone.abort();
  t.match(await gone.done, { gone: true });
  t.equal(q.size, 1);
  end(replicas[0]!);
  t.ok('slot' in (await next.done));
  next.abort();
  t.equal(replicas[0]!.outstanding, 1, 'leaving after the slot was given changes nothing: the caller ends its attempt');
  t.equal(q.size, 0);
});

t.test('affinity: the first in line lets one whose home is free go first, for a bounded time', async (t) => {
  const { replicas, q, pick, end } = setup(2, 1);
  const [r0, r1] = replicas as [Replica, Replica];
  await waitFor(q, pick, 'x').done;
  await waitFor(q, pick, 'x').done;
  const order: string[] = [];
  const a = waitFor(q, pick, 'a', { home: r1 });
  const b = waitFor(q, pick, 'b', { home: r0 });
  void a.done.then(() => order.push('a'));
  void b.done.then(() => order.push('b'));
  end(r0);
  await sleep(0);
  t.strictSame(order, ['b'], 'r0 freed: it went to the request whose home it is');
  end(r0);
  await sleep(0);
  t.strictSame(order, ['b', 'a'], 'and then to the first in line, with no one else for it');
  // Past the bounded wait, the first takes whatever is free.
  const c = waitFor(q, pick, 'c', { home: r1 });
  const d = waitFor(q, pick, 'd', { home: r0 });
  const order2: string[] = [];
  void c.done.then(() => order2.push('c'));
  void d.done.then(() => order2.push('d'));
  await sleep(AFFINITY_WAIT_MS + 20);
  end(r0);
  await sleep(0);
  t.strictSame(order2, ['c'], `after ${AFFINITY_WAIT_MS} ms the first in line takes another replica`);
  end(r1);
  await Promise.all([c.done, d.done]);
});
