// Tollgate performance benchmark: `npm run bench` (issues #13, #34 and #46; the goals it checks are
// #46's, in report.js).
//
// Runs the gateway on the config an operator would really run (../shared/bench/
// tollgate-bench.yaml: finite limits, metering on, memory store), its stdout and stderr written
// to a log file, and beside it in the same run the reference peer, a bare http-proxy-3 hop
// (../shared/bench/bare-hop.cjs), both on the shared fake upstream (../shared/bench/upstream.mjs).
// The gateway and the bare hop are pinned to one CPU and loaded in turn; this process (the
// load generator), the upstream and Redis run on the other. For each of the two it measures:
//
//   - CPU per non-streaming request and per 20-chunk stream at 64 connections: the process's
//     user+system CPU time (/proc/PID/stat) over the requests it served;
//   - p50 and p99 latency at one connection, and the time added to the first SSE byte; for the
//     gateway's tail, over the same requests: its own p99 (the access log's duration_ms), its GC
//     pauses (its /metrics), how long its main thread and the bare hop's waited for their CPU
//     (/proc/PID/schedstat) and the CPU their other threads took meanwhile (GC, JIT, libuv);
//   - RSS (/proc/PID/status) 1 s after start, idle once settled (after BENCH_IDLE_SECONDS without
//     traffic, V8's memory reducer has given back the young generation's pages), and at its
//     peak while BENCH_STREAMS slow streams are open;
//   - then the gateway alone on the same config with store.kind redis (a throwaway
//     redis-server): CPU per request, and Redis round trips (read events) and commands per
//     request, counted from Redis's INFO around sequential requests; p50/p99 at one connection
//     and throughput at 64;
//   - and the same with a replica and store.wait_replicas: 1 (phase redis-wait): what waiting
//     for a replica to confirm each debit (Redis WAIT) costs in latency and throughput;
//   - CPU per non-streaming request of the other routes on the same pipeline (phase dialects):
//     /v1/messages and /v1/responses on the gateway above; /v1/completions on a gateway of its
//     own, on a derived config (the shared one plus one provider and model, written to a temp
//     file) in front of the bench's own completions upstream (bench/completions-upstream.mjs:
//     the shared upstream serves only chat), so that every other figure is taken on the shared
//     config unchanged;
//   - CPU per MCP tools/call at 64 connections (phase mcp, CONTRACT section 17): a gateway of its
//     own on the shared config plus one MCP server (bench/mcp-upstream.mjs, made with the official
//     SDK, on the load CPU) priced 1 unit a call and granted to the bench plan, so each call is
//     rate-limited, held and settled as a chat request is; reported beside the chat request's CPU;
//   - BENCH_MANY_STREAMS slow streams (10,000) open at once on one gateway (phase many, #46): the
//     slow-stream phase at that count, on a gateway of its own whose slow model's provider may
//     open as many upstream connections; each stream a chunk every 2 s and long enough to
//     outlast BENCH_MANY_SECONDS (20), so that all are open together however long the load takes
//     to open them; the load's sockets bound to 127.0.0.2 and up (200 per
//     address: one address would meet server.max_connections_per_ip and run short of ephemeral
//     ports); its RSS per open stream, and no error. The gateway holds two sockets per stream:
//     under a file limit (ulimit -n) below twice the count and 1,024 to spare, it runs the most
//     streams the limit allows and says so (a note, and the rows name the count).
//
// It prints one table (figure | gateway | reference | ratio | goal | result: the reference is the
// bare hop, or for the Redis store's goals the memory store's figure), writes the same
// as JSON to bench/results.json (or BENCH_OUT) and, after a run of every phase, as the latest
// run of docs/performance.md (or BENCH_DOC). Any non-2xx answer, transport error, timeout or
// malformed stream fails the run (exit 1); goals missed do not.
//
// Environment:
//   BENCH_CONFIG            the gateway config (default ../shared/bench/tollgate-bench.yaml)
//   BENCH_SHARED            folder of upstream.mjs and bare-hop.cjs (default ../shared/bench)
//   BENCH_SECONDS           seconds per measured run (10)
//   BENCH_WARMUP_SECONDS    seconds per warm-up run (2)
//   BENCH_STREAMS           slow streams held open for the RSS figures (500)
//   BENCH_STREAM_SECONDS    seconds the slow streams are kept up (5)
//   BENCH_MANY_STREAMS      slow streams held open in phase many (10000)
//   BENCH_MANY_SECONDS      seconds phase many samples the RSS while they open and stay open (20)
//   BENCH_TTFB_REQUESTS     first-byte samples per target (200)
//   BENCH_IDLE_SECONDS      seconds without traffic before the settled idle RSS is read (30)
//   BENCH_REDIS=0           skip the Redis store variant
//   BENCH_PHASES            comma list of c1,ttfb,c64,stream,dialects,mcp,queue,slow,many,redis,redis-wait (default all of them)
//   BENCH_OUT               the JSON file (bench/results.json)
//   BENCH_DOC               the page whose latest-run table is rewritten (docs/performance.md, between
//                           its bench:latest markers): by default only when every phase ran; set
//                           it to write after a partial run too, or to '' never to write
//   BENCH_LOG_DIR           where the gateway logs go (bench/; gateway*.log, overwritten)
//   BENCH_GATEWAY_NODE_ARGS extra node flags for the gateway, e.g.
//                           "--cpu-prof --cpu-prof-dir=/tmp/prof" (written when it stops)
//   BENCH_MAX_SECONDS       the whole run is aborted after this long (computed from the above)

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse, parseDocument } from 'yaml';
import Redis from 'ioredis';
import {
  FAST, SLOW, cannon, cannonWithCpu, completionsRequest, counterDelta, dialectCheck, dialectRequests, gcDelta, gcPauses, headersFor, loggedDurations, openStreams, percentile,
  redisCounters, requestBody, sanityCheck, sequential, sequentialLatency, settle, timeToFirstByte,
} from './load.js';
import {
  HOST, clockTicks, freePort, log, noiseMeter, pinning, helperTicks, rssKb, schedstat, startGateway, startNodeScript, startRedis, stopAll, stopChild,
} from './procs.js';
import { figures, latestBlock, medianRun, missed, repsNotes, table, withLatest } from './report.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SHARED = resolve(process.env.BENCH_SHARED || join(ROOT, '..', 'shared', 'bench'));
const CONFIG = resolve(process.env.BENCH_CONFIG || join(SHARED, 'tollgate-bench.yaml'));
const OUT = resolve(process.env.BENCH_OUT || join(ROOT, 'bench', 'results.json'));
const LOG_DIR = resolve(process.env.BENCH_LOG_DIR || join(ROOT, 'bench'));

function envNumber(name, fallback, min) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`${name} must be a number >= ${min}, got '${raw}'`);
  return n;
}

/** Longer than the gateway's log batching (observe/log.ts: at least every 500 ms). */
const LOG_FLUSH_MS = 700;
const SECONDS = envNumber('BENCH_SECONDS', 10, 1);
const WARMUP = envNumber('BENCH_WARMUP_SECONDS', 2, 0);
const STREAMS = Math.round(envNumber('BENCH_STREAMS', 500, 1));
const STREAM_SECONDS = envNumber('BENCH_STREAM_SECONDS', 5, 2);
const TTFB_N = Math.round(envNumber('BENCH_TTFB_REQUESTS', 200, 10));
const IDLE_SECONDS = envNumber('BENCH_IDLE_SECONDS', 30, 0);
/**
 * How many times each figure with a goal is measured, alternating gateway and reference: the
 * table gives the median (issue #46: ratios in one run, medians of 3).
 */
const REPS = Math.round(envNumber('BENCH_REPS', 3, 1));
/** The SECONDS-long runs one more repetition adds: c64 and stream 2 each, c=1 3, completions and MCP 2 each, queue 3, Redis and Redis-wait 4 each. */
const SECONDS_PER_REP = 22;
const MANY_STREAMS = Math.round(envNumber('BENCH_MANY_STREAMS', 10_000, 1));
const MANY_SECONDS = envNumber('BENCH_MANY_SECONDS', 20, 2);
/** Phase many's model: on the slow model's provider, a chunk every 2 s, 10 s past the sampling. */
const MANY_MODEL = 'bench-many';
/**
 * Open files phase many leaves the gateway beside its two sockets per stream: its log, libuv's
 * own, the warm-up's idle upstream connections. 256 was too few: at 9,872 streams of a 20,000
 * limit the gateway ran out (libuv then accepts and drops a connection: the client's ECONNRESET).
 */
const MANY_SPARE_FILES = 1024;
const ALL_PHASES = ['c1', 'ttfb', 'c64', 'stream', 'dialects', 'mcp', 'queue', 'slow', 'many', 'redis', 'redis-wait'];
const PHASES = new Set((process.env.BENCH_PHASES || ALL_PHASES.join(',')).split(',').map((s) => s.trim()).filter(Boolean));
for (const p of PHASES) if (!ALL_PHASES.includes(p)) throw new Error(`BENCH_PHASES: unknown phase '${p}' (known: ${ALL_PHASES.join(', ')})`);
if (process.env.BENCH_REDIS === '0') { PHASES.delete('redis'); PHASES.delete('redis-wait'); }
const DOC = process.env.BENCH_DOC !== undefined
  ? (process.env.BENCH_DOC === '' ? undefined : resolve(process.env.BENCH_DOC))
  : (PHASES.size === ALL_PHASES.length ? join(ROOT, 'docs', 'performance.md') : undefined);
const NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);
const STOP_MS = NODE_ARGS.length > 0 ? 60_000 : 10_000; // a CPU profile is written on exit
const MAX_SECONDS = envNumber('BENCH_MAX_SECONDS', 300 + 5 * WARMUP + 30 * SECONDS + (REPS - 1) * SECONDS_PER_REP * SECONDS + 2 * STREAM_SECONDS + 2 * MANY_SECONDS + 150 + TTFB_N + IDLE_SECONDS, 10);

/** The key and the two model ids the run needs, from the config itself. */
function readConfig() {
  for (const f of [CONFIG, join(SHARED, 'upstream.mjs'), join(SHARED, 'bare-hop.cjs')]) {
    if (!existsSync(f)) throw new Error(`${f} not found (set BENCH_CONFIG / BENCH_SHARED)`);
  }
  const text = readFileSync(CONFIG, 'utf8');
  const cfg = parse(text);
  const key = cfg?.accounts?.[0]?.keys?.[0];
  if (typeof key !== 'string' || key.includes('${')) throw new Error(`${CONFIG}: accounts[0].keys[0] must be a literal key`);
  const ids = new Set((cfg.models ?? []).map((m) => m.id));
  for (const id of [FAST, SLOW]) if (!ids.has(id)) throw new Error(`${CONFIG}: model ${id} is missing (the shared upstream's behaviour comes from it)`);
  // The provider of the slow model caps the streams that can be open upstream at once.
  const provider = cfg.providers?.[(cfg.models ?? []).find((m) => m.id === SLOW).provider];
  const maxConnections = Number(provider?.max_connections ?? 256); // the schema's default
  return { text, key, maxConnections };
}

/** The same config with store.kind redis at `url` (and store.wait_replicas), written to `dir`. */
function redisConfig(text, url, dir, waitReplicas = 0) {
  const doc = parseDocument(text);
  doc.setIn(['store', 'kind'], 'redis');
  doc.setIn(['store', 'url'], url);
  if (waitReplicas > 0) doc.setIn(['store', 'wait_replicas'], waitReplicas);
  const path = join(dir, `tollgate-bench-redis${waitReplicas > 0 ? '-wait' : ''}.yaml`);
  writeFileSync(path, doc.toString());
  return path;
}

const fmt = (v, d = 1) => (typeof v === 'number' && Number.isFinite(v) ? v.toFixed(d) : '-');

async function main(tmp) {
  const { text, key, maxConnections } = readConfig();
  if (PHASES.has('slow') && maxConnections < STREAMS) {
    log(`WARNING: the config allows ${maxConnections} upstream connections (max_connections), fewer than BENCH_STREAMS=${STREAMS}: ` +
      'the gateway opens at most that many streams upstream and queues the rest');
  }
  const headers = headersFor(key);
  const ticks = clockTicks();
  const pin = pinning();
  if (!pin.pinned) log(`WARNING: running unpinned (${pin.why}); the figures are not comparable`);
  const idleMachine = noiseMeter(() => []);
  await sleep(1000);
  const busyBefore = idleMachine().othersPct;
  if (busyBefore > 10) log(`WARNING: other processes use ${fmt(busyBefore, 0)}% of all CPU before the start; figures will be noisy`);

  const upPort = await freePort();
  const upstream = await startNodeScript('upstream', join(SHARED, 'upstream.mjs'), ['--host', HOST, '--port', String(upPort)],
    { cpu: pin.load, ready: /upstream listening on/ });
  const upOrigin = `http://${HOST}:${upPort}`;
  const gwLog = join(LOG_DIR, 'gateway.log');
  rmSync(gwLog, { force: true });
  const gw = { name: 'gateway', ...await startGateway({ root: ROOT, configPath: CONFIG, logPath: gwLog, port: await freePort(), upstream: upOrigin, cpu: pin.proxy, nodeArgs: NODE_ARGS }) };
  const barePort = await freePort();
  const bareChild = await startNodeScript('bare hop', join(SHARED, 'bare-hop.cjs'), [String(barePort), upOrigin],
    { cpu: pin.proxy, env: { NODE_PATH: join(ROOT, 'node_modules') }, ready: /listening on/ });
  const bare = { name: 'bare hop', child: bareChild, pid: bareChild.pid, origin: `http://${HOST}:${barePort}` };
  const direct = { name: 'upstream', pid: upstream.pid, origin: upOrigin };
  log(`node ${process.version}, ${cpus().length} CPUs, ${pin.pinned ? `gateway and bare hop on CPU ${pin.proxy}, load, upstream and Redis on CPU ${pin.load}` : 'unpinned'}`);
  log(`config ${CONFIG}; gateway pid ${gw.pid} ${gw.origin}, log -> ${gwLog}; bare hop pid ${bare.pid} ${bare.origin}; upstream ${upOrigin}`);

  for (const t of [direct, gw, bare]) await sanityCheck(t, headers);
  await sleep(1000);
  const m = { idle: { gw: rssKb(gw.pid), bare: rssKb(bare.pid) } };
  // A process that has been quiet for a while gets its young generation's pages back from V8's
  // memory reducer (about 15 s here): the RSS an idle gateway shows an operator. Both alike.
  if (IDLE_SECONDS > 0) {
    log(`${IDLE_SECONDS} s without traffic, for the settled idle RSS`);
    await sleep(IDLE_SECONDS * 1000);
    m.settled = { gw: rssKb(gw.pid), bare: rssKb(bare.pid) };
  }
  const noise = noiseMeter(() => [process.pid, upstream.pid, gw.pid, bare.pid]);
  const plain = requestBody(FAST, false);
  const stream = requestBody(FAST, true);
  const slow = requestBody(SLOW, true);

  if (WARMUP > 0) {
    log(`warm-up: ${WARMUP} s per run`);
    for (const t of [gw, bare]) {
      await cannon(`warm-up ${t.name}`, t.origin, { headers, body: plain, connections: 64, seconds: WARMUP });
      await cannon(`warm-up ${t.name} streams`, t.origin, { headers, body: stream, connections: 64, seconds: WARMUP });
    }
  }
  // After the warm-up, as a gateway that has served traffic; growth is over the idle RSS (#13).
  if (PHASES.has('slow')) {
    log(`${STREAMS} slow streams (${SLOW}) for ${STREAM_SECONDS} s, gateway then bare hop`);
    m.slow = {};
    for (const [k, t] of [['gw', gw], ['bare', bare]]) {
      m.slow[k] = { ...await openStreams(t, STREAMS, STREAM_SECONDS, headers, slow, ticks), rssIdle: (m.settled ?? m.idle)[k] };
    }
  }
  if (PHASES.has('c1')) {
    log(`non-streaming, 1 connection: ${SECONDS} s per target (alternating)`);
    // Where the gateway's tail comes from: its own account of the same requests (the access
    // log's duration_ms), its GC pauses (its /metrics) and how long its main thread, and the bare
    // hop's, waited for their CPU (schedstat), all over the measured blocks only.
    const reading = async () => {
      await sleep(LOG_FLUSH_MS); // the log is written in batches
      return {
        log: statSync(gwLog).size, gc: await gcPauses(gw.origin), gw: schedstat(gw.pid), bare: schedstat(bare.pid),
        helpers: { gw: helperTicks(gw.pid), bare: helperTicks(bare.pid) },
      };
    };
    // Each repetition is read over its own measured blocks (after its connections' warm-up), and
    // the gateway's own account, GC and waits are summed over them.
    const runs = [];
    const own = [];
    const sums = { gcCount: 0, gcMs: 0, waitNs: { gw: 0, bare: 0 }, helpers: { gw: 0, bare: 0 } };
    for (let rep = 0; rep < REPS; rep++) {
      let at;
      runs.push(await sequentialLatency([direct, gw, bare], SECONDS, headers, plain, { afterWarmUp: async () => { at = await reading(); } }));
      const end = await reading();
      own.push(...loggedDurations(gwLog, at.log));
      const gc = gcDelta(at.gc, end.gc);
      sums.gcCount += gc.count;
      sums.gcMs += gc.ms;
      for (const k of ['gw', 'bare']) {
        sums.waitNs[k] += end[k].waitNs - at[k].waitNs;
        sums.helpers[k] += end.helpers[k] - at.helpers[k];
      }
    }
    const [d, g, b] = [0, 1, 2].map((i) => medianRun(runs.map((r) => r[i]), 'p99'));
    const measured = runs.reduce((n, r) => n + r[1].n, 0);
    const measuredBare = runs.reduce((n, r) => n + r[2].n, 0);
    const n = { gw: measured, bare: measuredBare };
    own.sort((x, y) => x - y);
    const inside = {
      n: own.length,
      p50: percentile(own, 50),
      p99: percentile(own, 99),
      gc: { count: sums.gcCount, ms: sums.gcMs, meanMs: sums.gcCount > 0 ? sums.gcMs / sums.gcCount : 0 },
      waitUs: { gw: sums.waitNs.gw / 1000 / n.gw, bare: sums.waitNs.bare / 1000 / n.bare },
      helpersUs: { gw: (sums.helpers.gw / ticks) * 1e6 / n.gw, bare: (sums.helpers.bare / ticks) * 1e6 / n.bare },
    };
    m.c1 = { direct: d, gw: g, bare: b, inside, measured };
  }
  if (PHASES.has('ttfb')) {
    log(`time to first byte: ${TTFB_N} streams per target`);
    const [d, g, b] = await timeToFirstByte([direct, gw, bare], TTFB_N, headers, slow);
    m.ttfb = { direct: d, gw: g, bare: b };
  }
  for (const [phase, body, what] of [['c64', plain, 'non-streaming'], ['stream', stream, '20-chunk streams']]) {
    if (!PHASES.has(phase)) continue;
    log(`${what}, 64 connections: ${SECONDS} s per target, ${REPS} times each, alternating`);
    const opts = { headers, body, connections: 64, seconds: SECONDS };
    const alone = await cannon(`upstream ${what} c64`, upOrigin, opts);
    const gws = [];
    const bares = [];
    for (let rep = 0; rep < REPS; rep++) {
      gws.push(await cannonWithCpu(`gateway ${what} c64`, gw, ticks, opts));
      bares.push(await cannonWithCpu(`bare hop ${what} c64`, bare, ticks, opts));
    }
    m[phase] = { direct: alone, gw: medianRun(gws, 'cpuUs'), bare: medianRun(bares, 'cpuUs') };
  }
  if (PHASES.has('dialects')) {
    // The other routes of the same pipeline on the gateway alone (the bare hop speaks none):
    // their CPU per request beside the chat route's and the bare hop's in this run.
    const requests = dialectRequests(key, FAST);
    await dialectCheck(gw, requests);
    m.dialects = {};
    for (const [name, r] of Object.entries(requests)) {
      log(`gateway ${r.path}, non-streaming, 64 connections: ${SECONDS} s`);
      const opts = { headers: r.headers, body: r.body, path: r.path, connections: 64, seconds: SECONDS };
      if (WARMUP > 0) await cannon(`warm-up gateway ${r.path}`, gw.origin, { ...opts, seconds: WARMUP });
      m.dialects[name] = await cannonWithCpu(`gateway ${r.path} c64`, gw, ticks, opts);
    }
  }
  const busy = noise();
  await sanityCheck(gw, headers); // still alive and correct after all that
  m.end = { gw: rssKb(gw.pid), bare: rssKb(bare.pid) };

  // Each variant's references (the bare hop, the gateway on the memory store) are measured again
  // beside it, run for run, not taken from the phases above: this host's speed moves by half
  // within minutes (the bare hop's CPU per request 117-226 µs in one run), and a ratio to a
  // figure taken minutes before measures the host. Both stay up, idle, meanwhile.
  const c64Of = (t) => () => cannonWithCpu(`${t.name} non-streaming c64 (reference)`, t, ticks, { headers, body: plain, connections: 64, seconds: SECONDS });
  const refs = { gw, bare, c64Of };
  if (PHASES.has('dialects')) m.dialects.completions = await completionsVariant({ text, tmp, key, upOrigin, pin, ticks, refs });
  if (PHASES.has('mcp')) m.mcp = await mcpVariant({ text, tmp, key, upOrigin, pin, ticks, refs });
  if (PHASES.has('queue')) m.queue = await queueVariant({ text, tmp, headers, upOrigin, pin, ticks, plain, refs });
  if (PHASES.has('redis')) m.redis = await redisVariant({ text, tmp, headers, upOrigin, pin, ticks, plain, stream, refs });
  if (PHASES.has('redis-wait')) m.redisWait = await redisVariant({ text, tmp, headers, upOrigin, pin, ticks, plain, stream, refs, waitReplicas: 1 });
  await stopChild(gw.child, STOP_MS);
  await stopChild(bare.child);
  // Last, alone: its thousands of streams want the host's open files and memory.
  if (PHASES.has('many')) m.many = await manyVariant({ text, tmp, headers, upOrigin, pin, ticks, plain });
  await stopAll(STOP_MS);
  return { m, busy, pin, logs: [gwLog, ...[m.dialects?.completions, m.mcp, m.queue, m.many, m.redis, m.redisWait].filter(Boolean).map((r) => r.log)] };
}

/**
 * `measure` run REPS times: the run whose `key` is the median (medianRun). With `refs` (name to
 * a measurement), each is run after it, rep for rep, and its median run is under `refs`.
 */
async function repeated(measure, key, refs = {}) {
  const runs = [];
  const refRuns = Object.fromEntries(Object.keys(refs).map((k) => [k, []]));
  for (let rep = 0; rep < REPS; rep++) {
    runs.push(await measure());
    for (const [k, ref] of Object.entries(refs)) refRuns[k].push(await ref());
  }
  const out = medianRun(runs, key);
  if (Object.keys(refs).length > 0) out.refs = Object.fromEntries(Object.entries(refRuns).map(([k, r]) => [k, medianRun(r, key)]));
  return out;
}

/**
 * c=1 latency of `target` and of each of `refs` (name to target), alternating in the same
 * blocks (sequentialLatency), REPS times: the median run by p99 of each, the refs' under `refs`.
 */
async function latencyBeside(target, refs, headers, body) {
  const names = Object.keys(refs);
  const runs = [];
  for (let rep = 0; rep < REPS; rep++) runs.push(await sequentialLatency([target, ...Object.values(refs)], SECONDS, headers, body));
  const out = medianRun(runs.map((r) => r[0]), 'p99');
  out.refs = Object.fromEntries(names.map((k, i) => [k, medianRun(runs.map((r) => r[i + 1]), 'p99')]));
  return out;
}

/** The model the completions figure asks for: the bench's own upstream serves it. */
const COMPLETIONS_MODEL = 'bench-completions';

/**
 * The shared config plus one provider (the fast model's own, copied, pointed at the completions
 * upstream at `origin`) and one model (the fast model's entry, renamed, on that provider),
 * written to `dir`. Nothing else of the shared config changes.
 */
function completionsConfig(text, origin, dir) {
  const doc = parseDocument(text);
  const cfg = doc.toJS();
  const fast = cfg.models.find((m) => m.id === FAST);
  const provider = structuredClone(cfg.providers[fast.provider]);
  provider.base_url = `${origin}/v1`;
  doc.setIn(['providers', 'bench-completions'], doc.createNode(provider));
  doc.addIn(['models'], doc.createNode({ ...fast, id: COMPLETIONS_MODEL, provider: 'bench-completions', upstream_model: COMPLETIONS_MODEL }));
  const path = join(dir, 'tollgate-bench-completions.yaml');
  writeFileSync(path, doc.toString());
  return path;
}

/**
 * CPU per non-streaming POST /v1/completions at 64 connections: a gateway of its own on the
 * derived config, pinned as the others, in front of the bench's completions upstream (on the
 * load CPU); warmed up, checked, then measured as the other dialects are.
 */
async function completionsVariant({ text, tmp, key, upOrigin, pin, ticks, refs }) {
  const label = 'gateway (completions)';
  const upPort = await freePort();
  const upstream = await startNodeScript('completions upstream', join(ROOT, 'bench', 'completions-upstream.mjs'), ['--host', HOST, '--port', String(upPort)],
    { cpu: pin.load, ready: /upstream listening on/ });
  const logPath = join(LOG_DIR, 'gateway-completions.log');
  rmSync(logPath, { force: true });
  let gw;
  try {
    gw = { name: label, ...await startGateway({
      root: ROOT, configPath: completionsConfig(text, `http://${HOST}:${upPort}`, tmp), logPath, port: await freePort(), upstream: upOrigin,
      cpu: pin.proxy, nodeArgs: NODE_ARGS, label,
    }) };
    const r = completionsRequest(key, COMPLETIONS_MODEL);
    await dialectCheck(gw, { completions: r });
    log(`${label} ${r.path}, non-streaming, 64 connections: ${SECONDS} s`);
    const opts = { headers: r.headers, body: r.body, path: r.path, connections: 64, seconds: SECONDS };
    if (WARMUP > 0) await cannon(`warm-up ${label}`, gw.origin, { ...opts, seconds: WARMUP });
    const out = await repeated(() => cannonWithCpu(`${label} c64`, gw, ticks, opts), 'cpuUs', { bare: refs.c64Of(refs.bare) });
    await dialectCheck(gw, { completions: r }); // still alive and correct after the run
    return { ...out, log: logPath };
  } finally {
    if (gw !== undefined) await stopChild(gw.child, STOP_MS);
    await stopChild(upstream);
  }
}

/**
 * The shared config plus one MCP server at `url` (1 unit a call) and the bench plan's grant of
 * its tools, written to `dir`. Nothing else of the shared config changes.
 */
function mcpConfig(text, url, dir) {
  const doc = parseDocument(text);
  const plan = doc.toJS().accounts[0].plan;
  doc.setIn(['mcp'], doc.createNode({ servers: { bench: { url, timeout_ms: 10000, price: { per_call_units: 1 } } } }));
  doc.setIn(['plans', plan, 'mcp_tools'], doc.createNode(['bench__*']));
  const path = join(dir, 'tollgate-bench-mcp.yaml');
  writeFileSync(path, doc.toString());
  return path;
}

/** One JSON-RPC POST to `/mcp/bench`; its answer's body (JSON) and session header. */
async function mcpPost(origin, headers, body) {
  const res = await fetch(`${origin}/mcp/bench`, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 200 && res.status !== 202) throw new Error(`mcp ${body.method}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return { json: text === '' ? undefined : JSON.parse(text), session: res.headers.get('mcp-session-id') };
}

/**
 * CPU per tools/call at 64 connections: a gateway of its own on mcpConfig's config, pinned as
 * the others, in front of bench/mcp-upstream.mjs (on the load CPU). One session is opened
 * (initialize, notifications/initialized), every call then carries it, as an agent's do.
 */
async function mcpVariant({ text, tmp, key, upOrigin, pin, ticks, refs }) {
  const label = 'gateway (mcp)';
  const upPort = await freePort();
  const upstream = await startNodeScript('mcp upstream', join(ROOT, 'bench', 'mcp-upstream.mjs'), ['--host', HOST, '--port', String(upPort)],
    { cpu: pin.load, ready: /upstream listening on/ });
  const logPath = join(LOG_DIR, 'gateway-mcp.log');
  rmSync(logPath, { force: true });
  let gw;
  try {
    gw = { name: label, ...await startGateway({
      root: ROOT, configPath: mcpConfig(text, `http://${HOST}:${upPort}/mcp`, tmp), logPath, port: await freePort(), upstream: upOrigin,
      cpu: pin.proxy, nodeArgs: NODE_ARGS, label,
    }) };
    const version = '2025-06-18';
    const base = { ...headersFor(key), accept: 'application/json, text/event-stream' };
    const init = await mcpPost(gw.origin, base, {
      jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'tollgate-bench', version: '1' } },
    });
    if (init.session === null) throw new Error(`mcp initialize: no session id (${JSON.stringify(init.json).slice(0, 300)})`);
    const headers = { ...base, 'mcp-session-id': init.session, 'mcp-protocol-version': version };
    await mcpPost(gw.origin, headers, { jsonrpc: '2.0', method: 'notifications/initialized' });
    const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hello from the bench' } } };
    const check = async () => {
      const { json } = await mcpPost(gw.origin, headers, call);
      if (json?.result?.content?.[0]?.text !== 'hello from the bench') throw new Error(`mcp tools/call: unexpected answer ${JSON.stringify(json).slice(0, 300)}`);
    };
    await check();
    log(`${label} POST /mcp/bench tools/call, 64 connections: ${SECONDS} s`);
    const opts = { headers, body: JSON.stringify(call), path: '/mcp/bench', connections: 64, seconds: SECONDS };
    if (WARMUP > 0) await cannon(`warm-up ${label}`, gw.origin, { ...opts, seconds: WARMUP });
    const out = await repeated(() => cannonWithCpu(`${label} c64`, gw, ticks, opts), 'cpuUs', { gateway: refs.c64Of(refs.gw) });
    await check(); // still alive and correct after the run
    return { ...out, log: logPath };
  } finally {
    if (gw !== undefined) await stopChild(gw.child, STOP_MS);
    await stopChild(upstream);
  }
}

/**
 * Above anything the run sends at once (64 connections, the warm-up's and the measured run's):
 * the queue is configured and never used.
 */
const QUEUE_IDLE_MAX_OUTSTANDING = 4096;

/**
 * The shared config with the fast model's provider given max_outstanding (QUEUE_IDLE_MAX_OUTSTANDING)
 * and a queue with the schema's defaults spelled out (CONTRACT section 13), written to `dir`.
 */
function queueConfig(text, dir) {
  const doc = parseDocument(text);
  const fast = doc.toJS().models.find((m) => m.id === FAST);
  doc.setIn(['providers', fast.provider, 'max_outstanding'], QUEUE_IDLE_MAX_OUTSTANDING);
  doc.setIn(['providers', fast.provider, 'queue'], doc.createNode({ max_wait_ms: 30000, max_queued: 1000, fairness: 'account' }));
  const path = join(dir, 'tollgate-bench-queue.yaml');
  writeFileSync(path, doc.toString());
  return path;
}

/**
 * CPU per non-streaming chat request at 64 connections with the admission queue configured but
 * idle: a gateway of its own on queueConfig's config, pinned as the others, warmed up and
 * measured as phase c64 is. The answers must say they did not wait (x-tollgate-queue-ms 0).
 */
async function queueVariant({ text, tmp, headers, upOrigin, pin, ticks, plain, refs }) {
  const label = 'gateway (queue idle)';
  const logPath = join(LOG_DIR, 'gateway-queue.log');
  rmSync(logPath, { force: true });
  let gw;
  try {
    gw = { name: label, ...await startGateway({
      root: ROOT, configPath: queueConfig(text, tmp), logPath, port: await freePort(), upstream: upOrigin,
      cpu: pin.proxy, nodeArgs: NODE_ARGS, label,
    }) };
    await sanityCheck(gw, headers);
    const probe = await fetch(`${gw.origin}/v1/chat/completions`, { method: 'POST', headers, body: plain });
    await probe.arrayBuffer();
    if (probe.status !== 200 || probe.headers.get('x-tollgate-queue-ms') !== '0') {
      throw new Error(`${label}: expected 200 with x-tollgate-queue-ms: 0 (the queue configured, not waited in), got ${probe.status}, ${probe.headers.get('x-tollgate-queue-ms')}`);
    }
    log(`${label}: non-streaming, 64 connections: ${SECONDS} s`);
    const opts = { headers, body: plain, connections: 64, seconds: SECONDS };
    if (WARMUP > 0) await cannon(`warm-up ${label}`, gw.origin, { ...opts, seconds: WARMUP });
    const out = await repeated(() => cannonWithCpu(`${label} c64`, gw, ticks, opts), 'cpuUs',
      { bare: refs.c64Of(refs.bare), gateway: refs.c64Of(refs.gw) });
    await sanityCheck(gw, headers);
    // Only a request that found every replica full waits (and is counted): none may have.
    const metrics = await (await fetch(`${gw.origin}/metrics`)).text();
    const waited = [...metrics.matchAll(/^tollgate_queue_wait_seconds_count(?:\{[^}]*\})? (\d+)/gm)].reduce((n, x) => n + Number(x[1]), 0);
    if (waited > 0) throw new Error(`${label}: ${waited} requests waited in the queue: it was not idle (max_outstanding ${QUEUE_IDLE_MAX_OUTSTANDING})`);
    return { ...out, log: logPath };
  } finally {
    if (gw !== undefined) await stopChild(gw.child, STOP_MS);
  }
}

/** The soft limit of open files this process (and so each child it starts) has. */
function openFilesLimit() {
  const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  const soft = line?.split(/\s{2,}/)[1];
  return soft === undefined || soft === 'unlimited' ? Infinity : Number(soft);
}

/**
 * The shared config with the slow model's provider allowed `n` upstream connections (and a few
 * more: the sanity checks and the warm-up), so that `n` streams are all open upstream at once,
 * and one model more on it (MANY_MODEL: the slow model's entry, its streams a chunk every
 * 2 s for 10 s more than the phase samples), written to `dir`.
 */
function manyConfig(text, dir, n) {
  const doc = parseDocument(text);
  const slow = doc.toJS().models.find((m) => m.id === SLOW);
  doc.setIn(['providers', slow.provider, 'max_connections'], n + 64);
  const chunks = Math.ceil((MANY_SECONDS + 10) / 2);
  doc.addIn(['models'], doc.createNode({ ...slow, id: MANY_MODEL, upstream_model: `bench-k${chunks}-d2000` }));
  const path = join(dir, 'tollgate-bench-many.yaml');
  writeFileSync(path, doc.toString());
  return path;
}

/**
 * #46's many open streams: a gateway of its own on manyConfig's config, pinned as the others,
 * warmed up, then MANY_STREAMS slow streams held open as phase slow holds its 500, from 200
 * connections per client address. Any error fails the run. The RSS per stream is over the RSS
 * just before the streams and over the RSS 1 s after start.
 */
async function manyVariant({ text, tmp, headers, upOrigin, pin, ticks, plain }) {
  const label = 'gateway (many streams)';
  // A client socket and an upstream socket per stream, and some to spare.
  // Where the host's open-file limit is lower (a hard limit the bench cannot raise), the phase
  // runs at the most streams it allows and the report says so: its goal row is then n/a.
  const limit = openFilesLimit();
  const n = Math.min(MANY_STREAMS, Math.floor((limit - MANY_SPARE_FILES) / 2));
  if (n < 500) {
    throw new Error(`phase many: ${MANY_STREAMS} streams need ${2 * MANY_STREAMS + MANY_SPARE_FILES} open files in the gateway, the limit is ${limit}: raise it (ulimit -n) or lower BENCH_MANY_STREAMS`);
  }
  if (n < MANY_STREAMS) {
    log(`WARNING ${label}: ${MANY_STREAMS} streams need ${2 * MANY_STREAMS + MANY_SPARE_FILES} open files, the limit is ${limit} (ulimit -n): ${n} streams instead`);
  }
  const logPath = join(LOG_DIR, 'gateway-many.log');
  rmSync(logPath, { force: true });
  let gw;
  try {
    gw = { name: label, ...await startGateway({
      root: ROOT, configPath: manyConfig(text, tmp, n), logPath, port: await freePort(), upstream: upOrigin,
      cpu: pin.proxy, nodeArgs: NODE_ARGS, label,
    }) };
    await sanityCheck(gw, headers);
    await sleep(1000);
    const rssStart = rssKb(gw.pid);
    if (WARMUP > 0) await cannon(`warm-up ${label}`, gw.origin, { headers, body: plain, connections: 64, seconds: WARMUP });
    log(`${label}: ${n} slow streams (${MANY_MODEL}), RSS sampled for ${MANY_SECONDS} s`);
    const out = await openStreams(gw, n, MANY_SECONDS, headers, requestBody(MANY_MODEL, true), ticks);
    await sanityCheck(gw, headers); // still alive and correct after them
    return { ...out, rssIdle: rssStart, log: logPath, wanted: MANY_STREAMS, fileLimit: limit };
  } finally {
    if (gw !== undefined) await stopChild(gw.child, STOP_MS);
  }
}

/**
 * The gateway on the same config with store.kind redis: CPU and Redis traffic per request,
 * latency at one connection, throughput at 64. With `waitReplicas`, Redis has that many
 * replicas and every debit waits for them (store.wait_replicas).
 */
async function redisVariant({ text, tmp, headers, upOrigin, pin, ticks, plain, stream, refs, waitReplicas = 0 }) {
  const label = waitReplicas > 0 ? `gateway (redis, wait_replicas ${waitReplicas})` : 'gateway (redis)';
  const server = await startRedis(pin.load, mkdtempSync(join(tmp, 'redis-')));
  const replicas = [];
  for (let i = 0; i < waitReplicas; i++) {
    replicas.push(await startRedis(pin.load, mkdtempSync(join(tmp, 'replica-')), ['--replicaof', HOST, String(server.port)], `redis replica ${i + 1}`));
  }
  const logPath = join(LOG_DIR, waitReplicas > 0 ? 'gateway-redis-wait.log' : 'gateway-redis.log');
  rmSync(logPath, { force: true });
  const gw = { name: label, ...await startGateway({
    root: ROOT, configPath: redisConfig(text, server.url, tmp, waitReplicas), logPath, port: await freePort(), upstream: upOrigin,
    cpu: pin.proxy, nodeArgs: NODE_ARGS, label,
  }) };
  const redis = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    // The replicas are in sync before anything is measured (WAIT would otherwise time out).
    const deadline = Date.now() + 10_000;
    while (((await redis.info('replication')).match(/state=online/g) ?? []).length < waitReplicas) {
      if (Date.now() > deadline) throw new Error(`${waitReplicas} replica(s) did not connect in 10 s`);
      await sleep(50);
    }
    // 'online' is said before a fresh replica acknowledges anything: a write is waited for too
    // (a WAIT after no write of its own connection would count every replica at once).
    while (waitReplicas > 0) {
      await redis.set('bench:replicas-probe', String(Date.now()));
      if (await redis.wait(waitReplicas, 200) >= waitReplicas) break;
      if (Date.now() > deadline) throw new Error(`${waitReplicas} replica(s) did not acknowledge a write in 10 s`);
    }
    await sanityCheck(gw, headers);
    if (WARMUP > 0) await cannon('warm-up gateway (redis)', gw.origin, { headers, body: plain, connections: 64, seconds: WARMUP });
    // What one INFO costs in the counters, with nothing else going on: subtracted below.
    await settle(gw.pid);
    const c0 = await redisCounters(redis);
    const c1 = await redisCounters(redis);
    const own = counterDelta(c0, c1);
    const perRequest = async (body, n) => {
      await settle(gw.pid);
      const a = await redisCounters(redis);
      await sequential(gw, n, headers, body);
      await settle(gw.pid); // writes after the answer (usage records) land too
      const d = counterDelta(a, await redisCounters(redis));
      const perCommand = {};
      for (const [k, v] of Object.entries(d.perCommand)) {
        const x = (v - (own.perCommand[k] ?? 0)) / n;
        if (x > 0) perCommand[k] = +x.toFixed(2);
      }
      return { n, reads: (d.reads - own.reads) / n, commands: (d.commands - own.commands) / n, perCommand };
    };
    log(`${label}: Redis traffic of 300 sequential requests and 100 sequential streams`);
    const r = { plain: await perRequest(plain, 300), stream: await perRequest(stream, 100), log: logPath };
    log(`${label}: non-streaming, 1 connection: ${SECONDS} s`);
    // Beside the memory store's gateway (the goals' reference); with replicas, beside the bare hop.
    const [refName, ref] = waitReplicas > 0 ? ['bare', refs.bare] : ['memory', refs.gw];
    r.c1 = await latencyBeside(gw, { [refName]: ref }, headers, plain);
    log(`${label}: non-streaming, 64 connections: ${SECONDS} s`);
    r.c64 = await repeated(() => cannonWithCpu(`${label} non-streaming c64`, gw, ticks,
      { headers, body: plain, connections: 64, seconds: SECONDS }, { redis: server.pid }), 'cpuUs', { [refName]: refs.c64Of(ref) });
    await sanityCheck(gw, headers);
    r.rssEnd = rssKb(gw.pid);
    return r;
  } finally {
    redis.disconnect();
    await stopChild(gw.child, STOP_MS);
    for (const r of replicas) await stopChild(r.child);
    await stopChild(server.child);
  }
}

/** Prints and writes the results; false when the page's latest run could not be rewritten. */
function report({ m, busy, pin, logs }) {
  const rows = figures(m, { streams: STREAMS });
  const noisy = busy.othersPct > 5 || busy.stealPct > 2;
  const when = new Date().toISOString();
  const out = process.stdout;
  const setup = `node ${process.version}, ${cpus().length} × ${cpus()[0]?.model?.trim() ?? '?'}, ` +
    `${pin.pinned ? `gateway and bare hop in turn on CPU ${pin.proxy}, load, upstream and Redis on CPU ${pin.load}` : 'UNPINNED'}, ${SECONDS} s per run`;
  out.write(`\nTollgate vs a bare http-proxy-3 hop, ${when}: ${setup}\n` +
    `config ${CONFIG} (gateway log: ${logs.map((f) => `${f}, ${fmt(statSync(f).size / 1e6, 1)} MB`).join('; ')})\n\n`);
  out.write(`${table(rows)}\n\n`);
  const notes = [];
  for (const miss of missed(rows)) notes.push(`goal MISSED: ${miss}`);
  notes.push(...repsNotes(m));
  if (m.slow) {
    for (const [k, s] of Object.entries(m.slow)) {
      notes.push(`${k === 'gw' ? 'gateway' : 'bare hop'}: ${s.streams} slow streams served; at the RSS peak ${s.inflightAtPeak} in flight, ` +
        `${s.openAtPeak} past their first event (most at once: ${s.maxOpen}); RSS just before them ${fmt(s.rssBefore / 1024)} MB; CPU per stream counted over all ${s.streams}`);
      if (s.openAtPeak < 0.9 * s.n) {
        notes.push(`WARNING: only ${s.openAtPeak} of ${s.n} streams had started at the RSS peak: the rest were still queued, so the RSS figures are for fewer open streams than the row says`);
      }
    }
  }
  if (m.many) {
    const s = m.many;
    notes.push(`many streams: ${s.streams} slow streams served by one gateway, no error; at the RSS peak ${s.inflightAtPeak} in flight, ` +
      `${s.openAtPeak} past their first event (most at once: ${s.maxOpen}); RSS 1 s after start ${fmt(s.rssIdle / 1024)} MB, just before them ${fmt(s.rssBefore / 1024)} MB, ` +
      `at the peak ${fmt(s.rssPeak / 1024)} MB`);
    if (s.n < s.wanted) {
      notes.push(`many streams: NOT the ${s.wanted.toLocaleString('en-US')} asked for: a stream holds two sockets in the gateway and its open-file ` +
        `limit is ${s.fileLimit} (ulimit -n; ${2 * s.wanted + MANY_SPARE_FILES} needed), so the phase ran ${s.n}`);
    }
  }
  if (m.c1) {
    const { inside } = m.c1;
    notes.push(`c=1: upstream alone p50 ${fmt(m.c1.direct.p50, 3)} ms, p99 ${fmt(m.c1.direct.p99, 3)} ms (${m.c1.measured} gateway samples over ${REPS} runs)`);
    notes.push(`c=1, the gateway's own account: ${inside.n} logged requests, p50 ${fmt(inside.p50, 3)} ms, p99 ${fmt(inside.p99, 3)} ms; ` +
      `${inside.gc.count} GC pauses (${fmt(inside.gc.meanMs, 2)} ms each on average, one per ${fmt(m.c1.measured / Math.max(1, inside.gc.count), 0)} requests)`);
    if (inside.n !== m.c1.measured) {
      notes.push(`WARNING: the gateway logged ${inside.n} chat requests for the ${m.c1.measured} measured at c=1 (a log level above info logs none): ` +
        'its own p99 is not of the same requests');
    }
  }
  if (m.ttfb) notes.push(`first byte p50: upstream ${fmt(m.ttfb.direct.p50, 3)} ms, gateway ${fmt(m.ttfb.gw.p50, 3)} ms, bare hop ${fmt(m.ttfb.bare.p50, 3)} ms`);
  if (m.c64) notes.push(`c=64 non-streaming req/s: upstream alone ${fmt(m.c64.direct.rps, 0)}; gateway served ${m.c64.gw.total}`);
  if (m.redis) {
    notes.push(`redis store: ${Math.round(m.redis.plain.reads * m.redis.plain.n)} Redis reads (round trips) over ${m.redis.plain.n} sequential requests, ` +
      `per request ${JSON.stringify(m.redis.plain.perCommand)}, per stream ${JSON.stringify(m.redis.stream.perCommand)}; ` +
      `redis-server CPU ${fmt(m.redis.c64.cpuUsOf.redis)} µs per request at c=64, ${fmt(m.redis.c64.rps, 0)} req/s`);
  }
  notes.push(`RSS at the end: gateway ${fmt(m.end.gw / 1024)} MB, bare hop ${fmt(m.end.bare / 1024)} MB`);
  notes.push(`${noisy ? 'WARNING: ' : ''}other processes used ${fmt(busy.othersPct)}% of the machine's CPU during the runs (steal ${fmt(busy.stealPct)}%)` +
    `${noisy ? ': the figures are noisy; re-run on an idle machine' : ''}`);
  out.write(`${notes.map((n) => `- ${n}`).join('\n')}\n`);

  const json = {
    taken_at: when, node: process.version, cpus: cpus().length, cpu_model: cpus()[0]?.model?.trim(), pinned: pin.pinned,
    config: CONFIG, seconds: SECONDS, streams: STREAMS, stream_seconds: STREAM_SECONDS, phases: [...PHASES],
    other_cpu_pct: +busy.othersPct.toFixed(1), steal_pct: +busy.stealPct.toFixed(1), noisy,
    figures: rows, measurements: m,
  };
  writeFileSync(OUT, `${JSON.stringify(json, null, 2)}\n`);
  out.write(`\nwritten to ${OUT}\n`);

  if (DOC === undefined) {
    out.write(`docs/performance.md left as it is: ${process.env.BENCH_DOC === '' ? 'BENCH_DOC is empty' : `only ${[...PHASES].join(',')} ran (BENCH_DOC=docs/performance.md writes it anyway)`}\n`);
    return true;
  }
  const block = latestBlock({ when, commit: commitOf(), setup: `${setup}; config ${relative(ROOT, CONFIG)}`, figures: rows, notes });
  try {
    writeFileSync(DOC, withLatest(readFileSync(DOC, 'utf8'), block));
  } catch (err) {
    process.stderr.write(`\n${DOC} not updated: ${err instanceof Error ? err.message : String(err)}\n`);
    return false;
  }
  out.write(`its table is the latest run of ${DOC}\n`);
  return true;
}

/**
 * The commit measured, with -dirty when tracked files outside docs/ differ from it (the page this
 * run rewrites is no change to what was measured), or 'unknown' outside a git checkout.
 */
function commitOf() {
  const git = (...args) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  try {
    const dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)docs') !== '';
    return `${git('rev-parse', '--short=7', 'HEAD')}${dirty ? '-dirty' : ''}`;
  } catch {
    return 'unknown';
  }
}

// ---------------------------------------------------------------------------------------------

const tmp = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
let interrupted = false;
const bail = async (why, code) => {
  if (interrupted) return;
  interrupted = true;
  log(why);
  await stopAll(2000);
  rmSync(tmp, { recursive: true, force: true });
  process.exit(code);
};
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => bail(`${sig}: stopping`, 130));
setTimeout(() => bail(`the run took longer than ${MAX_SECONDS} s (BENCH_MAX_SECONDS): aborted`, 1), MAX_SECONDS * 1000).unref();

let exitCode = 0;
try {
  if (!report(await main(tmp))) exitCode = 1;
} catch (err) {
  if (interrupted) await new Promise(() => {}); // bail() exits
  process.stderr.write(`\nbench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  for (const f of ['gateway.log', 'gateway-redis.log'].map((n) => join(LOG_DIR, n)).filter(existsSync)) {
    process.stderr.write(`\nthe end of ${f}:\n${readFileSync(f, 'utf8').slice(-2048)}\n`);
  }
  exitCode = 1;
} finally {
  await stopAll(STOP_MS);
  rmSync(tmp, { recursive: true, force: true });
}
process.exit(exitCode);
