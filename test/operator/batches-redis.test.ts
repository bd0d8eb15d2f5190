// Two gateways on one Redis (CONTRACT section 18): the one running a batch is killed (SIGKILL)
// mid-batch; once its lease lapses the other takes the batch over and finishes it, each
// custom_id once in the output and the wallet debited exactly once per line.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, serveFile, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const N = 30;
const redis = await startRedis();
const up = await fakeChat(300);
t.teardown(async () => { await up.close(); await redis.stop(); });

t.test('another instance takes over a batch whose instance died', async (t) => {
  const config = batchConfig(up.baseUrl, { store: { kind: 'redis', url: redis.url, prefix: 'op-batch:' }, batch: { concurrency: 2 } });
  const a = await serveFile(t, config);
  const clientA = new OpenAI({ apiKey: KEY, baseURL: `${a.url}/v1`, maxRetries: 0 });
  const file = await clientA.files.create({ file: await toFile(Buffer.from(lines(N)), 'nightly.jsonl'), purpose: 'batch' });
  const batch = await clientA.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => clientA.batches.retrieve(batch.id), (b) => b.request_counts!.completed >= 2);
  // The second instance starts while the first runs the batch: the lease keeps it off.
  const b = await serveFile(t, undefined, a.file);
  const partway = await clientA.batches.retrieve(batch.id);
  t.ok(partway.request_counts!.completed < N, 'killed partway through');
  a.proc.kill('SIGKILL');
  await new Promise((r) => a.proc.once('exit', r));

  const clientB = new OpenAI({ apiKey: KEY, baseURL: `${b.url}/v1`, maxRetries: 0 });
  const done = await until(() => clientB.batches.retrieve(batch.id), (x) => x.status === 'completed', 60_000);
  t.equal(done.status, 'completed', 'the other instance finished it');
  t.same(done.request_counts, { total: N, completed: N, failed: 0 });
  const out = (await (await clientB.files.content(done.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(out.map((o) => o.custom_id).sort(), Array.from({ length: N }, (_, i) => `req-${i}`).sort(), 'each custom_id once');
  const records = await fetch(`${b.url}/admin/usage/records?account=demo&limit=100`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json()) as any;
  const mine = records.records.filter((r: any) => r.batch_id === batch.id);
  t.ok(mine.length >= N, `usage records carry batch_id (${mine.length})`);
  t.same(new Set(mine.map((r: any) => r.custom_id)).size, N, 'and custom_id');
  const w = await wallet(b.url);
  t.equal(w.balance_units, WALLET - N * LINE_UNITS, 'each line debited once, at the discount');
});
