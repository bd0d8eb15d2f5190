// Batch lines (CONTRACT section 18) beyond the happy path: embeddings at the discount, a 402
// refusal as a failed line in the error file (not a failed batch, nothing charged), a cancel
// that stops new lines while those in flight finish and are charged, and a key revoked
// mid-batch, which fails the batch and keeps what finished.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, serveFile, wallet } from '../helpers/operator.js';

const POOR = 'tg_poor_2222222222222222';

t.test('embeddings, a 402 line, a cancel, a revoked key', async (t) => {
  const up = await fakeChat(250);
  t.teardown(() => up.close());
  const config = batchConfig(up.baseUrl);
  config.accounts.push({ id: 'poor', plan: 'pro', wallet_units: 10, keys: [POOR] });
  config.models.push({ id: 'e1', provider: 'up', type: 'embedding', price: { input_per_mtok: 1_000_000, output_per_mtok: 0 } });
  config.batch.max_file_bytes = 65536;
  const served = await serveFile(t, config);
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });

  // Embeddings: 5 prompt tokens at 1 unit, less 30%: 3.5, rounded up to 4.
  const emb = Array.from({ length: 3 }, (_, i) => JSON.stringify({ custom_id: `e-${i}`, method: 'POST', url: '/v1/embeddings', body: { model: 'e1', input: `text ${i}` } })).join('\n');
  const ef = await client.files.create({ file: await toFile(Buffer.from(emb), 'emb.jsonl'), purpose: 'batch' });
  const eb = await client.batches.create({ input_file_id: ef.id, endpoint: '/v1/embeddings', completion_window: '24h' });
  const edone = await until(() => client.batches.retrieve(eb.id), (b) => b.status === 'completed');
  t.same(edone.request_counts, { total: 3, completed: 3, failed: 0 });
  const eout = (await (await client.files.content(edone.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(eout[0].response.body.data[0].embedding, [0.5, 0.25]);
  t.equal((await wallet(served.url)).balance_units, WALLET - 3 * 4, 'embeddings charged at the discount, rounded up');

  // A wallet that cannot hold a line: each line is a failed line (402), the batch completes.
  const poor = new OpenAI({ apiKey: POOR, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const pf = await poor.files.create({ file: await toFile(Buffer.from(lines(2)), 'p.jsonl'), purpose: 'batch' });
  const pb = await poor.batches.create({ input_file_id: pf.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const pdone = await until(() => poor.batches.retrieve(pb.id), (b) => b.status === 'completed');
  t.same(pdone.request_counts, { total: 2, completed: 0, failed: 2 });
  t.equal(pdone.output_file_id, null);
  const perr = (await (await poor.files.content(pdone.error_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  for (const e of perr) {
    t.equal(e.response.status_code, 402);
    t.equal(e.error.code, 'insufficient_credits');
  }
  t.same(await wallet(served.url, 'poor'), { ...(await wallet(served.url, 'poor')), balance_units: 10, held_units: 0 }, 'nothing charged, nothing held');

  // Cancel: no new line starts; those in flight finish and are charged.
  const before = (await wallet(served.url)).balance_units;
  const cf = await client.files.create({ file: await toFile(Buffer.from(lines(40)), 'c.jsonl'), purpose: 'batch' });
  const cb = await client.batches.create({ input_file_id: cf.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => client.batches.retrieve(cb.id), (b) => b.request_counts!.completed >= 2);
  const cancelling = await client.batches.cancel(cb.id);
  t.ok(['cancelling', 'cancelled'].includes(cancelling.status), `cancel answers ${cancelling.status}`);
  const cancelled = await until(() => client.batches.retrieve(cb.id), (b) => b.status === 'cancelled');
  t.equal(cancelled.status, 'cancelled');
  t.ok(cancelled.cancelled_at !== null && cancelled.cancelling_at !== null);
  const n = cancelled.request_counts!.completed;
  t.ok(n >= 2 && n < 40, `${n} lines done before the cancel took`);
  const cout = (await (await client.files.content(cancelled.output_file_id!)).text()).trim().split('\n');
  t.equal(cout.length, n, 'the output holds the lines that finished');
  t.equal((await wallet(served.url)).balance_units, before - n * LINE_UNITS, 'each finished line charged, no other');
  const again = await client.batches.cancel(cb.id);
  t.equal(again.status, 'cancelled', 'cancelling again changes nothing');

  // The key revoked mid-batch: no new line starts; the batch fails, what finished is kept.
  const before2 = (await wallet(served.url)).balance_units;
  const rf = await client.files.create({ file: await toFile(Buffer.from(lines(40)), 'r.jsonl'), purpose: 'batch' });
  const rb = await client.batches.create({ input_file_id: rf.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await until(() => client.batches.retrieve(rb.id), (b) => b.request_counts!.completed >= 2);
  const admin = { authorization: `Bearer ${ADMIN}` };
  const keys = await (await fetch(`${served.url}/admin/accounts/demo/keys`, { headers: admin })).json() as any;
  const revoked = await fetch(`${served.url}/admin/keys/${keys.keys[0].id}`, { method: 'DELETE', headers: admin });
  t.ok(revoked.ok, `the key revoked: ${revoked.status}`);
  const gone = await until(async () => (await (await fetch(`${served.url}/admin/batches?account=demo`, { headers: admin })).json() as any).data.find((b: any) => b.id === rb.id),
    (b: any) => b.status === 'failed');
  t.equal(gone.status, 'failed');
  t.equal(gone.errors.data[0].code, 'invalid_key');
  const m = gone.request_counts.completed;
  t.ok(m >= 2 && m < 40, `${m} lines finished before the key was revoked`);
  t.ok(gone.output_file_id, 'what finished is kept');
  t.equal((await wallet(served.url)).balance_units, before2 - m * LINE_UNITS, 'each finished line charged, no other');
});
