// Metering behaviour only the memory store has (the shared part is metering-contract.ts, run
// from memory.test.ts): what is journaled, what is pruned at compaction, holds not surviving a
// restart, the usage file and the in-memory ring.

import t from 'tap';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { JOURNAL_FILE, SNAPSHOT_FILE } from '../../../lib/store/memory/journal.js';
import { MemoryStore } from '../../../lib/store/memory/store.js';
import { MemoryMetering, SETTLED_TTL_MS } from '../../../lib/store/memory/metering.js';
import type { Quotas, UsageRecord } from '../../../lib/store/types.js';
import { USAGE_DIR } from '../../../lib/store/memory/usage-files.js';
import { settledMemory } from '../../helpers/heap.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-metering-'));
  dirs.push(dir);
  return dir;
}

const NONE: Quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const DAY = new Date().toISOString().slice(0, 10);
const MONTH = DAY.slice(0, 7);
const hold = (account: string, requestId: string, units: number) =>
  ({ account, requestId, units, ttlMs: 60_000, day: DAY, month: MONTH, quotas: NONE });
const settlement = (account: string, requestId: string, units: number, day = DAY, month = MONTH) =>
  ({ account, requestId, units, promptTokens: 1, completionTokens: 2, day, month });
const record = (request_id: string, model = 'm'): UsageRecord => ({
  request_id, at: Date.now(), account: 'acme', key_id: 'key_x', team: null, model, provider: 'p', target: null, route: '/v1/chat/completions',
  status: 200, prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: 1, ttft_ms: 1, queue_ms: 0, tags: [], end_user: null,
});
const journal = async (dir: string) =>
  (await readFile(join(dir, JOURNAL_FILE), 'utf8')).split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));

// First, before other tests leave garbage for the collector to free while it measures.
t.test('a settled request id costs under 140 bytes for its hour, whatever string built it', async (t) => {
  // The ids the gateway holds with come from crypto.randomUUID(): a tree of 14 cons strings
  // (about 450 bytes) unless the id kept is made flat. Kept as [time, units] under an
  // account-and-id string, an id took about 190 bytes; as units under the id, with its time in
  // a run per second, about 110.
  const settled = async (): Promise<number> => (await settledMemory()).heapUsed;
  const s = new MemoryStore({ path: null });
  t.teardown(() => s.close());
  await s.createAccount({ id: 'acme', plan: 'free', balance_units: 1e15 });
  const N = 20_000;
  const before = await settled();
  for (let i = 0; i < N; i++) {
    const rid = randomUUID();
    await s.hold(hold('acme', rid, 10));
    await s.settle(settlement('acme', rid, 7));
  }
  const per = ((await settled()) - before) / N;
  t.ok(per < 140, `about ${Math.round(per)} bytes per settled request`);
  t.equal((await s.getAccount('acme'))!.balance_units, 1e15 - 7 * N, 'each settled once');
});

t.test('settled ids are forgotten an hour after their second, per account; within it a repeat charges nothing', async (t) => {
  const m = new MemoryMetering();
  const acme = { id: 'acme', plan: 'free', balance_units: 1000, created_at: 0 };
  const zeta = { id: 'zeta', plan: 'free', balance_units: 1000, created_at: 0 };
  const entry = (account: string, rid: string, charged: number, at: number) =>
    ({ op: 'settle' as const, account, rid, charged, tokens: 1, day: DAY, month: MONTH, at });
  const accounts = new Map([['acme', acme], ['zeta', zeta]]);
  const apply = (e: ReturnType<typeof entry>) => m.apply(accounts.get(e.account), e);
  // Two runs of acme's (one second each) and one of zeta's, the first two about to expire.
  const first = Date.now() - SETTLED_TTL_MS + 400;
  t.ok(apply(entry('acme', 'a1', 1, first)));
  t.ok(apply(entry('acme', 'a2', 2, first)));
  t.ok(apply(entry('zeta', 'z1', 5, first + 1)));
  t.ok(apply(entry('acme', 'a3', 3, first + 2000)));
  t.notOk(apply(entry('acme', 'a2', 9, first + 2001)), 'a repeat within the hour is not applied');
  t.equal(acme.balance_units, 1000 - 1 - 2 - 3, 'the repeat charged nothing');
  t.strictSame(m.snapshot().settled, [
    ['acme', 'a1', first, 1], ['acme', 'a2', first, 2], ['acme', 'a3', first + 2000, 3], ['zeta', 'z1', first + 1, 5],
  ], "each account's ids, oldest first, with their run's time");
  t.equal(m.repeated(acme, 'a2')?.charged_units, 2, 'the first charge is told');
  t.equal(m.repeated(zeta, 'a2'), undefined, "another account's id is not this one's");
  await new Promise((r) => setTimeout(r, Math.max(0, first + SETTLED_TTL_MS + 100 - Date.now())));
  t.ok(apply(entry('acme', 'a4', 4, Date.now())), 'a new settlement of acme');
  t.equal(m.repeated(acme, 'a1'), undefined, "its account's first run is forgotten");
  t.equal(m.repeated(acme, 'a2'), undefined, 'the whole run');
  t.equal(m.repeated(acme, 'a3')?.charged_units, 3, 'the next run is kept');
  t.equal(m.repeated(zeta, 'z1')?.charged_units, 5, "another account's ids wait for the sweep");
  t.strictSame(m.snapshot().settled.map((s) => s[1]), ['a3', 'a4'], 'the snapshot sweeps every account');
  t.equal(m.repeated(zeta, 'z1'), undefined);
  t.ok(apply(entry('acme', 'a1', 1, Date.now())), 'a forgotten id settles anew');

  // Restored from a snapshot, the same ids and runs; what the hour has passed is forgotten.
  const back = new MemoryMetering();
  back.restore({ settled: [['acme', 'old', Date.now() - SETTLED_TTL_MS - 1, 1], ['acme', 'x', Date.now(), 7], ['acme', 'y', Date.now(), 8]], usage: {} });
  t.strictSame(back.snapshot().settled.map((s) => [s[1], s[3]]), [['x', 7], ['y', 8]]);
});

t.test('a settlement is one journal entry; holds, releases and repeats are not journaled', async (t) => {
  const dir = await tempDir();
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.teardown(() => s.close());
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
  await s.hold(hold('acme', 'r1', 50));
  await s.hold(hold('acme', 'r2', 10));
  await s.release('acme', 'r2');
  await s.settle(settlement('acme', 'r1', 40));
  await s.settle(settlement('acme', 'r1', 40));
  await s.recordUsage(record('r1'));
  const entries = await journal(dir);
  t.strictSame(entries.map((e) => e.op), ['account', 'settle']);
  t.match(entries[1], { seq: 2, op: 'settle', account: 'acme', rid: 'r1', charged: 40, tokens: 3, day: DAY, month: MONTH, at: Number });
  const usage = (await readFile(join(dir, USAGE_DIR, `${DAY}.jsonl`), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  t.strictSame(usage, [record('r1')].map((r) => ({ ...r, at: usage[0].at })), 'usage records go to their own file, one per UTC day');
});

t.test('open holds do not survive a restart (as if their TTL ran out)', async (t) => {
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
  t.strictSame(await s.hold(hold('acme', 'r1', 100)), { ok: true, available_units: 0 });
  await s.close();
  s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.teardown(() => s.close());
  t.equal((await s.accountUsage('acme', DAY, MONTH)).held_units, 0);
  t.strictSame(await s.settle(settlement('acme', 'r1', 30)), { applied: true, charged_units: 30, balance_units: 70, available_units: 70 }, 'the request can still be settled');
});

t.test('compaction prunes settled ids after their hour and old usage windows', async (t) => {
  const dir = await tempDir();
  const now = Date.now();
  const oldDay = new Date(now - 60 * 86_400_000).toISOString().slice(0, 10);
  const oldMonth = new Date(now - 430 * 86_400_000).toISOString().slice(0, 7);
  const lines = [
    { seq: 1, op: 'account', id: 'acme', plan: 'pro', balance_units: 1000, created_at: now },
    { seq: 2, op: 'settle', account: 'acme', rid: 'old', charged: 10, tokens: 1, day: oldDay, month: oldMonth, at: now - SETTLED_TTL_MS - 60_000 },
    { seq: 3, op: 'settle', account: 'acme', rid: 'recent', charged: 20, tokens: 2, day: DAY, month: MONTH, at: now - SETTLED_TTL_MS + 60_000 },
  ];
  await writeFile(join(dir, JOURNAL_FILE), lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  let s = await MemoryStore.open({ path: dir, fsyncMs: 0, compactBytes: 1 });
  const snap = JSON.parse(await readFile(join(dir, SNAPSHOT_FILE), 'utf8'));
  t.strictSame(snap.state.metering.settled, [['acme', 'recent', now - SETTLED_TTL_MS + 60_000, 20]], 'only ids settled in the last hour are kept');
  t.strictSame(snap.state.metering.usage, { acme: { [DAY]: [1, 2, 20], [MONTH]: [1, 2, 20] } }, 'old day and month windows are dropped');
  await s.close();

  s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  t.teardown(() => s.close());
  t.equal((await s.getAccount('acme'))?.balance_units, 970, 'the debits stay');
  t.equal((await s.settle(settlement('acme', 'recent', 5)))?.applied, false, 'a recent id is still refused');
  t.equal((await s.settle(settlement('acme', 'old', 5)))?.applied, true, 'a forgotten id applies again');
});

t.test('a snapshot from before metering loads; a corrupt metering state does not', async (t) => {
  const dir = await tempDir();
  const state = { accounts: [{ id: 'acme', plan: 'pro', balance_units: 50, created_at: 1 }], keys: [], sessions: [], credits: {} };
  const write = (st: unknown) => writeFile(join(dir, SNAPSHOT_FILE), JSON.stringify({ format: 'tollgate-store-snapshot', version: 1, seq: 0, state: st }));
  await write(state);
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.strictSame(await s.settle(settlement('acme', 'r1', 20)), { applied: true, charged_units: 20, balance_units: 30, available_units: 30 });
  await s.close();
  await rm(join(dir, JOURNAL_FILE));
  await write({ ...state, metering: { settled: [['acme', 'r1', 'yesterday', 20]], usage: {} } });
  await t.rejects(MemoryStore.open({ path: dir, fsyncMs: 1000 }), { message: 'store snapshot: unexpected metering state' });
});

t.test('a torn last line of the usage file is skipped, and later records are intact', async (t) => {
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.recordUsage(record('r1'));
  await s.close();
  const file = join(dir, USAGE_DIR, `${DAY}.jsonl`);
  await writeFile(file, `${await readFile(file, 'utf8')}{"request_id":"r2","at":`);
  s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.teardown(() => s.close());
  await s.recordUsage(record('r3'));
  t.equal((await s.usageReport(undefined, 0)).requests, 2);
});

t.test('without a path, records are not capped by count: 150,000 are all kept', async (t) => {
  const s = new MemoryStore({ path: null });
  t.teardown(() => s.close());
  for (let i = 0; i < 10; i++) await s.recordUsage(record(`first-${i}`, 'first'));
  for (let i = 0; i < 150_000; i++) await s.recordUsage(record(`r-${i}`));
  const report = await s.usageReport(undefined, 0);
  t.equal(report.requests, 150_010);
  t.strictSame(Object.keys(report.by_model), ['first', 'm'], 'the oldest are still there');
});

t.test('bad metering input is refused before anything is journaled', async (t) => {
  const dir = await tempDir();
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.teardown(() => s.close());
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
  await t.rejects(s.hold({ ...hold('acme', 'r', 1), units: -1 }), RangeError);
  await t.rejects(s.hold({ ...hold('acme', 'r', 1), units: 1.5 }), RangeError);
  await t.rejects(s.hold({ ...hold('acme', 'r', 1), ttlMs: 0 }), RangeError);
  await t.rejects(s.hold({ ...hold('acme', 'r', 1), day: '2024-1-1' }), TypeError);
  await t.rejects(s.hold({ ...hold('acme', 'r', 1), quotas: { ...NONE, tokens_per_day: -1 } }), RangeError);
  await t.rejects(s.hold({ ...hold('acme', '', 1) }), TypeError);
  await t.rejects(s.settle({ ...settlement('acme', 'r', 1), promptTokens: -1 }), RangeError);
  await t.rejects(s.settle({ ...settlement('acme', 'r', 1), month: '2024' }), TypeError);
  await t.rejects(s.recordUsage({ ...record('r'), units: Number.NaN }), TypeError);
  t.equal((await journal(dir)).length, 1);
  t.equal((await s.accountUsage('acme', DAY, MONTH)).held_units, 0);
});
