// Batch lines wait in the admission queue's lowest band (CONTRACT sections 13 and 18): one
// replica at max_outstanding 1, a batch whose lines fill it and queue at `low`, and an
// interactive request of the same account that arrives later, waits at `normal`, and is sent
// before every waiting line once the replica has room.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { batchConfig, lines, until as poll } from '../helpers/batches.js';
import { holding, until } from '../helpers/fleet.js';
import { KEY, metric, serveFile } from '../helpers/operator.js';
import { startUpstream } from '../helpers/upstream.js';

const hold = holding('replica');
const replica = await startUpstream(hold.script);
t.teardown(() => replica.close());

t.test('batch lines queue at low; interactive traffic goes first', async (t) => {
  const config = batchConfig(replica.baseUrl, { batch: { concurrency: 3 } });
  config.providers = { ...config.providers, up: { kind: 'openai', targets: [{ url: replica.baseUrl }], max_outstanding: 1, queue: { max_wait_ms: 30_000, max_queued: 100 } } };
  const served = await serveFile(t, config);
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const depth = (priority: string) => metric(served.url, 'tollgate_queue_depth', { provider: 'up', priority });

  const file = await client.files.create({ file: await toFile(Buffer.from(lines(4)), 'q.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  t.ok(await until(async () => hold.waiting() === 1 && (await depth('low')) === 2, 15_000), 'one line on the replica, two waiting at low');
  t.equal(await metric(served.url, 'tollgate_batch_lines', { state: 'running' }), 3, 'three lines running (one sent, two queued)');
  t.equal(await metric(served.url, 'tollgate_batch_lines', { state: 'waiting' }), 1, 'one not started');

  const live = client.chat.completions.create({ model: 'm1', messages: [{ role: 'user', content: 'now' }] }).withResponse();
  t.ok(await until(async () => (await depth('normal')) === 1), 'the interactive request waits at normal');
  hold.release();
  t.ok(await until(async () => hold.waiting() === 1 && (await depth('normal')) === 0), 'the replica took the interactive request next');
  // The line that finished made room for the last one: it waits with the other two.
  t.ok(await until(async () => (await depth('low')) === 3), 'the lines still wait, the last one with them');
  hold.release();
  const { response } = await live;
  t.equal(response.status, 200);
  t.ok(Number(response.headers.get('x-tollgate-queue-ms')) >= 0);
  const release = setInterval(() => hold.release(), 20);
  t.teardown(() => clearInterval(release));
  const done = await poll(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed');
  t.same(done.request_counts, { total: 4, completed: 4, failed: 0 });
});
