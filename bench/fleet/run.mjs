// `npm run bench:fleet` (issue #11): the three balance policies on a simulated fleet, one
// process tree on this machine. FLEET_REPLICAS simulated model servers (bench/fleet/server.mjs:
// bounded concurrent sequences, an LRU prefix cache by block hashes, prefill time for the
// uncached prompt tokens only, one prefill at a time, decode time per output token, vLLM's
// /metrics) behind the real gateway (bin/tollgate.js serve), started once per policy with
// `balance` set to it and each replica's metrics_url given. Two workloads, the same request
// stream for every policy:
//
//   (a) conversations: multi-turn conversations over 4 shared system prompts (~150 tokens),
//       each opening with its own document (FLEET_DOC_TOKENS) and growing by FLEET_TURN_TOKENS
//       of new text and the answer at each turn (up to FLEET_TURNS turns); FLEET_CLIENTS
//       clients, started over the first 6 s, each send a turn as soon as the answer to the one
//       before arrived (a saturating closed loop) and go on to the next conversation;
//       FLEET_WARMUP_SECONDS of warm-up (caches and queues fill), then FLEET_SECONDS measured;
//   (b) unique: single prompts of FLEET_UNIQUE_TOKENS, no two sharing a prefix, from
//       FLEET_UNIQUE_CLIENTS clients back to back; 2 s of warm-up, FLEET_UNIQUE_SECONDS measured.
// Client c sends conversations c, c + clients, ... in order, so every policy is offered the
// same stream; throughput counts the requests finished within the measured time, TTFT is taken
// of every request begun in it.
//
// Every request streams; time to first token is taken at the client (first body byte: the
// gateway sends nothing before the first token). For each workload and policy: throughput
// (requests per second of wall time), p50/p90 time to first token, and the servers' prefix
// cache hit rate (cached prompt tokens over prompt tokens, warm-up included), printed as a
// table and written as JSON (bench/fleet-results.json, or FLEET_OUT). Caches and counters are
// reset between runs. Simulated time is scaled so that it dominates the real CPU the processes
// use (a simulated token stands for several of a real model's: prefill is slow per token and
// prompts short, which keeps the gateway's own tokenizing cheap). Any failed request fails the run.
//
// Environment (defaults): FLEET_REPLICAS (4), FLEET_CLIENTS (48), FLEET_DOC_TOKENS (600),
// FLEET_TURN_TOKENS (60), FLEET_TURNS (24), FLEET_WARMUP_SECONDS (8), FLEET_SECONDS (8),
// FLEET_UNIQUE_CLIENTS (32), FLEET_UNIQUE_TOKENS (600), FLEET_UNIQUE_SECONDS (8),
// FLEET_OUTPUT_TOKENS (16); per simulated replica FLEET_MAX_SEQS (16), FLEET_PREFILL_US (400 per
// uncached prompt token), FLEET_DECODE_MS (10 per output token), FLEET_CACHE_TOKENS (48000);
// FLEET_OUT.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, log, startGateway, startNodeScript, stopAll, stopChild } from '../procs.js';
import { conversations, runWorkload, uniquePrompts } from './workload.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = resolve(process.env.FLEET_OUT || join(ROOT, 'bench', 'fleet-results.json'));
const env = (name, fallback) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};
const REPLICAS = env('FLEET_REPLICAS', 4);
const SIM = {
  maxSeqs: env('FLEET_MAX_SEQS', 16), prefillUs: env('FLEET_PREFILL_US', 400), decodeMs: env('FLEET_DECODE_MS', 10),
  cacheTokens: env('FLEET_CACHE_TOKENS', 48000),
};
const LOAD = {
  clients: env('FLEET_CLIENTS', 48), docTokens: env('FLEET_DOC_TOKENS', 600), turnTokens: env('FLEET_TURN_TOKENS', 60),
  turns: env('FLEET_TURNS', 24), warmup: env('FLEET_WARMUP_SECONDS', 8), seconds: env('FLEET_SECONDS', 8), rampMs: 6000,
  uniqueClients: env('FLEET_UNIQUE_CLIENTS', 32), uniqueTokens: env('FLEET_UNIQUE_TOKENS', 600), uniqueSeconds: env('FLEET_UNIQUE_SECONDS', 8),
  outputTokens: env('FLEET_OUTPUT_TOKENS', 16),
};
const POLICIES = ['round_robin', 'least_outstanding', 'prefix_affinity'];
const KEY = 'tg_fleetbench_000000000000000000';

function configYaml(policy, replicas) {
  return [
    'server: { sse_keepalive_ms: 60000 }',
    'store: { kind: memory }',
    'plans: { bench: { paid: true, requests_per_minute: null, tokens_per_minute: null, max_concurrent: null } }',
    'accounts:',
    `  - { id: bench, plan: bench, wallet_units: 1000000000000, keys: [${KEY}] }`,
    'providers:',
    '  sim:',
    '    kind: openai',
    '    timeout_ms: 120000',
    `    balance: ${policy}`,
    '    metrics_interval_ms: 200',
    '    targets:',
    ...replicas.map((r) => `      - { url: ${r.url}/v1, metrics_url: ${r.url}/metrics }`),
    'models:',
    '  - { id: sim, provider: sim, context_window: 131072, max_output_tokens: 1024, price: { input_per_mtok: 1, output_per_mtok: 1 } }',
    '',
  ].join('\n');
}

async function serverStats(replicas) {
  const all = await Promise.all(replicas.map((r) => fetch(`${r.url}/stats`).then((x) => x.json())));
  const queries = all.reduce((s, x) => s + x.queries, 0);
  const hits = all.reduce((s, x) => s + x.hits, 0);
  return { hitRate: queries === 0 ? 0 : hits / queries, perReplica: all.map((x) => x.requests) };
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];

async function main() {
  const started = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-fleet-'));
  const replicas = [];
  try {
    for (let i = 0; i < REPLICAS; i++) {
      const port = await freePort();
      const child = await startNodeScript(`sim r${i}`, join(ROOT, 'bench', 'fleet', 'server.mjs'), [
        '--port', String(port), '--name', `r${i}`, '--max-seqs', String(SIM.maxSeqs), '--prefill-us', String(SIM.prefillUs),
        '--decode-ms', String(SIM.decodeMs), '--cache-tokens', String(SIM.cacheTokens),
      ], { ready: /listening on/ });
      replicas.push({ child, url: `http://127.0.0.1:${port}` });
    }
    const workloads = {
      conversations: { script: conversations(LOAD, 0xc0ffee), warmup: LOAD.warmup, seconds: LOAD.seconds, clients: LOAD.clients, rampMs: LOAD.rampMs },
      unique: {
        script: uniquePrompts({ outputTokens: LOAD.outputTokens, tokens: LOAD.uniqueTokens }, 0xbeef), warmup: 2, seconds: LOAD.uniqueSeconds,
        clients: LOAD.uniqueClients, rampMs: 1000,
      },
    };
    const results = [];
    for (const [workload, { script, warmup, seconds, clients, rampMs }] of Object.entries(workloads)) {
      for (const policy of POLICIES) {
        await Promise.all(replicas.map((r) => fetch(`${r.url}/reset`, { method: 'POST' })));
        const configPath = join(dir, `${policy}.yaml`);
        writeFileSync(configPath, configYaml(policy, replicas));
        const port = await freePort();
        const gw = await startGateway({
          root: ROOT, configPath, logPath: join(dir, `gateway-${policy}.log`), port, upstream: '', nodeArgs: [], label: `gateway (${policy})`,
        });
        log(`${workload} / ${policy}: ${clients} clients, ${warmup} s of warm-up, ${seconds} s measured`);
        try {
          const run = await runWorkload(script, { origin: gw.origin, key: KEY, clients, warmupSeconds: warmup, seconds, rampMs });
          const stats = await serverStats(replicas);
          const ttft = [...run.ttftMs].sort((a, b) => a - b);
          results.push({
            workload, policy, requests: run.requests, seconds: run.seconds,
            throughput_rps: run.requests / run.seconds, ttft_p50_ms: pct(ttft, 50), ttft_p90_ms: pct(ttft, 90),
            cache_hit_rate: stats.hitRate, per_replica: stats.perReplica,
          });
        } finally {
          await stopChild(gw.child);
        }
      }
    }
    const report = summarize(results);
    process.stdout.write(`${report.table}\n\n${report.goals.map((g) => `${g.met ? 'MET ' : 'MISS'} ${g.text}`).join('\n')}\n`);
    writeFileSync(OUT, `${JSON.stringify({
      at: new Date().toISOString(), seconds: (Date.now() - started) / 1000, replicas: REPLICAS, sim: SIM, load: LOAD, results, goals: report.goals,
    }, null, 2)}\n`);
    log(`written to ${OUT}`);
  } finally {
    await stopAll(3000);
    rmSync(dir, { recursive: true, force: true });
  }
}

function summarize(results) {
  const by = (w, p) => results.find((r) => r.workload === w && r.policy === p);
  const rows = results.map((r) => [
    r.workload, r.policy, r.throughput_rps.toFixed(1), `${Math.round(r.ttft_p50_ms)}`, `${Math.round(r.ttft_p90_ms)}`,
    `${(100 * r.cache_hit_rate).toFixed(0)}%`, r.per_replica.join('/'),
  ]);
  const header = ['workload', 'policy', 'req/s', 'TTFT p50 ms', 'TTFT p90 ms', 'cache hits', 'requests per replica'];
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  const line = (r) => `| ${r.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ')} |`;
  const sep = `|${widths.map((w, i) => (i < 2 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  const a = { rr: by('conversations', 'round_robin'), pa: by('conversations', 'prefix_affinity') };
  const b = { lo: by('unique', 'least_outstanding'), pa: by('unique', 'prefix_affinity') };
  const speedup = a.pa.throughput_rps / a.rr.throughput_rps;
  const tail = a.pa.ttft_p90_ms / a.rr.ttft_p90_ms;
  const gap = b.pa.throughput_rps / b.lo.throughput_rps - 1;
  return {
    table: [line(header), sep, ...rows.map(line)].join('\n'),
    goals: [
      { text: `(a) prefix_affinity throughput ${speedup.toFixed(2)}x round_robin's (goal >= 1.4x)`, value: speedup, met: speedup >= 1.4 },
      { text: `(a) prefix_affinity p90 TTFT ${tail.toFixed(2)} of round_robin's (goal <= 0.33)`, value: tail, met: tail <= 1 / 3 },
      { text: `(b) prefix_affinity throughput ${(100 * gap).toFixed(1)}% from least_outstanding's (goal within 5%)`, value: gap, met: Math.abs(gap) <= 0.05 },
    ],
  };
}

main().catch((err) => {
  process.stderr.write(`bench:fleet failed: ${err.stack ?? err}\n`);
  process.exitCode = 1;
});
