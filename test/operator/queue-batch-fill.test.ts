// A batch fills a fleet's idle capacity, not just batch.concurrency slots (CONTRACT sections 13
// and 18; issues #43, #46): YAML on disk, `tollgate serve` as a child process, the openai SDK.
// One replica at max_outstanding 4 behind a queue and batch.concurrency 1: the runner sends
// more lines while the replica has free slots and nothing waits, so all 4 slots run lines, and
// no more than that pile up in the queue's low band. An interactive request that arrives
// meanwhile waits at normal and is sent before any line once a slot frees; lines then fill the
// slots again, and the batch completes with every line answered once.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { batchConfig, lines, until as poll } from '../helpers/batches.js';
import { holding, until } from '../helpers/fleet.js';
import { KEY, metric, serveFile } from '../helpers/operator.js';
import { startUpstream } from '../helpers/upstream.js';

const hold = holding('replica');
const replica = await startUpstream(hold.script);
t.teardown(() => replica.close());

t.test('batch.concurrency 1 on a replica of 4 slots: the lines fill the 4, interactive traffic still goes first', async (t) => {
  const config = batchConfig(replica.baseUrl, { batch: { max_file_bytes: 65536, concurrency: 1 } });
  config.providers = { ...config.providers, up: { kind: 'openai', targets: [{ url: replica.baseUrl }], max_outstanding: 4, timeout_ms: 60_000, queue: { max_wait_ms: 60_000, max_queued: 100 } } };
  const served = await serveFile(t, config);
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const depth = (priority: string) => metric(served.url, 'tollgate_queue_depth', { provider: 'up', priority });
  const posts = () => replica.requests.filter((r) => r.method === 'POST').length;

  const file = await client.files.create({ file: await toFile(Buffer.from(lines(12)), 'fill.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  t.ok(await until(() => hold.waiting() === 4, 15_000), 'the replica runs 4 lines at batch.concurrency 1: its idle slots were filled');
  // However long the lines run, no more than the replica's slots (and one just sent) are out.
  await new Promise((r) => setTimeout(r, 500));
  t.equal(hold.waiting(), 4, 'still 4 on the replica');
  t.ok((await depth('low')) <= 1, 'and at most one line waits in the low band');

  const live = client.chat.completions.create({ model: 'm1', messages: [{ role: 'user', content: 'now' }] }).withResponse();
  t.ok(await until(async () => (await depth('normal')) === 1), 'the interactive request waits at normal');
  const before = posts();
  hold.release();
  t.ok(await until(() => posts() > before), 'a slot freed');
  const sent = replica.requests.filter((r) => r.method === 'POST').slice(before);
  t.equal(sent[0]?.body.messages[0].content, 'now', 'the interactive request was the first sent after the release');
  const release = setInterval(() => hold.release(), 20);
  t.teardown(() => clearInterval(release));
  const { response } = await live;
  t.equal(response.status, 200);
  const done = await poll(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed');
  t.same(done.request_counts, { total: 12, completed: 12, failed: 0 });
  t.equal(replica.requests.filter((r) => r.method === 'POST' && r.body.messages[0].content !== 'now').length, 12, 'each line sent once');
});
