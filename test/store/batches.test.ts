// The memory store's files and batches on disk (store/batches.ts): records and each line's
// outcome outlive a reopen, an outcome is stored once (the first stands), a log cut short by a
// crash mid-append loses only its cut line, and expired files are found for the sweep.

import t from 'tap';
import { appendFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryBatchStore, type BatchRecord, type FileRecord } from '../../lib/store/batches.js';

const file = (id: string, expires_at: number): FileRecord => ({
  id, object: 'file', bytes: 2, created_at: 1, filename: 'a.jsonl', purpose: 'batch', expires_at, account: 'demo',
});

const batch: BatchRecord = {
  id: 'batch_1', object: 'batch', endpoint: '/v1/chat/completions', errors: null, input_file_id: 'file-1', completion_window: '24h',
  status: 'in_progress', output_file_id: null, error_file_id: null, created_at: 1, in_progress_at: 2, expires_at: 3, finalizing_at: null,
  completed_at: null, failed_at: null, expired_at: null, cancelling_at: null, cancelled_at: null,
  request_counts: { total: 3, completed: 0, failed: 0 }, metadata: null, account: 'demo', key_id: 'key_1',
};

t.test('on disk: records, outcomes once, a cut log line, expiry', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-batches-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const a = await MemoryBatchStore.open(dir);
  await a.putFile(file('file-1', 9_999_999_999), Buffer.from('{}'));
  await a.putFile(file('file-old', 100), Buffer.from('{}'));
  await a.putBatch(batch);
  t.equal(await a.addOutcome('batch_1', { line: 1, ok: true, text: 'one' }), true);
  t.equal(await a.addOutcome('batch_1', { line: 1, ok: false, text: 'again' }), false, 'a line has one outcome');
  t.equal(await a.addOutcome('batch_1', { line: 2, ok: false, text: 'two' }), true);
  t.same(await a.activeBatches().then((l) => l.map((b) => b.id)), ['batch_1']);
  t.same(await a.expiredFiles(200, 10), ['file-old']);
  await a.close();
  // A crash mid-append leaves a cut line at the end of the log.
  await appendFile(join(dir, 'batches', 'batch_1.lines'), '{"line":3,"ok":tr');

  const b = await MemoryBatchStore.open(dir);
  t.same((await b.getBatch('batch_1'))?.status, 'in_progress');
  t.same((await b.fileContent('file-1'))?.toString(), '{}');
  t.same((await b.outcomes('batch_1')).map((o) => [o.line, o.text]), [[1, 'one'], [2, 'two']], 'the first outcome stands; the cut line is not one');
  t.same(await b.counts('batch_1'), { completed: 1, failed: 1 });
  t.equal(await b.addOutcome('batch_1', { line: 3, ok: true, text: 'three' }), true, 'the cut line is run again');
  t.equal(await b.deleteFile('file-old'), true);
  t.equal(await b.deleteFile('file-old'), false);
  await b.close();
  const c = await MemoryBatchStore.open(dir);
  t.equal(await c.getFile('file-old'), undefined, 'a deleted file stays deleted');
  t.same(await c.listFiles('demo').then((l) => l.map((f) => f.id)), ['file-1']);
  t.same((await c.outcomes('batch_1')).map((o) => o.line), [1, 2, 3], 'its outcome, after the cut, read back');
});

t.test('without a path: in the process only', async (t) => {
  const s = await MemoryBatchStore.open(null);
  await s.putBatch({ ...batch, status: 'completed' });
  t.same(await s.activeBatches(), []);
  t.same((await s.listBatches('demo')).length, 1);
  t.same(await s.listBatches('other'), []);
  t.equal(await s.lease(), true);
});
