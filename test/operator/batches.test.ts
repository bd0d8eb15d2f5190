// Batches and files (CONTRACT section 18) from a YAML file, with the official openai SDK: a file
// uploaded, a batch made, run through the metered pipeline at the plan's discount (money exact:
// the wallet debited exactly the sum of the lines' discounted units), its output and error files
// read back; another account's ids are 404; an invalid file fails the batch with line numbers
// and charges nothing; a file above batch.max_file_bytes is 413.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { LINE_UNITS, OTHER, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, metric, serveFile, wallet } from '../helpers/operator.js';

t.test('a batch runs at the discount, exact to the unit, with the openai SDK', async (t) => {
  const up = await fakeChat();
  t.teardown(() => up.close());
  const served = await serveFile(t, batchConfig(up.baseUrl));
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const other = new OpenAI({ apiKey: OTHER, baseURL: `${served.url}/v1`, maxRetries: 0 });

  const file = await client.files.create({ file: await toFile(Buffer.from(lines(5)), 'nightly.jsonl'), purpose: 'batch' });
  t.match(file, { object: 'file', purpose: 'batch', filename: 'nightly.jsonl', bytes: Buffer.byteLength(lines(5)) });
  t.match(file.id, /^file-/);
  t.same((await client.files.list()).data.map((f) => f.id), [file.id], 'the account lists its file');
  t.same((await other.files.list()).data, [], 'another account lists none');
  const stranger = await other.files.retrieve(file.id).then(() => 0, (e: any) => [e.status, e.error?.code]);
  t.same(stranger, [404, 'not_found'], "another account's file id is 404 not_found");

  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly' } });
  t.match(batch, { object: 'batch', endpoint: '/v1/chat/completions', input_file_id: file.id, completion_window: '24h', metadata: { job: 'nightly' } });
  t.equal(batch.status, 'validating');
  const strangerBatch = await other.batches.retrieve(batch.id).then(() => 0, (e: any) => [e.status, e.error?.code]);
  t.same(strangerBatch, [404, 'not_found'], "another account's batch id is 404 not_found");
  const strangerMade = await other.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' })
    .then(() => 0, (e: any) => [e.status, e.error?.code]);
  t.same(strangerMade, [404, 'not_found'], "a batch of another account's file is 404 not_found");

  const done = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed');
  t.equal(done.status, 'completed');
  t.same(done.request_counts, { total: 5, completed: 5, failed: 0 });
  t.ok(done.in_progress_at !== null && done.finalizing_at !== null && done.completed_at !== null, 'each step has its time');
  t.equal(done.error_file_id, null);
  const out = (await (await client.files.content(done.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(out.map((o) => o.custom_id).sort(), ['req-0', 'req-1', 'req-2', 'req-3', 'req-4']);
  for (const o of out) {
    t.equal(o.error, null);
    t.equal(o.response.status_code, 200);
    t.equal(o.response.body.choices[0].message.content, `echo line ${o.custom_id.slice(4)}`);
    t.equal(o.response.request_id, `${batch.id}-${Number(o.custom_id.slice(4)) + 1}`);
  }
  const w = await wallet(served.url);
  t.equal(w.balance_units, WALLET - 5 * LINE_UNITS, 'each line charged its cost less 30%, rounded up');
  t.equal(w.held_units, 0);
  t.equal((await wallet(served.url, 'other')).balance_units, WALLET, 'nobody else paid');
  const records = await fetch(`${served.url}/admin/usage/records?account=demo&limit=100`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json()) as any;
  t.same(records.records.map((r: any) => [r.batch_id, r.custom_id, r.units]).sort(), out.map((o) => [batch.id, o.custom_id, LINE_UNITS]).sort(),
    'a usage record per line, with batch_id, custom_id and the discounted units');

  t.equal(await metric(served.url, 'tollgate_batch_lines_done_total', { outcome: 'completed' }), 5, 'lines done, counted');
  t.equal(await metric(served.url, 'tollgate_batch_lines', { state: 'waiting' }), 0, 'none waiting');
  t.equal(await metric(served.url, 'tollgate_batch_lines', { state: 'running' }), 0, 'none running');

  const list = await client.batches.list({ limit: 10 });
  t.same(list.data.map((b) => b.id), [batch.id]);
  const admin = await fetch(`${served.url}/admin/batches`, { headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(admin.status, 200);
  t.same(((await admin.json()) as any).data.map((b: any) => [b.id, b.account]), [[batch.id, 'demo']], 'the admin API lists every account\'s');

  const deleted = await client.files.delete(file.id);
  t.match(deleted, { id: file.id, deleted: true });
  t.equal(await client.files.retrieve(file.id).then(() => 200, (e: any) => e.status), 404, 'a deleted file is gone');
});

t.test('an invalid file fails the batch with line numbers, nothing charged', async (t) => {
  const up = await fakeChat();
  t.teardown(() => up.close());
  const served = await serveFile(t, batchConfig(up.baseUrl));
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const good = lines(1).trim();
  const content = [
    good,
    'not json',
    JSON.stringify({ custom_id: 'req-0', method: 'POST', url: '/v1/chat/completions', body: { model: 'm1', messages: [{ role: 'user', content: 'x' }] } }),
    JSON.stringify({ custom_id: 'b', method: 'POST', url: '/v1/embeddings', body: { model: 'm1', input: 'x' } }),
    JSON.stringify({ custom_id: 'c', method: 'POST', url: '/v1/chat/completions', body: { model: 'nope', messages: [{ role: 'user', content: 'x' }] } }),
    JSON.stringify({ custom_id: 'd', method: 'POST', url: '/v1/chat/completions', body: { model: 'm1', stream: true, messages: [{ role: 'user', content: 'x' }] } }),
    JSON.stringify({ custom_id: 'e', method: 'GET', url: '/v1/chat/completions', body: {} }),
    JSON.stringify({ custom_id: 'f', method: 'POST', url: '/v1/chat/completions', body: { model: 'm1', messages: 'x' } }),
  ].join('\n');
  const file = await client.files.create({ file: await toFile(Buffer.from(content), 'bad.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const failed = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'failed');
  t.equal(failed.status, 'failed');
  t.same(failed.errors!.data!.map((e) => [e.line, e.code]), [
    [2, 'invalid_json_line'], [3, 'duplicate_custom_id'], [4, 'mismatched_url'], [5, 'model_not_found'], [6, 'invalid_request'], [7, 'invalid_method'],
    [8, 'invalid_type'],
  ]);
  t.equal(up.requests.length, 0, 'no line ran');
  t.same(await wallet(served.url), { ...(await wallet(served.url)), balance_units: WALLET, held_units: 0 }, 'the wallet unchanged');

  const big = await client.files.create({ file: await toFile(Buffer.alloc(5000, 'x'), 'big.jsonl'), purpose: 'batch' })
    .then(() => 0, (e: any) => [e.status, e.error?.code]);
  t.same(big, [413, 'request_too_large'], 'a file above batch.max_file_bytes is 413');
  const purpose = await client.files.create({ file: await toFile(Buffer.from(good), 'a.jsonl'), purpose: 'fine-tune' })
    .then(() => 0, (e: any) => [e.status, e.error?.code, e.error?.param]);
  t.same(purpose, [400, 'invalid_value', 'purpose']);
  const window = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '1h' as '24h' })
    .then(() => 0, (e: any) => [e.status, e.error?.param]);
  t.same(window, [400, 'completion_window']);
});
