// The memory store's in-memory usage records (no store.path) are held column by column
// (lib/store/memory/usage-columns.ts): a record reads back exactly as written, field for field and in
// the contract's order, across days and pages; and it costs a fraction of the heap an object
// did (a busy gateway keeps 90 days of them).

import t from 'tap';
import fc from 'fast-check';
import type { UsageRecord } from '../../../lib/store/types.js';
import { DAY_MS, validateUsageRecord } from '../../../lib/store/usage-records.js';
import { DayColumns, MemoryUsageLog } from '../../../lib/store/memory/usage-columns.js';
import { settledMemory } from '../../helpers/heap.js';
import { holds } from '../../property/arbitraries.js';

const NOW = Date.UTC(2026, 10, 23, 12);
const FIELDS = ['request_id', 'at', 'account', 'key_id', 'team', 'model', 'provider', 'target', 'route', 'status', 'prompt_tokens',
  'cached_tokens', 'completion_tokens', 'units', 'usage_source', 'duration_ms', 'ttft_ms', 'queue_ms', 'tags', 'end_user'];

// First, before other tests leave garbage for the collector to free while it measures.
t.test('100,000 records cost under 250 bytes each (as objects: about 600)', async (t) => {
  const settled = async (): Promise<number> => {
    const m = await settledMemory();
    return m.heapUsed + m.arrayBuffers;
  };
  const N = 100_000;
  const log = new MemoryUsageLog(90, () => NOW);
  const before = await settled();
  for (let i = 0; i < N; i++) {
    // As the gateway writes them: a fresh request id, fields from a small set, real numbers.
    await log.record({
      request_id: `req_${(0x5eed0000 + i).toString(16)}${'0'.repeat(20)}`, at: NOW - 1000 + (i % 1000), account: `acct-${i % 7}`,
      key_id: i % 5 === 0 ? null : `key_${(i % 40).toString(16).padStart(16, '0')}`, team: i % 3 === 0 ? null : `team-${i % 4}`, model: i % 2 ? 'llama-3-8b' : 'qwen-7b',
      provider: 'local', target: `http://10.0.0.${i % 4}:8000/v1`, route: '/v1/chat/completions', status: i % 50 ? 200 : 429,
      prompt_tokens: 100 + (i % 900), cached_tokens: i % 64, completion_tokens: i % 500, units: 1000 * i, usage_source: 'upstream',
      duration_ms: 12.5 + i / 1000, ttft_ms: i % 3 ? 3.25 + i / 7 : null, queue_ms: i % 4 ? 0 : i % 30_000, tags: i % 5 ? [] : ['a', `t${i % 7}`], end_user: i % 3 ? null : `u${i % 11}`,
    });
  }
  const per = ((await settled()) - before) / N;
  t.ok(per < 250, `about ${Math.round(per)} bytes per record`);
  const page = await log.page({ since: 0, limit: 3, account: 'acct-3' });
  t.strictSame(page.records.map((r) => r.request_id), ['req_5eed0003' + '0'.repeat(20), 'req_5eed000a' + '0'.repeat(20), 'req_5eed0011' + '0'.repeat(20)],
    'and they are all there');
});

const text = fc.oneof(fc.constantFrom('a', 'acct', '/v1/chat/completions', 'llama', ''), fc.string({ unit: 'grapheme', maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 8 }));
const count = fc.oneof(fc.constantFrom(0, 1, 2 ** 31, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER), fc.nat(), fc.maxSafeNat());
const ms = fc.oneof(fc.constantFrom(0, 0.5, 1e-9, 1e300), fc.double({ min: 0, max: 1e12, noNaN: true }));
const record: fc.Arbitrary<UsageRecord> = fc.record({
  request_id: fc.string({ minLength: 1, maxLength: 40 }),
  at: fc.integer({ min: NOW - 3 * DAY_MS, max: NOW }),
  account: fc.string({ minLength: 1, maxLength: 8 }),
  key_id: fc.option(text, { nil: null }),
  team: fc.option(text.filter((s) => s !== ''), { nil: null }),
  model: text,
  provider: text,
  target: fc.option(text, { nil: null }),
  route: text,
  status: fc.oneof(fc.constantFrom(200, 402, 429, 499, 503), fc.integer()),
  prompt_tokens: count,
  cached_tokens: count,
  completion_tokens: count,
  units: count,
  usage_source: fc.constantFrom('upstream', 'counted', 'none'),
  duration_ms: ms,
  ttft_ms: fc.option(ms, { nil: null }),
  queue_ms: count,
  tags: fc.uniqueArray(fc.stringMatching(/^[a-z0-9._:-]{1,64}$/), { maxLength: 8 }),
  end_user: fc.option(text.filter((s) => s !== ''), { nil: null }),
}) as fc.Arbitrary<UsageRecord>;

t.test('records read back exactly as written, in the contract\'s field order, page by page over days', async (t) => {
  await holds(t, 'usage columns round trip', fc.asyncProperty(fc.array(record, { maxLength: 60 }), fc.integer({ min: 1, max: 7 }), async (records, limit) => {
    const log = new MemoryUsageLog(90, () => NOW);
    for (const r of records) {
      validateUsageRecord(r);
      await log.record({ ...r });
    }
    const back: UsageRecord[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages <= records.length; pages++) {
      const page = await log.page({ since: 0, limit, ...(cursor === undefined ? {} : { cursor }) });
      back.push(...page.records);
      if (page.next_cursor === null) break;
      cursor = page.next_cursor;
    }
    // Bucketed by UTC day, in order of writing within a day.
    const expected = [...records].map((r, i) => ({ r, i })).sort((a, b) => Math.floor(a.r.at / DAY_MS) - Math.floor(b.r.at / DAY_MS) || a.i - b.i).map((x) => x.r);
    if (back.length !== expected.length) throw new Error(`${back.length} records back of ${expected.length}`);
    back.forEach((got, i) => {
      if (JSON.stringify(Object.keys(got)) !== JSON.stringify(FIELDS)) throw new Error(`fields ${Object.keys(got).join(',')}`);
      for (const f of FIELDS) {
        const [a, b] = f === 'tags' ? [JSON.stringify((got as any)[f]), JSON.stringify((expected[i] as any)[f])] : [(got as any)[f], (expected[i] as any)[f]];
        if (!Object.is(a, b)) throw new Error(`record ${i}: ${f} ${String((got as any)[f])} != ${String((expected[i] as any)[f])}`);
      }
    });
    const report = await log.report(undefined, 0);
    if (report.requests !== records.length) throw new Error(`report counts ${report.requests}`);
  }), 200);
});

t.test('a record without a known usage_source is refused, and nothing is kept of it', async (t) => {
  const day = new DayColumns();
  const bad = { request_id: 'r', at: NOW, account: 'a', key_id: null, team: null, model: 'm', provider: 'p', target: null, route: '/', status: 200,
    prompt_tokens: 1, cached_tokens: 0, completion_tokens: 1, units: 1, usage_source: 'guessed', duration_ms: 1, ttft_ms: null, queue_ms: 0, tags: [], end_user: null } as unknown as UsageRecord;
  t.throws(() => day.push(bad), { name: 'TypeError', message: /usage_source/ });
  t.equal(day.length, 0);
  day.push({ ...bad, usage_source: 'none' });
  t.equal(day.length, 1);
  t.equal(day.get(0).usage_source, 'none');
});
