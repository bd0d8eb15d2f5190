// Retention from a YAML file (batch.retention_days, CONTRACT section 18), on the memory store
// with a path and on Redis: a batch runs to completion, the gateway stops, and starts again on
// the same file with its clock 31 days ahead (test/fixtures/clock/shift.mjs, a preload of the
// test's own; no setting shortens retention). Its first sweep deletes the input and output
// files and the batch from the store itself: the folder under store.path is empty, no Redis key
// is left; the API answers 404 for each id and lists nothing. Money is untouched by it.

import t from 'tap';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import YAML from 'yaml';
import OpenAI, { toFile } from 'openai';
import { serveChild } from '../helpers/child.js';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const CLOCK = fileURLToPath(new URL('../fixtures/clock/shift.mjs', import.meta.url));
const AHEAD = String(31 * 86_400);

const redis = await startRedis();
const up = await fakeChat();
t.teardown(async () => { await up.close(); await redis.stop(); });

for (const kind of ['memory', 'redis'] as const) {
  t.test(`${kind}: files and batches past retention are deleted from the store`, async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'tollgate-op-retention-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const store = kind === 'memory' ? { kind: 'memory', path: join(dir, 'store'), fsync_ms: 0 } : { kind: 'redis', url: redis.url, prefix: 'op-ret:' };
    const file = join(dir, 'tollgate.yaml');
    await writeFile(file, YAML.stringify(batchConfig(up.baseUrl, { store, batch: { max_file_bytes: 4096, concurrency: 2, retention_days: 30 } })));
    const first = await serveChild(t, file);
    let client = new OpenAI({ apiKey: KEY, baseURL: `${first.url}/v1`, maxRetries: 0 });
    const input = await client.files.create({ file: await toFile(Buffer.from(lines(2)), 'two.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const done = await until(() => client.batches.retrieve(batch.id), (b) => b.status === 'completed');
    t.equal(done.status, 'completed');
    first.proc.kill('SIGTERM');
    await new Promise((r) => first.proc.once('exit', r));

    const stored = async (): Promise<string[]> => {
      if (kind === 'memory') return (await readdir(join(dir, 'store', 'batches'))).sort();
      const r = new Redis(redis.url);
      try { return (await r.keys('op-ret:b*')).sort(); } finally { r.disconnect(); }
    };
    t.ok((await stored()).some((k) => k.includes(batch.id)), 'before: the batch is in the store');

    const second = await serveChild(t, file, { CLOCK_OFFSET_S: AHEAD }, ['--import', CLOCK]);
    client = new OpenAI({ apiKey: KEY, baseURL: `${second.url}/v1`, maxRetries: 0 });
    const left = await until(stored, (keys) => keys.length === 0);
    t.same(left, [], kind === 'memory' ? 'nothing left under store.path/batches' : 'no Redis key of a file or batch left');
    for (const id of [input.id, done.output_file_id!]) {
      t.equal(await client.files.retrieve(id).then(() => 200, (e: any) => e.status), 404, `file ${id} is 404`);
    }
    t.equal(await client.batches.retrieve(batch.id).then(() => 200, (e: any) => e.status), 404, 'the batch is 404');
    t.same((await client.batches.list()).data, []);
    t.same((await client.files.list()).data, []);
    const admin = await fetch(`${second.url}/admin/batches`, { headers: { authorization: `Bearer ${ADMIN}` } }).then((r) => r.json()) as any;
    t.same(admin.data, [], 'the admin API lists none');
    const w = await wallet(second.url);
    t.same([w.balance_units, w.held_units], [WALLET - 2 * LINE_UNITS, 0], 'the lines stay charged once; deleting changes no money');
  });
}
