// The places of a full queue (lib/upstream/balance/shares.ts through queue.ts; CONTRACT sections
// 13 and 21): max_queued shared by weight among the flows waiting now. A flood that filled the
// queue gives places up to a newcomer of another flow, its newest first, until the newcomer's
// flow reaches its share; a higher priority takes the place of the newest request of the lowest
// one (with fairness none: one flow for all); the request that gives its place up is refused
// 'displaced' at once, its timer cleared, no slot taken. A property test drives arrivals, leaves
// and dispatches of flows with weights and priorities against an oracle of the rule: no request
// refused a place its flow's share had room for, each displaced one from a flow above its share
// (or the newcomer's own, of a lower priority), and no waiter lost or answered twice.

import t from 'tap';
import fc from 'fast-check';
import { setTimeout as sleep } from 'node:timers/promises';
import type { QueuePriority } from '../../lib/config/types.js';
import { ProviderQueue, type WaitResult } from '../../lib/upstream/balance/queue.js';
import { Replica } from '../../lib/upstream/balance/replica.js';
import { holds } from '../property/arbitraries.js';

const RANK: Record<QueuePriority, number> = { high: 0, normal: 1, low: 2 };

/** One replica of `slots` places, all taken, in front of a queue of `max` places. */
async function full(max: number, fairness: 'account' | 'key' | 'none' = 'account', slots = 1) {
  const replica = new Replica('http://r0/v1');
  replica.maxOutstanding = slots;
  const q = new ProviderQueue('p');
  q.config = { max_wait_ms: 60_000, max_queued: max, fairness };
  const pick = () => (replica.usable(Date.now()) ? replica : undefined);
  const results = new Map<string, WaitResult>();
  const waits = new Map<string, { leave: () => void }>();
  const wait = (name: string, flow: string, priority: QueuePriority = 'normal', weight = 1) => {
    const w = q.wait({ flow, priority, cost: 100, weight, home: undefined, pick, waitMs: 60_000 });
    waits.set(name, w);
    void w.result.then((r) => { results.set(name, r); });
  };
  for (let i = 0; i < slots; i++) wait(`running${i}`, 'x');
  await sleep(0);
  /** One place on the replica frees: the next in line takes it. */
  const free = async () => { replica.end(0, 'success', false, null); q.drain(); await sleep(0); };
  return { q, replica, wait, results, waits, free };
}

const outcome = (r: WaitResult | undefined) => (r === undefined ? 'waiting' : 'slot' in r ? 'slot' : 'refused' in r ? r.refused : 'gone');

t.test("a flood fills max_queued: another account still gets places, the flood's newest give theirs up, up to an equal share", async (t) => {
  const f = await full(6);
  for (let i = 0; i < 6; i++) f.wait(`a${i}`, 'a');
  f.wait('a6', 'a');
  await sleep(0);
  t.equal(outcome(f.results.get('a6')), 'full', 'the flood alone: its own next one is refused (it holds its whole share)');
  for (let i = 0; i < 4; i++) f.wait(`b${i}`, 'b');
  await sleep(0);
  t.strictSame(['a5', 'a4', 'a3', 'b3'].map((n) => outcome(f.results.get(n))), ['displaced', 'displaced', 'displaced', 'full'],
    'b takes 3 places (its share of 6 with a waiting too), each from the flood\'s newest; its 4th is refused');
  t.strictSame(['a0', 'a1', 'a2', 'b0', 'b1', 'b2'].map((n) => outcome(f.results.get(n))), Array(6).fill('waiting'));
  t.equal(f.q.size, 6);
  const displaced = f.results.get('a5') as Extract<WaitResult, { refused: string }>;
  t.ok(displaced.retryMs >= 1, `with a Retry-After (${displaced.retryMs} ms)`);
  t.equal(f.replica.outstanding, 1, 'no slot taken by the refused');
  t.equal(f.q.refused, 5, 'three displaced and two refused on arrival');
  // The flood asks again: it holds its share, and nothing of its own is of a lower priority.
  f.wait('a7', 'a');
  await sleep(0);
  t.equal(outcome(f.results.get('a7')), 'full');
  // Served in the fair order: the two flows interleave.
  const order: string[] = [];
  for (let i = 0; i < 7; i++) {
    await f.free();
    for (const n of ['a0', 'a1', 'a2', 'b0', 'b1', 'b2']) if (outcome(f.results.get(n)) === 'slot' && !order.includes(n)) order.push(n);
  }
  t.strictSame(order, ['a0', 'b0', 'a1', 'b1', 'a2', 'b2']);
  t.equal(f.q.size, 0);
});

t.test("shares by weight: fair_weight 3 holds three times the places of fair_weight 1", async (t) => {
  const f = await full(8);
  for (let i = 0; i < 8; i++) f.wait(`a${i}`, 'a', 'normal', 1);
  for (let i = 0; i < 8; i++) f.wait(`b${i}`, 'b', 'normal', 3);
  await sleep(0);
  const by = (prefix: string, what: string) => [...f.results].filter(([n, r]) => n.startsWith(prefix) && outcome(r) === what).length;
  t.equal(by('a', 'displaced'), 6, 'the weight-1 flood keeps 2 of 8 places');
  t.equal(by('b', 'full'), 2, 'the weight-3 account gets 6, then is refused');
  t.equal(f.q.size, 8);
  // A third account of weight 4 arrives: shares 8x1/8, 8x3/8, 8x4/8 = 1, 3, 4.
  for (let i = 0; i < 5; i++) f.wait(`c${i}`, 'c', 'normal', 4);
  await sleep(0);
  t.equal(by('c', 'full'), 1, 'c takes 4 places');
  t.equal(by('a', 'displaced'), 7, 'one more from a (2 > 1)');
  t.equal(by('b', 'displaced'), 3, 'three from b (6 > 3)');
  for (let i = 0; i < 9; i++) await f.free();
  t.equal(f.q.size, 0);
});

t.test('a higher priority takes the place of the newest of the lowest; the displaced gets a refusal at once and its timer is gone', async (t) => {
  // fairness none: one flow for all, so only priority moves places.
  const f = await full(3, 'none');
  f.wait('n0', '', 'normal');
  f.wait('l0', '', 'low');
  f.wait('l1', '', 'low');
  f.wait('low-late', '', 'low');
  f.wait('normal-late', '', 'normal');
  await sleep(0);
  t.equal(outcome(f.results.get('low-late')), 'full', 'the same priority as the lowest waiting: refused');
  t.equal(outcome(f.results.get('l1')), 'displaced', 'a normal arrival takes the newest low request\'s place');
  f.wait('h0', '', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('l0')), 'displaced', 'a high one the next low one\'s');
  f.wait('h1', '', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('normal-late')), 'displaced', 'no low left: the newest normal');
  f.wait('h2', '', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('n0')), 'displaced');
  f.wait('h3', '', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('h3')), 'full', 'all high: refused');
  t.equal(f.q.depth('low'), 0);
  t.equal(f.q.depth('high'), 3);
  // A displaced request's max_wait_ms timer was cleared: nothing fires later, no second answer.
  const l1 = f.results.get('l1');
  f.waits.get('l1')!.leave();
  await sleep(0);
  t.equal(f.results.get('l1'), l1, 'leaving after the refusal changes nothing');
  for (let i = 0; i < 3; i++) await f.free();
  t.strictSame(['h0', 'h1', 'h2'].map((n) => outcome(f.results.get(n))), ['slot', 'slot', 'slot']);
  t.equal(f.q.size, 0);
});

t.test('an account at its share may put a higher priority request of its own ahead, not hold more', async (t) => {
  const f = await full(4);
  f.wait('a-low0', 'a', 'low');
  f.wait('a-low1', 'a', 'low');
  f.wait('b0', 'b', 'normal');
  f.wait('b1', 'b', 'normal');
  f.wait('a-high', 'a', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('a-low1')), 'displaced', "a's newest low gives its place to a's high");
  t.strictSame(['a-low0', 'b0', 'b1', 'a-high'].map((n) => outcome(f.results.get(n))), Array(4).fill('waiting'), "b's normal ones keep theirs: a holds its share");
  f.wait('a-high2', 'a', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('a-low0')), 'displaced');
  f.wait('a-high3', 'a', 'high');
  await sleep(0);
  t.equal(outcome(f.results.get('a-high3')), 'full', "nothing of a's own is lower, and b is within its share");
  for (let i = 0; i < 4; i++) await f.free();
  t.equal(f.q.size, 0);
});

t.test('fairness key: the flows are keys (the caller passes the key id), the same rule', async (t) => {
  const f = await full(2, 'key');
  f.wait('k1-0', 'key_1');
  f.wait('k1-1', 'key_1');
  f.wait('k2-0', 'key_2');
  await sleep(0);
  t.equal(outcome(f.results.get('k1-1')), 'displaced');
  t.equal(outcome(f.results.get('k2-0')), 'waiting');
  for (let i = 0; i < 2; i++) await f.free();
  t.equal(f.q.size, 0);
});

type Op =
  | { kind: 'arrive'; flow: number; priority: QueuePriority }
  | { kind: 'leave'; at: number }
  | { kind: 'free' };

t.test('property: arrivals, leaves and dispatches never refuse a place a flow is owed, displace only above a share, never lose or repeat a waiter', async (t) => {
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 8, arbitrary: fc.record({ kind: fc.constant('arrive' as const), flow: fc.integer({ min: 0, max: 4 }), priority: fc.constantFrom<QueuePriority>('high', 'normal', 'low') }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('leave' as const), at: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('free' as const) }) },
  );
  const scenario = fc.record({
    max: fc.integer({ min: 0, max: 10 }),
    flows: fc.integer({ min: 1, max: 4 }),
    slots: fc.integer({ min: 1, max: 3 }),
    fairness: fc.constantFrom<'account' | 'none'>('account', 'account', 'none'),
    weights: fc.array(fc.constantFrom(0.5, 1, 2, 3), { minLength: 5, maxLength: 5 }),
    ops: fc.array(op, { minLength: 20, maxLength: 150, size: 'max' }),
  });
  await holds(t, 'queue places', fc.asyncProperty(scenario, async ({ max, flows: nflows, slots, fairness, weights, ops }) => {
    const replica = new Replica('http://r0/v1');
    replica.maxOutstanding = slots;
    const q = new ProviderQueue('p');
    q.config = { max_wait_ms: 600_000, max_queued: max, fairness };
    const pick = () => (replica.usable(Date.now()) ? replica : undefined);
    interface W { n: number; flow: string; priority: QueuePriority; weight: number; answers: WaitResult[]; leave: () => void }
    const all: W[] = [];
    /** The oracle's queue: waiting requests in arrival order. */
    let waiting: W[] = [];
    let running = 0;
    const fail = (why: string) => { throw new Error(why); };
    const settle = () => {
      for (const w of all) if (w.answers.length > 1) fail(`waiter ${w.n} answered ${w.answers.length} times`);
      const before = waiting;
      waiting = [];
      for (const w of before) {
        const a = w.answers[0];
        if (a === undefined) { waiting.push(w); continue; }
        if ('slot' in a) running++;
        else if ('refused' in a && a.refused === 'timeout') fail(`waiter ${w.n} timed out`);
      }
      if (q.size !== waiting.length) fail(`queue size ${q.size}, oracle ${waiting.length}`);
      if (replica.outstanding !== running) fail(`outstanding ${replica.outstanding}, oracle ${running}`);
      if (running > slots) fail('more running than slots');
      if (waiting.length > Math.max(max, 0)) fail('more waiting than max_queued');
      if (waiting.length > 0 && running < slots) fail('a slot idle while requests wait');
    };
    const flush = async () => { for (let i = 0; i < 3; i++) await Promise.resolve(); };
    for (const o of ops) {
      if (o.kind === 'arrive') {
        const flow = fairness === 'none' ? '' : `f${o.flow % nflows}`;
        const weight = fairness === 'none' ? 1 : weights[o.flow % nflows]!;
        if (waiting.length === 0 && running < slots) {
          // As Attempts.next does: a free replica and no one waiting, no queue at all.
          replica.begin();
          running++;
          all.push({ n: all.length, flow, priority: o.priority, weight, answers: [{ slot: { replica, token: 0 }, waitedMs: 0 }], leave: () => undefined });
          continue;
        }
        // What the rule allows, from the oracle's view before the arrival.
        const wasFull = waiting.length >= max;
        const flows = new Map<string, { held: number; weight: number }>();
        for (const w of waiting) {
          const h = flows.get(w.flow) ?? { held: 0, weight: w.weight };
          h.held++;
          flows.set(w.flow, h);
        }
        let total = weight;
        for (const [id, h] of flows) if (id !== flow) total += h.weight;
        const held = flows.get(flow)?.held ?? 0;
        const owed = (held + 1) * total <= max * weight;
        const above = (id: string) => id !== flow && flows.get(id)!.held * total > max * flows.get(id)!.weight;
        const w: W = { n: all.length, flow, priority: o.priority, weight, answers: [], leave: () => undefined };
        const waitingBefore = [...waiting];
        const handle = q.wait({ flow, priority: o.priority, cost: 100, weight, home: undefined, pick, waitMs: 600_000 });
        w.leave = handle.leave;
        void handle.result.then((r) => { w.answers.push(r); });
        all.push(w);
        waiting.push(w);
        await flush();
        const displaced = waitingBefore.filter((x) => x.answers[0] !== undefined && 'refused' in x.answers[0]);
        const mine = w.answers[0];
        if (!wasFull) {
          if (displaced.length > 0 || (mine !== undefined && 'refused' in mine)) fail('a refusal with room in the queue');
        } else if (mine !== undefined && 'refused' in mine) {
          if (owed) fail(`flow ${flow} refused with ${held} held, its share ${(max * weight) / total}`);
          if (waitingBefore.some((x) => x.flow === flow && RANK[x.priority] > RANK[o.priority])) fail('refused though its flow had a lower request waiting');
          if (displaced.length > 0) fail('refused and displaced both');
        } else {
          if (displaced.length !== 1) fail(`${displaced.length} displaced by one arrival`);
          const v = displaced[0]!;
          if (owed) {
            // The newest of the lowest priority among the flows above their share.
            const candidates = waitingBefore.filter((x) => above(x.flow));
            const lowest = Math.max(...candidates.map((x) => RANK[x.priority]));
            const expected = candidates.filter((x) => RANK[x.priority] === lowest).at(-1);
            if (v !== expected) fail(`displaced ${v.n} (${v.flow}), expected ${expected?.n}`);
          } else {
            const own = waitingBefore.filter((x) => x.flow === flow && RANK[x.priority] > RANK[o.priority]);
            const lowest = Math.max(...own.map((x) => RANK[x.priority]));
            const expected = own.filter((x) => RANK[x.priority] === lowest).at(-1);
            if (v !== expected) fail(`swapped ${v.n}, expected ${expected?.n} of the flow's own`);
          }
        }
      } else if (o.kind === 'leave') {
        if (waiting.length === 0) continue;
        waiting[o.at % waiting.length]!.leave();
        await flush();
      } else {
        if (running === 0) continue;
        replica.end(0, 'success', false, null);
        running--;
        q.drain();
        await flush();
      }
      settle();
    }
    // Everyone still waiting is served in the end, once.
    while (waiting.length > 0 || running > 0) {
      if (running === 0) fail('waiting with nothing running');
      replica.end(0, 'success', false, null);
      running--;
      q.drain();
      await flush();
      settle();
    }
    for (const w of all) if (w.answers.length !== 1) fail(`waiter ${w.n} answered ${w.answers.length} times`);
    return q.size === 0;
  }), 300);
});
