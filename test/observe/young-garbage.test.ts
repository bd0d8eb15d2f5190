// What a served request leaves for the garbage collector (issue #13, p99): its objects die
// young. In Node 20's V8 an object made by a spread-first literal that then gains members
// ({ ...rateHeaders, 'x-request-id': id }) outlived young-generation collections with all it
// referenced: a gateway answering GET /v1/models/{id} at one connection promoted about 1 MB to
// the old generation per scavenge, and each scavenge took 2-7 ms instead of under 1 (the p99 at
// one connection is made of such pauses). lib/objects.ts says how answers are built instead.
//
// The gateway runs as `tollgate serve --trace-gc`; the old generation's growth across each
// scavenge of the measured stretch (none with a mark-compact between) is what was promoted.

import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'undici';
import { PRO_KEY } from '../helpers/gateway.js';

const BIN = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));
/** Before the fix: about 1 MB per scavenge on this route; after: under 0.1 MB. */
const MAX_PROMOTED_MB = 0.3;
/** Scavenges measured (after the first few, while the young generation grows to its size). */
const MEASURED = 12;
const SKIPPED = 4;

const dir = await mkdtemp(join(tmpdir(), 'tollgate-young-garbage-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

// Every plan limit finite, so each answer carries the six x-ratelimit-* headers.
const CONFIG = `server: { port: 0 }
plans:
  pro:
    paid: true
    requests_per_minute: 100000000
    tokens_per_minute: 100000000000
    max_concurrent: 100000
accounts:
  - id: acme
    plan: pro
    wallet_units: 1000000000000
    keys: [${PRO_KEY}]
providers:
  echo: { kind: echo }
models:
  - { id: echo-m, provider: echo, context_window: 8192, max_output_tokens: 64, price: { input_per_mtok: 1, output_per_mtok: 1 } }
`;

interface Scavenge { before: number; after: number }

/** The --trace-gc lines since `from`: scavenges, and null for each mark-compact. */
function collections(out: string, from: number): Array<Scavenge | null> {
  const found: Array<Scavenge | null> = [];
  for (const line of out.slice(from).split('\n')) {
    const m = /: (Scavenge|Mark-Compact|Mark-sweep)\S* ([\d.]+) \([\d.]+\) -> ([\d.]+) \(/.exec(line);
    if (m === null) continue;
    found.push(m[1] === 'Scavenge' ? { before: Number(m[2]), after: Number(m[3]) } : null);
  }
  return found;
}

t.test('answers with x-ratelimit-* headers leave their objects to die young', async (t) => {
  const file = join(dir, 'gateway.yaml');
  await writeFile(file, CONFIG);
  const proc = spawn(process.execPath, ['--trace-gc', BIN, 'serve', '--config', file, '--host', '127.0.0.1'], {
    stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' },
  });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const url = /listening on (\S+)/.exec(out)?.[1];
  if (url === undefined) throw new Error(`the gateway did not start: ${out}`);

  const client = new Client(url, { pipelining: 1 });
  t.teardown(() => client.close());
  const headers = { authorization: `Bearer ${PRO_KEY}` };
  const first = await client.request({ method: 'GET', path: '/v1/models/echo-m', headers });
  t.equal(first.statusCode, 200);
  t.equal(first.headers['x-ratelimit-limit-requests'], '100000000', 'the answer carries the rate-limit headers');
  t.equal(first.headers['x-ratelimit-remaining-tokens'], '100000000000');
  await first.body.dump();

  const from = out.length;
  let sent = 0;
  // One connection, one request at a time, until enough scavenges were seen (or a bound).
  while (collections(out, from).filter((c) => c !== null).length < SKIPPED + MEASURED + 1 && sent < 200_000) {
    const res = await client.request({ method: 'GET', path: '/v1/models/echo-m', headers });
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${await res.body.text()}`);
    await res.body.dump();
    sent++;
  }
  const seen = collections(out, from).slice(SKIPPED);
  const promoted: number[] = [];
  for (let i = 1; i < seen.length; i++) {
    const [a, b] = [seen[i - 1], seen[i]];
    if (a !== null && a !== undefined && b !== null && b !== undefined) promoted.push(b.after - a.after);
  }
  t.ok(promoted.length >= MEASURED / 2, `${promoted.length} scavenges measured over ${sent} requests`);
  const mean = promoted.reduce((s, x) => s + x, 0) / Math.max(1, promoted.length);
  t.ok(mean < MAX_PROMOTED_MB, `promoted per scavenge: ${mean.toFixed(2)} MB (at most ${MAX_PROMOTED_MB})`);
  proc.kill('SIGTERM');
});
