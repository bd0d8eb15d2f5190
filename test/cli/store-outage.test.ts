// `tollgate serve` with its Redis down, as an operator would meet it (CONTRACT section 9): the
// process starts, prints its URL line, answers 503s, survives a SIGHUP reload and Redis going
// away again mid-stream, and recovers by itself, seeding the accounts. A process that exits, or
// an unhandled rejection (which ends a Node process), fails the test.

import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY, sseData } from '../helpers/gateway.js';
import { serveChild } from '../helpers/child.js';
import { startRedis } from '../helpers/redis.js';

const ADMIN = 'cli-outage-admin';
const LATE_KEY = 'tg_late_44444444444444444444';
const UNAVAILABLE = { message: 'The account store is unavailable; retry shortly.', type: 'server_error', param: null, code: 'service_unavailable' };

function yaml(url: string, extraAccount = ''): string {
  return `server: { port: 0, sse_keepalive_ms: 60000 }
admin: { token: ${ADMIN} }
store: { kind: redis, url: "${url}", prefix: "cli-outage-${process.pid}:", timeout_ms: 300 }
plans: { free: { paid: false, max_concurrent: 2 } }
accounts:
  - { id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}] }
${extraAccount}
providers:
  echo: { kind: echo }
  slow: { kind: echo, chunk_delay_ms: 60 }
models:
  - { id: echo-small, provider: echo, price: { input_per_mtok: 1000000, output_per_mtok: 1000000 } }
  - { id: slow, provider: slow, price: { input_per_mtok: 1000000, output_per_mtok: 1000000 } }
`;
}

const chat = (url: string, key = DEMO_KEY, model = 'echo-small', stream = false) => fetch(`${url}/v1/chat/completions`, {
  method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'a b c d e f g h i j k l' }], max_tokens: 20 }),
});
const admin = (url: string, path: string) => fetch(`${url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });

async function unavailable(t: any, res: Response, what: string): Promise<void> {
  t.equal(res.status, 503, what);
  t.equal(res.headers.get('retry-after'), '1');
  t.equal(res.headers.get('retry-after-ms'), '1000');
  t.strictSame(await res.json(), { ...UNAVAILABLE, request_id: res.headers.get('x-request-id'), error: UNAVAILABLE }, `${what}: the envelope`);
}

async function untilReady(url: string): Promise<number> {
  let status = 0;
  for (let i = 0; i < 200 && status !== 200; i++) { await sleep(50); status = (await fetch(`${url}/readyz`)).status; }
  return status;
}

t.test('tollgate serve with Redis down: starts, 503s, reloads, recovers by itself', async (t) => {
  const redis = await startRedis({ persist: true });
  t.teardown(() => redis.stop());
  await redis.halt();
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-outage-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, yaml(redis.url));

  const child = await serveChild(t, file);
  t.match(child.output(), /^tollgate listening on http:\/\/127\.0\.0\.1:\d+\n/, 'the URL line, first');
  t.equal((await fetch(`${child.url}/healthz`)).status, 200, '/healthz 200');
  t.equal((await fetch(`${child.url}/readyz`)).status, 503, '/readyz 503');
  await unavailable(t, await chat(child.url), 'chat');
  await unavailable(t, await fetch(`${child.url}/v1/models`, { headers: { authorization: `Bearer ${DEMO_KEY}` } }), 'models');
  await unavailable(t, await admin(child.url, '/accounts/demo'), 'admin');

  // A reload while the store is down: accepted, its seed deferred.
  await writeFile(file, yaml(redis.url, `  - { id: late, plan: free, wallet_units: 100, keys: [${LATE_KEY}] }`));
  child.proc.kill('SIGHUP');
  await sleep(800);
  t.equal(child.proc.exitCode, null, 'alive after the reload');
  t.notMatch(child.output(), /reload rejected/, 'the reload was not rejected');

  await redis.restart();
  t.equal(await untilReady(child.url), 200, 'ready by itself once Redis answers');
  const res = await chat(child.url);
  t.equal(res.status, 200, 'the seeded demo key works');
  const charged = Number(res.headers.get('x-tollgate-units-charged'));
  t.ok(charged > 0);
  t.match(await (await admin(child.url, '/accounts/demo')).json(), { balance_units: 1_000_000 - charged, held_units: 0, usage: { day: { requests: 1 } } });
  t.equal((await chat(child.url, LATE_KEY)).status, 200, 'the account the reload added was seeded too');

  // Redis goes away again with two streams in flight (the account's whole cap).
  const streams = [chat(child.url, DEMO_KEY, 'slow', true), chat(child.url, DEMO_KEY, 'slow', true)];
  const opened = await Promise.all(streams);
  t.strictSame(opened.map((r) => r.status), [200, 200]);
  await redis.halt();
  for (const r of opened) {
    const sse = sseData(await r.text());
    t.equal(sse.done, false, 'cut short: no [DONE]');
    t.strictSame(sse.events.at(-1), { ...UNAVAILABLE, request_id: r.headers.get('x-request-id'), error: UNAVAILABLE }, 'an in-stream error');
  }
  await unavailable(t, await admin(child.url, '/accounts/demo'), 'admin while down again');
  await redis.restart();
  t.equal(await untilReady(child.url), 200);
  let acct: any;
  for (let i = 0; i < 100; i++) {
    acct = await (await admin(child.url, '/accounts/demo')).json();
    if (acct.held_units === 0) break;
    await sleep(25);
  }
  t.match(acct, { balance_units: 1_000_000 - charged, held_units: 0, usage: { day: { requests: 1 } } }, 'holds released, nothing more charged');
  const both = await Promise.all([chat(child.url, DEMO_KEY, 'slow', true), chat(child.url, DEMO_KEY, 'slow', true)]);
  t.strictSame(both.map((r) => r.status), [200, 200], 'both slots are back at once, not after their 30 s leases');
  for (const r of both) t.ok(sseData(await r.text()).done);
  t.equal(child.proc.exitCode, null, 'the process never exited');
  t.equal(child.proc.signalCode, null);
});
