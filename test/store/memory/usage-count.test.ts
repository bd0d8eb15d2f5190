// The memory store with a path counts its day files on open in the background, newest day
// first (lib/store/memory/usage-files.ts, issue #30): a totals query waits only for the days
// its range covers, a filtered page scans a day not yet counted, and a record written while
// the files are counted is counted exactly once. The count is held at a chosen day through the
// log's `beforeCount` hook (no timing): a 24 h query answers while older days wait; a 30-day
// one waits for them all.

import t from 'tap';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileUsageLog } from '../../../lib/store/memory/usage-files.js';
import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from '../../../lib/store/types.js';
import { DAY_MS } from '../../../lib/store/usage-records.js';
import { HOUR_MS } from '../../../lib/store/usage-totals.js';
import { holds } from '../../property/arbitraries.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-count-'));
  dirs.push(dir);
  return dir;
}

const NOW = Date.UTC(2026, 10, 20, 12, 30);
const TODAY = Math.floor(NOW / DAY_MS);
const clock = (): number => NOW;
const DAYS_30: [number, number] = [NOW - 30 * DAY_MS, NOW + 1];
const HOURS_24: [number, number] = [NOW - DAY_MS, NOW];

let ids = 0;
function rec(at: number, account: string, units: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `r-${ids++}`, at, account, key_id: `key_${account}`, team: null, model: units % 2 === 0 ? 'm-even' : 'm-odd', provider: 'p', target: null,
    route: '/v1/chat/completions', status: units % 5 === 0 ? 503 : 200, prompt_tokens: units, cached_tokens: 0, completion_tokens: 1, units,
    usage_source: 'upstream', duration_ms: 1, ttft_ms: null, queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

function expectedHourly(records: UsageRecord[], since: number, until: number): HourTotals[] {
  const from = Math.ceil(since / HOUR_MS);
  const to = Math.max(from, Math.ceil(until / HOUR_MS));
  const rows: HourTotals[] = [];
  for (let h = from; h < to; h++) {
    const row = { hour: h * HOUR_MS, requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
    for (const r of records) {
      if (Math.floor(r.at / HOUR_MS) !== h) continue;
      row.requests++;
      if (r.status >= 400) row.errors++;
      row.prompt_tokens += r.prompt_tokens;
      row.completion_tokens += r.completion_tokens;
      row.units += r.units;
    }
    rows.push(row);
  }
  return rows;
}

function expectedTop(records: UsageRecord[], by: TotalsDimension, since: number, until: number): TopRow[] {
  const from = Math.ceil(since / HOUR_MS) * HOUR_MS;
  const to = Math.ceil(until / HOUR_MS) * HOUR_MS;
  const sums = new Map<string, TopRow>();
  for (const r of records) {
    if (r.at < from || r.at >= to) continue;
    const id = by === 'account' ? r.account : by === 'key' ? r.key_id! : r.model;
    const row = sums.get(id) ?? { id, requests: 0, units: 0 };
    row.requests++;
    row.units += r.units;
    sums.set(id, row);
  }
  return [...sums.values()].sort((a, b) => b.units - a.units || (a.id < b.id ? -1 : 1)).slice(0, 50);
}

/** Every record a query returns, following next_cursor. */
async function pagesOf(log: FileUsageLog, q: { account?: string; keyId?: string; model?: string }): Promise<UsageRecord[]> {
  const out: UsageRecord[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await log.page({ since: 0, limit: 7, cursor, ...q });
    out.push(...page.records);
    if (page.next_cursor === null) return out;
    cursor = page.next_cursor;
  }
}

/** The records a store holds, in the order the stores return them (by day, then as written). */
function inOrder(records: UsageRecord[]): UsageRecord[] {
  return records.map((r, i) => [r, i] as const)
    .sort(([a, i], [b, j]) => Math.floor(a.at / DAY_MS) - Math.floor(b.at / DAY_MS) || i - j).map(([r]) => r);
}

/** A gate the count's hook waits at for one day: `held` once the count reaches it. */
function holdAt(day: number): { beforeCount(d: number): Promise<void>; order: number[]; held: Promise<void>; release(): void } {
  const order: number[] = [];
  let release!: () => void;
  let reached!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  const held = new Promise<void>((r) => { reached = r; });
  return {
    order, held, release,
    async beforeCount(d) {
      order.push(d);
      if (d !== day) return;
      reached();
      await gate;
    },
  };
}

/** Whether `p` settles within a few turns of the event loop (it could only by not waiting). */
async function settlesSoon(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  p.then(() => { settled = true; }, () => { settled = true; });
  for (let i = 0; i < 50 && !settled; i++) await new Promise<void>((r) => setImmediate(r));
  return settled;
}

/** Records over the last five days (today included), ten a day, three accounts. */
function fiveDays(): UsageRecord[] {
  const out: UsageRecord[] = [];
  for (let back = 4; back >= 0; back--) {
    for (let i = 0; i < 10; i++) {
      const at = Math.min(NOW - 1, (TODAY - back) * DAY_MS + i * 2 * HOUR_MS + 17);
      out.push(rec(at, ['a', 'b', 'c'][i % 3]!, 10 * back + i + 1));
    }
  }
  return out;
}

async function written(records: UsageRecord[]): Promise<string> {
  const dir = await tempDir();
  const log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0 });
  for (const r of records) await log.record(r);
  await log.close();
  return dir;
}

t.test('a 24 h query answers while older days are still to be counted; a 30-day one waits for them', async (t) => {
  const before = fiveDays();
  const dir = await written(before);
  const hold = holdAt(TODAY - 2);
  const log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0, beforeCount: (d) => hold.beforeCount(d) });
  t.teardown(() => log.close());
  await hold.held;
  t.strictSame(hold.order, [TODAY, TODAY - 1, TODAY - 2], 'newest day first, held at the third');

  t.strictSame(await log.hourly(...HOURS_24, undefined), expectedHourly(before, ...HOURS_24), 'the last 24 hours, exact');
  t.strictSame(await log.top('account', ...HOURS_24, 50, undefined), expectedTop(before, 'account', ...HOURS_24));
  t.strictSame(await log.top('key', ...HOURS_24, 50, undefined), expectedTop(before, 'key', ...HOURS_24));
  const yesterday: [number, number] = [(TODAY - 1) * DAY_MS, TODAY * DAY_MS];
  t.strictSame(await log.top('model', ...yesterday, 50, undefined), expectedTop(before, 'model', ...yesterday), 'a whole counted day');

  const month = log.top('account', ...DAYS_30, 50, undefined);
  const twoDaysBack = log.hourly((TODAY - 2) * DAY_MS + HOUR_MS, (TODAY - 2) * DAY_MS + 2 * HOUR_MS, undefined);
  t.equal(await settlesSoon(month), false, 'a 30-day top waits for the days held');
  t.equal(await settlesSoon(twoDaysBack), false, 'an hour of the day held waits for it');

  // Filtered pages: counted days from their postings, the others scanned, in order either way.
  t.strictSame(await pagesOf(log, { account: 'b' }), inOrder(before.filter((r) => r.account === 'b')));
  t.strictSame(await pagesOf(log, { model: 'm-odd', account: 'c' }), inOrder(before.filter((r) => r.model === 'm-odd' && r.account === 'c')));

  hold.release();
  t.strictSame(await month, expectedTop(before, 'account', ...DAYS_30), 'exact once the count completes');
  t.strictSame(await twoDaysBack, expectedHourly(before, (TODAY - 2) * DAY_MS + HOUR_MS, (TODAY - 2) * DAY_MS + 2 * HOUR_MS));
  t.strictSame(hold.order, [TODAY, TODAY - 1, TODAY - 2, TODAY - 3, TODAY - 4]);
  t.strictSame(await log.hourly(...DAYS_30, undefined), expectedHourly(before, ...DAYS_30));
});

t.test('records written while the files are counted are counted once, in every day', async (t) => {
  const before = fiveDays();
  const dir = await written(before);
  const hold = holdAt(TODAY - 2);
  let log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0, beforeCount: (d) => hold.beforeCount(d) });
  await hold.held;
  // Into a counted day, the day held (about to be read), and a day not reached yet.
  const during = [TODAY, TODAY - 1, TODAY - 2, TODAY - 4].flatMap((day, i) => [
    rec(day * DAY_MS + 3 * HOUR_MS + i, 'b', 100 + i), rec(day * DAY_MS + 5 * HOUR_MS + i, 'd', 200 + i),
  ]);
  await Promise.all(during.map((r) => log.record(r)));
  const all = [...before, ...during];
  t.strictSame(await log.hourly(...HOURS_24, undefined), expectedHourly(all, ...HOURS_24), 'the 24 h answer has them, before the older days are counted');
  t.strictSame(await pagesOf(log, { account: 'd' }), inOrder(during.filter((r) => r.account === 'd')), 'a filtered page finds them, counted day or not');
  hold.release();
  for (const by of ['account', 'key', 'model'] as const) t.strictSame(await log.top(by, ...DAYS_30, 50, undefined), expectedTop(all, by, ...DAYS_30), `top by ${by}`);
  t.strictSame(await log.hourly(...DAYS_30, undefined), expectedHourly(all, ...DAYS_30));
  t.strictSame(await pagesOf(log, {}), inOrder(all), 'each record is in its file once');
  t.strictSame(await pagesOf(log, { account: 'b' }), inOrder(all.filter((r) => r.account === 'b')), 'postings in file order after the count');
  await log.close();
  log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0 });
  t.teardown(() => log.close());
  t.strictSame(await log.top('account', ...DAYS_30, 50, undefined), expectedTop(all, 'account', ...DAYS_30), 'the same after the next open');
});

t.test('a query waiting for a day is refused, not left hanging, when the store closes during the count', async (t) => {
  const dir = await written(fiveDays());
  const hold = holdAt(TODAY - 3);
  const log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0, beforeCount: (d) => hold.beforeCount(d) });
  await hold.held;
  const month = log.hourly(...DAYS_30, undefined);
  const closing = log.close();
  hold.release();
  await closing;
  await t.rejects(month, /store closed/);
  t.strictSame(hold.order, [TODAY, TODAY - 1, TODAY - 2, TODAY - 3], 'the count stopped at the close');
});

t.test('property: whatever day the count is held at and whatever is written meanwhile, totals equal the records', async (t) => {
  const record = fc.record({ back: fc.integer({ min: 0, max: 5 }), minute: fc.integer({ min: 0, max: 24 * 60 - 1 }), account: fc.constantFrom('a', 'b', 'c'), units: fc.integer({ min: 0, max: 1000 }) });
  const toRecord = (x: { back: number; minute: number; account: string; units: number }): UsageRecord =>
    rec(Math.min(NOW - 1, (TODAY - x.back) * DAY_MS + x.minute * 60_000), x.account, x.units);
  await holds(t, 'counted once', fc.asyncProperty(
    fc.array(record, { minLength: 1, maxLength: 25 }), fc.array(record, { maxLength: 15 }), fc.integer({ min: 0, max: 5 }),
    async (beforeX, duringX, heldBack) => {
      const before = beforeX.map(toRecord);
      const dir = await written(before);
      const days = new Set(before.map((r) => Math.floor(r.at / DAY_MS)));
      const heldDay = [...days].sort((a, b) => b - a).find((d) => d <= TODAY - heldBack) ?? Math.min(...days);
      const hold = holdAt(heldDay);
      const log = await FileUsageLog.open(dir, { now: clock, fsyncMs: 0, beforeCount: (d) => hold.beforeCount(d) });
      try {
        await hold.held;
        const during = duringX.map(toRecord);
        await Promise.all(during.map((r) => log.record(r)));
        const all = [...before, ...during];
        if (heldDay < TODAY - 1) assert.deepEqual(await log.hourly(...HOURS_24, undefined), expectedHourly(all, ...HOURS_24));
        hold.release();
        assert.deepEqual(await log.hourly(...DAYS_30, undefined), expectedHourly(all, ...DAYS_30));
        assert.deepEqual(await log.top('key', ...DAYS_30, 50, undefined), expectedTop(all, 'key', ...DAYS_30));
        assert.deepEqual(await pagesOf(log, { account: 'a' }), inOrder(all.filter((r) => r.account === 'a')));
      } finally {
        hold.release();
        await log.close();
      }
    },
  ), 25);
});
