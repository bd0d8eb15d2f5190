// The memory store: the shared store and metering contracts (in memory, durable, durable with
// an fsync per write and constant compaction), then what only the journal has: compaction, a torn last line,
// a crash between snapshot and truncation, and broken files.

import t from 'tap';
import { appendFile, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JOURNAL_FILE, SNAPSHOT_FILE } from '../../../lib/store/memory/journal.js';
import { MemoryStore, type MemoryStoreOptions } from '../../../lib/store/memory/store.js';
import { storeContract } from '../contract.js';
import { meteringContract } from '../metering-contract.js';
import { teamsContract } from '../teams-contract.js';
import { keyContract } from '../key-contract.js';
import { auditContract } from '../audit-contract.js';
import { defaultControls } from '../../../lib/store/types.js';

const dirs: string[] = [];
t.teardown(async () => { for (const d of dirs) await rm(d, { recursive: true, force: true }); });

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-store-'));
  dirs.push(dir);
  return dir;
}

function durable(opts: Omit<MemoryStoreOptions, 'path'>) {
  return async () => {
    const path = await tempDir();
    let store = await MemoryStore.open({ path, ...opts });
    return {
      store,
      reopen: async () => {
        await store.close();
        store = await MemoryStore.open({ path, ...opts });
        return store;
      },
    };
  };
}

storeContract(t, 'memory', async () => ({ store: new MemoryStore({ path: null, fsyncMs: 1000 }) }));
storeContract(t, 'durable memory', durable({ fsyncMs: 1000 }));
storeContract(t, 'durable memory (fsync per write, compacting often)', durable({ fsyncMs: 0, compactBytes: 256 }));
meteringContract(t, 'memory', async () => ({ store: new MemoryStore({ path: null, fsyncMs: 1000 }) }));
meteringContract(t, 'durable memory', durable({ fsyncMs: 1000 }));
meteringContract(t, 'durable memory (fsync per write, compacting often)', durable({ fsyncMs: 0, compactBytes: 256 }));
teamsContract(t, 'memory', async () => ({ store: new MemoryStore({ path: null, fsyncMs: 1000 }) }));
teamsContract(t, 'durable memory', durable({ fsyncMs: 0, compactBytes: 256 }));
keyContract(t, 'memory', async () => ({ store: new MemoryStore({ path: null, fsyncMs: 1000 }) }));
keyContract(t, 'durable memory', durable({ fsyncMs: 1000 }));
keyContract(t, 'durable memory (compacting often)', durable({ fsyncMs: 0, compactBytes: 256 }));
auditContract(t, 'memory', async () => ({ store: new MemoryStore({ path: null, fsyncMs: 1000 }) }));
auditContract(t, 'durable memory (compacting often)', durable({ fsyncMs: 0, compactBytes: 256 }));

const journalOf = (dir: string) => join(dir, JOURNAL_FILE);
const snapshotOf = (dir: string) => join(dir, SNAPSHOT_FILE);
const exists = (file: string) => stat(file).then(() => true, () => false);
const lines = async (dir: string) => (await readFile(journalOf(dir), 'utf8')).split('\n').filter((l) => l !== '');

t.test('the journal records each change as a numbered JSON line', async (t) => {
  const dir = await tempDir();
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 10 });
  await Promise.all([s.addCredits('acme', 5, 'a'), s.addCredits('acme', 6, 'b'), s.addCredits('acme', 7, 'a')]);
  await s.revokeSession('sid');
  // Written to the kernel before the promises resolved: readable before close().
  const entries = (await lines(dir)).map((l) => JSON.parse(l));
  t.strictSame(entries.map((e) => e.seq), [1, 2, 3, 4], 'a repeated idempotency key is not journaled');
  t.strictSame(entries.map((e) => e.op), ['account', 'credit', 'credit', 'session']);
  t.match(entries[1], { account: 'acme', units: 5, ik: 'a' });
  await s.close();
  t.equal(await exists(snapshotOf(dir)), false, 'no snapshot before the journal is large');
});

t.test('compaction writes a snapshot, empties the journal and survives reopening', async (t) => {
  const dir = await tempDir();
  const opts = { path: dir, fsyncMs: 1000, compactBytes: 4096 };
  let s = await MemoryStore.open(opts);
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
  await s.createKey({ id: 'key_a', account: 'acme', digest: 'a'.repeat(64) });
  await s.revokeKey('key_a');
  for (let i = 0; i < 300; i++) await s.addCredits('acme', i, `c${i}`);
  t.equal(await exists(snapshotOf(dir)), true, 'a snapshot was written');
  t.equal(await exists(`${snapshotOf(dir)}.tmp`), false, 'through a temporary file that is gone');
  const size = (await stat(journalOf(dir))).size;
  t.ok(size < 4096 * 2, `the journal was emptied and stays small (${size} bytes)`);
  const snap = JSON.parse(await readFile(snapshotOf(dir), 'utf8'));
  t.equal(snap.format, 'tollgate-store-snapshot');
  t.type(snap.seq, 'number');
  t.ok((await lines(dir)).every((l) => JSON.parse(l).seq > snap.seq), 'the journal holds only entries after the snapshot');

  await s.close();
  s = await MemoryStore.open(opts);
  t.equal((await s.getAccount('acme'))?.balance_units, (299 * 300) / 2, 'the balance survives');
  t.strictSame(await s.addCredits('acme', 1000, 'c0'), { applied: false, balance_units: (299 * 300) / 2 }, 'idempotency keys from before the snapshot survive');
  t.strictSame(await s.addCredits('acme', 1000, 'c299'), { applied: false, balance_units: (299 * 300) / 2 }, 'and from after it');
  t.type((await s.keyByDigest('a'.repeat(64)))?.revoked_at, 'number', 'the revocation survives');
  await s.close();
});

t.test("controls written before keys had a queue priority (journal and snapshot) read as the plan's: priority null", async (t) => {
  const withoutPriority = (text: string) => text.split('\n').map((l) => {
    if (l === '') return l;
    const v = JSON.parse(l);
    for (const c of [v.controls, ...(v.state?.keys ?? []).map((k: any) => k.controls)]) if (c !== undefined) delete c.priority;
    return JSON.stringify(v);
  }).join('\n');
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 10 });
  const d = 'ab'.repeat(32);
  await s.createKey({ id: 'key_old', account: 'acme', digest: d, controls: { ...defaultControls(), name: 'old', priority: 'high' } });
  await s.updateKey('key_old', { models: ['m'] });
  await s.close();
  const journal = await readFile(journalOf(dir), 'utf8');
  t.ok(journal.includes('"priority"'), 'this version writes it');
  await writeFile(journalOf(dir), withoutPriority(journal));
  s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  t.strictSame((await s.getKey('key_old'))!.controls, { ...defaultControls(), name: 'old', models: ['m'] }, 'from the journal');
  await s.updateKey('key_old', { priority: 'low' });
  await s.close();
  // A snapshot of an older version, too.
  s = await MemoryStore.open({ path: dir, fsyncMs: 0, compactBytes: 1 });
  await s.close();
  t.equal(await exists(snapshotOf(dir)), true);
  await writeFile(snapshotOf(dir), withoutPriority(await readFile(snapshotOf(dir), 'utf8')));
  s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  t.equal((await s.getKey('key_old'))!.controls.priority, null, 'from the snapshot');
  t.equal((await s.getKey('key_old'))!.controls.name, 'old');
  await s.close();
});

t.test('a torn last journal line is ignored and cut off', async (t) => {
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
  await s.addCredits('acme', 1, 'one');
  await s.close();
  await appendFile(journalOf(dir), '{"seq":3,"op":"credit","account":"acme","units":1000,"ik":"to');

  s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.equal((await s.getAccount('acme'))?.balance_units, 101, 'the torn credit was not applied');
  t.strictSame(await s.addCredits('acme', 5, 'torn'), { applied: true, balance_units: 106 }, 'and its key is unused');
  await s.close();
  t.strictSame((await lines(dir)).map((l) => JSON.parse(l).seq), [1, 2, 3], 'the fragment is gone: every line parses and numbering resumed after the last whole one');

  s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.equal((await s.getAccount('acme'))?.balance_units, 106, 'the change after the torn line survives the next reopen');
  await s.close();
});

t.test('a crash between the snapshot rename and the journal truncation applies nothing twice', async (t) => {
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
  for (let i = 1; i <= 20; i++) await s.addCredits('acme', i, `c${i}`);
  await s.revokeSession('sid');
  await s.close();
  const before = await readFile(journalOf(dir), 'utf8');

  // Opening with a tiny threshold compacts at once: snapshot written, journal emptied.
  s = await MemoryStore.open({ path: dir, fsyncMs: 0, compactBytes: 1 });
  t.equal(await exists(snapshotOf(dir)), true);
  t.equal((await lines(dir)).length, 0, 'the journal was emptied');
  await s.close();
  s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  await s.addCredits('acme', 1000, 'after');
  await s.close();
  const after = await readFile(journalOf(dir), 'utf8');
  t.equal(JSON.parse(after).seq, 23, 'numbering continues after the snapshot');

  // As if the process died after the rename but before the truncation: the old entries are
  // still in the journal, followed by the newer one.
  await writeFile(journalOf(dir), before + after);
  s = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  t.equal((await s.getAccount('acme'))?.balance_units, 210 + 1000, 'each credit counted once');
  t.strictSame(await s.addCredits('acme', 1, 'c20'), { applied: false, balance_units: 1210 });
  t.equal(await s.isSessionRevoked('sid'), true);
  await s.close();
});

t.test('a stale temporary snapshot is ignored', async (t) => {
  const dir = await tempDir();
  let s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 7 });
  await s.close();
  await writeFile(`${snapshotOf(dir)}.tmp`, '{"format":"tollgate-store-sn');
  s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.equal((await s.getAccount('acme'))?.balance_units, 7);
  t.equal(await exists(`${snapshotOf(dir)}.tmp`), false, 'and removed');
  await s.close();
});

t.test('a corrupt line inside the journal stops the store from opening', async (t) => {
  const dir = await tempDir();
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 7 });
  await s.addCredits('acme', 1, 'x');
  await s.close();
  const [first, second] = await lines(dir);
  await writeFile(journalOf(dir), `${first}\n{"seq":2,"op":"cre\n${second}\n`);
  await t.rejects(MemoryStore.open({ path: dir, fsyncMs: 1000 }), { message: `${journalOf(dir)}:2: corrupt journal line` });
  await writeFile(journalOf(dir), `${first}\n{"seq":2,"op":"nonsense"}\n`);
  await t.rejects(MemoryStore.open({ path: dir, fsyncMs: 1000 }), { message: `${dir}: journal entry 2 is not a store change` });
});

t.test('a store constructed with a path loads before answering', async (t) => {
  const dir = await tempDir();
  const first = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  await first.createAccount({ id: 'acme', plan: 'pro', balance_units: 3 });
  await first.close();
  const s = new MemoryStore({ path: dir, fsyncMs: 1000 });
  t.equal((await s.getAccount('acme'))?.balance_units, 3);
  await s.close();
});

t.test('a closed store refuses work; close is idempotent', async (t) => {
  const s = await MemoryStore.open({ path: await tempDir(), fsyncMs: 1000 });
  await s.close();
  await s.close();
  await t.rejects(s.ping(), { message: 'store closed' });
  await t.rejects(s.createAccount({ id: 'a', plan: 'free', balance_units: 0 }), { message: 'store closed' });
});

t.test('bad input is refused before anything is journaled', async (t) => {
  const dir = await tempDir();
  const s = await MemoryStore.open({ path: dir, fsyncMs: 1000 });
  t.teardown(() => s.close());
  await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
  await t.rejects(s.addCredits('acme', 1.5, 'k'), RangeError);
  await t.rejects(s.addCredits('acme', Number.NaN, 'k'), RangeError);
  await t.rejects(s.createAccount({ id: '', plan: 'pro', balance_units: 0 }), TypeError);
  await t.rejects(s.createKey({ id: 'key_x', account: 'acme', digest: 'tg_plaintext_key' }), TypeError, 'a plaintext key is never stored');
  t.equal((await lines(dir)).length, 1);
});

t.test('a listener that throws does not stop the others', async (t) => {
  const s = new MemoryStore({ path: null, fsyncMs: 1000 });
  t.teardown(() => s.close());
  const seen: string[] = [];
  s.onRevoke(() => { throw new Error('boom'); });
  s.onRevoke((r) => seen.push(r.kind));
  await s.revokeSession('sid');
  t.strictSame(seen, ['session']);
});

t.test('files written before per-key controls load as keys without controls', async (t) => {
  const { sha256Hex, keyIdOf } = await import('../../../lib/store/digest.js');
  const { defaultControls } = await import('../../../lib/store/types.js');
  const path = await tempDir();
  const d1 = sha256Hex('tg_old_snapshot');
  const d2 = sha256Hex('tg_old_journal');
  // A snapshot and a journal exactly as the previous version wrote them.
  await writeFile(join(path, SNAPSHOT_FILE), JSON.stringify({
    format: 'tollgate-store-snapshot', version: 1, seq: 2,
    state: {
      accounts: [{ id: 'old', plan: 'free', balance_units: 50, created_at: 1 }],
      keys: [{ id: keyIdOf(d1), account: 'old', digest: d1, created_at: 2, revoked_at: null }],
      sessions: [], credits: {},
    },
  }));
  await writeFile(join(path, JOURNAL_FILE), `${JSON.stringify({ seq: 3, op: 'key', id: keyIdOf(d2), account: 'old', digest: d2, created_at: 3 })}\n`
    + `${JSON.stringify({ seq: 4, op: 'settle', account: 'old', rid: 'r1', charged: 5, tokens: 2, day: '2026-11-23', month: '2026-11', at: Date.now() })}\n`);
  const s = await MemoryStore.open({ path, fsyncMs: 0 });
  t.teardown(() => s.close());
  for (const d of [d1, d2]) {
    const k = await s.keyByDigest(d);
    t.strictSame([k?.id, k?.controls, k?.previous, k?.last4, k?.spent], [keyIdOf(d), defaultControls(), null, null, { period: 'n', units: 0 }]);
  }
  t.equal((await s.getAccount('old'))?.balance_units, 45, 'an old settlement still debits');
  t.strictSame((await s.listKeys('old'))?.map((k) => k.id), [keyIdOf(d1), keyIdOf(d2)]);
  t.ok(await s.updateKey(keyIdOf(d1), { name: 'now with controls' }), 'and they take controls');
});
