// Retention (batch.retention_days, lib/batch/retention.ts) on both stores: a sweep deletes the
// files past their expires_at and the batches that ended more than retention_days ago, from
// the store itself (the memory store's files on disk under its path; every Redis key of the
// record, its outcomes, counts and lease, and its place in each set), never a running batch nor
// a live file, and at most `limit` of each per sweep (it says when it was full).

import t from 'tap';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryBatchStore, type BatchRecord, type BatchStore, type FileRecord } from '../../lib/store/batches.js';
import { RedisBatchStore } from '../../lib/store/redis/batches.js';
import { sweep } from '../../lib/batch/retention.js';
import { startRedis } from '../helpers/redis.js';
import { storeClient } from '../helpers/store-client.js';

const DAY = 86_400;
const NOW = 1_800_000_000;

const file = (id: string, expires_at: number): FileRecord => ({
  id, object: 'file', bytes: 2, created_at: 1, filename: 'a.jsonl', purpose: 'batch', expires_at, account: 'demo',
});

function batch(id: string, status: BatchRecord['status'], ended: number | null): BatchRecord {
  return {
    id, object: 'batch', endpoint: '/v1/chat/completions', errors: null, input_file_id: 'file-live', completion_window: '24h',
    status, output_file_id: null, error_file_id: null, created_at: NOW - 40 * DAY, in_progress_at: null, expires_at: NOW, finalizing_at: null,
    completed_at: status === 'completed' ? ended : null, failed_at: status === 'failed' ? ended : null, expired_at: status === 'expired' ? ended : null,
    cancelling_at: null, cancelled_at: status === 'cancelled' ? ended : null,
    request_counts: { total: 1, completed: 0, failed: 0 }, metadata: null, account: 'demo', key_id: 'key_1',
  };
}

/** Fills `s`: 3 expired files and a live one; 3 batches ended 31 days ago (retention 30), one ended yesterday, one running. */
async function fill(s: BatchStore): Promise<void> {
  for (const id of ['file-a', 'file-b', 'file-c']) await s.putFile(file(id, NOW - DAY), Buffer.from('{}'));
  await s.putFile(file('file-live', NOW + DAY), Buffer.from('{}'));
  const old = NOW - 31 * DAY;
  for (const [id, status] of [['batch_old1', 'completed'], ['batch_old2', 'failed'], ['batch_old3', 'expired']] as const) {
    await s.putBatch(batch(id, 'in_progress', null));
    await s.addOutcome(id, { line: 1, ok: true, text: 'x' });
    await s.lease(id, 'me', 60_000);
    await s.putBatch(batch(id, status, old));
  }
  await s.putBatch(batch('batch_recent', 'cancelled', NOW - DAY));
  await s.putBatch(batch('batch_running', 'in_progress', null));
  await s.lease('batch_running', 'me', 60_000);
}

async function check(t: any, s: BatchStore): Promise<void> {
  await fill(s);
  t.equal(await sweep(s, NOW, 30, 2), true, 'a sweep of at most 2 of each was full');
  t.equal((await s.listFiles('demo')).length, 2, 'it deleted 2 files of 3');
  t.equal((await s.listBatches()).length, 3, 'and 2 batches of 3');
  t.equal(await sweep(s, NOW, 30, 2), false, 'the next one finished the work');
  t.same((await s.listFiles('demo')).map((f) => f.id), ['file-live'], 'the live file stays');
  t.same((await s.listBatches()).map((b) => b.id).sort(), ['batch_recent', 'batch_running'], 'a batch within retention, and a running one, stay');
  t.same(await s.activeBatches().then((l) => l.map((b) => b.id)), ['batch_running']);
  for (const id of ['file-a', 'file-b', 'file-c']) {
    t.equal(await s.getFile(id), undefined);
    t.equal(await s.fileContent(id), undefined);
  }
  for (const id of ['batch_old1', 'batch_old2', 'batch_old3']) {
    t.equal(await s.getBatch(id), undefined);
    t.same(await s.outcomes(id), []);
    t.same(await s.counts(id), { completed: 0, failed: 0 });
  }
  t.equal(await sweep(s, NOW, 30, 2), false, 'nothing left to sweep');
}

t.test('the memory store with a path: deleted from disk, and stays deleted', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-retention-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const s = await MemoryBatchStore.open(dir);
  await check(t, s);
  await s.close();
  t.same((await readdir(join(dir, 'batches'))).sort(), [
    'batch_recent.batch.json', 'batch_running.batch.json', 'file-live.data', 'file-live.file.json',
  ], 'only what is kept is on disk');
  const reopened = await MemoryBatchStore.open(dir);
  t.same((await reopened.listBatches()).map((b) => b.id).sort(), ['batch_recent', 'batch_running'], 'a reopened store finds only what was kept');
});

t.test('the memory store without a path', async (t) => {
  await check(t, await MemoryBatchStore.open(null));
});

t.test('Redis: every key of what was deleted is gone', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const { client, admin } = await storeClient(t, redis.url, 'retention');
  await check(t, new RedisBatchStore(client, 'ret:'));
  const keys = (await admin.keys('ret:*')).sort();
  t.same(keys.filter((k) => /old|file-[abc]\b/.test(k)), [], 'no key names a deleted file or batch');
  t.same([await admin.smembers('ret:bfall'), await admin.smembers('ret:bfa:demo'), await admin.zrange('ret:bfexp', 0, -1)], [['file-live'], ['file-live'], ['file-live']],
    'each set of files holds the live file only');
  t.same((await admin.smembers('ret:bball')).sort(), ['batch_recent', 'batch_running']);
  t.same((await admin.smembers('ret:bba:demo')).sort(), ['batch_recent', 'batch_running']);
  t.same(await admin.zrange('ret:bbend', 0, -1), ['batch_recent'], 'the sweep index holds the finished batch still kept');
  t.same(keys, [
    'ret:bactive', 'ret:bb:batch_recent', 'ret:bb:batch_running', 'ret:bba:demo', 'ret:bball', 'ret:bbend', 'ret:bf:file-live', 'ret:bfa:demo', 'ret:bfall',
    'ret:bfc:file-live', 'ret:bfexp', 'ret:blease:batch_running',
  ], 'every key left is one of what is kept');
});
