// A batch outlives its gateway (CONTRACT section 18): the memory store with a path, the gateway
// killed (SIGKILL) mid-batch and started again on the same file; the batch completes with each
// custom_id once in its output, and the wallet is debited exactly once per line. A SIGTERM
// drain lets the lines in flight finish and starts no new one; the restart runs the rest.

import t from 'tap';
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import OpenAI, { toFile } from 'openai';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { KEY, WALLET, serveFile, statusOf, wallet } from '../helpers/operator.js';

const N = 16;

t.test('a gateway killed mid-batch resumes it after a restart, each line answered and charged once', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-op-batch-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const up = await fakeChat(150);
  t.teardown(() => up.close());
  const config = batchConfig(up.baseUrl, { store: { kind: 'memory', path: join(dir, 'store'), fsync_ms: 0 } });
  const first = await serveFile(t, config);
  let client = new OpenAI({ apiKey: KEY, baseURL: `${first.url}/v1`, maxRetries: 0 });
  const file = await client.files.create({ file: await toFile(Buffer.from(lines(N)), 'nightly.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const partway = await until(() => client.batches.retrieve(batch.id), (b) => b.request_counts!.completed >= 4);
  t.ok(partway.request_counts!.completed >= 4 && partway.request_counts!.completed < N, 'killed partway through');
  first.proc.kill('SIGKILL');
  await new Promise((r) => first.proc.once('exit', r));

  const second = await serveFile(t, undefined, first.file);
  t.equal(await statusOf(`${second.url}/readyz`, 200), 200);
  client = new OpenAI({ apiKey: KEY, baseURL: `${second.url}/v1`, maxRetries: 0 });
  t.equal((await client.files.retrieve(file.id)).id, file.id, 'the input file outlived the restart');
  const done = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed', 30_000);
  t.equal(done.status, 'completed');
  t.same(done.request_counts, { total: N, completed: N, failed: 0 });
  const out = (await (await client.files.content(done.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(out.map((o) => o.custom_id).sort(), Array.from({ length: N }, (_, i) => `req-${i}`).sort(), 'each custom_id once');
  const w = await wallet(second.url);
  t.equal(w.balance_units, WALLET - N * LINE_UNITS, 'each line debited once, at the discount');
  t.equal(w.held_units, 0, 'no hold left');
});

t.test('SIGTERM mid-batch: lines in flight finish, no new one starts, the restart finishes the batch', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-op-batch-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const up = await fakeChat(300);
  t.teardown(() => up.close());
  const first = await serveFile(t, batchConfig(up.baseUrl, { store: { kind: 'memory', path: join(dir, 'store'), fsync_ms: 0 } }));
  let client = new OpenAI({ apiKey: KEY, baseURL: `${first.url}/v1`, maxRetries: 0 });
  const file = await client.files.create({ file: await toFile(Buffer.from(lines(N)), 'nightly.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => client.batches.retrieve(batch.id), (b) => b.request_counts!.completed >= 2);
  const exited = new Promise<number | null>((resolve) => first.proc.once('exit', (code) => resolve(code)));
  first.proc.kill('SIGTERM');
  t.equal(await exited, 0, 'the drain ends, exit 0');
  const sent = up.requests.length;
  t.ok(sent < N, `${sent} lines sent before the drain stopped the batch`);

  const second = await serveFile(t, undefined, first.file);
  client = new OpenAI({ apiKey: KEY, baseURL: `${second.url}/v1`, maxRetries: 0 });
  const done = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed', 30_000);
  t.same(done.request_counts, { total: N, completed: N, failed: 0 });
  t.equal(up.requests.length, N, 'each line sent upstream once: the drained ones were not run again');
  const w = await wallet(second.url);
  t.equal(w.balance_units, WALLET - N * LINE_UNITS, 'each line debited once');
  t.equal(w.held_units, 0);
});
