// Usage totals kept as records are written (lib/store/usage-totals.ts), in every store: memory,
// memory with a path (totals rebuilt from the day files on open), Redis, and Redis Cluster (the
// totals live in each hour's slot, written by the record's own script). A property over
// generated record sets (writes repeated with the same write id, sequentially and at once):
// usageHourly and usageTop equal the sums of the records the store returns, per hour, per
// account, key and model; hour and day boundaries; retention; a reopened store keeps its
// totals; listAccounts pages.

import t from 'tap';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { MemoryUsageLog } from '../../lib/store/memory/usage-columns.js';
import { FileUsageLog } from '../../lib/store/memory/usage-files.js';
import { counterKey, totalsKeys } from '../../lib/store/redis/totals-hours.js';
import type { HourTotals, Store, TopRow, TotalsDimension, UsageRecord } from '../../lib/store/types.js';
import { DAY_MS } from '../../lib/store/usage-records.js';
import { HOUR_MS, spans } from '../../lib/store/usage-totals.js';
import { startRedis } from '../helpers/redis.js';
import { holds } from '../property/arbitraries.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-totals-'));
  dirs.push(dir);
  return dir;
}

const redis = await startRedis();
t.teardown(() => redis.stop());
const cluster = redis.external ? undefined : await startRedis({ cluster: true });
t.teardown(() => cluster?.stop());
let prefixes = 0;

interface Opened { store: Store; reopen?: () => Promise<Store> }
interface Kind { name: string; open(retentionDays?: number): Promise<Opened> }

const kinds: Kind[] = [
  { name: 'memory', open: async (days) => ({ store: new MemoryStore({ path: null, usageRetentionDays: days }) }) },
  {
    name: 'memory with a path',
    open: async (days) => {
      const dir = await tempDir();
      let s = await MemoryStore.open({ path: dir, usageRetentionDays: days, fsyncMs: 0 });
      return { store: s, reopen: async () => { await s.close(); s = await MemoryStore.open({ path: dir, usageRetentionDays: days }); return s; } };
    },
  },
  {
    name: 'redis',
    open: async (days) => {
      const s = new RedisStore({ url: redis.url, prefix: `totals${prefixes++}:`, usageRetentionDays: days, commandTimeoutMs: 10_000 });
      await s.ready();
      return { store: s };
    },
  },
];
if (cluster !== undefined) {
  kinds.push({
    name: 'redis cluster',
    open: async (days) => {
      // A cluster-enabled server refuses a script whose keys are in two slots; braces in the
      // prefix: the totals still share their hour's slot.
      const s = new RedisStore({ url: cluster.url, prefix: `tg{c${prefixes++}:`, usageRetentionDays: days, commandTimeoutMs: 10_000 });
      await s.ready();
      return { store: s };
    },
  });
}

function rec(i: number, at: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `r-${i}`, at, account: 'a', key_id: 'key_a1', team: null, model: 'm', provider: 'p', target: null, route: '/v1/chat/completions',
    status: 200, prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 1, ttft_ms: null,
    queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

/** Every record the store returns (the records are what the totals must sum). */
async function recordsOf(s: Store, since: number): Promise<UsageRecord[]> {
  const out: UsageRecord[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await s.usageRecords({ since, limit: 1000, cursor });
    out.push(...page.records);
    if (page.next_cursor === null) return out;
    cursor = page.next_cursor;
  }
}

/** The hourly series and tops computed from records, as the stores must answer them. */
function expectedHourly(records: UsageRecord[], since: number, until: number, account?: string): HourTotals[] {
  const from = Math.ceil(since / HOUR_MS);
  const to = Math.max(from, Math.ceil(until / HOUR_MS));
  const rows: HourTotals[] = [];
  for (let h = from; h < to; h++) {
    const row = { hour: h * HOUR_MS, requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
    for (const r of records) {
      if (Math.floor(r.at / HOUR_MS) !== h || (account !== undefined && r.account !== account)) continue;
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

function expectedTop(records: UsageRecord[], by: TotalsDimension, since: number, until: number, limit: number, account?: string): TopRow[] {
  const from = Math.ceil(since / HOUR_MS) * HOUR_MS;
  const to = Math.ceil(until / HOUR_MS) * HOUR_MS;
  const sums = new Map<string, TopRow>();
  for (const r of records) {
    if (r.at < from || r.at >= to || (account !== undefined && r.account !== account)) continue;
    const id = by === 'account' ? r.account : by === 'key' ? r.key_id : r.model;
    if (id === null) continue;
    const row = sums.get(id) ?? { id, requests: 0, units: 0 };
    row.requests++;
    row.units += r.units;
    sums.set(id, row);
  }
  return [...sums.values()].sort((a, b) => b.units - a.units || (a.id < b.id ? -1 : 1)).slice(0, limit);
}

t.test('range helpers', async (t) => {
  t.strictSame(spans(0, 24), { days: [0], hours: [] });
  t.strictSame(spans(23, 49), { days: [1], hours: [23, 48] });
  t.strictSame(spans(1, 5), { days: [], hours: [1, 2, 3, 4] });
  t.strictSame(spans(5, 5), { days: [], hours: [] });
});

const ACCOUNTS = ['a', 'b', 'c'];
const MODELS = ['m1', 'm2', 'm3'];
const STATUSES = [200, 200, 200, 400, 429, 499, 500, 503];

for (const kind of kinds) {
  t.test(kind.name, async (t) => {
    t.test('property: totals equal the sums of the records, each write counted once', async (t) => {
      const day0 = Math.floor(Date.now() / DAY_MS) * DAY_MS;
      // Records from 3 hours before a UTC midnight to 3 hours after it (yesterday's), so
      // hours and days both have boundaries inside.
      const start = day0 - 3 * HOUR_MS;
      const record = fc.record({
        account: fc.constantFrom(...ACCOUNTS),
        key: fc.constantFrom(null, 'k1', 'k2'),
        model: fc.constantFrom(...MODELS),
        status: fc.constantFrom(...STATUSES),
        prompt_tokens: fc.nat(5000),
        completion_tokens: fc.nat(5000),
        units: fc.oneof(fc.nat(1000), fc.constant(0), fc.integer({ min: 2 ** 40, max: 2 ** 41 })),
        offset: fc.oneof(fc.integer({ min: 0, max: 6 * HOUR_MS - 1 }), fc.constantFrom(0, HOUR_MS - 1, HOUR_MS, 3 * HOUR_MS - 1, 3 * HOUR_MS)),
        // 0: written once; 1: written again after it landed; 2: written twice at once.
        repeat: fc.constantFrom(0, 0, 0, 1, 2),
      });
      await holds(t, `${kind.name}: totals`, fc.asyncProperty(fc.array(record, { minLength: 1, maxLength: 40 }), async (gen) => {
        const { store } = await kind.open();
        try {
          const written = gen.map((g, i) => rec(i, start + g.offset, {
            account: g.account, key_id: g.key === null ? null : `key_${g.account}_${g.key}`, model: g.model, status: g.status,
            prompt_tokens: g.prompt_tokens, completion_tokens: g.completion_tokens, units: g.units,
          }));
          await Promise.all(gen.map(async (g, i) => {
            const r = written[i]!;
            const id = `w-${i}`;
            if (g.repeat === 2) await Promise.all([store.recordUsage(r, id), store.recordUsage(r, id)]);
            else await store.recordUsage(r, id);
            if (g.repeat === 1) await store.recordUsage(r, id);
          }));
          const records = await recordsOf(store, start);
          if (records.length !== written.length) throw new Error(`${records.length} records for ${written.length} writes`);
          const since = start - HOUR_MS;
          const until = start + 7 * HOUR_MS;
          const same = (a: unknown, b: unknown, what: string) => {
            if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
          };
          same(await store.usageHourly({ since, until }), expectedHourly(records, since, until), 'hourly');
          for (const account of ACCOUNTS) {
            same(await store.usageHourly({ since, until, account }), expectedHourly(records, since, until, account), `hourly of ${account}`);
          }
          // Ranges of whole days (read from day totals) and of hours around them.
          const ranges: Array<[number, number]> = [[since, until], [day0, day0 + DAY_MS], [day0 - DAY_MS, day0 + DAY_MS], [start + HOUR_MS + 1, start + 4 * HOUR_MS]];
          for (const [s0, u0] of ranges) {
            for (const by of ['account', 'key', 'model'] as const) {
              same(await store.usageTop({ by, since: s0, until: u0, limit: 50 }), expectedTop(records, by, s0, u0, 50), `top ${by} ${s0}..${u0}`);
              same(await store.usageTop({ by, since: s0, until: u0, limit: 2 }), expectedTop(records, by, s0, u0, 2), `top 2 ${by}`);
              same(await store.usageTop({ by, since: s0, until: u0, limit: 50, account: 'b' }), expectedTop(records, by, s0, u0, 50, 'b'), `top ${by} of b`);
            }
          }
        } finally {
          await store.close();
        }
      }), kind.name.startsWith('redis') ? 15 : 25);
    });

    t.test('hours: every hour starting in [since, until), zeros included; the boundaries', async (t) => {
      const { store } = await kind.open();
      t.teardown(() => store.close());
      const h0 = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - 5 * HOUR_MS;
      await store.recordUsage(rec(1, h0 - 1, { units: 1 }));
      await store.recordUsage(rec(2, h0, { units: 10, status: 500 }));
      await store.recordUsage(rec(3, h0 + HOUR_MS - 1, { units: 100, account: 'b', key_id: null }));
      await store.recordUsage(rec(4, h0 + 2 * HOUR_MS, { units: 1000 }));
      const rows = await store.usageHourly({ since: h0, until: h0 + 3 * HOUR_MS });
      t.strictSame(rows.map((r) => [r.hour - h0, r.requests, r.errors, r.units]), [[0, 2, 1, 110], [HOUR_MS, 0, 0, 0], [2 * HOUR_MS, 1, 0, 1000]]);
      // A since inside an hour starts at the next hour; an until inside one includes it.
      t.strictSame((await store.usageHourly({ since: h0 - 1, until: h0 + 1 })).map((r) => r.hour - h0), [0]);
      t.strictSame((await store.usageHourly({ since: h0 + 1, until: h0 + HOUR_MS })).map((r) => r.hour), []);
      t.strictSame((await store.usageHourly({ since: h0, until: h0 + 3 * HOUR_MS, account: 'b' })).map((r) => r.units), [100, 0, 0]);
      t.strictSame(await store.usageHourly({ since: h0, until: h0 + 3 * HOUR_MS, account: 'nobody' }).then((r) => r.map((x) => x.requests)), [0, 0, 0]);
      t.strictSame(await store.usageTop({ by: 'key', since: h0, until: h0 + HOUR_MS, limit: 10 }), [{ id: 'key_a1', requests: 1, units: 10 }], 'a record without a key counts in no key');
      t.strictSame(await store.usageTop({ by: 'account', since: h0 - HOUR_MS, until: h0 + 3 * HOUR_MS, limit: 10 }), [
        { id: 'a', requests: 3, units: 1011 }, { id: 'b', requests: 1, units: 100 },
      ]);
      t.strictSame(await store.usageTop({ by: 'model', since: h0, until: h0 + HOUR_MS, limit: 10, account: 'nobody' }), []);
      await t.rejects(store.usageHourly({ since: h0, until: h0 + 31 * DAY_MS + 1 }), RangeError, 'at most 31 days');
      await t.rejects(store.usageHourly({ since: h0, until: h0 - 1 }), RangeError);
      await t.rejects(store.usageTop({ by: 'colour' as TotalsDimension, since: h0, until: h0 + 1, limit: 1 }), RangeError);
      await t.rejects(store.usageTop({ by: 'key', since: h0, until: h0 + 1, limit: 0 }), RangeError);
    });

    if (kind.name === 'memory with a path') {
      t.test('a reopened store keeps its totals (rebuilt from the day files)', async (t) => {
        const { store, reopen } = await kind.open();
        const h0 = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - 30 * HOUR_MS;
        for (let i = 0; i < 50; i++) await store.recordUsage(rec(i, h0 + i * 1_800_000, { units: i, account: ACCOUNTS[i % 3]!, model: MODELS[i % 2]! }), `w${i}`);
        const q = { since: h0, until: h0 + 30 * HOUR_MS };
        const filtered = (s: Store) => s.usageRecords({ since: h0, limit: 7, account: 'b', model: MODELS[0] });
        const before = [await store.usageHourly(q), await store.usageTop({ ...q, by: 'model', limit: 5 }), await store.usageTop({ ...q, by: 'key', limit: 5, account: 'b' })];
        const pageBefore = await filtered(store);
        t.equal(pageBefore.records.length, 7);
        const again = await reopen!();
        t.teardown(() => again.close());
        const after = [await again.usageHourly(q), await again.usageTop({ ...q, by: 'model', limit: 5 }), await again.usageTop({ ...q, by: 'key', limit: 5, account: 'b' })];
        t.strictSame(after, before);
        t.strictSame(await filtered(again), pageBefore, 'the postings of filtered pages too');
        t.equal((before[0] as HourTotals[]).reduce((n, h) => n + h.requests, 0), 50);
        await again.recordUsage(rec(99, h0 + 1, { units: 7 }));
        t.equal((await again.usageHourly(q))[0]!.units, (before[0] as HourTotals[])[0]!.units + 7, 'and counts on');
      });
    }

    t.test('listAccounts: id order, pages, a prefix', async (t) => {
      const { store } = await kind.open();
      t.teardown(() => store.close());
      const ids = ['b2', 'a', 'b10', 'b1', 'c', 'ab', 'b'];
      for (const id of ids) await store.createAccount({ id, plan: 'free', balance_units: id.length });
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      for (;;) {
        const page = await store.listAccounts({ limit: 3, cursor });
        pages++;
        seen.push(...page.accounts.map((a) => a.id));
        if (page.next_cursor === null) break;
        cursor = page.next_cursor;
      }
      t.strictSame(seen, [...ids].sort());
      t.equal(pages, 3);
      const first = await store.listAccounts({ limit: 10 });
      t.match(first.accounts[0], { id: 'a', plan: 'free', balance_units: 1 });
      t.equal(first.next_cursor, null);
      t.strictSame((await store.listAccounts({ limit: 10, prefix: 'b' })).accounts.map((a) => a.id), ['b', 'b1', 'b10', 'b2']);
      const p1 = await store.listAccounts({ limit: 2, prefix: 'b' });
      t.strictSame(p1.accounts.map((a) => a.id), ['b', 'b1']);
      t.strictSame((await store.listAccounts({ limit: 2, prefix: 'b', cursor: p1.next_cursor! })).accounts.map((a) => a.id), ['b10', 'b2']);
      t.equal((await store.listAccounts({ limit: 2, prefix: 'b', cursor: p1.next_cursor! })).next_cursor, null);
      t.strictSame((await store.listAccounts({ limit: 5, prefix: 'zz' })), { accounts: [], next_cursor: null });
      await t.rejects(store.listAccounts({ limit: 0 }), RangeError);
      await t.rejects(store.listAccounts({ limit: 5, cursor: '!!' }), RangeError);
    });
  });
}

t.test('retention: totals go with their records', async (t) => {
  let now = Date.UTC(2026, 10, 20, 12);
  const clock = () => now;
  const logs = [new MemoryUsageLog(2, clock), await FileUsageLog.open(await tempDir(), { retentionDays: 2, now: clock, fsyncMs: 0 })];
  for (const log of logs) {
    const d0 = Date.UTC(2026, 10, 19);
    await log.record(rec(1, d0 + 5, { units: 5 }));
    await log.record(rec(2, d0 + DAY_MS + 5, { units: 7 }));
    await log.record(rec(3, d0 - 3 * DAY_MS, { units: 11 })); // past retention when written: never kept
    const range = [d0 - 3 * DAY_MS, d0 + 2 * DAY_MS] as const;
    t.strictSame(await log.top('account', ...range, 5, undefined), [{ id: 'a', requests: 2, units: 12 }]);
    now = Date.UTC(2026, 10, 22, 0, 0, 0, 1); // the 19th is wholly past the 2 days
    t.strictSame(await log.top('account', ...range, 5, undefined), [{ id: 'a', requests: 1, units: 7 }]);
    t.equal((await log.hourly(d0, d0 + HOUR_MS, undefined))[0]!.requests, 0);
    t.equal((await log.page({ since: 0, limit: 10 })).records.length, 1, 'as the records');
    now = Date.UTC(2026, 10, 20, 12);
    await log.close();
  }
});

t.test('redis: the totals expire with their hour stream', async (t) => {
  const s = new RedisStore({ url: redis.url, prefix: 'totals-exp:', usageRetentionDays: 3 });
  await s.ready();
  t.teardown(() => s.close());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const at = Date.now() - 2 * HOUR_MS;
  const r = rec(1, at, { status: 503 });
  await s.recordUsage(r, 'x');
  const hourKey = `totals-exp:{usage:${Math.floor(at / HOUR_MS)}}`;
  const streamExpiry = await c.pexpiretime(hourKey);
  t.ok(streamExpiry > Date.now() + 2 * DAY_MS);
  let n = 0;
  for (const k of totalsKeys(hourKey, r)) {
    if ((await c.exists(k)) === 0) continue;
    n++;
    t.equal(await c.pexpiretime(k), streamExpiry, `${k} expires with the stream`);
  }
  t.equal(n, 20, 'the count, and nineteen columns: all, account, key, model, the account\'s models, the account\'s keys, the key\'s models (no team), and the twelve of tags and end users (the record counts as none of either)');
  t.equal(await c.get(counterKey(hourKey)), '1', 'the hour counts its one record');
});

t.test('redis: day totals are summed from the hours once, and again when a late record lands in the day', async (t) => {
  const prefix = `totals-day${Date.now()}:`;
  const s = new RedisStore({ url: redis.url, prefix, commandTimeoutMs: 10_000 });
  await s.ready();
  t.teardown(() => s.close());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const yesterday = Math.floor(Date.now() / DAY_MS) - 1;
  const at = yesterday * DAY_MS + 5 * HOUR_MS;
  const range = { since: yesterday * DAY_MS, until: (yesterday + 1) * DAY_MS, limit: 10 };
  await s.recordUsage(rec(1, at, { units: 5 }), 'd1');
  await s.recordUsage(rec(2, at + HOUR_MS, { units: 7, account: 'b', key_id: 'key_b1' }), 'd2');
  t.strictSame(await s.usageTop({ ...range, by: 'account' }), [{ id: 'a', requests: 1, units: 5 }, { id: 'b', requests: 1, units: 7 }].reverse());
  const meta = await c.get(`${prefix}{usage:day:${yesterday}}:m:account`);
  t.match(meta, /^(\d+,){23}\d+$/, 'the day is summed and kept, with the hour counts it summed');
  const kept = await c.keys(`${prefix}{usage:day:${yesterday}}:t:account:*`);
  t.equal(kept.length, 1);
  t.ok((await c.pexpiretime(kept[0]!)) >= (yesterday + 1) * DAY_MS + 90 * DAY_MS - 1, 'expires with the records of its day');
  // Read from the kept sums: changing them shows (a test of where the answer comes from).
  await c.hset(kept[0]!, 'a', '1 0 0 0 1000');
  t.strictSame((await s.usageTop({ ...range, by: 'account' }))[0], { id: 'a', requests: 1, units: 1000 }, 'the kept day is read');
  await s.recordUsage(rec(3, at + 2 * HOUR_MS, { units: 11 }), 'd3'); // late, into the finished day
  t.strictSame(await s.usageTop({ ...range, by: 'account' }), [{ id: 'a', requests: 2, units: 16 }, { id: 'b', requests: 1, units: 7 }], 'summed again from the hours');
  t.equal((await c.keys(`${prefix}{usage:day:${yesterday}}:t:account:*`)).length, 1, 'the earlier sums are deleted');
  t.strictSame(await s.usageTop({ ...range, by: 'key', account: 'b' }), [{ id: 'key_b1', requests: 1, units: 7 }]);
});

t.test('redis: accounts created before the id index are listed (filled from the plan indexes, once)', async (t) => {
  const prefix = `tg{old${Date.now()}:`;
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const first = new RedisStore({ url: redis.url, prefix, commandTimeoutMs: 10_000 });
  await first.ready();
  for (const [id, plan] of [['x', 'free'], ['a', 'pro'], ['m', 'free']] as const) await first.createAccount({ id, plan, balance_units: 1 });
  await first.close();
  // As an earlier version left them: no id index.
  await c.del(`${prefix}{accounts}`, `${prefix}{accounts}:filled`);
  await c.sadd(`${prefix}{plan:free}`, 'ghost'); // in an index, never created: passed over
  const s = new RedisStore({ url: redis.url, prefix, commandTimeoutMs: 10_000 });
  await s.ready();
  t.teardown(() => s.close());
  t.strictSame((await s.listAccounts({ limit: 10 })).accounts.map((a) => a.id), ['a', 'm', 'x']);
  t.equal(await c.get(`${prefix}{accounts}:filled`), '1', 'done once');
  await s.createAccount({ id: 'b', plan: 'pro', balance_units: 1 });
  t.strictSame((await s.listAccounts({ limit: 2 })).accounts.map((a) => a.id), ['a', 'b']);
});
