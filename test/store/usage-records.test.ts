// Usage records in every store (memory without a path, memory with day files, Redis hourly
// streams): pages with a stable cursor return each record once, also while records are being
// written; filters; retention trims by time only (old records injected, and a clock moved past
// retention); the earlier single usage.jsonl file is migrated; records written before queue_ms
// existed (a day file's line, a stream entry) read it as 0; a page reads SCAN_CAP records at
// most and lets the event loop run between its batches.

import t from 'tap';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { Store, UsagePage, UsageQuery, UsageRecord } from '../../lib/store/types.js';
import { DAY_MS, SCAN_CAP } from '../../lib/store/usage-records.js';
import { MemoryUsageLog } from '../../lib/store/memory/usage-columns.js';
import { FileUsageLog, LEGACY_USAGE_FILE, USAGE_DIR } from '../../lib/store/memory/usage-files.js';
import { startRedis } from '../helpers/redis.js';
import fc from 'fast-check';
import { holds } from '../property/arbitraries.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-usage-'));
  dirs.push(dir);
  return dir;
}

const redis = await startRedis();
t.teardown(() => redis.stop());
let prefixes = 0;

function rec(i: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `r-${i}`, at: Date.now(), account: i % 3 === 0 ? 'a' : 'b', key_id: i % 2 === 0 ? 'key_even' : 'key_odd', team: null,
    model: i % 5 === 0 ? 'm5' : 'm', provider: 'p', target: 'http://10.0.0.1:8000/v1', route: '/v1/chat/completions', status: 200,
    prompt_tokens: i, cached_tokens: 0, completion_tokens: 2 * i, units: 3 * i, usage_source: 'upstream', duration_ms: 1.5, ttft_ms: null,
    queue_ms: i % 4 === 0 ? 0 : 40 * i, tags: [], end_user: null, ...over,
  };
}

async function all(s: Store, q: UsageQuery): Promise<{ records: UsageRecord[]; pages: number }> {
  const records: UsageRecord[] = [];
  let cursor = q.cursor;
  let pages = 0;
  for (;;) {
    const page: UsagePage = await s.usageRecords({ ...q, cursor });
    pages++;
    records.push(...page.records);
    if (page.next_cursor === null) return { records, pages };
    cursor = page.next_cursor;
  }
}

interface Kind { name: string; open(retentionDays?: number): Promise<{ store: Store; reopen?: () => Promise<Store> }> }

const kinds: Kind[] = [
  { name: 'memory', open: async (days) => ({ store: new MemoryStore({ path: null, usageRetentionDays: days }) }) },
  {
    name: 'memory with a path',
    open: async (days) => {
      const dir = await tempDir();
      let s = await MemoryStore.open({ path: dir, usageRetentionDays: days });
      return { store: s, reopen: async () => { await s.close(); s = await MemoryStore.open({ path: dir, usageRetentionDays: days }); return s; } };
    },
  },
  {
    name: 'redis',
    open: async (days) => {
      const s = new RedisStore({ url: redis.url, prefix: `usage${prefixes++}:`, usageRetentionDays: days, commandTimeoutMs: 10_000 });
      await s.ready();
      return { store: s };
    },
  },
];

for (const kind of kinds) {
  t.test(kind.name, async (t) => {
    t.test('pages return every record once, in a stable order, with the contract fields', async (t) => {
      const { store: s } = await kind.open();
      t.teardown(() => s.close());
      const since = Date.now() - 1000;
      for (let i = 0; i < 1050; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => s.recordUsage(rec(i + j))));
      const first = await all(s, { since, limit: 100 });
      t.equal(first.records.length, 1050);
      t.equal(new Set(first.records.map((r) => r.request_id)).size, 1050, 'each record once');
      t.ok(first.pages >= 11 && first.pages <= 12, `${first.pages} pages of 100`);
      const again = await all(s, { since, limit: 7 });
      t.strictSame(again.records.map((r) => r.request_id), first.records.map((r) => r.request_id), 'the same order with another page size');
      const r5 = first.records.find((r) => r.request_id === 'r-5')!;
      t.strictSame(Object.keys(r5), [
        'request_id', 'at', 'account', 'key_id', 'team', 'model', 'provider', 'target', 'route', 'status', 'prompt_tokens', 'cached_tokens',
        'completion_tokens', 'units', 'usage_source', 'duration_ms', 'ttft_ms', 'queue_ms', 'tags', 'end_user',
      ]);
      t.match(r5, { account: 'b', key_id: 'key_odd', model: 'm5', prompt_tokens: 5, completion_tokens: 10, units: 15, ttft_ms: null, queue_ms: 200 });
      t.strictSame(first.records.find((r) => r.request_id === 'r-8')!.queue_ms, 0, 'a request that did not wait: 0');

      t.equal((await all(s, { since, limit: 1000, account: 'a' })).records.length, 350, 'by account');
      t.equal((await all(s, { since, limit: 1000, keyId: 'key_even' })).records.length, 525, 'by key');
      t.equal((await all(s, { since, limit: 1000, model: 'm5', account: 'a' })).records.length, 70, 'by model and account');
      t.strictSame(await s.usageRecords({ since: Date.now() + 60_000, limit: 10 }), { records: [], next_cursor: null }, 'nothing in the future');
      t.strictSame(await s.usageRecords({ since: 0, until: since, limit: 10 }), { records: [], next_cursor: null }, 'nothing before');
    });

    t.test('paging while records are written: each record once, and those written ahead of the cursor show up', async (t) => {
      const { store: s } = await kind.open();
      t.teardown(() => s.close());
      const since = Date.now() - 1000;
      for (let i = 0; i < 300; i++) await s.recordUsage(rec(i));
      let writing = true;
      let written = 300;
      const writer = (async () => {
        while (writing) {
          await Promise.all(Array.from({ length: 10 }, () => s.recordUsage(rec(written++))));
          await new Promise((r) => setImmediate(r));
        }
      })();
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      for (; pages < 400; pages++) {
        // Stop writing after a while, before a page is read: the pager (25 a page against the
        // writer's 10 a turn) would catch up with the writer near page 20, and a page that ends
        // the records (no next cursor) leaves what is written after it unreachable.
        if (pages === 10) { writing = false; await writer; }
        const page = await s.usageRecords({ since, limit: 25, cursor });
        seen.push(...page.records.map((r) => r.request_id));
        // Let the writer run between pages.
        await new Promise((r) => setImmediate(r));
        if (page.next_cursor === null) break;
        cursor = page.next_cursor;
      }
      writing = false;
      await writer;
      t.ok(pages >= 10 && written > 300, `${pages} pages, ${written - 300} records written while the first 10 were read`);
      t.equal(new Set(seen).size, seen.length, 'no record twice');
      t.equal(seen.length, written, `every record, the ${written - 300} written while paging included`);
    });

    t.test('property: a filtered query pages exactly the records an unfiltered one matches, in its order', async (t) => {
      const base = Date.now() - 30 * 3_600_000;
      const gen = fc.record({
        records: fc.array(fc.record({
          account: fc.constantFrom('a', 'b', 'c'), key: fc.constantFrom(null, 'k1', 'k2'), model: fc.constantFrom('m1', 'm2', 'rare'),
          offset: fc.integer({ min: 0, max: 30 * 3_600_000 - 1 }),
        }), { maxLength: 60 }),
        filters: fc.array(fc.record({
          account: fc.option(fc.constantFrom('a', 'b', 'c', 'zz'), { nil: undefined }),
          keyId: fc.option(fc.constantFrom('key_a_k1', 'key_b_k2', 'key_zz'), { nil: undefined }),
          model: fc.option(fc.constantFrom('m1', 'rare', 'zz'), { nil: undefined }),
          limit: fc.integer({ min: 1, max: 7 }),
        }), { minLength: 1, maxLength: 4 }),
      });
      await holds(t, `${kind.name}: filtered pages`, fc.asyncProperty(gen, async ({ records, filters }) => {
        const { store: s } = await kind.open();
        try {
          await s.createAccount({ id: 'a', plan: 'free', balance_units: 0 });
          await s.createKey({ id: 'key_a_k1', account: 'a', digest: 'ab'.repeat(32) });
          // In time order per bucket, as a gateway writes them (a cursor's position only grows).
          const sorted = [...records].sort((x, y) => x.offset - y.offset);
          for (const [i, g] of sorted.entries()) {
            await s.recordUsage(rec(i, { at: base + g.offset, account: g.account, key_id: g.key === null ? null : `key_${g.account}_${g.key}`, model: g.model }));
          }
          const everything = (await all(s, { since: base, limit: 1000 })).records;
          for (const f of filters) {
            const q = { since: base, limit: f.limit, account: f.account, keyId: f.keyId, model: f.model };
            const got = (await all(s, q)).records.map((r) => r.request_id);
            const want = everything.filter((r) => (f.account === undefined || r.account === f.account) && (f.keyId === undefined || r.key_id === f.keyId)
              && (f.model === undefined || r.model === f.model)).map((r) => r.request_id);
            if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${JSON.stringify(f)}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`);
          }
        } finally {
          await s.close();
        }
      }), kind.name === 'redis' ? 20 : 30);
    });

    t.test('a rare filter finds its records on the first page (indexes, not a scan), and the pages end', async (t) => {
      const { store: s } = await kind.open();
      t.teardown(() => s.close());
      const since = Date.now() - 1000;
      const n = SCAN_CAP + 600;
      for (let i = 0; i < n; i += 1000) await Promise.all(Array.from({ length: Math.min(1000, n - i) }, (_, j) => s.recordUsage(rec(i + j, { account: 'many' }))));
      await s.recordUsage(rec(n, { account: 'rare' }));
      await s.recordUsage(rec(n + 1, { account: 'many', model: 'rare-model' }));
      const first = await s.usageRecords({ since, limit: 10, account: 'rare' });
      t.strictSame(first.records.map((r) => r.request_id), [`r-${n}`], 'found at once');
      const rest = await all(s, { since, limit: 10, account: 'rare' });
      t.strictSame(rest.records.map((r) => r.request_id), [`r-${n}`], 'once, and the pages end');
      t.strictSame((await s.usageRecords({ since, limit: 10, model: 'rare-model' })).records.map((r) => r.request_id), [`r-${n + 1}`]);
      t.strictSame((await s.usageRecords({ since, limit: 10, model: 'rare-model', account: 'rare' })).records, []);
      t.strictSame((await all(s, { since, limit: 10, keyId: 'key_nobody' })).records, []);
      const many = await all(s, { since, limit: 1000, account: 'many', keyId: 'key_odd' });
      t.equal(many.records.length, (n + 2) / 2 - 0, 'every odd record of account many');
      t.ok(many.records.every((r) => r.account === 'many' && r.key_id === 'key_odd'));
    });

    t.test('retention: records are trimmed by time only, never before retention_days', async (t) => {
      const { store: s } = await kind.open(30);
      t.teardown(() => s.close());
      const now = Date.now();
      await s.recordUsage(rec(1, { at: now - 31 * DAY_MS }));
      await s.recordUsage(rec(2, { at: now - 29 * DAY_MS }));
      await s.recordUsage(rec(3, { at: now - 1000 }));
      const got = await all(s, { since: 0, limit: 100 });
      t.strictSame(got.records.map((r) => r.request_id), ['r-2', 'r-3'], 'a record past retention is gone; one a day inside it stays');
      const report = await s.usageReport(undefined, 0);
      t.equal(report.requests, 2);
      t.strictSame(report.by_key, {
        key_even: { requests: 1, prompt_tokens: 2, completion_tokens: 4, units: 6 },
        key_odd: { requests: 1, prompt_tokens: 3, completion_tokens: 6, units: 9 },
      });
    });

    t.test('a cursor sent back altered answers a page, never a store fault', async (t) => {
      const { store: s } = await kind.open();
      t.teardown(() => s.close());
      const bucket = Math.floor(Date.now() / (kind.name === 'redis' ? 3_600_000 : DAY_MS));
      await s.recordUsage(rec(1));
      for (const pos of ['0', '1', '99999999999999999999', '18446744073709551615-18446744073709551615', '18446744073709551614-99999999999999999999', '5-3']) {
        const page = await s.usageRecords({ since: 0, limit: 10, cursor: `${bucket}:${pos}` });
        t.ok(Array.isArray(page.records) && page.records.length <= 1, `${pos}: a page`);
      }
      t.strictSame((await s.usageRecords({ since: 0, limit: 10, cursor: `${bucket + 5}:0` })).records, [], 'a later bucket: nothing');
    });

    t.test('a bad record is refused', async (t) => {
      const { store: s } = await kind.open();
      t.teardown(() => s.close());
      await t.rejects(s.recordUsage(rec(1, { units: -1 })), TypeError);
      await t.rejects(s.recordUsage(rec(1, { cached_tokens: 1.5 })), TypeError);
      await t.rejects(s.recordUsage(rec(1, { queue_ms: 2.5 })), TypeError, 'queue_ms is whole milliseconds');
      await t.rejects(s.recordUsage(rec(1, { queue_ms: -1 })), TypeError);
      await t.rejects(s.recordUsage({ ...rec(1), queue_ms: undefined } as unknown as UsageRecord), TypeError, 'and always there');
      await t.rejects(s.recordUsage(rec(1, { request_id: '' })), TypeError);
      t.strictSame((await s.usageRecords({ since: 0, limit: 10 })).records, []);
    });

    if (kind.name === 'memory with a path') {
      t.test('records survive a reopen, and a cursor taken before it still works', async (t) => {
        const h = await kind.open();
        let s = h.store;
        for (let i = 0; i < 30; i++) await s.recordUsage(rec(i));
        const first = await s.usageRecords({ since: 0, limit: 10 });
        s = await h.reopen!();
        t.teardown(() => s.close());
        await s.recordUsage(rec(30));
        const rest = await all(s, { since: 0, limit: 10, cursor: first.next_cursor! });
        t.strictSame([...first.records, ...rest.records].map((r) => r.request_id), Array.from({ length: 31 }, (_, i) => `r-${i}`));
      });
    }
  });
}

t.test('a clock moved past retention drops whole days, in memory and in day files', async (t) => {
  let now = Date.UTC(2026, 0, 10, 12);
  const mem = new MemoryUsageLog(2, () => now);
  const dir = await tempDir();
  const file = await FileUsageLog.open(dir, { retentionDays: 2, now: () => now });
  t.teardown(() => file.close());
  for (const log of [mem, file]) {
    await log.record(rec(1, { at: Date.UTC(2026, 0, 9, 23) }));
    await log.record(rec(2, { at: Date.UTC(2026, 0, 10, 1) }));
  }
  t.strictSame((await readdir(join(dir, USAGE_DIR))).sort(), ['2026-01-09.jsonl', '2026-01-10.jsonl']);
  // Jan 11 22:00: the oldest record (Jan 9 23:00) is not 2 days old yet: everything is kept.
  now = Date.UTC(2026, 0, 11, 22);
  for (const log of [mem, file]) {
    await log.record(rec(3, { at: now }));
    t.strictSame((await log.page({ since: 0, limit: 10 })).records.map((r) => r.request_id), ['r-1', 'r-2', 'r-3']);
  }
  // Jan 12 00:01:01: the whole of Jan 9 is past 2 days (its day is dropped), Jan 10 is not.
  now = Date.UTC(2026, 0, 12, 0, 1, 1);
  for (const log of [mem, file]) {
    await log.record(rec(4, { at: now }));
    t.strictSame((await log.page({ since: 0, limit: 10 })).records.map((r) => r.request_id), ['r-2', 'r-3', 'r-4']);
  }
  t.strictSame((await readdir(join(dir, USAGE_DIR))).sort(), ['2026-01-10.jsonl', '2026-01-11.jsonl', '2026-01-12.jsonl'], 'the expired day file is deleted');
});

t.test('redis: an hour stream expires at the end of its hour plus the retention; records past it are never written', async (t) => {
  const prefix = `usage${prefixes++}:`;
  const s = new RedisStore({ url: redis.url, prefix, usageRetentionDays: 3 });
  t.teardown(() => s.close());
  await s.ready();
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const at = Date.now() - 2 * DAY_MS;
  await s.recordUsage(rec(1, { at }));
  await s.recordUsage(rec(2, { at: Date.now() - 4 * DAY_MS }));
  const hour = Math.floor(at / 3_600_000);
  t.equal(await c.pexpiretime(`${prefix}{usage:${hour}}`), (hour + 1) * 3_600_000 + 3 * DAY_MS);
  const keys = await c.keys(`${prefix}*`).then((k) => k.sort());
  // Beside the stream: its totals and their count (lib/store/redis/totals-hours.ts), expiring with it.
  const totals = keys.filter((k) => k.startsWith(`${prefix}{usage:${hour}}:t`));
  t.ok(totals.length > 0);
  for (const k of totals) t.equal(await c.pexpiretime(k), (hour + 1) * 3_600_000 + 3 * DAY_MS, `${k} expires with the stream`);
  t.strictSame(keys.filter((k) => !k.includes(':w:') && !totals.includes(k)), [`${prefix}{usage:${hour}}`, `${prefix}{usage:index}`]);
  const mark = keys.find((k) => k.startsWith(`${prefix}{usage:${hour}}:w:`));
  t.ok(mark !== undefined, "the written record's mark, beside its stream");
  const ttl = await c.pttl(mark!);
  t.ok(ttl > 0 && ttl <= 300_000, `the mark expires within minutes (${ttl} ms)`);
});

t.test('the single usage.jsonl of an earlier version is moved into day files, its records read as the new shape', async (t) => {
  const dir = await tempDir();
  const day = Date.UTC(2026, 10, 20, 10);
  const old = (id: string, at: number, credential: string) => JSON.stringify({
    request_id: id, at, account: 'acme', credential, model: 'm', provider: 'p', upstream_model: 'u', prompt_tokens: 1,
    completion_tokens: 2, units: 3, usage_source: 'upstream', status: 200, code: '', latency_ms: 7, ttfc_ms: 2,
  });
  await writeFile(join(dir, LEGACY_USAGE_FILE), `${old('o1', day, 'key_abc')}\n${old('o2', day + DAY_MS, 'session_x')}\n{"torn":`);
  const s = await MemoryStore.open({ path: dir, usageRetentionDays: 36500 });
  t.teardown(() => s.close());
  const page = await s.usageRecords({ since: 0, limit: 10 });
  t.strictSame(page.records, [
    { request_id: 'o1', at: day, account: 'acme', key_id: 'key_abc', team: null, model: 'm', provider: 'p', target: null, route: '', status: 200,
      prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 7, ttft_ms: 2, queue_ms: 0, tags: [], end_user: null },
    { request_id: 'o2', at: day + DAY_MS, account: 'acme', key_id: null, team: null, model: 'm', provider: 'p', target: null, route: '', status: 200,
      prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 7, ttft_ms: 2, queue_ms: 0, tags: [], end_user: null },
  ]);
  t.strictSame((await readdir(dir)).includes(LEGACY_USAGE_FILE), false, 'the old file is gone');
  t.strictSame((await readdir(join(dir, USAGE_DIR))).sort(), ['2026-11-20.jsonl', '2026-11-21.jsonl']);
  t.match(await readFile(join(dir, USAGE_DIR, '2026-11-20.jsonl'), 'utf8'), /"key_id":"key_abc"/);
});

t.test('records written before queue_ms existed read it as 0: a day file\'s line, a Redis stream entry', async (t) => {
  const { queue_ms: _dropped, ...older } = rec(3, { at: Date.UTC(2026, 10, 20, 10), queue_ms: 120 });
  const dir = await tempDir();
  await mkdir(join(dir, USAGE_DIR), { recursive: true });
  await writeFile(join(dir, USAGE_DIR, '2026-11-20.jsonl'), `${JSON.stringify(older)}\n`);
  const m = await MemoryStore.open({ path: dir, usageRetentionDays: 36500 });
  t.teardown(() => m.close());
  t.strictSame((await m.usageRecords({ since: 0, limit: 10 })).records, [{ ...older, queue_ms: 0 }], 'memory store, day file');

  const prefix = `usage${prefixes++}:`;
  const r = new RedisStore({ url: redis.url, prefix, usageRetentionDays: 36500 });
  t.teardown(() => r.close());
  await r.ready();
  const c = new Redis(redis.url);
  t.teardown(() => c.disconnect());
  const hour = Math.floor(older.at / 3_600_000);
  await c.xadd(`${prefix}{usage:${hour}}`, '*', 'r', JSON.stringify(older));
  await c.zadd(`${prefix}{usage:index}`, hour, String(hour));
  await r.recordUsage(rec(4, { at: older.at + 1, queue_ms: 75 }));
  t.strictSame((await r.usageRecords({ since: 0, limit: 10 })).records.map((x) => [x.request_id, x.queue_ms]), [['r-3', 0], ['r-4', 75]], 'redis store, stream');
});

t.test('redis: records of an hour stay listed after a Redis that restarted empty (the index comes back)', async (t) => {
  const own = redis.external ? undefined : await startRedis();
  if (own === undefined) { t.comment('needs a local redis-server to restart'); return; }
  t.teardown(() => own.stop());
  const s = new RedisStore({ url: own.url, prefix: 'restart:' });
  t.teardown(() => s.close());
  await s.ready();
  await s.recordUsage(rec(1));
  await own.restart();
  await s.ready(5000);
  let written = false;
  for (let i = 0; i < 100 && !written; i++) {
    written = await s.recordUsage(rec(2)).then(() => true, () => false);
    if (!written) await new Promise((r) => setTimeout(r, 50));
  }
  t.ok(written);
  t.strictSame((await s.usageRecords({ since: 0, limit: 10 })).records.map((r) => r.request_id), ['r-2'], 'the record after the restart is found');
});

t.test('a record the store cannot take now is retried until it lands (Redis down, then back)', async (t) => {
  const { GuardedStore } = await import('../../lib/store/guard.js');
  const { RetryQueue } = await import('../../lib/store/retry.js');
  const own = redis.external ? undefined : await startRedis();
  if (own === undefined) { t.comment('needs a local redis-server to stop'); return; }
  t.teardown(() => own.stop());
  const inner = new RedisStore({ url: own.url, prefix: 'retry:', commandTimeoutMs: 200 });
  t.teardown(() => inner.close());
  await inner.ready();
  const retries = new RetryQueue({ minDelayMs: 20, maxDelayMs: 100 });
  const s = new GuardedStore(inner, retries);
  await own.halt();
  // Two records with the same (client-given) request id: both must land.
  await s.recordUsage(rec(1, { request_id: 'same' }));
  await s.recordUsage(rec(2, { request_id: 'same' }));
  t.equal(retries.size, 2, 'both wait for the store');
  await own.restart();
  await inner.ready(5000);
  for (let i = 0; i < 200 && retries.size > 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 0);
  const page = await s.usageRecords({ since: 0, limit: 10 });
  t.strictSame(page.records.map((r) => r.prompt_tokens).sort(), [1, 2], 'both records landed once Redis was back');
  await retries.close();
});

t.test('a record whose write Redis stalls on lands once: the retry finds the first write and appends nothing', async (t) => {
  const { GuardedStore } = await import('../../lib/store/guard.js');
  const { RetryQueue } = await import('../../lib/store/retry.js');
  const own = redis.external ? undefined : await startRedis();
  if (own === undefined) { t.comment('needs a local redis-server to stop'); return; }
  t.teardown(() => own.stop());
  const inner = new RedisStore({ url: own.url, prefix: 'stall:', commandTimeoutMs: 200 });
  t.teardown(() => inner.close());
  await inner.ready();
  const retries = new RetryQueue({ minDelayMs: 20, maxDelayMs: 100 });
  t.teardown(() => retries.close());
  const s = new GuardedStore(inner, retries);
  await s.recordUsage(rec(0, { request_id: 'before' })); // the hour is indexed: a record is one script
  own.freeze();
  // Timed out, so queued for retry; the first write still waits in Redis's socket and runs on thaw.
  await s.recordUsage(rec(1, { request_id: 'stalled' }));
  await s.recordUsage(rec(2, { request_id: 'stalled' }));
  t.equal(retries.size, 2, 'both wait for the store');
  await new Promise((r) => setTimeout(r, 300)); // a retry pass or two time out as well
  own.thaw();
  for (let i = 0; i < 200 && retries.size > 0; i++) await new Promise((r) => setTimeout(r, 25));
  t.equal(retries.size, 0);
  const page = await s.usageRecords({ since: 0, limit: 10 });
  t.strictSame(page.records.map((r) => r.prompt_tokens).sort(), [0, 1, 2], 'each record once, though each write was sent more than once');
});

t.test('a page looks at SCAN_CAP records at most, letting the event loop run between batches', async (t) => {
  const log = new MemoryUsageLog(90);
  const day = Math.floor(Date.now() / DAY_MS) * DAY_MS;
  for (let i = 0; i < 2 * SCAN_CAP + 10; i++) void log.record(rec(i, { at: day + i, account: 'x', key_id: 'key_x' }));
  await log.record(rec(-1, { at: day + 2 * SCAN_CAP + 100, account: 'y', key_id: 'key_y' }));
  // A turn of the event loop counted while a page is read: the page must leave room for them.
  let turns = 0;
  let counting = true;
  const turn = (): void => { turns++; if (counting) setImmediate(turn); };
  setImmediate(turn);
  const pages: UsagePage[] = [];
  const reads: number[] = [];
  let cursor: string | undefined;
  do {
    const before = log.reads.n;
    const page = await log.page({ since: day + 2 * SCAN_CAP + 50, limit: 10, cursor });
    reads.push(log.reads.n - before);
    pages.push(page);
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined);
  counting = false;
  t.strictSame(pages.map((p) => p.records.map((r) => r.request_id)), [[], [], ['r--1']], 'the one record past since, on the third page');
  t.strictSame(reads, [SCAN_CAP, SCAN_CAP, 11], 'each page read at most SCAN_CAP records: a cost the history\'s length does not change');
  // A page reads batches of 500 and yields between them (setImmediate: one turn each).
  t.ok(turns >= 2 * (SCAN_CAP / 500 - 1), `the event loop turned between batches (${turns} turns)`);

  // A filtered page, from the store's index: the other account's records are compared, not read.
  const before = log.reads.n;
  const filtered = await log.page({ since: day, limit: 10, account: 'y' });
  t.strictSame(filtered.records.map((r) => r.request_id), ['r--1']);
  t.equal(log.reads.n - before, 1, 'only the match is read');
});
