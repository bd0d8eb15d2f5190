// kill -9 of a process writing to a durable memory store loses no acknowledged change.
//
// A child process (fixtures/crash-child.ts) changes the store from 8 concurrent workers,
// printing `begin` before each change and `ack` once its promise resolved. The test SIGKILLs
// it mid-load, three times on the same directory (small compaction threshold, so snapshots
// are taken while it runs), then opens the store itself and checks the rule:
//
//   every acknowledged change is present; a change begun but not acknowledged may or may not
//   be (it may have been written just before the kill); nothing is applied twice; and each
//   balance is exactly its opening balance plus the units of the credits, minus the units of
//   the settlements, the store remembers as applied (acknowledged ones included), so no credit
//   or debit is counted twice or out of nowhere. Each account's usage counts exactly those
//   settlements.

import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SNAPSHOT_FILE } from '../../../lib/store/memory/journal.js';
import { MemoryStore } from '../../../lib/store/memory/store.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CHILD = fileURLToPath(new URL('./fixtures/crash-child.ts', import.meta.url));

interface Run { events: any[]; signal: string | null; code: number | null; stderr: string }

/** Runs the child on `dir` and SIGKILLs it once it has acknowledged `killAfter` changes. */
async function runUntilKilled(dir: string, round: number, killAfter: number): Promise<Run> {
  const env: Record<string, string | undefined> = { ...process.env, TS_NODE_TRANSPILE_ONLY: '1' };
  delete env.NODE_OPTIONS;
  const log = join(dir, `events-${round}.jsonl`);
  const child = spawn(process.execPath, ['--import', '@tapjs/typescript/import', CHILD, join(dir, 'store'), String(round), '16384', log], {
    cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
  const closed = once(child, 'close');
  const guard = setTimeout(() => child.kill('SIGKILL'), 60_000);
  // Poll the child's event file; kill once enough changes were acknowledged.
  const poll = setInterval(() => {
    readFile(log, 'utf8').then((text) => {
      if (countAcks(text) >= killAfter) child.kill('SIGKILL');
    }, () => undefined);
  }, 10);
  const [code, signal] = await closed;
  clearInterval(poll);
  clearTimeout(guard);
  const text = await readFile(log, 'utf8').catch(() => '');
  // Whole lines only: the kill may have cut the last one.
  const events = text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  return { events, signal, code, stderr };
}

function countAcks(text: string): number {
  let n = 0;
  for (let i = text.indexOf('"t":"ack"'); i !== -1; i = text.indexOf('"t":"ack"', i + 1)) n++;
  return n;
}

t.test('SIGKILL mid-load loses no acknowledged change and applies none twice', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-crash-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const events: any[] = [];
  for (const [round, killAfter] of [[1, 300], [2, 800], [3, 1500]]) {
    const run = await runUntilKilled(dir, round, killAfter);
    t.equal(run.signal, 'SIGKILL', `round ${round}: the child was killed mid-load${run.stderr ? `\n${run.stderr}` : ''}`);
    const acked = run.events.filter((e) => e.t === 'ack').length;
    t.ok(acked >= killAfter, `round ${round}: ${acked} changes acknowledged before the kill`);
    events.push(...run.events);
  }
  t.ok(await stat(join(dir, 'store', SNAPSHOT_FILE)).then(() => true, () => false), 'compaction ran during the load');

  const begun = events.filter((e) => e.t === 'begin');
  const acked = events.filter((e) => e.t === 'ack');
  const isAcked = (op: string, id: string) => acked.some((e) => e.op === op && (e.id ?? e.ik ?? e.rid) === id);

  const store = await MemoryStore.open({ path: join(dir, 'store'), fsyncMs: 1000 });
  t.teardown(() => store.close());

  // Accounts: every acknowledged one exists.
  const accounts = begun.filter((e) => e.op === 'account');
  const ackedAccounts = acked.filter((e) => e.op === 'account');
  t.ok(ackedAccounts.every((e) => e.created === true), 'each account was new');
  const missingAccounts = [];
  for (const e of ackedAccounts) if ((await store.getAccount(e.id)) === undefined) missingAccounts.push(e.id);
  t.strictSame(missingAccounts, [], `all ${ackedAccounts.length} acknowledged accounts are present`);

  // Credits: the first `begin` of an idempotency key carries its units; later ones are retries.
  const firstUnits = new Map<string, { account: string; units: number }>();
  for (const e of begun) if (e.op === 'credit' && !firstUnits.has(e.ik)) firstUnits.set(e.ik, { account: e.account, units: e.units });
  const ackedCredits = acked.filter((e) => e.op === 'credit');
  const retries = ackedCredits.filter((e) => e.units === 1_000_000);
  t.ok(retries.length > 0 && retries.every((e) => e.applied === false), `${retries.length} acknowledged retries were refused`);
  t.ok(ackedCredits.filter((e) => e.units !== 1_000_000).every((e) => e.applied === true), 'every first attempt applied');

  // Which keys the store remembers as used: a zero-unit credit with the same key is refused.
  const applied = new Set<string>();
  const expected = new Map<string, number>(accounts.map((e) => [e.id, e.balance]));
  const balances = new Map<string, number>();
  for (const a of accounts) {
    const rec = await store.getAccount(a.id);
    if (rec !== undefined) balances.set(a.id, rec.balance_units);
  }
  for (const [ik, { account, units }] of firstUnits) {
    const r = await store.addCredits(account, 0, ik);
    if (r?.applied === false) {
      applied.add(ik);
      expected.set(account, (expected.get(account) ?? 0) + units);
    }
  }
  const lost = ackedCredits.filter((e) => !applied.has(e.ik)).map((e) => e.ik);
  t.strictSame(lost, [], `all ${ackedCredits.length - retries.length} acknowledged credits are applied`);
  const inflight = [...applied].filter((ik) => !isAcked('credit', ik)).length;
  t.comment(`${inflight} credits were begun, not acknowledged, and still written before the kill`);
  // Settlements, likewise: a zero-unit settle of the same request id is refused once settled.
  // The usage is read first, since such a probe settles an id the store does not know.
  const window = { day: '2099-12-31', month: '2099-12' };
  const firstSettle = new Map<string, { account: string; units: number }>();
  for (const e of begun) if (e.op === 'settle' && !firstSettle.has(e.rid)) firstSettle.set(e.rid, { account: e.account, units: e.units });
  const ackedSettles = acked.filter((e) => e.op === 'settle');
  const settleRetries = ackedSettles.filter((e) => e.units === 1_000_000);
  t.ok(settleRetries.length > 0 && settleRetries.every((e) => e.applied === false), `${settleRetries.length} acknowledged settlement retries were refused`);
  t.ok(ackedSettles.filter((e) => e.units !== 1_000_000).every((e) => e.applied === true && e.charged === e.units), 'every first settlement applied and charged its units');
  const usage = new Map<string, { requests: number; tokens: number; units: number }>();
  for (const id of balances.keys()) usage.set(id, (await store.accountUsage(id, window.day, window.month)).month);
  const settled = new Set<string>();
  const expectedUsage = new Map<string, { requests: number; tokens: number; units: number }>([...balances.keys()].map((id) => [id, { requests: 0, tokens: 0, units: 0 }]));
  for (const [rid, { account, units }] of firstSettle) {
    const r = await store.settle({ account, requestId: rid, units: 0, promptTokens: 0, completionTokens: 0, ...window });
    if (r?.applied !== false) continue;
    settled.add(rid);
    expected.set(account, (expected.get(account) ?? 0) - units);
    const u = expectedUsage.get(account);
    if (u !== undefined) { u.requests += 1; u.tokens += 3; u.units += units; }
  }
  const lostSettles = ackedSettles.filter((e) => !settled.has(e.rid)).map((e) => e.rid);
  t.strictSame(lostSettles, [], `all ${ackedSettles.length - settleRetries.length} acknowledged settlements are applied`);
  t.comment(`${[...settled].filter((rid) => !isAcked('settle', rid)).length} settlements were begun, not acknowledged, and still written before the kill`);
  t.strictSame(Object.fromEntries(usage), Object.fromEntries(expectedUsage), 'each account\'s usage counts exactly its settlements, each once');

  const wrong = [...balances].filter(([id, balance]) => balance !== expected.get(id)).map(([id, balance]) => ({ id, balance, expected: expected.get(id) }));
  t.strictSame(wrong, [], `all ${balances.size} balances equal opening balance + the credits - the settlements applied, each once`);

  // Keys and revocations.
  const ackedKeys = acked.filter((e) => e.op === 'key');
  t.ok(ackedKeys.every((e) => e.created === true), 'each key was new');
  const badKeys = [];
  for (const e of ackedKeys) {
    const k = await store.keyByDigest(e.digest);
    if (k === undefined || k.id !== e.id || k.account !== e.account) badKeys.push(e.id);
  }
  t.strictSame(badKeys, [], `all ${ackedKeys.length} acknowledged keys are present`);
  const digestOf = new Map(begun.filter((e) => e.op === 'key').map((e) => [e.id, e.digest]));
  const ackedRevokes = acked.filter((e) => e.op === 'revoke');
  t.ok(ackedRevokes.every((e) => typeof e.revoked_at === 'number'), 'each revocation was acknowledged with its time');
  const badRevokes = [];
  for (const e of ackedRevokes) {
    const k = await store.keyByDigest(digestOf.get(e.id));
    if (k?.revoked_at !== e.revoked_at) badRevokes.push({ id: e.id, stored: k?.revoked_at, acked: e.revoked_at });
  }
  t.strictSame(badRevokes, [], `all ${ackedRevokes.length} acknowledged revocations are present with their first time`);
});
