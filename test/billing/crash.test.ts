// SIGKILL with holds open: after a restart (and the hold TTL) the available balance is whole,
// and every debit reported to a client before the crash is still there.

import t from 'tap';
import { serveChild } from '../helpers/child.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { completionBody, json, startUpstream, streamFrames, writeSse } from '../helpers/upstream.js';

const ADMIN = 'crash-billing-admin';
const KEY = 'tg_crash_000000000000000000000000';


t.test('SIGKILL with holds open loses no reported debit and leaves no hold', async (t) => {
  const up = await startUpstream(async (req, res, body) => {
    if (body.stream) {
      // Held open: these requests have holds when the gateway dies.
      await writeSse(res, streamFrames(['never', 'finishes']).slice(0, 2), { end: false });
      await new Promise((r) => res.on('close', r));
      return;
    }
    json(res, 200, completionBody('done', { usage: { prompt_tokens: 1000, completion_tokens: 2000, total_tokens: 3000 } }));
  });
  t.teardown(() => up.close());
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-billcrash-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server: { port: 0 }
admin: { token: ${ADMIN} }
store: { kind: memory, path: ${join(dir, 'state')}, fsync_ms: 1000 }
plans: { p: { paid: false } }
accounts: [{ id: payer, plan: p, wallet_units: 100000, keys: [${KEY}] }]
providers: { up: { kind: openai, base_url: ${up.baseUrl}, timeout_ms: 30000 } }
models: [{ id: m, provider: up, context_window: 32768, max_output_tokens: 1000, price: { input_per_mtok: 1000, output_per_mtok: 1000 } }]
`);
  let gw = await serveChild(t, file);
  const chat = (url: string, stream: boolean) => fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream, max_tokens: 1000, messages: [{ role: 'user', content: 'x' }] }),
  });
  const account = async (url: string) => (await fetch(`${url}/admin/accounts/payer`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<any>;

  // Streams whose holds stay open.
  const streams = await Promise.all(Array.from({ length: 5 }, () => chat(gw.url, true)));
  for (const s of streams) t.equal(s.status, 200);
  let reported = 0;
  for (let i = 0; i < 20; i++) {
    const res = await chat(gw.url, false);
    t.equal(res.status, 200);
    reported += Number(res.headers.get('x-tollgate-units-charged'));
  }
  t.equal(reported, 20 * 3, 'each request reported a debit of 3 units');
  const before = await account(gw.url);
  t.ok(before.held_units > 0, `holds open before the crash (${before.held_units} units)`);
  gw.proc.kill('SIGKILL');
  await new Promise((r) => gw.proc.once('exit', r));
  for (const s of streams) await s.body?.cancel().catch(() => undefined);

  gw = await serveChild(t, file);
  const after = await account(gw.url);
  t.equal(after.balance_units, 100000 - reported, 'every reported debit survived, nothing else was charged');
  t.equal(after.held_units, 0, 'no hold survives the crash');
  t.equal(after.available_units, 100000 - reported, 'the available balance is whole');
  t.equal(after.usage.day.requests, 20);
  gw.proc.kill('SIGTERM');
});
