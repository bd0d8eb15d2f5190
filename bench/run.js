// Tollgate overhead benchmark: `npm run bench`.
//
// Starts a fast fake OpenAI-compatible upstream (bench/upstream.js) and the gateway
// (bin/tollgate.js serve, stdout to /dev/null at the default log level `info`, as in
// production) as child processes, then measures each figure directly against the upstream
// and through the gateway:
//
//   1. non-streaming, concurrency 1: p50/p99 latency, and what the gateway adds
//   2. non-streaming, concurrency 64: req/s both ways, and the gateway's CPU time per request
//   3. streaming (20 chunks), concurrency 16: req/s both ways, gateway CPU per request, and the
//      time to the first body byte (p50 of sequential requests)
//   4. the gateway's RSS growth per open stream, with BENCH_STREAMS streams held open
//
// For reference, the same runs (but 4.) go through a bare node:http + undici pass-through proxy
// (bench/bare-proxy.js) on the gateway's CPU: what one Node.js hop costs on this machine.
// Other processes' CPU use and steal time are measured too: on a busy machine the figures are
// noisy, and the report says so.
//
// Pinning (taskset): this process (the load generator) and the upstream on CPU 0, the gateway
// on CPU 1. Without taskset everything runs unpinned, with a warning.
//
// Environment:
//   BENCH_SECONDS          seconds per measured run (default 10)
//   BENCH_WARMUP_SECONDS   seconds per warm-up run (default 2)
//   BENCH_TTFB_REQUESTS    sequential streaming requests per side for time to first byte (200)
//   BENCH_STREAMS          streams held open for the RSS figure (500)
//   BENCH_LOG_LEVEL        the gateway's TOLLGATE_LOG_LEVEL (default info)
//   BENCH_TTFB_GAP_MS      ms between a stream's first chunk and the rest in that test (5)
//   BENCH_BARE_PROXY=0     skip the reference runs of a bare node:http + undici proxy
//                          (bench/bare-proxy.js) on the gateway's CPU, which show the floor of
//                          one Node.js hop on this machine (by default they run too)
//   BENCH_GATEWAY_NODE_ARGS extra node flags for the gateway, e.g. "--cpu-prof --cpu-prof-dir=/tmp/p"
//
// Any non-2xx answer, transport error or timeout fails the run (exit code 1): the figures
// would mean nothing. Targets missed are reported (MISS) but do not fail the run.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Client, Pool } from 'undici';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const HOST = '127.0.0.1';

function envNumber(name, fallback, min = 0) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min) throw new Error(`${name} must be a number >= ${min}, got '${raw}'`);
  return n;
}

const SECONDS = envNumber('BENCH_SECONDS', 10, 1);
const WARMUP_SECONDS = envNumber('BENCH_WARMUP_SECONDS', 2, 0);
const TTFB_REQUESTS = Math.round(envNumber('BENCH_TTFB_REQUESTS', 200, 10));
const OPEN_STREAMS = Math.round(envNumber('BENCH_STREAMS', 500, 1));
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL || 'info';
const BARE_PROXY = process.env.BENCH_BARE_PROXY !== '0';
const GATEWAY_NODE_ARGS = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);

const KEY = 'tg_bench_000000000000000000000000';
const MODEL = 'bench-model';
const PATH = '/v1/chat/completions';
const HEADERS = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
const messages = (content) => [{ role: 'user', content }];
const BODY_PLAIN = JSON.stringify({ model: MODEL, messages: messages('Say hello.'), max_tokens: 64 });
const BODY_STREAM = JSON.stringify({
  model: MODEL, messages: messages('Say hello.'), max_tokens: 64, stream: true, stream_options: { include_usage: true },
});
// The first chunk alone, the other 19 after TTFB_GAP_MS: a real model's tokens are spaced out,
// and a burst of all 20 in one read would be flushed together, measuring the whole stream.
const TTFB_GAP_MS = Math.round(envNumber('BENCH_TTFB_GAP_MS', 5, 1));
const BODY_TTFB = JSON.stringify({
  model: MODEL, messages: messages(`hold ${TTFB_GAP_MS}`), max_tokens: 64, stream: true, stream_options: { include_usage: true },
});
const BODY_HOLD = JSON.stringify({
  model: MODEL, messages: messages('hold'), max_tokens: 64, stream: true, stream_options: { include_usage: true },
});

const TARGETS = {
  cpuPerRequestUs: 150,
  addedP50Ms: 0.3,
  addedP99Ms: 1.5,
  addedTtfbMs: 0.5,
  rssPerStreamKb: 50,
};

const log = (msg) => process.stderr.write(`[bench] ${msg}\n`);

// ---------------------------------------------------------------------------------------------
// Child processes

const children = new Set();
let tmp;
let gatewayChild;

function haveTaskset() {
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function clockTicks() {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Spawns `node args…`, optionally pinned to `cpu`; keeps the last 8 KB of stderr for errors. */
function spawnNode(name, nodeArgs, { cpu, pinned, stdout, env }) {
  const [cmd, args] = pinned
    ? ['taskset', ['-c', String(cpu), process.execPath, ...nodeArgs]]
    : [process.execPath, nodeArgs];
  const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', stdout, 'pipe'], env: { ...process.env, ...env } });
  child.label = name;
  child.stderrTail = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s) => { child.stderrTail = (child.stderrTail + s).slice(-8192); });
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => {
    child.exitInfo = { code, signal };
    children.delete(child);
    resolve(child.exitInfo);
  }));
  children.add(child);
  return child;
}

function diedError(child) {
  const { code, signal } = child.exitInfo ?? {};
  return new Error(`${child.label} exited early (code ${code}, signal ${signal})\n${child.stderrTail}`);
}

/** Starts a helper script that prints "... listening on PORT" on stdout. */
async function startHelper(name, script, args, pinned, cpu) {
  const child = spawnNode(name, [join(ROOT, script), ...args], { cpu, pinned, stdout: 'pipe' });
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`${name} did not start in 10 s`)), 10_000);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s) => {
      buf += s;
      const m = /listening on (\d+)/.exec(buf);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.exited.then(() => { clearTimeout(timer); reject(diedError(child)); });
  });
  child.stdout.resume();
  return { child, port, pid: child.pid, origin: `http://${HOST}:${port}` };
}

function gatewayConfig(upstreamPort) {
  // Written with real values (flow maps cannot hold ${...}). The plan has no limits, so the
  // bench measures the request path, not the rate limiter saying no.
  return `# generated by bench/run.js
service: { name: tollgate, key_prefix: tg }
server: { host: ${HOST}, port: 0, drain_timeout_ms: 2000 }
store: { kind: memory }
plans:
  bench: { paid: true, requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }
accounts:
  - { id: bench, plan: bench, wallet_units: 1000000000, keys: [${KEY}] }
providers:
  up: { kind: openai, base_url: "http://${HOST}:${upstreamPort}/v1", max_connections: ${Math.max(256, OPEN_STREAMS + 64)} }
models:
  - { id: ${MODEL}, provider: up, upstream_model: fake, context_window: 32768, max_output_tokens: 256 }
`;
}

async function startGateway(pinned, upstreamPort) {
  const configPath = join(tmp, 'tollgate-bench.yaml');
  writeFileSync(configPath, gatewayConfig(upstreamPort));
  const port = await freePort();
  // stdout (the "listening" line and one pino line per request) goes to /dev/null, as a
  // production deployment's log shipping would take it away; readiness is polled on /readyz.
  const devnull = openSync('/dev/null', 'w');
  const child = spawnNode('gateway', [
    ...GATEWAY_NODE_ARGS, join(ROOT, 'bin/tollgate.js'), 'serve', '--config', configPath, '--host', HOST, '--port', String(port),
  ], { cpu: 1, pinned, stdout: devnull, env: { TOLLGATE_LOG_LEVEL: LOG_LEVEL } });
  closeSync(devnull);
  gatewayChild = child;
  const origin = `http://${HOST}:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitInfo) throw diedError(child);
    try {
      const res = await fetch(`${origin}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`gateway not ready in 20 s\n${child.stderrTail}`);
    await sleep(50);
  }
  return { child, port, origin, pid: child.pid };
}

async function stopChild(child, timeoutMs = 5000) {
  if (child.exitInfo) return;
  child.kill('SIGTERM');
  const done = await Promise.race([child.exited, sleep(timeoutMs).then(() => null)]);
  if (done === null && !child.exitInfo) {
    log(`${child.label} did not stop in ${timeoutMs} ms; killing it`);
    child.kill('SIGKILL');
    await child.exited;
  }
}

async function cleanup() {
  await Promise.allSettled([...children].map((c) => stopChild(c)));
  if (tmp) rmSync(tmp, { recursive: true, force: true });
}

process.on('exit', () => {
  for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } }
});
let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    if (interrupted) return;
    interrupted = true;
    log(`${sig}: stopping`);
    cleanup().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// /proc readings of the gateway

function procCpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime is field 14, stime field 15.
  return Number(fields[11]) + Number(fields[12]);
}

function procRssKb(pid) {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}

/** Machine-wide CPU ticks from /proc/stat: user+nice+system (busy), steal, and all. */
function machineTicks() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { busy: f[0] + f[1] + f[2], steal: f[7] ?? 0, total: f.slice(0, 8).reduce((a, b) => a + b, 0) };
}

/**
 * Measures how much CPU processes other than ours (this one and its children) took while it
 * ran, and the hypervisor's steal time: on a shared machine both make every figure noisy.
 */
function noiseMeter(pids) {
  const ours = () => pids().reduce((sum, pid) => { try { return sum + procCpuTicks(pid); } catch { return sum; } }, 0);
  const m0 = machineTicks();
  const o0 = ours();
  return () => {
    const m1 = machineTicks();
    const total = m1.total - m0.total;
    const others = Math.max(0, (m1.busy - m0.busy) - (ours() - o0));
    return { othersPct: total > 0 ? (100 * others) / total : 0, stealPct: total > 0 ? (100 * (m1.steal - m0.steal)) / total : 0 };
  };
}

// ---------------------------------------------------------------------------------------------
// Load

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

async function cannon(label, origin, { body, connections, seconds }) {
  const result = await autocannon({
    url: `${origin}${PATH}`,
    method: 'POST',
    headers: HEADERS,
    body,
    connections,
    pipelining: 1,
    duration: seconds,
    timeout: 10,
  });
  const bad = { non2xx: result.non2xx, errors: result.errors, timeouts: result.timeouts };
  if (bad.non2xx || bad.errors || bad.timeouts || result.requests.total === 0) {
    throw new Error(`${label}: ${JSON.stringify(bad)} of ${result.requests.total} requests ` +
      `(status codes ${JSON.stringify(result.statusCodeStats)}); the figures would be meaningless`);
  }
  return result;
}

/** An autocannon run against the gateway, with the gateway's CPU time read around it. */
async function cannonWithCpu(label, gw, ticksPerSec, opts) {
  const before = procCpuTicks(gw.pid);
  const result = await cannon(label, gw.origin, opts);
  const ticks = procCpuTicks(gw.pid) - before;
  const cpuUsPerRequest = (ticks / ticksPerSec) * 1e6 / result.requests.total;
  return { result, cpuUsPerRequest, cpuSeconds: ticks / ticksPerSec };
}

async function expectOk(label, statusCode, body) {
  if (statusCode !== 200) {
    const text = await body.text().catch(() => '');
    throw new Error(`${label}: status ${statusCode}: ${text.slice(0, 500)}`);
  }
}

/**
 * Sequential non-streaming requests on one keep-alive connection per target, alternating
 * between the targets in half-second blocks so drift hits all alike. Latency is measured with
 * performance.now() (autocannon's histogram has 1 ms resolution, too coarse for this).
 */
async function sequentialLatency(targets, seconds) {
  const clients = targets.map((t) => new Client(t.origin, { pipelining: 1, keepAliveTimeout: 60_000 }));
  const samples = targets.map(() => []);
  const one = async (i) => {
    const t0 = performance.now();
    const res = await clients[i].request({ method: 'POST', path: PATH, headers: HEADERS, body: BODY_PLAIN });
    await expectOk(`${targets[i].name} c1`, res.statusCode, res.body);
    await res.body.dump();
    samples[i].push(performance.now() - t0);
  };
  try {
    for (let i = 0; i < targets.length; i++) for (let k = 0; k < 200; k++) await one(i); // warm the connection
    samples.forEach((s) => (s.length = 0));
    const blockMs = 500;
    const blocks = Math.max(1, Math.round((seconds * 1000) / blockMs));
    for (let b = 0; b < blocks; b++) {
      for (let i = 0; i < targets.length; i++) {
        const end = performance.now() + blockMs;
        while (performance.now() < end) await one(i);
      }
    }
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
  return samples.map((s) => {
    const sorted = s.sort((a, b) => a - b);
    const total = s.reduce((a, b) => a + b, 0);
    return { n: s.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), mean: total / s.length, rps: (s.length * 1000) / total };
  });
}

/**
 * Time to the first body byte of a streaming request, p50 over `n` sequential requests per
 * target (alternating request by request). The upstream sends the first chunk, then the rest
 * TTFB_GAP_MS later. Each stream is read to the end and checked for [DONE].
 */
async function timeToFirstByte(targets, n) {
  const clients = targets.map((t) => new Client(t.origin, { pipelining: 1, keepAliveTimeout: 60_000 }));
  const samples = targets.map(() => []);
  const one = async (i, record) => {
    const t0 = performance.now();
    const res = await clients[i].request({ method: 'POST', path: PATH, headers: HEADERS, body: BODY_TTFB });
    await expectOk(`${targets[i].name} stream`, res.statusCode, res.body);
    let first;
    let tail = '';
    for await (const chunk of res.body) {
      if (first === undefined) first = performance.now() - t0;
      tail = (tail + chunk.toString('latin1')).slice(-64);
    }
    if (!tail.endsWith('data: [DONE]\n\n')) throw new Error(`${targets[i].name} stream did not end with [DONE]: ...${JSON.stringify(tail)}`);
    if (record) samples[i].push(first);
  };
  try {
    for (let k = 0; k < 50; k++) for (let i = 0; i < targets.length; i++) await one(i, false);
    for (let k = 0; k < n; k++) for (let i = 0; i < targets.length; i++) await one(i, true);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
  return samples.map((s) => {
    const sorted = s.sort((a, b) => a - b);
    return { n: s.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  });
}

/** Opens `n` held streams through the gateway, reads its RSS once all have a first chunk. */
async function openStreamsRss(gw, up, n) {
  const rssBefore = procRssKb(gw.pid);
  const pool = new Pool(gw.origin, { connections: n + 8, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 0 });
  const controllers = [];
  const opened = [];
  try {
    for (let k = 0; k < n; k++) {
      const ac = new AbortController();
      controllers.push(ac);
      opened.push((async () => {
        const res = await pool.request({ method: 'POST', path: PATH, headers: HEADERS, body: BODY_HOLD, signal: ac.signal });
        await expectOk('held stream', res.statusCode, res.body);
        res.body.on('error', () => { /* aborted below */ });
        await new Promise((resolve, reject) => {
          res.body.once('data', resolve);
          res.body.once('end', () => reject(new Error('held stream ended before its first chunk')));
          res.body.once('error', reject);
        });
      })());
    }
    const t0 = performance.now();
    await Promise.race([
      Promise.all(opened),
      sleep(30_000, undefined, { ref: false }).then(() => { throw new Error(`not all ${n} held streams got a first chunk in 30 s`); }),
      gw.child.exited.then(() => { throw diedError(gw.child); }),
    ]);
    const openMs = performance.now() - t0;
    await sleep(300);
    let rssDuring = 0;
    for (let k = 0; k < 5; k++) { rssDuring = Math.max(rssDuring, procRssKb(gw.pid)); await sleep(100); }
    const upHeld = await (await fetch(`${up.origin}/healthz`)).json();
    if (upHeld.held < n) throw new Error(`the upstream holds ${upHeld.held} streams, expected ${n}`);
    // Abort every client stream; the gateway must pass the aborts on to the upstream.
    for (const ac of controllers) ac.abort();
    await Promise.allSettled(opened);
    const deadline = Date.now() + 10_000;
    let left = n;
    while (Date.now() < deadline) {
      left = (await (await fetch(`${up.origin}/healthz`)).json()).held;
      if (left === 0) break;
      await sleep(100);
    }
    if (left !== 0) throw new Error(`${left} upstream streams still open 10 s after every client aborted`);
    return { n, openMs, rssBefore, rssDuring, rssAfter: procRssKb(gw.pid), perStreamKb: (rssDuring - rssBefore) / n };
  } finally {
    for (const ac of controllers) ac.abort();
    await pool.destroy().catch(() => {});
  }
}

/** One non-streaming and one streaming request through the gateway, checked field by field. */
async function sanityCheck(gw) {
  const client = new Client(gw.origin);
  try {
    let res = await client.request({ method: 'POST', path: PATH, headers: HEADERS, body: BODY_PLAIN });
    await expectOk('sanity (non-streaming)', res.statusCode, res.body);
    const json = await res.body.json();
    if (json.object !== 'chat.completion' || json.model !== MODEL || !json.choices?.[0]?.message?.content || json.usage?.total_tokens !== 32) {
      throw new Error(`sanity (non-streaming): unexpected answer ${JSON.stringify(json).slice(0, 500)}`);
    }
    res = await client.request({ method: 'POST', path: PATH, headers: HEADERS, body: BODY_STREAM });
    await expectOk('sanity (streaming)', res.statusCode, res.body);
    const text = await res.body.text();
    const events = text.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
    if (events.at(-1) !== '[DONE]') throw new Error(`sanity (streaming): no [DONE] at the end: ${text.slice(-300)}`);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const content = chunks.filter((c) => c.choices?.[0]?.delta?.content).length;
    const finish = chunks.filter((c) => c.choices?.[0]?.finish_reason === 'stop').length;
    const usage = chunks.filter((c) => Array.isArray(c.choices) && c.choices.length === 0 && c.usage?.total_tokens === 32).length;
    if (content !== 20 || finish !== 1 || usage !== 1) {
      throw new Error(`sanity (streaming): ${content} content chunks, ${finish} finish, ${usage} usage chunks (want 20, 1, 1)`);
    }
  } finally {
    await client.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const fmt = (v, digits = 2) => (v === undefined || v === null || Number.isNaN(v) ? '-' : v.toFixed(digits));
const fmtInt = (v) => (v === undefined || Number.isNaN(v) ? '-' : Math.round(v).toLocaleString('en-US'));

function table(rows, header = ['metric', 'direct', 'tollgate', 'ratio/added', 'target', 'result']) {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => String(r[i] ?? '').length)));
  const line = (r) => `| ${r.map((c, i) => (i === 0 ? String(c ?? '').padEnd(widths[i]) : String(c ?? '').padStart(widths[i]))).join(' | ')} |`;
  const sep = `|${widths.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(header), sep, ...rows.map(line)].join('\n');
}

const verdict = (value, max) => (Number.isFinite(value) ? (value <= max ? 'PASS' : 'MISS') : 'MISS');

// ---------------------------------------------------------------------------------------------

async function main() {
  tmp = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
  const ticksPerSec = clockTicks();
  let pinned = haveTaskset();
  if (pinned) {
    try {
      execFileSync('taskset', ['-a', '-p', '-c', '0', String(process.pid)], { stdio: 'ignore' });
    } catch (err) {
      log(`WARNING: could not pin the load generator to CPU 0 (${err.message}); running unpinned`);
      pinned = false;
    }
  } else {
    log('WARNING: taskset not found; running unpinned (load generator, upstream and gateway share all CPUs)');
  }
  if (cpus().length < 2 && pinned) {
    log('WARNING: fewer than 2 CPUs; running unpinned');
    pinned = false;
  }

  // Other load on the machine makes every figure noisy: say so before and after.
  const idle = noiseMeter(() => []);
  await sleep(1000);
  const before = idle();
  if (before.othersPct > 10) {
    log(`WARNING: the machine is busy before the bench starts (${fmt(before.othersPct, 0)}% of all CPU used by other processes); figures will be noisy`);
  }

  const up = await startHelper('fake upstream', 'bench/upstream.js', ['0'], pinned, 0);
  const gw = await startGateway(pinned, up.port);
  const bare = BARE_PROXY ? await startHelper('bare proxy', 'bench/bare-proxy.js', [up.origin], pinned, 1) : undefined;
  log(`node ${process.version}, ${cpus().length} CPUs, ${pinned ? 'pinned: load+upstream CPU 0, gateway CPU 1' : 'unpinned'}; ` +
    `gateway pid ${gw.pid} (${gw.origin}, log level ${LOG_LEVEL}, stdout -> /dev/null), upstream ${up.origin}` +
    `${bare ? `, bare proxy ${bare.origin}` : ''}`);
  await sanityCheck(gw);
  const noise = noiseMeter(() => [process.pid, up.pid, gw.pid, ...(bare ? [bare.pid] : [])]);

  const direct = { name: 'direct', origin: up.origin };
  const gateway = { name: 'tollgate', origin: gw.origin };
  const targets = [direct, gateway, ...(bare ? [{ name: 'bare proxy', origin: bare.origin }] : [])];

  if (WARMUP_SECONDS > 0) {
    log(`warm-up: ${WARMUP_SECONDS} s per run`);
    for (const t of targets) {
      await cannon(`warm-up ${t.name} non-streaming`, t.origin, { body: BODY_PLAIN, connections: 64, seconds: WARMUP_SECONDS });
      await cannon(`warm-up ${t.name} streaming`, t.origin, { body: BODY_STREAM, connections: 16, seconds: WARMUP_SECONDS });
    }
  }

  log(`RSS: ${OPEN_STREAMS} streams held open through the gateway`);
  const rss = await openStreamsRss(gw, up, OPEN_STREAMS);

  log(`non-streaming, concurrency 1: ${SECONDS} s per side (alternating)`);
  const [c1Direct, c1Gw, c1Bare] = await sequentialLatency(targets, SECONDS);

  log(`streaming, time to first byte: ${TTFB_REQUESTS} sequential requests per side`);
  const [ttfbDirect, ttfbGw, ttfbBare] = await timeToFirstByte(targets, TTFB_REQUESTS);

  log(`non-streaming, concurrency 64: ${SECONDS} s per side`);
  const c64Direct = await cannon('direct non-streaming c64', up.origin, { body: BODY_PLAIN, connections: 64, seconds: SECONDS });
  const c64Gw = await cannonWithCpu('tollgate non-streaming c64', gw, ticksPerSec, { body: BODY_PLAIN, connections: 64, seconds: SECONDS });
  const c64Bare = bare && await cannonWithCpu('bare proxy non-streaming c64', bare, ticksPerSec, { body: BODY_PLAIN, connections: 64, seconds: SECONDS });

  log(`streaming (20 chunks), concurrency 16: ${SECONDS} s per side`);
  const sDirect = await cannon('direct streaming c16', up.origin, { body: BODY_STREAM, connections: 16, seconds: SECONDS });
  const sGw = await cannonWithCpu('tollgate streaming c16', gw, ticksPerSec, { body: BODY_STREAM, connections: 16, seconds: SECONDS });
  const sBare = bare && await cannonWithCpu('bare proxy streaming c16', bare, ticksPerSec, { body: BODY_STREAM, connections: 16, seconds: SECONDS });

  const during = noise();
  // The gateway must still be alive and healthy after all that.
  await sanityCheck(gw);
  const rssEnd = procRssKb(gw.pid);

  const added = {
    p50: c1Gw.p50 - c1Direct.p50,
    p99: c1Gw.p99 - c1Direct.p99,
    ttfb: ttfbGw.p50 - ttfbDirect.p50,
  };
  const rpsRatio = c64Gw.result.requests.average / c64Direct.requests.average;
  const sRatio = sGw.result.requests.average / sDirect.requests.average;

  const rows = [
    ['non-streaming c1: p50 latency (ms)', fmt(c1Direct.p50, 3), fmt(c1Gw.p50, 3), `+${fmt(added.p50, 3)}`, `<= +${TARGETS.addedP50Ms}`, verdict(added.p50, TARGETS.addedP50Ms)],
    ['non-streaming c1: p99 latency (ms)', fmt(c1Direct.p99, 3), fmt(c1Gw.p99, 3), `+${fmt(added.p99, 3)}`, `<= +${TARGETS.addedP99Ms}`, verdict(added.p99, TARGETS.addedP99Ms)],
    ['non-streaming c1: req/s', fmtInt(c1Direct.rps), fmtInt(c1Gw.rps), `x${fmt(c1Gw.rps / c1Direct.rps)}`, '', ''],
    ['non-streaming c64: req/s', fmtInt(c64Direct.requests.average), fmtInt(c64Gw.result.requests.average), `x${fmt(rpsRatio)}`, '', ''],
    ['non-streaming c64: gateway CPU/request (us)', '', fmt(c64Gw.cpuUsPerRequest, 1), '', `<= ${TARGETS.cpuPerRequestUs}`, verdict(c64Gw.cpuUsPerRequest, TARGETS.cpuPerRequestUs)],
    ['streaming c16 (20 chunks): req/s', fmtInt(sDirect.requests.average), fmtInt(sGw.result.requests.average), `x${fmt(sRatio)}`, '', ''],
    ['streaming c16: gateway CPU/request (us)', '', fmt(sGw.cpuUsPerRequest, 1), '', '', ''],
    ['streaming: time to first byte p50 (ms)', fmt(ttfbDirect.p50, 3), fmt(ttfbGw.p50, 3), `+${fmt(added.ttfb, 3)}`, `<= +${TARGETS.addedTtfbMs}`, verdict(added.ttfb, TARGETS.addedTtfbMs)],
    [`gateway RSS, ${rss.n} open streams (MB)`, '', `${fmt(rss.rssBefore / 1024, 1)} -> ${fmt(rss.rssDuring / 1024, 1)}`, '', '', ''],
    ['gateway RSS growth per open stream (KB)', '', fmt(rss.perStreamKb, 1), '', `<= ${TARGETS.rssPerStreamKb}`, verdict(rss.perStreamKb, TARGETS.rssPerStreamKb)],
  ];

  process.stdout.write(`\nTollgate overhead benchmark: node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model?.trim() ?? '?'}), ` +
    `${pinned ? 'load generator + fake upstream on CPU 0, gateway on CPU 1' : 'UNPINNED'}, ` +
    `${SECONDS} s per run, gateway log level ${LOG_LEVEL} (stdout -> /dev/null)\n\n`);
  process.stdout.write(`${table(rows)}\n\n`);
  if (bare) {
    const ref = [
      ['non-streaming c1: p50 latency (ms)', fmt(c1Direct.p50, 3), fmt(c1Bare.p50, 3), `+${fmt(c1Bare.p50 - c1Direct.p50, 3)}`],
      ['non-streaming c1: p99 latency (ms)', fmt(c1Direct.p99, 3), fmt(c1Bare.p99, 3), `+${fmt(c1Bare.p99 - c1Direct.p99, 3)}`],
      ['non-streaming c64: req/s', fmtInt(c64Direct.requests.average), fmtInt(c64Bare.result.requests.average), `x${fmt(c64Bare.result.requests.average / c64Direct.requests.average)}`],
      ['non-streaming c64: proxy CPU/request (us)', '', fmt(c64Bare.cpuUsPerRequest, 1), ''],
      ['streaming c16 (20 chunks): req/s', fmtInt(sDirect.requests.average), fmtInt(sBare.result.requests.average), `x${fmt(sBare.result.requests.average / sDirect.requests.average)}`],
      ['streaming c16: proxy CPU/request (us)', '', fmt(sBare.cpuUsPerRequest, 1), ''],
      ['streaming: time to first byte p50 (ms)', fmt(ttfbDirect.p50, 3), fmt(ttfbBare.p50, 3), `+${fmt(ttfbBare.p50 - ttfbDirect.p50, 3)}`],
    ];
    process.stdout.write(`Reference, the floor of one Node.js hop: a bare node:http + undici pass-through proxy (bench/bare-proxy.js) on the gateway's CPU\n\n`);
    process.stdout.write(`${table(ref, ['metric', 'direct', 'bare proxy', 'ratio/added'])}\n\n`);
  }
  process.stdout.write(`c1: ${c1Direct.n} direct / ${c1Gw.n} gateway requests; time to first byte: ${ttfbGw.n} per side ` +
    `(p99 direct ${fmt(ttfbDirect.p99, 3)} ms, gateway ${fmt(ttfbGw.p99, 3)} ms); ` +
    `c64: ${c64Gw.result.requests.total} gateway requests, ${fmt(c64Gw.cpuSeconds)} CPU s; ` +
    `streaming: ${sGw.result.requests.total} gateway requests, ${fmt(sGw.cpuSeconds)} CPU s; ` +
    `${rss.n} streams opened in ${fmt(rss.openMs, 0)} ms, RSS after abort ${fmt(rss.rssAfter / 1024, 1)} MB, at the end ${fmt(rssEnd / 1024, 1)} MB\n`);

  const noisy = during.othersPct > 5 || during.stealPct > 2;
  process.stdout.write(`${noisy ? 'WARNING: ' : ''}other processes used ${fmt(during.othersPct, 1)}% of the machine's CPU during the runs ` +
    `(steal ${fmt(during.stealPct, 1)}%)${noisy ? '; the figures are noisy, re-run on an idle machine' : ''}\n`);

  const summary = {
    node: process.version,
    cpus: cpus().length,
    pinned,
    seconds: SECONDS,
    log_level: LOG_LEVEL,
    other_cpu_pct: +during.othersPct.toFixed(1),
    steal_pct: +during.stealPct.toFixed(1),
    nonstream_c1: {
      direct_p50_ms: +c1Direct.p50.toFixed(3), direct_p99_ms: +c1Direct.p99.toFixed(3),
      tollgate_p50_ms: +c1Gw.p50.toFixed(3), tollgate_p99_ms: +c1Gw.p99.toFixed(3),
      added_p50_ms: +added.p50.toFixed(3), added_p99_ms: +added.p99.toFixed(3),
    },
    nonstream_c64: {
      direct_rps: Math.round(c64Direct.requests.average), tollgate_rps: Math.round(c64Gw.result.requests.average),
      ratio: +rpsRatio.toFixed(3), gateway_cpu_us_per_request: +c64Gw.cpuUsPerRequest.toFixed(1),
    },
    stream_c16: {
      direct_rps: Math.round(sDirect.requests.average), tollgate_rps: Math.round(sGw.result.requests.average),
      ratio: +sRatio.toFixed(3), gateway_cpu_us_per_request: +sGw.cpuUsPerRequest.toFixed(1),
      direct_ttfb_p50_ms: +ttfbDirect.p50.toFixed(3), tollgate_ttfb_p50_ms: +ttfbGw.p50.toFixed(3), added_ttfb_p50_ms: +added.ttfb.toFixed(3),
    },
    open_streams: {
      n: rss.n, rss_before_kb: rss.rssBefore, rss_during_kb: rss.rssDuring, rss_per_stream_kb: +rss.perStreamKb.toFixed(1),
    },
    ...(bare ? {
      bare_proxy: {
        added_p50_ms: +(c1Bare.p50 - c1Direct.p50).toFixed(3), added_p99_ms: +(c1Bare.p99 - c1Direct.p99).toFixed(3),
        c64_rps: Math.round(c64Bare.result.requests.average), c64_cpu_us_per_request: +c64Bare.cpuUsPerRequest.toFixed(1),
        stream_rps: Math.round(sBare.result.requests.average), stream_cpu_us_per_request: +sBare.cpuUsPerRequest.toFixed(1),
        added_ttfb_p50_ms: +(ttfbBare.p50 - ttfbDirect.p50).toFixed(3),
      },
    } : {}),
    targets: {
      cpu_us_per_request: verdict(c64Gw.cpuUsPerRequest, TARGETS.cpuPerRequestUs),
      added_p50: verdict(added.p50, TARGETS.addedP50Ms),
      added_p99: verdict(added.p99, TARGETS.addedP99Ms),
      added_ttfb: verdict(added.ttfb, TARGETS.addedTtfbMs),
      rss_per_stream: verdict(rss.perStreamKb, TARGETS.rssPerStreamKb),
    },
  };
  process.stdout.write(`\nBENCH_JSON ${JSON.stringify(summary)}\n`);
}

let exitCode = 0;
try {
  await main();
} catch (err) {
  if (interrupted) await new Promise(() => {}); // the signal handler cleans up and exits
  process.stderr.write(`\nbench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  if (gatewayChild?.exitInfo) {
    const { code, signal } = gatewayChild.exitInfo;
    process.stderr.write(`the gateway had exited (code ${code}, signal ${signal})${gatewayChild.stderrTail ? `; its stderr:\n${gatewayChild.stderrTail}` : ''}\n`);
  }
  exitCode = 1;
} finally {
  await cleanup();
}
process.exit(exitCode);
