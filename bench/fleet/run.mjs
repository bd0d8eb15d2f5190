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
//   (c) overload (issue #31): a batch tenant of FLEET_BATCH_CLIENTS closed-loop clients (4x the
//       fleet's FLEET_REPLICAS x FLEET_MAX_SEQS sequences by default; prompts of
//       FLEET_BATCH_PROMPT_TOKENS, answers of FLEET_BATCH_OUTPUT_TOKENS) and an interactive tenant
//       sending FLEET_INTERACTIVE_RPS requests a second (prompts of FLEET_INTERACTIVE_PROMPT_TOKENS,
//       answers of FLEET_INTERACTIVE_OUTPUT_TOKENS), least_outstanding; run four ways: idle (the
//       interactive tenant alone), no queue, the queue with fairness (max_outstanding =
//       FLEET_MAX_SEQS, fairness: account), and the queue with fairness and priority (the
//       interactive plan priority: high). Reported: the interactive p50/p90 TTFT and its ratio
//       to idle, the batch tenant's throughput, the fleet's (all requests) and its utilisation
//       (sequence-time run over the replicas' capacity, in the measured window); and the queue's
//       CPU per request with 1,000 waiting. Also: slot use as the mean batch (sequences run
//       at once per replica) and the requests waiting in the gateway (sampled /admin/upstreams).
//   (c') overload-sim (issue #46): the same four runs of (c) in simulated time
//       (bench/fleet/simulate.mjs: the built Fleet, Replica and ProviderQueue around a model of
//       the servers, no sockets, no wall clock), so that what the queue decides is measured
//       apart from the CPU the processes get on a shared machine; with FLEET_SIM_BASELINE=DIR
//       (another checkout, built), the same runs with that build's code too, in the same table.
//   (d) batch (issue #43): a batch of FLEET_BATCH_LINES lines (prompts of FLEET_BATCH_PROMPT_TOKENS,
//       answers of FLEET_BATCH_OUTPUT_TOKENS) through the Batch API (bench/fleet/batch.mjs: files
//       and batches with the openai SDK), the gateway's queue as in (c) (max_outstanding =
//       FLEET_MAX_SEQS) and batch.concurrency FLEET_BATCH_CONCURRENCY (default twice the fleet's
//       sequences, so that the lines fill every free sequence and the rest wait in the queue's low
//       band); run three ways: the interactive tenant of (c) alone for FLEET_BATCH_IDLE_SECONDS
//       (its idle TTFT), the batch alone, and the batch with the interactive tenant (its plan's
//       default band, normal). Reported: the batch's time and its ratio to the batch alone, the
//       fleet's busy share while the batch runs, the interactive p50/p90 TTFT of the requests begun
//       meanwhile and its ratio to idle; the gateway's requests in flight to the replicas and
//       waiting in its queue (sampled /admin/upstreams).
// FLEET_WORKLOADS picks workloads (default conversations,unique,overload,overload-sim,batch).
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
// FLEET_OUT; for (c): FLEET_BATCH_CLIENTS (4 x replicas x max seqs), FLEET_BATCH_PROMPT_TOKENS (20),
// FLEET_BATCH_OUTPUT_TOKENS (64), FLEET_INTERACTIVE_RPS (10), FLEET_INTERACTIVE_PROMPT_TOKENS
// (300), FLEET_INTERACTIVE_OUTPUT_TOKENS (16), FLEET_OVERLOAD_WARMUP_SECONDS (4),
// FLEET_OVERLOAD_SECONDS (10), FLEET_OVERLOAD_METRICS_MS (200: the gateway's
// metrics_interval_ms, and the scrape interval in simulated time); FLEET_SIM_BASELINE; for (d):
// FLEET_BATCH_LINES (5000), FLEET_BATCH_CONCURRENCY (8), FLEET_BATCH_IDLE_SECONDS (10).

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, log, startGateway, startNodeScript, stopAll, stopChild } from '../procs.js';
import { conversations, runWorkload, uniquePrompts } from './workload.mjs';
import { measureQueueCpu, runOverload } from './overload.mjs';
import { simulateOverload } from './simulate.mjs';
import { runBatchWorkload } from './batch.mjs';

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
const OVERLOAD = {
  batchClients: env('FLEET_BATCH_CLIENTS', 4 * REPLICAS * SIM.maxSeqs), batchPromptTokens: env('FLEET_BATCH_PROMPT_TOKENS', 20),
  batchOutputTokens: env('FLEET_BATCH_OUTPUT_TOKENS', 64), interactiveRps: env('FLEET_INTERACTIVE_RPS', 10),
  interactivePromptTokens: env('FLEET_INTERACTIVE_PROMPT_TOKENS', 300), interactiveOutputTokens: env('FLEET_INTERACTIVE_OUTPUT_TOKENS', 16),
  warmup: env('FLEET_OVERLOAD_WARMUP_SECONDS', 4), seconds: env('FLEET_OVERLOAD_SECONDS', 10),
  metricsMs: env('FLEET_OVERLOAD_METRICS_MS', 200),
};
const BATCH = {
  lines: env('FLEET_BATCH_LINES', 5000), concurrency: env('FLEET_BATCH_CONCURRENCY', 8), idleSeconds: env('FLEET_BATCH_IDLE_SECONDS', 10),
};
const WORKLOADS = new Set((process.env.FLEET_WORKLOADS ?? 'conversations,unique,overload,overload-sim,batch').split(',').map((w) => w.trim()));
/** Simulated time (c'): the servers' scrape interval as the live runs' metrics_interval_ms, 0.5 ms a hop. */
const SIMULATED = {
  replicas: REPLICAS, maxSeqs: SIM.maxSeqs, prefillUs: SIM.prefillUs, decodeMs: SIM.decodeMs, scrapeMs: OVERLOAD.metricsMs, hopMs: 0.5, jitter: 0.1,
  batchClients: OVERLOAD.batchClients, batchOutputTokens: OVERLOAD.batchOutputTokens, interactiveRps: OVERLOAD.interactiveRps,
  // As the servers count a prompt: the chat template adds about 8 tokens.
  batchPromptTokens: OVERLOAD.batchPromptTokens + 8, interactivePromptTokens: OVERLOAD.interactivePromptTokens + 10,
  interactiveOutputTokens: OVERLOAD.interactiveOutputTokens, warmupSeconds: OVERLOAD.warmup, seconds: OVERLOAD.seconds, seed: 0x0dd,
};
const POLICIES = ['round_robin', 'least_outstanding', 'prefix_affinity'];
const KEY = 'tg_fleetbench_000000000000000000';
const BATCH_KEY = 'tg_fleetbatch_00000000000000000';
const INTERACTIVE_KEY = 'tg_fleetinteractive_00000000000';
const ADMIN_TOKEN = 'fleet-bench-admin-token-0000000';
/** The overload runs: no batch tenant; no queue; the queue with fairness; and with priority too. */
const OVERLOAD_RUNS = [
  { run: 'idle', batch: false, queue: false, priority: false },
  { run: 'no queue', batch: true, queue: false, priority: false },
  { run: 'queue, fairness', batch: true, queue: true, priority: false },
  { run: 'queue, fairness + priority', batch: true, queue: true, priority: true },
];

/** A plan without limits (the fleet is what is measured), with `extra` members. */
const unlimited = (extra = '') => `{ paid: true, requests_per_minute: null, tokens_per_minute: null, max_concurrent: null${extra} }`;

/**
 * A gateway config in front of `replicas` as provider `sim` and model `sim`: `plans` maps a plan
 * to its YAML, `accounts` lists [id, plan, key]; `queue` (YAML) puts the provider's queue in
 * front of replicas of SIM.maxSeqs sequences each.
 */
function fleetYaml(replicas, { server, admin = false, batch, plans, accounts, balance, metricsMs, queue }) {
  return [
    `server: ${server}`,
    'store: { kind: memory }',
    ...(admin ? [`admin: { token: ${ADMIN_TOKEN} }`] : []),
    ...(batch ? [`batch: ${batch}`] : []),
    'plans:',
    ...Object.entries(plans).map(([name, plan]) => `  ${name}: ${plan}`),
    'accounts:',
    ...accounts.map(([id, plan, key]) => `  - { id: ${id}, plan: ${plan}, wallet_units: 1000000000000, keys: [${key}] }`),
    'providers:',
    '  sim:',
    '    kind: openai',
    '    timeout_ms: 120000',
    `    balance: ${balance}`,
    `    metrics_interval_ms: ${metricsMs}`,
    ...(queue ? [`    max_outstanding: ${SIM.maxSeqs}`, `    queue: ${queue}`] : []),
    '    targets:',
    ...replicas.map((r) => `      - { url: ${r.url}/v1, metrics_url: ${r.url}/metrics }`),
    'models:',
    '  - { id: sim, provider: sim, context_window: 131072, max_output_tokens: 1024, price: { input_per_mtok: 1, output_per_mtok: 1 } }',
    '',
  ].join('\n');
}

/** The two tenants of workloads (c) and (d). */
const TENANTS = [['batch', 'batch', BATCH_KEY], ['interactive', 'interactive', INTERACTIVE_KEY]];

/** Workload (c): a batch tenant and an interactive one (priority high in the last run). */
function overloadYaml(variant, replicas) {
  return fleetYaml(replicas, {
    // One client process holds more than 256 connections (the default cap per address).
    server: '{ sse_keepalive_ms: 60000, max_connections_per_ip: null }',
    admin: true,
    plans: { batch: unlimited(), interactive: unlimited(variant.priority ? ', priority: high' : '') },
    accounts: TENANTS,
    balance: 'least_outstanding',
    metricsMs: OVERLOAD.metricsMs,
    queue: variant.queue ? '{ max_wait_ms: 60000, max_queued: 10000, fairness: account }' : undefined,
  });
}

/** Workload (d): the gateway's queue as in (c), batch.concurrency `concurrency`. */
function batchYaml(replicas, concurrency) {
  return fleetYaml(replicas, {
    server: '{ sse_keepalive_ms: 60000, max_connections_per_ip: null }',
    admin: true,
    batch: `{ concurrency: ${concurrency}, max_lines: 50000 }`,
    plans: { batch: unlimited(), interactive: unlimited() },
    accounts: TENANTS,
    balance: 'least_outstanding',
    metricsMs: OVERLOAD.metricsMs,
    queue: '{ max_wait_ms: 600000, max_queued: 100000, fairness: account }',
  });
}

/** Sequence-ms run by every replica so far, and when each was read. */
async function busy(replicas) {
  const all = await Promise.all(replicas.map((r) => fetch(`${r.url}/stats`).then((x) => x.json())));
  return { seqMs: all.reduce((s, x) => s + x.busy_seq_ms, 0), at: performance.now() };
}

function configYaml(policy, replicas) {
  return fleetYaml(replicas, {
    server: '{ sse_keepalive_ms: 60000 }',
    plans: { bench: unlimited() },
    accounts: [['bench', 'bench', KEY]],
    balance: policy,
    metricsMs: 200,
  });
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
    const live = ['conversations', 'unique', 'overload', 'batch'].some((w) => WORKLOADS.has(w));
    for (let i = 0; live && i < REPLICAS; i++) {
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
      if (!WORKLOADS.has(workload)) continue;
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
    const overload = [];
    let queueCpu;
    if (WORKLOADS.has('overload')) {
      for (const variant of OVERLOAD_RUNS) {
        await Promise.all(replicas.map((r) => fetch(`${r.url}/reset`, { method: 'POST' })));
        const configPath = join(dir, 'overload.yaml');
        writeFileSync(configPath, overloadYaml(variant, replicas));
        const port = await freePort();
        const gw = await startGateway({
          root: ROOT, configPath, logPath: join(dir, `gateway-overload-${overload.length}.log`), port, upstream: '', nodeArgs: [], label: `gateway (overload: ${variant.run})`,
        });
        const batchClients = variant.batch ? OVERLOAD.batchClients : 0;
        log(`overload / ${variant.run}: ${batchClients} batch clients, ${OVERLOAD.interactiveRps} interactive req/s, ${OVERLOAD.warmup} s of warm-up, ${OVERLOAD.seconds} s measured`);
        try {
          const marks = {};
          // Requests waiting in the gateway's queue, sampled through the window.
          const waiting = [];
          let sampling = false;
          const sample = async () => {
            while (sampling) {
              const view = await fetch(`${gw.origin}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }).then((r) => r.json());
              waiting.push(view.providers.sim.queued);
              await new Promise((r) => setTimeout(r, 250));
            }
          };
          let sampler;
          const run = await runOverload({
            origin: gw.origin, batchKey: BATCH_KEY, interactiveKey: INTERACTIVE_KEY, batchClients, interactiveRps: OVERLOAD.interactiveRps,
            warmupSeconds: OVERLOAD.warmup, seconds: OVERLOAD.seconds, seed: 0x0dd,
            batch: { promptTokens: OVERLOAD.batchPromptTokens, outputTokens: OVERLOAD.batchOutputTokens },
            interactive: { promptTokens: OVERLOAD.interactivePromptTokens, outputTokens: OVERLOAD.interactiveOutputTokens },
            onWindow: async (edge) => {
              marks[edge] = await busy(replicas);
              sampling = edge === 'start';
              if (sampling) sampler = sample();
            },
          });
          await sampler;
          const ttft = [...run.ttftMs].sort((a, b) => a - b);
          const window = (marks.end.at - marks.start.at) / 1000;
          overload.push({
            run: variant.run, interactive_requests: ttft.length, interactive_refused: run.interactiveRefused,
            interactive_ttft_p50_ms: pct(ttft, 50), interactive_ttft_p90_ms: pct(ttft, 90),
            batch_rps: run.batchDone / OVERLOAD.seconds, batch_refused: run.batchRefused,
            fleet_rps: (run.batchDone + run.interactiveDone) / OVERLOAD.seconds,
            utilisation: (marks.end.seqMs - marks.start.seqMs) / (window * 1000 * REPLICAS * SIM.maxSeqs),
            gateway_waiting: waiting.length === 0 ? 0 : waiting.reduce((a, b) => a + b, 0) / waiting.length,
          });
        } catch (err) {
          throw new Error(`overload / ${variant.run}: ${err.message}\n--- gateway log (tail) ---\n${gw.child.output()}`, { cause: err });
        } finally {
          await stopChild(gw.child);
        }
      }
      queueCpu = await measureQueueCpu(ROOT, { waiting: 1000 });
    }
    const batchRuns = [];
    if (WORKLOADS.has('batch')) {
      const tenant = {
        key: INTERACTIVE_KEY, rps: OVERLOAD.interactiveRps, promptTokens: OVERLOAD.interactivePromptTokens, outputTokens: OVERLOAD.interactiveOutputTokens,
      };
      const lines = { key: BATCH_KEY, promptTokens: OVERLOAD.batchPromptTokens, outputTokens: OVERLOAD.batchOutputTokens };
      const runs = [
        { run: 'interactive alone (idle)', concurrency: BATCH.concurrency, batch: null, tenant },
        { run: 'batch alone', concurrency: BATCH.concurrency, batch: { ...lines, lines: BATCH.lines }, tenant: null },
        { run: 'batch + interactive', concurrency: BATCH.concurrency, batch: { ...lines, lines: BATCH.lines }, tenant },
      ];
      for (const variant of runs) {
        await Promise.all(replicas.map((r) => fetch(`${r.url}/reset`, { method: 'POST' })));
        const configPath = join(dir, 'batch.yaml');
        writeFileSync(configPath, batchYaml(replicas, variant.concurrency));
        const port = await freePort();
        const gw = await startGateway({
          root: ROOT, configPath, logPath: join(dir, `gateway-batch-${batchRuns.length}.log`), port, upstream: '', nodeArgs: [], label: `gateway (batch: ${variant.run})`,
        });
        log(`batch / ${variant.run}: ${variant.batch?.lines ?? 0} lines at concurrency ${variant.concurrency}, ${variant.tenant === null ? 0 : OVERLOAD.interactiveRps} interactive req/s`);
        try {
          const r = await runBatchWorkload({ origin: gw.origin, batch: variant.batch, tenant: variant.tenant, seconds: BATCH.idleSeconds, warmupSeconds: OVERLOAD.warmup, seed: 0x0dd, busy: () => busy(replicas),
            upstreams: () => fetch(`${gw.origin}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }).then((x) => x.json()).then((v) => v.providers.sim),
          });
          const ttft = [...r.ttftMs].sort((a, b) => a - b);
          batchRuns.push({
            run: variant.run, concurrency: variant.concurrency, lines: variant.batch?.lines ?? 0, seconds: r.seconds,
            utilisation: r.busySeqMs / (r.seconds * 1000 * REPLICAS * SIM.maxSeqs),
            interactive_requests: ttft.length, interactive_refused: r.refused, gateway_outstanding: r.outstanding, gateway_waiting: r.queued,
            interactive_ttft_p50_ms: ttft.length === 0 ? null : pct(ttft, 50), interactive_ttft_p90_ms: ttft.length === 0 ? null : pct(ttft, 90),
          });
        } catch (err) {
          throw new Error(`batch / ${variant.run}: ${err.message}\n--- gateway log (tail) ---\n${gw.child.output()}`, { cause: err });
        } finally {
          await stopChild(gw.child);
        }
      }
    }
    const simulated = [];
    if (WORKLOADS.has('overload-sim')) {
      const builds = [['this', ROOT], ...(process.env.FLEET_SIM_BASELINE ? [['baseline', resolve(process.env.FLEET_SIM_BASELINE)]] : [])];
      for (const [build, root] of builds) {
        // And a reference: the queue by its own requests in flight alone (no metrics_url).
        for (const variant of [...OVERLOAD_RUNS, { ...OVERLOAD_RUNS.at(-1), run: 'queue, fairness + priority, no metrics_url', metrics: false }]) {
          log(`overload in simulated time / ${build} / ${variant.run}`);
          simulated.push({ build, ...(await simulateOverload(root, variant, SIMULATED)) });
        }
      }
    }
    const report = summarize(results, overload, queueCpu, simulated, batchRuns);
    process.stdout.write(`${report.table}\n\n${report.goals.map((g) => `${g.met ? 'MET   ' : 'MISSED'} ${g.text}`).join('\n')}\n`);
    writeFileSync(OUT, `${JSON.stringify({
      at: new Date().toISOString(), seconds: (Date.now() - started) / 1000, replicas: REPLICAS, sim: SIM, load: LOAD, overload_load: OVERLOAD,
      results, overload, queue_cpu: queueCpu, simulated, simulated_load: SIMULATED, batch_load: BATCH, batch: batchRuns, goals: report.goals,
    }, null, 2)}\n`);
    log(`written to ${OUT}`);
  } finally {
    await stopAll(3000);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A markdown table: the first `left` columns left-aligned, the rest right-aligned. */
function table(header, rows, left) {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  const line = (r) => `| ${r.map((c, i) => (i < left ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ')} |`;
  const sep = `|${widths.map((w, i) => (i < left ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(header), sep, ...rows.map(line)].join('\n');
}

function summarizeOverload(overload, cpu) {
  if (overload.length === 0) return { table: '', goals: [] };
  const by = (run) => overload.find((r) => r.run === run);
  const idle = by('idle');
  const rows = overload.map((r) => [
    r.run, `${Math.round(r.interactive_ttft_p50_ms)}`, `${Math.round(r.interactive_ttft_p90_ms)}`,
    `${(r.interactive_ttft_p90_ms / idle.interactive_ttft_p90_ms).toFixed(2)}x`, r.batch_rps.toFixed(1), r.fleet_rps.toFixed(1),
    `${(100 * r.utilisation).toFixed(0)}%`, (r.utilisation * SIM.maxSeqs).toFixed(1), r.gateway_waiting.toFixed(0), `${r.batch_refused + r.interactive_refused}`,
  ]);
  const header = ['overload run', 'interactive TTFT p50 ms', 'p90 ms', 'p90 vs idle', 'batch req/s', 'fleet req/s', 'slot use', 'mean batch', 'waiting in gateway', 'refused'];
  const none = by('no queue');
  const queued = by('queue, fairness + priority');
  const tail = queued.interactive_ttft_p90_ms / idle.interactive_ttft_p90_ms;
  const kept = queued.fleet_rps / none.fleet_rps;
  const use = queued.utilisation;
  return {
    table: `${table(header, rows, 1)}\n\nqueue CPU per request with ${cpu.waiting} waiting: ${cpu.cpuUsPerRequest.toFixed(2)} us`,
    goals: [
      { text: `(c) interactive p90 TTFT under overload with the queue ${tail.toFixed(2)}x idle (goal <= 1.5x)`, value: tail, met: tail <= 1.5 },
      { text: `(c) fleet throughput with the queue ${(100 * kept).toFixed(1)}% of without (goal >= 95%)`, value: kept, met: kept >= 0.95 },
      { text: `(c) slot use with the queue ${(100 * use).toFixed(1)}% (goal >= 95%: no replica idles while requests wait)`, value: use, met: use >= 0.95 },
      { text: `(c) queue CPU ${cpu.cpuUsPerRequest.toFixed(2)} us per request at ${cpu.waiting} waiting (goal < 20 us)`, value: cpu.cpuUsPerRequest, met: cpu.cpuUsPerRequest < 20 },
    ],
  };
}

function summarize(results, overload, queueCpu, simulated, batchRuns) {
  const parts = [
    results.length === 0 ? { table: '', goals: [] } : summarizePolicies(results), summarizeOverload(overload, queueCpu), summarizeSimulated(simulated),
    summarizeBatch(batchRuns),
  ];
  return { table: parts.map((p) => p.table).filter((x) => x !== '').join('\n\n'), goals: parts.flatMap((p) => p.goals) };
}

/** (d) the batch workload: a row per run, the goals of #43 side by side. */
function summarizeBatch(runs) {
  if (runs.length === 0) return { table: '', goals: [] };
  const by = (run) => runs.find((r) => r.run === run);
  const idle = by('interactive alone (idle)');
  const alone = by('batch alone');
  const both = by('batch + interactive');
  const ms = (v) => (v === null ? '-' : `${Math.round(v)}`);
  const rows = runs.map((r) => [
    r.run, `${r.lines}`, `${r.concurrency}`, r.lines === 0 ? '-' : r.seconds.toFixed(1), r.lines === 0 ? '-' : (r.lines / r.seconds).toFixed(1),
    r.lines === 0 || r.lines !== alone.lines ? '-' : `${(r.seconds / alone.seconds).toFixed(2)}x`, `${(100 * r.utilisation).toFixed(1)}%`,
    ms(r.interactive_ttft_p50_ms), ms(r.interactive_ttft_p90_ms),
    r.interactive_ttft_p90_ms === null ? '-' : `${(r.interactive_ttft_p90_ms / idle.interactive_ttft_p90_ms).toFixed(2)}x`,
    r.lines === 0 ? '-' : r.gateway_outstanding.toFixed(0), r.lines === 0 ? '-' : r.gateway_waiting.toFixed(0),
  ]);
  const header = [
    'batch run', 'lines', 'concurrency', 'batch s', 'lines/s', 'vs batch alone', 'fleet busy', 'interactive TTFT p50 ms', 'p90 ms', 'p90 vs idle',
    'sent to replicas', 'waiting in gateway',
  ];
  const tail = both.interactive_ttft_p90_ms / idle.interactive_ttft_p90_ms;
  const slower = both.seconds / alone.seconds;
  return {
    table: table(header, rows, 1),
    goals: [
      { text: `(d) interactive p90 TTFT while the batch runs ${tail.toFixed(2)}x idle (goal <= 1.2x)`, value: tail, met: tail <= 1.2 },
      { text: `(d) fleet busy while the batch runs (with the interactive tenant) ${(100 * both.utilisation).toFixed(1)}% (goal >= 95%)`, value: both.utilisation, met: both.utilisation >= 0.95 },
      { text: `(d) batch time with the interactive tenant ${slower.toFixed(2)}x the batch alone (goal <= 1.1x)`, value: slower, met: slower <= 1.1 },
    ],
  };
}

/** (c') in simulated time: per build, the same columns as (c), the goals of #46 for this build. */
function summarizeSimulated(simulated) {
  if (simulated.length === 0) return { table: '', goals: [] };
  const by = (build, run) => simulated.find((r) => r.build === build && r.run === run);
  const rows = simulated.map((r) => {
    const idle = by(r.build, 'idle');
    const none = by(r.build, 'no queue');
    return [
      r.build, r.run, `${Math.round(r.interactive_ttft_p50_ms)}`, `${Math.round(r.interactive_ttft_p90_ms)}`,
      `${(r.interactive_ttft_p90_ms / idle.interactive_ttft_p90_ms).toFixed(2)}x`, `${Math.round(r.interactive_gateway_p90_ms)}`, `${Math.round(r.interactive_server_wait_p90_ms)}`,
      r.fleet_rps.toFixed(1), `${(r.fleet_rps / none.fleet_rps).toFixed(2)}x`, `${(100 * r.utilisation).toFixed(1)}%`, (r.utilisation * SIMULATED.maxSeqs).toFixed(1), r.gateway_waiting.toFixed(0),
    ];
  });
  const header = ['build', 'overload run (simulated time)', 'TTFT p50 ms', 'p90 ms', 'p90 vs idle', 'of it: gateway p90', 'server p90', 'fleet req/s', 'vs no queue', 'slot use', 'mean batch', 'waiting in gateway'];
  const q = by('this', 'queue, fairness + priority');
  const tail = q.interactive_ttft_p90_ms / by('this', 'idle').interactive_ttft_p90_ms;
  const kept = q.fleet_rps / by('this', 'no queue').fleet_rps;
  return {
    table: table(header, rows, 2),
    goals: [
      { text: `(c') simulated: slot use with the queue ${(100 * q.utilisation).toFixed(1)}% (goal >= 95%)`, value: q.utilisation, met: q.utilisation >= 0.95 },
      { text: `(c') simulated: interactive p90 TTFT with the queue ${tail.toFixed(2)}x idle (goal <= 1.5x)`, value: tail, met: tail <= 1.5 },
      { text: `(c') simulated: fleet throughput with the queue ${kept.toFixed(2)}x without (goal >= 0.95x)`, value: kept, met: kept >= 0.95 },
    ],
  };
}

function summarizePolicies(results) {
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
  const goals = [];
  if (a.rr !== undefined && a.pa !== undefined) {
    const speedup = a.pa.throughput_rps / a.rr.throughput_rps;
    const tail = a.pa.ttft_p90_ms / a.rr.ttft_p90_ms;
    goals.push(
      { text: `(a) prefix_affinity throughput ${speedup.toFixed(2)}x round_robin's (goal >= 1.4x)`, value: speedup, met: speedup >= 1.4 },
      { text: `(a) prefix_affinity p90 TTFT ${tail.toFixed(2)} of round_robin's (goal <= 0.33)`, value: tail, met: tail <= 1 / 3 },
    );
  }
  if (b.lo !== undefined && b.pa !== undefined) {
    const gap = b.pa.throughput_rps / b.lo.throughput_rps - 1;
    goals.push({ text: `(b) prefix_affinity throughput ${(100 * gap).toFixed(1)}% from least_outstanding's (goal within 5%)`, value: gap, met: Math.abs(gap) <= 0.05 });
  }
  return { table: [line(header), sep, ...rows.map(line)].join('\n'), goals };
}

main().catch((err) => {
  process.stderr.write(`bench:fleet failed: ${err.stack ?? err}\n`);
  process.exitCode = 1;
});
