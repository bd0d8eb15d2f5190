// The audit log in both stores (CONTRACT section 12): appendAudit/listAudit behave the same on
// the memory store and on Redis (its own redis-server): newest first, paged by cursor with each
// event once, the since filter, bad cursors refused; the memory store with a path keeps every
// event across a reopen (and ignores a torn last line); two Redis store instances share one log.

import t from 'tap';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { appendFile, mkdtemp, readFile, rm } from 'node:fs/promises';
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

t.test('memory with a path: events survive a reopen; a torn last line is not an event', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-audit-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const a = await MemoryStore.open({ path: dir });
  const now = Date.now();
  for (let i = 0; i < 5; i++) await a.appendAudit(event(i, now + i));
  await a.close();
  await appendFile(join(dir, 'audit.jsonl'), '{"at":1,"actor":"torn');
  const b = await MemoryStore.open({ path: dir });
  const events = (await b.listAudit({ since: 0, limit: 100 })).events;
  t.same(events.map((e) => e.actor), ['actor-4', 'actor-3', 'actor-2', 'actor-1', 'actor-0']);
  await b.appendAudit(event(5, now + 5));
  await b.close();
  const lines = (await readFile(join(dir, 'audit.jsonl'), 'utf8')).split('\n').filter(Boolean);
  t.equal(lines.filter((l) => { try { JSON.parse(l); return true; } catch { return false; } }).length, 6, 'the new event is on a line of its own');
  const c = await MemoryStore.open({ path: dir });
  t.equal((await c.listAudit({ since: 0, limit: 100 })).events[0]!.actor, 'actor-5');
  await c.close();
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
