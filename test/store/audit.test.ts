// The audit log in both stores (CONTRACT section 12): appendAudit/listAudit behave the same on
// the memory store and on Redis (its own redis-server): newest first, paged by cursor with each
// event once, the since filter, bad cursors refused; the memory store with a path keeps every
// event across a reopen (in its journal, then its snapshot) and reads the audit.jsonl of an
// earlier version (not its torn last line) until a snapshot holds it; two Redis store instances
// share one log.

import t from 'tap';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { AuditEvent, Store } from '../../lib/store/types.js';
import { holds } from '../property/arbitraries.js';
import { startRedis } from '../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

const event = (i: number, at: number): AuditEvent => ({
  at, actor: `actor-${i}`, role: i % 2 === 0 ? 'admin' : 'member', action: 'POST /admin/accounts/{id}/credits', target: `acct-${i}`, ip: '127.0.0.1', request_id: `req-${i}`,
});

async function all(store: Store, since: number, limit: number): Promise<AuditEvent[]> {
  const out: AuditEvent[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 1000; pages++) {
    const page = await store.listAudit({ since, limit, cursor });
    out.push(...page.events);
    if (page.next_cursor === null) return out;
    if (page.events.length !== limit) throw new Error('a page that is not the last is full');
    cursor = page.next_cursor;
  }
  throw new Error('too many pages');
}

const stores: Array<[string, () => Promise<Store>]> = [
  ['memory', async () => new MemoryStore({ path: null })],
  ['redis', async () => RedisStore.open({ url: redis.url, prefix: `tga:${randomUUID()}:` })],
];

for (const [name, open] of stores) {
  t.test(`${name}: newest first, every event once across pages, since filters`, async (t) => {
    await holds(t, `${name} audit paging`, fc.asyncProperty(
      fc.array(fc.integer({ min: 0, max: 50 }), { minLength: 0, maxLength: 30 }), fc.integer({ min: 1, max: 7 }), fc.integer({ min: 0, max: 30 }),
      async (gaps, limit, sinceIndex) => {
        const store = await open();
        try {
          const base = Date.now() - 10_000_000;
          let at = base;
          const written = gaps.map((g, i) => event(i, (at += g * 1000)));
          for (const e of written) await store.appendAudit(e);
          const since = written[sinceIndex]?.at ?? base;
          const got = await all(store, since, limit);
          const want = written.filter((e) => e.at >= since).reverse();
          if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`got ${JSON.stringify(got.map((e) => e.actor))} want ${JSON.stringify(want.map((e) => e.actor))}`);
        } finally {
          await store.close();
        }
      }), name === 'redis' ? 20 : 60);
  });

  t.test(`${name}: a cursor it did not give, and a bad event, are RangeErrors`, async (t) => {
    const store = await open();
    t.teardown(() => store.close());
    await store.appendAudit(event(1, Date.now()));
    await t.rejects(store.listAudit({ since: 0, limit: 10, cursor: 'nope' }), RangeError);
    await t.rejects(store.listAudit({ since: 0, limit: 0 }), RangeError);
    await t.rejects(store.appendAudit({ ...event(2, Date.now()), actor: 5 as unknown as string }), RangeError);
    t.equal((await store.listAudit({ since: 0, limit: 10 })).events.length, 1);
  });
}

t.test('memory with a path: events survive a reopen, from the journal and from a snapshot', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-audit-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const now = Date.now();
  const a = await MemoryStore.open({ path: dir });
  for (let i = 0; i < 5; i++) await a.appendAudit(event(i, now + i));
  await a.close();
  const journal = (await readFile(join(dir, 'journal.jsonl'), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  t.equal(journal.filter((e) => e.op === 'audit').length, 5, 'each event is an entry of the journal');
  // A tiny compaction threshold: the store compacts as it opens, so the log is in the snapshot.
  const b = await MemoryStore.open({ path: dir, compactBytes: 1 });
  t.same((await b.listAudit({ since: 0, limit: 100 })).events.map((e) => e.actor), ['actor-4', 'actor-3', 'actor-2', 'actor-1', 'actor-0']);
  await b.appendAudit(event(5, now + 5));
  await b.close();
  const snapshot = JSON.parse(await readFile(join(dir, 'snapshot.json'), 'utf8'));
  t.same(snapshot.state.audit.map((e: AuditEvent) => e.actor), ['actor-0', 'actor-1', 'actor-2', 'actor-3', 'actor-4'], 'the snapshot holds the log');
  const c = await MemoryStore.open({ path: dir });
  t.same((await c.listAudit({ since: 0, limit: 100 })).events.map((e) => e.actor), ['actor-5', 'actor-4', 'actor-3', 'actor-2', 'actor-1', 'actor-0']);
  await c.close();
});

t.test('memory with a path: the audit.jsonl of an earlier version is read (not its torn last line) until a snapshot holds it', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-audit-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const now = Date.now();
  await writeFile(join(dir, 'audit.jsonl'), `${[0, 1, 2].map((i) => JSON.stringify(event(i, now + i))).join('\n')}\n{"at":1,"actor":"torn`);
  const a = await MemoryStore.open({ path: dir });
  await a.appendAudit(event(3, now + 3));
  t.same((await a.listAudit({ since: 0, limit: 100 })).events.map((e) => e.actor), ['actor-3', 'actor-2', 'actor-1', 'actor-0'], 'the file\'s events, then the journal\'s');
  await a.close();
  const b = await MemoryStore.open({ path: dir });
  t.same((await b.listAudit({ since: 0, limit: 100 })).events.map((e) => e.actor), ['actor-3', 'actor-2', 'actor-1', 'actor-0'], 'read again: no snapshot holds them yet');
  await b.close();
  const c = await MemoryStore.open({ path: dir, compactBytes: 1 });
  await c.appendAudit(event(4, now + 4));
  await c.close();
  const d = await MemoryStore.open({ path: dir });
  t.same((await d.listAudit({ since: 0, limit: 100 })).events.map((e) => e.actor), ['actor-4', 'actor-3', 'actor-2', 'actor-1', 'actor-0'], 'each once, from the snapshot');
  await d.close();
  await t.rejects(stat(join(dir, 'audit.jsonl')), { code: 'ENOENT' }, 'the old file is gone once a snapshot holds what it held');
});

t.test('redis: two instances share one log', async (t) => {
  const prefix = `tga:${randomUUID()}:`;
  const a = await RedisStore.open({ url: redis.url, prefix });
  const b = await RedisStore.open({ url: redis.url, prefix });
  t.teardown(async () => { await a.close(); await b.close(); });
  await a.appendAudit(event(1, Date.now()));
  await b.appendAudit(event(2, Date.now() + 1));
  t.same((await a.listAudit({ since: 0, limit: 10 })).events.map((e) => e.actor), ['actor-2', 'actor-1']);
});
