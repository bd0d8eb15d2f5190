// The gateway itself SIGKILLed mid-load on the durable memory store: every mutation the admin
// API acknowledged (a key issued, a credit added) is still there after a restart.

import t from 'tap';
import { serveChild } from '../../helpers/child.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ADMIN = 'crash-admin-token';


t.test('SIGKILL mid-load loses no acknowledged admin mutation', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-gwcrash-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server: { port: 0 }
admin: { token: ${ADMIN} }
store: { kind: memory, path: ${join(dir, 'state')}, fsync_ms: 1000 }
accounts:
  - { id: victim, plan: free, wallet_units: 0 }
providers: { echo: { kind: echo } }
models: [{ id: m, provider: echo }]
`);
  let gw = await serveChild(t, file);
  const post = (url: string, path: string, body?: unknown) => fetch(`${url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });

  const ackedCredits: number[] = [];
  const ackedKeys: string[] = [];
  let stop = false;
  let n = 0;
  const worker = async () => {
    while (!stop) {
      const i = n++;
      try {
        if (i % 5 === 0) {
          const res = await post(gw.url, '/admin/accounts/victim/keys');
          if (res.status === 201) ackedKeys.push(((await res.json()) as any).key);
        } else {
          const res = await post(gw.url, '/admin/accounts/victim/credits', { units: i, idempotency_key: `c-${i}` });
          if (res.status === 200) ackedCredits.push(i);
        }
      } catch {
        return; // the gateway is gone
      }
    }
  };
  const workers = Array.from({ length: 8 }, worker);
  while (ackedCredits.length < 300) await sleep(5);
  gw.proc.kill('SIGKILL');
  stop = true;
  await Promise.all(workers);
  t.ok(ackedCredits.length >= 300 && ackedKeys.length > 0, `${ackedCredits.length} credits and ${ackedKeys.length} keys acknowledged`);

  gw = await serveChild(t, file);
  const account: any = await (await fetch(`${gw.url}/admin/accounts/victim`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  const ackedSum = ackedCredits.reduce((a, b) => a + b, 0);
  t.ok(account.balance_units >= ackedSum, `balance ${account.balance_units} includes every acknowledged credit (${ackedSum})`);
  // Each acknowledged credit is applied exactly once: repeating its key changes nothing.
  let reapplied = 0;
  for (const i of ackedCredits.slice(0, 50)) {
    const res: any = await (await post(gw.url, '/admin/accounts/victim/credits', { units: i, idempotency_key: `c-${i}` })).json();
    if (res.applied) reapplied++;
  }
  t.equal(reapplied, 0, 'no acknowledged credit was lost or can apply twice');
  let working = 0;
  for (const key of ackedKeys) {
    const status = (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status;
    if (status === 200) working++;
  }
  t.equal(working, ackedKeys.length, 'every acknowledged key still works');
  gw.proc.kill('SIGTERM');
});
