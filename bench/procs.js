// Child processes of `npm run bench` and what /proc says about them: the shared fake upstream,
// the gateway (its stdout and stderr written to a log file, as a deployment keeps its log), the
// shared bare http-proxy-3 hop, a throwaway redis-server; CPU pinning with taskset; CPU time
// and RSS of one process; how busy the rest of the machine was. Every child is killed when the
// bench exits, however it exits.

import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';

export const HOST = '127.0.0.1';
export const log = (msg) => process.stderr.write(`[bench] ${msg}\n`);

const children = new Set();

process.on('exit', () => {
  for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } }
});

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function clockTicks() {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}

/** The CPUs this process may run on (Cpus_allowed_list), e.g. [0, 1]. */
function allowedCpus() {
  const m = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'));
  if (!m) return [];
  const out = [];
  for (const part of m[1].split(',')) {
    const [a, b] = part.split('-').map(Number);
    for (let c = a; c <= (b ?? a); c++) out.push(c);
  }
  return out;
}

/**
 * Pins this process (the load generator, all its threads) to one CPU and returns the plan:
 * `load` for this process, the upstream and Redis, `proxy` for the gateway and the bare hop.
 * Without taskset or a second CPU everything runs unpinned, and the report says so.
 */
export function pinning() {
  const cpus = allowedCpus();
  if (cpus.length < 2) return { pinned: false, why: `only ${cpus.length} CPU allowed` };
  const plan = { pinned: true, load: cpus[0], proxy: cpus[1] };
  try {
    execFileSync('taskset', ['-a', '-p', '-c', String(plan.load), String(process.pid)], { stdio: 'ignore' });
  } catch (err) {
    return { pinned: false, why: `taskset failed (${err.message.split('\n')[0]})` };
  }
  return plan;
}

/** Spawns `cmd args`, pinned to `cpu` when given; the child is killed when the bench exits. */
export function spawnChild(label, cmd, args, { cpu, stdio = ['ignore', 'pipe', 'pipe'], env, cwd } = {}) {
  const [file, argv] = cpu === undefined ? [cmd, args] : ['taskset', ['-c', String(cpu), cmd, ...args]];
  const child = spawn(file, argv, { cwd, stdio, env: { ...process.env, ...env } });
  child.label = label;
  child.tail = '';
  for (const s of [child.stdout, child.stderr]) {
    if (!s) continue;
    s.setEncoding('utf8');
    s.on('data', (d) => { child.tail = (child.tail + d).slice(-8192); });
  }
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => {
    child.exitInfo = { code, signal };
    children.delete(child);
    resolve(child.exitInfo);
  }));
  children.add(child);
  return child;
}

export function diedError(child) {
  const { code, signal } = child.exitInfo ?? {};
  return new Error(`${child.label} exited early (code ${code}, signal ${signal})\n${child.output?.() ?? child.tail}`);
}

/** Starts a node script that prints a line matching `ready` on stdout once it listens. */
export async function startNodeScript(label, script, args, { cpu, env, ready }) {
  const child = spawnChild(label, process.execPath, [script, ...args], { cpu, env });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${label} did not start in 10 s\n${child.tail}`)), 10_000);
    const check = () => { if (ready.test(child.tail)) { clearTimeout(timer); resolve(); } };
    child.stdout.on('data', check);
    child.exited.then(() => { clearTimeout(timer); reject(diedError(child)); });
  });
  return child;
}

/**
 * Starts `tollgate serve` pinned to `cpu`, stdout and stderr appended to `logPath`, and waits
 * for /readyz (polled only here: with Redis, each poll is a command).
 */
export async function startGateway({ root, configPath, logPath, port, upstream, cpu, nodeArgs, label = 'gateway' }) {
  const fd = openSync(logPath, 'a');
  const child = spawnChild(label, process.execPath, [
    ...nodeArgs, join(root, 'bin/tollgate.js'), 'serve', '--config', configPath, '--host', HOST, '--port', String(port),
  ], { cpu, cwd: root, stdio: ['ignore', fd, fd], env: { TOLLGATE_PORT: String(port), BENCH_UPSTREAM: upstream } });
  closeSync(fd);
  child.output = () => {
    try { return readFileSync(logPath, 'utf8').slice(-4096); } catch { return ''; }
  };
  const origin = `http://${HOST}:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitInfo) throw diedError(child);
    try {
      const res = await fetch(`${origin}/readyz`);
      await res.arrayBuffer();
      if (res.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`${label} not ready in 30 s\n${child.output()}`);
    await sleep(50);
  }
  return { child, pid: child.pid, origin, logPath };
}

/** A redis-server on a free port with no persistence, pinned to `cpu`. */
export async function startRedis(cpu, dir, extraArgs = [], label = 'redis-server') {
  const port = await freePort();
  const child = spawnChild(label, 'redis-server', [
    '--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no', '--dir', dir, ...extraArgs,
  ], { cpu });
  const deadline = Date.now() + 10_000;
  while (!/Ready to accept connections/.test(child.tail)) {
    if (child.exitInfo) throw diedError(child);
    if (Date.now() > deadline) throw new Error(`redis-server did not start in 10 s\n${child.tail}`);
    await sleep(20);
  }
  return { child, pid: child.pid, port, url: `redis://${HOST}:${port}` };
}

export async function stopChild(child, timeoutMs = 5000) {
  if (!child || child.exitInfo) return;
  child.kill('SIGTERM');
  const done = await Promise.race([child.exited, sleep(timeoutMs).then(() => null)]);
  if (done === null && !child.exitInfo) {
    log(`${child.label} did not stop in ${timeoutMs} ms; killing it`);
    child.kill('SIGKILL');
    await child.exited;
  }
}

export async function stopAll(timeoutMs) {
  await Promise.allSettled([...children].map((c) => stopChild(c, timeoutMs)));
}

// ---------------------------------------------------------------------------------------------
// /proc readings

/** User+system CPU time of one process, in clock ticks (fields 14 and 15 of /proc/PID/stat). */
export function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/**
 * CPU ticks of `pid`'s threads other than the main one (V8's GC and compiler helpers, libuv's
 * pool): on a process pinned to one core, time they take is time its main thread waits.
 */
export function helperTicks(pid) {
  let sum = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    if (tid === String(pid)) continue;
    try {
      sum += cpuTicks(`${pid}/task/${tid}`);
    } catch { /* the thread ended */ }
  }
  return sum;
}

/**
 * The main thread's scheduler account (/proc/PID/schedstat): ns run on a CPU, ns spent runnable
 * but waiting for one (another thread or process had it), and timeslices.
 */
export function schedstat(pid) {
  const [runNs, waitNs, slices] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(/\s+/).map(Number);
  return { runNs, waitNs, slices };
}

export function rssKb(pid) {
  const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}

function machineTicks() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return { busy: f[0] + f[1] + f[2], steal: f[7] ?? 0, total: f.slice(0, 8).reduce((a, b) => a + b, 0) };
}

/**
 * How much of the machine's CPU processes other than ours (`pids()`) took while it ran, and
 * the hypervisor's steal time: on a shared machine both make every figure noisy.
 */
export function noiseMeter(pids) {
  const ours = () => pids().reduce((sum, pid) => { try { return sum + cpuTicks(pid); } catch { return sum; } }, 0);
  const m0 = machineTicks();
  const o0 = ours();
  return () => {
    const m1 = machineTicks();
    const total = m1.total - m0.total;
    const others = Math.max(0, (m1.busy - m0.busy) - (ours() - o0));
    return { othersPct: total > 0 ? (100 * others) / total : 0, stealPct: total > 0 ? (100 * (m1.steal - m0.steal)) / total : 0 };
  };
}
