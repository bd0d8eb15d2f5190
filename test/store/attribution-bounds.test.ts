// The totals by tag and by end user are bounded (CONTRACT section 20, ../../docs/attribution.md):
// per account and UTC hour, the first 10,000 distinct end users (1,000 tags) keep their names,
// later ones count under '(other)', and every sum stays exact: the groups by end user add up to
// the totals. On the memory store, the memory store with a path (reopened: the day files read
// again decide alike), Redis and a Redis Cluster (the bound's set shares its hour's slot).

import t from 'tap';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { Store, TotalsRow, UsageRecord } from '../../lib/store/types.js';
import { BOUNDS, HOUR_MS, OTHER } from '../../lib/store/usage-totals.js';
import { startRedis } from '../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const cluster = redis.external ? undefined : await startRedis({ cluster: true });
t.teardown(() => cluster?.stop());

const USERS = BOUNDS.end_user!;
const TAGS = BOUNDS.tag!;
const hour = Math.floor(Date.now() / HOUR_MS) * HOUR_MS;

function rec(i: number, over: Partial<UsageRecord>): UsageRecord {
  return {
    request_id: `r-${i}`, at: hour + (i % 1000), account: 'a', key_id: 'key_a1', team: null, model: 'm', provider: 'p', target: null,
    route: '/v1/chat/completions', status: 200, prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3 + (i % 5), usage_source: 'upstream',
    duration_ms: 1, ttft_ms: null, queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

// USERS + 5 distinct end users, the first ones again after the bound is reached (they keep their
// names), records without one, and one other account whose own bound is untouched.
const records: UsageRecord[] = [];
for (let i = 0; i < USERS + 5; i++) records.push(rec(i, { end_user: `u${i}` }));
for (let i = 0; i < 3; i++) records.push(rec(USERS + 10 + i, { end_user: 'u0', tags: ['x'] }));
for (let i = 0; i < 4; i++) records.push(rec(USERS + 20 + i, { end_user: null }));
records.push(rec(USERS + 30, { account: 'b', end_user: `u${USERS + 1}` }));
// TAGS + 2 distinct tags on account c, two per record.
for (let i = 0; i < TAGS / 2 + 1; i++) records.push(rec(USERS + 100 + i, { account: 'c', tags: [`t${2 * i}`, `t${2 * i + 1}`] }));

const sum = (rows: TotalsRow[]) => rows.reduce((a, r) => a + r.units, 0);
const count = (rows: TotalsRow[], value: string) => rows.find((r) => r.values[0] === value)?.requests ?? 0;

async function check(t: any, s: Store): Promise<void> {
  const q = { since: hour, until: hour + HOUR_MS };
  const [all, users] = await Promise.all([s.usageTotals({ ...q, by: [], account: 'a' }), s.usageTotals({ ...q, by: ['end_user'], account: 'a' })]);
  t.equal(users.length, USERS + 2, 'the bound, (other) and none');
  t.equal(count(users, OTHER), 5, 'the end users past the bound count under (other)');
  t.equal(count(users, 'u0'), 4, 'an end user seen before the bound keeps its name after it');
  t.equal(count(users, ''), 4, 'records without an end user');
  t.equal(sum(users), sum(all), 'the groups sum to the totals to the unit');
  t.equal(count(await s.usageTotals({ ...q, by: ['end_user'], account: 'b' }), `u${USERS + 1}`), 1, "another account's bound is its own");
  const tags = await s.usageTotals({ ...q, by: ['tag'], account: 'c' });
  t.equal(tags.length, TAGS + 1, 'tags are bounded too');
  t.equal(count(tags, OTHER), 1, "the last record's two tags past the bound count once under (other)");
  const everyone = await s.usageTotals({ ...q, by: ['end_user'] });
  t.equal(sum(everyone), sum(await s.usageTotals({ ...q, by: [] })), 'over all accounts too');
}


t.test('memory', async (t) => {
  const s = new MemoryStore({ path: null });
  // In order: the bound keeps the first names written.
  for (const r of records) await s.recordUsage(r);
  await check(t, s);
  await s.close();
});

t.test('memory with a path, reopened', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-bounds-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  let s: Store = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  for (const r of records) await s.recordUsage(r);
  await check(t, s);
  await s.close();
  s = await MemoryStore.open({ path: dir });
  await check(t, s);
  await s.close();
});

for (const [name, url] of [['redis', redis.url], ...(cluster === undefined ? [] : [['redis cluster', cluster.url]])] as const) {
  t.test(name, async (t) => {
    const s = new RedisStore({ url, prefix: `tg{bounds-${name.length}}:`, commandTimeoutMs: 10_000 });
    await s.ready();
    t.teardown(() => s.close());
    // Sequential up to the bound (the first names are kept), then at once.
    for (const r of records.slice(0, USERS)) await s.recordUsage(r);
    const rest = records.slice(USERS);
    for (let i = 0; i < rest.length; i += 100) await Promise.all(rest.slice(i, i + 100).map((r) => s.recordUsage(r)));
    await check(t, s);
  });
}
