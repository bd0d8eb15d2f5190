// store.settle_wait_ms from a YAML file, through `tollgate serve` (CONTRACT section 16): a debit
// that Redis stalls on is waited for up to that long. A stall shorter than it: the request is
// answered 200 with what Redis applied once it resumed. A longer one: 503 service_unavailable
// within the bound, and the debit Redis applies when it resumes is given back. The ledger and
// the usage records agree to the unit.

import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY } from '../helpers/gateway.js';
import { serveChild } from '../helpers/child.js';
import { startRedis } from '../helpers/redis.js';
import { completionBody, json, startUpstream } from '../helpers/upstream.js';

const ADMIN = 'cli-settle-admin';
const UNITS = 12 + 2 * 7; // the fake upstream's usage at one unit per prompt token, two per completion token

t.test('tollgate serve: store.settle_wait_ms bounds the wait for a stalled debit', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  let open: () => void = () => {};
  const up = await startUpstream(async (_req, res) => {
    await new Promise<void>((r) => { open = r; });
    json(res, 200, completionBody('ok'));
  });
  t.teardown(() => up.close());
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-settle-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server: { port: 0 }
admin: { token: ${ADMIN} }
store: { kind: redis, url: "${redis.url}", prefix: "cli-settle-${process.pid}:", timeout_ms: 300, settle_wait_ms: 2000 }
accounts:
  - { id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}] }
providers:
  up: { kind: openai, base_url: "${up.baseUrl}" }
models:
  - { id: m, provider: up, price: { input_per_mtok: 1000000, output_per_mtok: 2000000 } }
`);
  const child = await serveChild(t, file);
  const admin = async (path: string) => (await fetch(`${child.url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<any>;
  for (let i = 0; i < 200 && (await fetch(`${child.url}/readyz`)).status !== 200; i++) await sleep(50);

  /** A request whose answer arrives while Redis is stopped for `stallMs`: its response and how long it took. */
  const stalled = async (id: string, stallMs: number) => {
    const seen = up.requests.length;
    const started = Date.now();
    const res = fetch(`${child.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'x-request-id': id },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: id }] }),
    });
    while (up.requests.length === seen) await sleep(10);
    redis.freeze();
    open();
    const thawed = sleep(stallMs).then(() => redis.thaw());
    const answer = await res;
    const ms = Date.now() - started;
    await thawed;
    return { answer, ms };
  };

  const short = await stalled('short-stall', 1000);
  t.equal(short.answer.status, 200, 'a stall shorter than settle_wait_ms: answered');
  t.ok(short.ms >= 900, `after Redis resumed (${short.ms} ms)`);
  t.equal(short.answer.headers.get('x-tollgate-units-charged'), String(UNITS), 'with what Redis applied');
  t.equal(((await short.answer.json()) as any).choices[0].message.content, 'ok');

  const long = await stalled('long-stall', 4500);
  t.equal(long.answer.status, 503, 'a longer stall: refused');
  t.ok(long.ms >= 2000 && long.ms < 4000, `within settle_wait_ms and a store timeout, before Redis resumed (${long.ms} ms)`);
  t.equal(long.answer.headers.get('retry-after'), '1');
  t.match(await long.answer.json(), { code: 'service_unavailable', type: 'server_error', request_id: 'long-stall' });

  // The debit Redis applied when it resumed is given back; the records say the same.
  let acct: any;
  let records: any[] = [];
  for (let i = 0; i < 200; i++) {
    acct = await admin('/accounts/demo').catch(() => undefined);
    records = (await admin('/usage/records?account=demo').catch(() => ({ records: [] }))).records ?? [];
    if (acct?.balance_units === 1_000_000 - UNITS && acct.held_units === 0 && records.length === 2) break;
    await sleep(50);
  }
  t.equal(acct.balance_units, 1_000_000 - UNITS, 'the wallet paid the answered request only');
  t.equal(acct.held_units, 0, 'no hold left');
  t.strictSame(acct.usage.day, { requests: 1, tokens: 19, units: UNITS }, 'one settled request');
  t.strictSame(records.map((r) => [r.request_id, r.status, r.units]).sort(), [['long-stall', 503, 0], ['short-stall', 200, UNITS]],
    'one record each, with what the ledger holds');
  t.notOk(child.output().includes(DEMO_KEY), 'no credential in the output');
});
