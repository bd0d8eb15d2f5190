// A batch not done within its completion window is `expired` (CONTRACT section 18), as OpenAI
// does it: the lines that finished are kept (the output file) and charged, the lines that never
// started are in the error file as `batch_expired` with `response: null`, never sent upstream
// and never charged, and nothing stays held. The window is 24 h and no setting shortens it: the
// test moves the gateway's clock instead (test/fixtures/clock/shift.mjs, preloaded into the
// `tollgate serve` child; SIGUSR2 moves it 25 h ahead mid-batch).

import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import OpenAI, { toFile } from 'openai';
import { serveChild } from '../helpers/child.js';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, wallet } from '../helpers/operator.js';

/** Lines at 0.4 s one at a time: about 5 s of work, time enough to move the clock midway. */
const N = 12;
const CLOCK = fileURLToPath(new URL('../fixtures/clock/shift.mjs', import.meta.url));

t.test('a batch past its window expires: finished lines kept and charged, the rest batch_expired', async (t) => {
  const up = await fakeChat(400);
  t.teardown(() => up.close());
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-expired-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, YAML.stringify(batchConfig(up.baseUrl, { batch: { max_file_bytes: 4096, concurrency: 1 } })));
  const served = await serveChild(t, file, { CLOCK_STEP_S: String(25 * 3600) }, ['--import', CLOCK]);
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });

  const input = await client.files.create({ file: await toFile(Buffer.from(lines(N)), 'nightly.jsonl'), purpose: 'batch' });
  const batch = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  t.equal(batch.expires_at, batch.created_at + 24 * 3600, 'the window is 24 h');
  const running = await until(() => client.batches.retrieve(batch.id), (b) => (b.request_counts?.completed ?? 0) >= 2);
  t.ok(running.request_counts!.completed >= 2 && running.status === 'in_progress', 'two lines done, the batch running');
  served.proc.kill('SIGUSR2');

  const expired = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'expired');
  t.equal(expired.status, 'expired');
  t.ok(expired.expired_at !== null && expired.expired_at! >= expired.expires_at!, 'expired_at is at or past the window');
  t.same([expired.completed_at, expired.failed_at, expired.cancelled_at], [null, null, null]);
  const ran = expired.request_counts!.completed;
  t.ok(ran >= 2 && ran < N, `the lines that finished (${ran}) are kept`);
  t.same(expired.request_counts, { total: N, completed: ran, failed: N - ran });
  t.equal(up.requests.length, ran, 'the lines not started never reached the model server');

  const out = (await (await client.files.content(expired.output_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(out.map((o) => o.custom_id), Array.from({ length: ran }, (_, i) => `req-${i}`), 'the output file: the finished lines');
  t.ok(out.every((o) => o.error === null && o.response.status_code === 200));
  const errs = (await (await client.files.content(expired.error_file_id!)).text()).trim().split('\n').map((l) => JSON.parse(l));
  t.same(errs.map((e) => e.custom_id), Array.from({ length: N - ran }, (_, i) => `req-${ran + i}`), 'the error file: every line not run, in order');
  for (const e of errs) {
    t.match(e.id, /^batch_req_/);
    t.same([e.response, e.error], [null, { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' }]);
  }

  const w = await wallet(served.url);
  t.same([w.balance_units, w.held_units], [WALLET - ran * LINE_UNITS, 0], 'only the finished lines are charged; nothing held');
  const records = await fetch(`${served.url}/admin/usage/records?account=demo&limit=100`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json()) as any;
  t.equal(records.records.length, ran, 'a usage record per finished line, none for the rest');
});
