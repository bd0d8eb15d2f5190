// What the memory store keeps of a usage write (issue #46): a write id, for WRITE_MARK_MS,
// so that a repeat appends nothing (lib/store/memory/write-marks.ts), and not the record, its
// copy and its promise, which the whole five minutes kept about 600 bytes a request in the old
// generation. And the totals' kept places (lib/store/totals-book.ts), found without a string
// made per record, stay exact past their bound of shapes.

import t from 'tap';
import fc from 'fast-check';
import type { UsageRecord } from '../../../lib/store/types.js';
import { WRITE_MARK_MS } from '../../../lib/store/usage-records.js';
import { WriteMarks } from '../../../lib/store/memory/write-marks.js';
import { MemoryStore } from '../../../lib/store/memory/store.js';
import { MemoryUsageLog } from '../../../lib/store/memory/usage-columns.js';
import { settledMemory } from '../../helpers/heap.js';
import { holds } from '../../property/arbitraries.js';

const NOW = Date.UTC(2026, 11, 7, 12);

function rec(i: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `req-${i}`, at: NOW + (i % 1000), account: 'acme', key_id: 'key_1', team: null, model: 'm', provider: 'p', target: null,
    route: '/v1/chat/completions', status: 200, prompt_tokens: 10, cached_tokens: 0, completion_tokens: 5, units: 15, usage_source: 'upstream',
    duration_ms: 1.5, ttft_ms: null, queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

// First, before other tests leave garbage for the collector to free while it measures.
t.test('a write done keeps its id alone: 20,000 writes with ids cost under 400 bytes each, record included', async (t) => {
  const settled = async (): Promise<number> => {
    const m = await settledMemory();
    return m.heapUsed + m.arrayBuffers;
  };
  const store = await MemoryStore.open({ path: null });
  t.teardown(() => store.close());
  // Write ids as the guard makes them (lib/store/guard.ts): one writer's, numbered.
  const writer = 'a1b2c3d4e5f6';
  await store.recordUsage(rec(-1, { at: Date.now() }), `${writer}.0`);
  const before = await settled();
  const N = 20_000;
  for (let i = 0; i < N; i++) await store.recordUsage(rec(i, { request_id: `req_${(0x5eed0000 + i).toString(16)}${'0'.repeat(20)}`, at: Date.now() }), `${writer}.${i + 1}`);
  const per = ((await settled()) - before) / N;
  // The records' columns take about 200 of these; each write kept about 600 more before.
  t.ok(per < 400, `about ${Math.round(per)} bytes per write`);
  await store.recordUsage(rec(7, { at: Date.now() }), `${writer}.8`);
  const today = Math.floor(Date.now() / 86_400_000) * 86_400_000;
  const totals = await store.usageTotals({ by: [], since: today - 86_400_000, until: today + 86_400_000 });
  t.equal(totals[0]?.requests, N + 1, 'a repeat of a kept id appended nothing');
});

t.test('a repeat within WRITE_MARK_MS appends nothing; one after may append again', async (t) => {
  const real = Date.now;
  let now = NOW;
  Date.now = () => now;
  t.teardown(() => { Date.now = real; });
  const store = await MemoryStore.open({ path: null });
  t.teardown(() => store.close());
  const count = async (): Promise<number> => (await store.usageRecords({ since: 0, limit: 100 })).records.length;
  await store.recordUsage(rec(1, { at: now }), 'w1');
  await Promise.all([store.recordUsage(rec(1, { at: now }), 'w1'), store.recordUsage(rec(2, { at: now }), 'w2'), store.recordUsage(rec(2, { at: now }), 'w2')]);
  t.equal(await count(), 2, 'repeats, sequential and at once, append nothing');
  now += WRITE_MARK_MS - 1;
  await store.recordUsage(rec(1, { at: NOW }), 'w1');
  t.equal(await count(), 2, 'nor a repeat 1 ms short of WRITE_MARK_MS');
  now += 2000;
  await store.recordUsage(rec(1, { at: NOW }), 'w1');
  t.equal(await count(), 3, 'past it (and its second), the id is forgotten');
  const totals = await store.usageTotals({ by: [], since: NOW - (NOW % 3_600_000), until: NOW - (NOW % 3_600_000) + 3_600_000 });
  t.equal(totals[0]?.requests, 3, 'totals count what was appended, once');
});

t.test('WriteMarks: every id is kept at least until the cutoff passes its time, and then forgotten', (t) =>
  holds(t, 'marks', fc.property(
    // Steps of the clock between marks (some back), and when forget is called.
    fc.array(fc.record({ step: fc.oneof(fc.integer({ min: 0, max: 1500 }), fc.constantFrom(0, 1, 999, 1000, -5000)), forget: fc.boolean() }), { minLength: 1, maxLength: 300 }),
    (steps) => {
      const marks = new WriteMarks();
      const times = new Map<string, number>();
      let now = NOW;
      const window = 10_000;
      steps.forEach(({ step, forget }, i) => {
        now += step;
        const id = `w.${i}`;
        marks.add(id, now);
        times.set(id, now);
        if (!forget) return;
        marks.forget(now - window);
        for (const [id, at] of times) {
          // Kept while younger than the window; forgotten within a second after, once those before it are.
          if (at >= now - window && !marks.has(id)) throw new Error(`${id} (at ${at}) forgotten at ${now}`);
        }
      });
      marks.forget(now + 2 * window + 1000 + 5000 * steps.length);
      if (marks.size !== 0) throw new Error(`${marks.size} ids left after every one is past`);
    },
  ), 200));

t.test('WriteMarks: many runs, their arrays cut as they are forgotten', (t) => {
  const marks = new WriteMarks();
  for (let i = 0; i < 10_000; i++) marks.add(`w.${i}`, NOW + i * 100);
  marks.add('w.5', NOW + 5_000_000); // marked already: keeps its time, counted once
  t.equal(marks.size, 10_000);
  marks.forget(NOW + 500_000); // the ids of the first 500 s
  t.equal(marks.size, 5_000);
  t.notOk(marks.has('w.4999'));
  t.ok(marks.has('w.5000'));
  marks.forget(NOW + 999_999);
  t.equal(marks.size, 10, 'the last second stays whole');
  marks.forget(NOW + 1_000_000);
  t.equal(marks.size, 0);
  t.end();
});

t.test('totals stay exact past the bound of kept shapes (4,096), with and without key and team', async (t) => {
  const log = new MemoryUsageLog(90, () => NOW);
  const expected = new Map<string, number>();
  const models = 5000;
  for (let i = 0; i < 3 * models; i++) {
    const model = `m${i % models}`;
    const units = 2 ** 40 + i;
    await log.record(rec(i, { model, units, key_id: i % 3 === 0 ? null : 'key_1', team: i % 2 === 0 ? null : 'team-1' }));
    expected.set(model, (expected.get(model) ?? 0) + units);
  }
  const since = NOW - (NOW % 86_400_000);
  const rows = await log.totals({ by: ['model'], since, until: since + 86_400_000 });
  t.equal(rows.length, models);
  t.ok(rows.every((r) => r.units === expected.get(r.values[0]!) && r.requests === 3), 'every model\'s sums, exact');
  const keys = await log.totals({ by: ['key'], account: 'acme', since, until: since + 86_400_000 });
  t.strictSame(keys.map((r) => [r.values[0], r.requests]), [['key_1', 10_000]], 'records without a key count in no key');
  const teams = await log.totals({ by: ['team'], account: 'acme', since, until: since + 86_400_000 });
  t.strictSame(teams.map((r) => [r.values[0], r.requests]), [['team-1', 7_500]]);
});
