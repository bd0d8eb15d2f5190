// Usage reads from totals (CONTRACT section 21, "reads are bounded"; issue #40 finding 3): what
// GET /admin/usage (Store.usageReport) and GET /v1/usage (Store.usageTotals by key and model per
// UTC day) answer equals a reference summed here from the records the store returns, to the
// unit, on every store: memory, memory with a path (and again after a reopen: the totals
// rebuilt from the day files), Redis, a Redis Cluster node behind one URL, a three-primary
// Redis Cluster, and two Redis instances writing and reading each other's records. A property
// over generated record sets (hour and day boundaries, repeated writes, a `since` on the hour,
// inside an hour, before everything), and the count of records each read read back: none for a
// read of whole hours. Then the Redis hours written by a version with other columns (or none):
// summed anew from their records once, exactly, and read from totals after.

import t from 'tap';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { COLUMNS } from '../../lib/store/usage-totals.js';
import { HOUR_SCRIPTS, RedisHours, columnKey, counterKey } from '../../lib/store/redis/totals-hours.js';
import type { Store, UsageRecord, UsageReport, UsageSums } from '../../lib/store/types.js';
import { DAY_MS, ReadCount } from '../../lib/store/usage-records.js';
import { HOUR_MS } from '../../lib/store/usage-totals.js';
import { startRedis } from '../helpers/redis.js';
import { startCluster } from '../helpers/redis-topology.js';
import { holds } from '../property/arbitraries.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-reads-'));
  dirs.push(dir);
  return dir;
}

const redis = await startRedis();
t.teardown(() => redis.stop());
const node = redis.external ? undefined : await startRedis({ cluster: true });
t.teardown(() => node?.stop());
const cluster = redis.external ? undefined : await startCluster(3);
t.teardown(() => cluster?.stop());
let prefixes = 0;

/** A store to write with, the stores to read with (the same, or another instance), and a reopen. */
interface Opened { writers: Store[]; readers: Store[]; reopen?: () => Promise<Store>; close(): Promise<void> }
interface Kind { name: string; open(): Promise<Opened> }

const redisStore = async (options: ConstructorParameters<typeof RedisStore>[0]): Promise<RedisStore> => {
  const s = new RedisStore({ commandTimeoutMs: 10_000, ...options });
  await s.ready();
  return s;
};
const single = (s: Store): Opened => ({ writers: [s], readers: [s], close: () => s.close() });

const kinds: Kind[] = [
  { name: 'memory', open: async () => single(new MemoryStore({ path: null })) },
  {
    name: 'memory with a path',
    open: async () => {
      const dir = await tempDir();
      let s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
      return {
        writers: [s], readers: [s], close: () => s.close(),
        reopen: async () => { await s.close(); s = await MemoryStore.open({ path: dir }); return s; },
      };
    },
  },
  { name: 'redis', open: async () => single(await redisStore({ url: redis.url, prefix: `reads${prefixes++}:` })) },
  {
    name: 'two instances on one redis',
    open: async () => {
      const prefix = `reads${prefixes++}:`;
      const [a, b] = [await redisStore({ url: redis.url, prefix }), await redisStore({ url: redis.url, prefix })];
      return { writers: [a, b], readers: [b, a], close: async () => { await a.close(); await b.close(); } };
    },
  },
];
if (node !== undefined) {
  // A Cluster node behind one URL: reads find out (CROSSSLOT) and send one hour a call.
  kinds.push({ name: 'redis cluster node behind a url', open: async () => single(await redisStore({ url: node.url, prefix: `tg{r${prefixes++}:` })) });
}
if (cluster !== undefined) {
  kinds.push({ name: 'redis cluster of three', open: async () => single(await redisStore({ topology: { kind: 'cluster', nodes: cluster.nodes }, prefix: `reads${prefixes++}:` })) });
}

function rec(i: number, at: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `r-${i}`, at, account: 'a', key_id: 'key_a1', team: null, model: 'm', provider: 'p', target: null, route: '/v1/chat/completions',
    status: 200, prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 1, ttft_ms: null,
    queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

async function recordsOf(s: Store): Promise<UsageRecord[]> {
  const out: UsageRecord[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await s.usageRecords({ since: 0, limit: 1000, cursor });
    out.push(...page.records);
    if (page.next_cursor === null) return out;
    cursor = page.next_cursor;
  }
}

const zero = (): UsageSums => ({ requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 });
function add(m: Map<string, UsageSums>, id: string, r: UsageRecord): void {
  const s = m.get(id) ?? zero();
  s.requests++;
  s.prompt_tokens += r.prompt_tokens;
  s.completion_tokens += r.completion_tokens;
  s.units += r.units;
  m.set(id, s);
}
const sorted = (m: Map<string, UsageSums>) => Object.fromEntries([...m].sort(([a], [b]) => (a < b ? -1 : 1)));

/** GET /admin/usage's answer, summed from the records. */
function expectedReport(records: UsageRecord[], account: string | undefined, since: number): UsageReport {
  const total = new Map<string, UsageSums>();
  const [byModel, byKey, byTeam] = [new Map<string, UsageSums>(), new Map<string, UsageSums>(), new Map<string, UsageSums>()];
  for (const r of records) {
    if (r.at < since || (account !== undefined && r.account !== account)) continue;
    add(total, '', r);
    add(byModel, r.model, r);
    if (r.key_id !== null) add(byKey, r.key_id, r);
    if (r.team !== null) add(byTeam, r.team, r);
  }
  return { ...(total.get('') ?? zero()), by_model: sorted(byModel), by_key: sorted(byKey), by_team: sorted(byTeam) };
}

/** GET /v1/usage's rows of a key (by day, then model), summed from the records. */
function expectedDays(records: UsageRecord[], account: string, key: string, since: number, until: number) {
  const rows = new Map<string, { day: number; model: string; requests: number; errors: number; prompt_tokens: number; completion_tokens: number; units: number }>();
  for (const r of records) {
    if (r.account !== account || r.key_id !== key || r.at < since || r.at >= until) continue;
    const day = Math.floor(r.at / DAY_MS) * DAY_MS;
    const k = `${day} ${r.model}`;
    const row = rows.get(k) ?? { day, model: r.model, requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 };
    row.requests++;
    if (r.status >= 400) row.errors++;
    row.prompt_tokens += r.prompt_tokens;
    row.completion_tokens += r.completion_tokens;
    row.units += r.units;
    rows.set(k, row);
  }
  return [...rows.values()].sort((a, b) => a.day - b.day || (a.model < b.model ? -1 : 1))
    .map(({ day, model, ...s }) => ({ day, values: [model], ...s }));
}

const same = (a: unknown, b: unknown, what: string): void => {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}:\n  got  ${JSON.stringify(a)}\n  want ${JSON.stringify(b)}`);
};

const ACCOUNTS = ['a', 'b'];
const MODELS = ['m1', 'm2', 'm3'];

for (const kind of kinds) {
  t.test(kind.name, async (t) => {
    t.test('property: reports and a key\'s days equal the records\' sums; whole hours read no record', async (t) => {
      const day0 = Math.floor(Date.now() / DAY_MS) * DAY_MS;
      // From 26 hours before yesterday's midnight to 2 hours after it: hours, days, and their edges.
      const start = day0 - DAY_MS - 26 * HOUR_MS;
      const record = fc.record({
        account: fc.constantFrom(...ACCOUNTS),
        key: fc.constantFrom(null, 'k1', 'k2'),
        team: fc.constantFrom(null, null, 't1', 't2'),
        model: fc.constantFrom(...MODELS),
        status: fc.constantFrom(200, 200, 400, 499, 503),
        prompt_tokens: fc.nat(5000),
        completion_tokens: fc.nat(5000),
        units: fc.oneof(fc.nat(1000), fc.integer({ min: 2 ** 40, max: 2 ** 41 })),
        offset: fc.oneof(fc.integer({ min: 0, max: 28 * HOUR_MS - 1 }), fc.constantFrom(0, 2 * HOUR_MS - 1, 2 * HOUR_MS, 26 * HOUR_MS - 1, 26 * HOUR_MS)),
        repeat: fc.constantFrom(0, 0, 0, 1, 2),
      });
      const sinceOf = fc.oneof(
        fc.constant(0),
        fc.constantFrom(start, day0 - DAY_MS, day0 - DAY_MS + 5 * HOUR_MS),
        fc.integer({ min: start, max: start + 28 * HOUR_MS }),
      );
      const cases = kind.name.startsWith('memory') ? 25 : 12;
      await holds(t, `${kind.name}: reads from totals`, fc.asyncProperty(fc.array(record, { minLength: 1, maxLength: 40 }), fc.array(sinceOf, { minLength: 3, maxLength: 3 }), async (gen, sinces) => {
        const opened = await kind.open();
        try {
          const written = gen.map((g, i) => rec(i, start + g.offset, {
            account: g.account, key_id: g.key === null ? null : `key_${g.account}_${g.key}`, team: g.team === null ? null : `${g.account}-${g.team}`,
            model: g.model, status: g.status, prompt_tokens: g.prompt_tokens, completion_tokens: g.completion_tokens, units: g.units,
          }));
          await Promise.all(gen.map(async (g, i) => {
            const w = opened.writers[i % opened.writers.length]!;
            const id = `w-${i}`;
            if (g.repeat === 2) await Promise.all([w.recordUsage(written[i]!, id), w.recordUsage(written[i]!, id)]);
            else await w.recordUsage(written[i]!, id);
            if (g.repeat === 1) await w.recordUsage(written[i]!, id);
          }));
          const check = async (s: Store, where: string) => {
            const records = await recordsOf(s);
            if (records.length !== written.length) throw new Error(`${where}: ${records.length} records for ${written.length} writes`);
            for (const account of [undefined, ...ACCOUNTS]) {
              for (const since of sinces) {
                const got = await s.usageReport(account, since);
                same(got, expectedReport(records, account, since), `${where}: report of ${account ?? 'all'} since ${since - start}`);
                const parts = Object.values(got.by_model).reduce((n, m) => n + m.units, 0);
                if (parts !== got.units) throw new Error(`${where}: by_model sums to ${parts}, the total is ${got.units}`);
              }
            }
            const [since, until] = [day0 - 2 * DAY_MS, day0 + DAY_MS];
            for (const account of ACCOUNTS) {
              for (const key of ['k1', 'k2', 'k3']) {
                const keyId = `key_${account}_${key}`;
                same(await s.usageTotals({ by: ['model'], account, key: keyId, since, until, daily: true }), expectedDays(records, account, keyId, since, until), `${where}: days of ${keyId}`);
              }
            }
            // Reads of whole hours read no record back (once the memory store's count of its
            // files on open is over: a read from 0 waits for every day of it).
            await s.usageReport(undefined, 0);
            const before = s.usageRecordsRead();
            for (const account of [undefined, 'a']) await s.usageReport(account, day0 - DAY_MS);
            await s.usageTotals({ by: ['model'], account: 'a', key: 'key_a_k1', since, until, daily: true });
            await s.usageTotals({ by: ['team'], account: 'b', since: start, until: day0 + DAY_MS });
            if (s.usageRecordsRead() !== before) throw new Error(`${where}: reads of whole hours read ${s.usageRecordsRead() - before} records`);
          };
          for (const [i, s] of opened.readers.entries()) await check(s, `reader ${i}`);
          if (opened.reopen !== undefined) await check(await opened.reopen(), 'reopened');
        } finally {
          await opened.close();
        }
      }), cases);
    });

    t.test('a since inside an hour reads that hour\'s records after it, and no other', async (t) => {
      const opened = await kind.open();
      t.teardown(() => opened.close());
      const s = opened.writers[0]!;
      const h0 = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - 30 * HOUR_MS;
      for (let i = 0; i < 30; i++) await s.recordUsage(rec(i, h0 + i * HOUR_MS + 1000, { units: i }), `x${i}`);
      await s.recordUsage(rec(100, h0 + 10 * HOUR_MS + 2000, { units: 1000, account: 'b' }), 'x100');
      const before = s.usageRecordsRead();
      const got = await s.usageReport('a', h0 + 10 * HOUR_MS + 500);
      t.equal(got.requests, 20, 'from the record of hour 10 on');
      t.equal(got.units, Array.from({ length: 20 }, (_, i) => i + 10).reduce((a, b) => a + b, 0));
      const read = s.usageRecordsRead() - before;
      // Redis reads the hour's stream (two records); memory the day's records of the account.
      t.ok(read >= 1 && read <= 24, `the records of since's hour (or day), not the history: ${read}`);
    });

    t.test('bad reads are refused as the caller\'s bug, not answered wrong', async (t) => {
      const opened = await kind.open();
      t.teardown(() => opened.close());
      const s = opened.readers[0]!;
      const d = Math.floor(Date.now() / DAY_MS) * DAY_MS;
      await t.rejects(s.usageTotals({ by: ['model'], account: 'a', key: 'k', since: d + 1, until: d + DAY_MS, daily: true }), RangeError, 'days begin at midnight');
      await t.rejects(s.usageTotals({ by: ['model'], since: d, until: d - HOUR_MS }), RangeError, 'until before since');
      await t.rejects(s.usageTotals({ by: ['model'], key: 'k', since: d, until: d + DAY_MS }), RangeError, 'a key without its account');
      await t.rejects(s.usageTotals({ by: ['model', 'team'], since: d, until: d + DAY_MS }), RangeError, 'no column holds model by team');
      await t.rejects(s.usageTotals({ by: ['model'], account: 'a', key: 'k', since: d, until: d + HOUR_MS }), RangeError, 'a key\'s models are kept per day');
      await t.rejects(s.usageTotals({ by: ['colour' as 'model'], since: d, until: d + DAY_MS }), RangeError);
      await t.rejects(s.usageReport(undefined, Number.NaN), TypeError);
      t.strictSame(await s.usageReport('a', Date.now() + 3 * DAY_MS), { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0, by_model: {}, by_key: {}, by_team: {} });
    });
  });
}

t.test('redis: hours written by a version with other columns are summed anew once, exactly', async (t) => {
  const prefix = `reads-old${prefixes++}:`;
  const s = await redisStore({ url: redis.url, prefix });
  t.teardown(() => s.close());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const h0 = Math.floor(Date.now() / DAY_MS) * 24 - 30; // the last six hours of the day before yesterday, yesterday's first three
  const written: UsageRecord[] = [];
  for (let i = 0; i < 90; i++) {
    const r = rec(i, (h0 + (i % 9)) * HOUR_MS + i, { account: i % 2 === 0 ? 'a' : 'b', key_id: `key_${i % 3}`, team: i % 4 === 0 ? 'red' : null, model: `m${i % 2}`, units: i });
    written.push(r);
    await s.recordUsage(r, `o${i}`);
  }
  const want = expectedReport(written, undefined, 0);
  const hourKey = (h: number) => `${prefix}{usage:${h}}`;
  // As the release before this one left hours 0-2: no count, no team or key+model columns; as
  // the one before totals, hours 3-5: nothing but the streams. Hour 6: an instance of the old
  // release wrote one more record beside this one's (the count is one short).
  for (let h = h0; h < h0 + 6; h++) {
    const k = hourKey(h);
    const groups = await c.keys(`${k}:t:key+model:*`);
    await c.del(counterKey(k), columnKey(k, 'team', ''), ...groups, ...(await c.keys(`${k}:t:key@:*`)), ...(await c.keys(`${k}:t:team@:*`)));
    if (h >= h0 + 3) await c.del(...COLUMNS.map((x) => columnKey(k, x.name, '')), ...(await c.keys(`${k}:t:*@:*`)));
  }
  const late = rec(900, (h0 + 6) * HOUR_MS + 7, { units: 5, key_id: 'key_0' });
  await c.xadd(hourKey(h0 + 6), '*', 'r', JSON.stringify(late));
  written.push(late);
  const before = s.usageRecordsRead();
  t.strictSame(await s.usageReport(undefined, 0), expectedReport(written, undefined, 0), 'exact, with the record the counts missed');
  t.not(want.units, expectedReport(written, undefined, 0).units);
  const summed = s.usageRecordsRead() - before;
  t.equal(summed, 70 + 1, 'the seven hours not whole were read once: their records, no other');
  for (let h = h0; h < h0 + 9; h++) t.equal(Number(await c.get(counterKey(hourKey(h)))), await c.xlen(hourKey(h)), `hour ${h - h0} counts its stream`);
  const day = Math.floor(Date.now() / DAY_MS) * DAY_MS;
  t.strictSame(await s.usageTotals({ by: ['model'], account: 'a', key: 'key_0', since: day - DAY_MS, until: day + DAY_MS, daily: true }),
    expectedDays(written, 'a', 'key_0', day - DAY_MS, day + DAY_MS), 'a key\'s days, from the columns made');
  t.strictSame(await s.usageTop({ by: 'team', since: h0 * HOUR_MS, until: (h0 + 9) * HOUR_MS, limit: 5 }), [{ id: 'red', requests: 23, units: written.filter((r) => r.team === 'red').reduce((n, r) => n + r.units, 0) }]);
  const again = s.usageRecordsRead();
  await s.usageReport(undefined, 0);
  await s.usageReport('b', h0 * HOUR_MS);
  t.equal(s.usageRecordsRead(), again, 'then read from totals alone');

  // A second instance started later finds every hour whole: its background pass reads nothing.
  const other = await redisStore({ url: redis.url, prefix });
  t.teardown(() => other.close());
  t.strictSame(await other.usageReport(undefined, 0), expectedReport(written, undefined, 0));
  t.equal(other.usageRecordsRead(), 0);
});

t.test('redis: a store started on hours of an earlier version sums them in the background, newest first', async (t) => {
  const prefix = `reads-bg${prefixes++}:`;
  const s = await redisStore({ url: redis.url, prefix });
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const h0 = Math.floor(Date.now() / HOUR_MS) - 5;
  for (let i = 0; i < 40; i++) await s.recordUsage(rec(i, (h0 + (i % 4)) * HOUR_MS + i, { units: i }), `b${i}`);
  await s.close();
  for (let h = h0; h < h0 + 4; h++) await c.del(counterKey(`${prefix}{usage:${h}}`));
  const again = await redisStore({ url: redis.url, prefix });
  t.teardown(() => again.close());
  // No read asks: the pass started by ready() makes every hour whole by itself.
  for (let i = 0; i < 500 && again.usageRecordsRead() < 40; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(again.usageRecordsRead(), 40, 'each record read once');
  for (let h = h0; h < h0 + 4; h++) t.equal(await c.get(counterKey(`${prefix}{usage:${h}}`)), '10');
  t.equal((await again.usageReport(undefined, 0)).units, 780);
  t.equal(again.usageRecordsRead(), 40, 'the report read totals alone');
});

t.test('redis: an hour whose records keep changing while it is summed is answered from the sums made', async (t) => {
  const prefix = `reads-busy${prefixes++}:`;
  const s = await redisStore({ url: redis.url, prefix });
  t.teardown(() => s.close());
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  for (const [name, script] of Object.entries(HOUR_SCRIPTS)) c.defineCommand(name, { lua: script.lua });
  const hour = Math.floor(Date.now() / HOUR_MS) - 2;
  const hk = `${prefix}{usage:${hour}}`;
  for (let i = 0; i < 12; i++) await s.recordUsage(rec(i, hour * HOUR_MS + i, { account: i % 3 === 0 ? 'b' : 'a', units: 10 + i }), `busy${i}`);
  await c.del(counterKey(hk), columnKey(hk, 'account', ''));
  // As if an instance of an earlier release kept writing into the hour: each write back is refused.
  let tries = 0;
  const client = c as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const busy = {
    tgTotalsRead: (...args: unknown[]) => client.tgTotalsRead!(...args),
    tgTotalsRebuild: async () => { tries++; return 0; },
    xrange: (...args: unknown[]) => client.xrange!(...args),
  };
  const reads = new ReadCount();
  const hours = new RedisHours(busy as never, (h) => `${prefix}{usage:${h}}`, 90 * DAY_MS, 24, reads);
  const [found] = await hours.read([hour], (k) => columnKey(k, 'account', ''));
  t.equal(tries, 3, 'written back three times, refused each');
  t.equal(found!.count, -1, 'not whole in Redis');
  t.strictSame(Object.fromEntries(found!.fields), { a: [8, 0, 8, 16, 8 * 10 + 1 + 2 + 4 + 5 + 7 + 8 + 10 + 11], b: [4, 0, 4, 8, 4 * 10 + 0 + 3 + 6 + 9] }, 'the sums made from the records');
  t.equal(reads.n, 36, 'the stream read once per try');
  t.equal(await c.exists(columnKey(hk, 'account', '')), 0, 'Redis left as it was');
});
