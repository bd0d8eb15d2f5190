// The load `npm run bench` puts on a target (the gateway, the bare hop or the upstream itself)
// and what it reads back: autocannon runs with the target's CPU time around them, sequential
// latency at one connection, time to the first SSE byte, many slow streams held open with the
// target's RSS sampled, and Redis's own counters. Any non-2xx answer, transport error, timeout
// or malformed stream throws: a figure taken on failing requests would mean nothing.

import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import autocannon from 'autocannon';
import { Client, Pool } from 'undici';
import { cpuTicks, rssKb } from './procs.js';

export const FAST = 'bench-k20-d0'; // 20 chunks back to back (the shared upstream's model ids)
export const SLOW = 'bench-k20-d50'; // 20 chunks 50 ms apart: a stream open about a second
const PATH = '/v1/chat/completions';
/** Connections the slow-stream phase opens from one client address (below the gateway's per-address cap of 256). */
const PER_ADDRESS = 200;

// A short but ordinary chat request: a system prompt and a question, as an app would send.
const MESSAGES = [
  { role: 'system', content: 'You are a concise assistant for an online bookshop. Answer in at most three sentences, in the language of the question, and never invent prices or stock levels: say so when you do not know.' },
  { role: 'user', content: 'Do you have the second volume of "The Three-Body Problem" trilogy in paperback, and how long does delivery to Lyon usually take?' },
];

export function requestBody(model, stream) {
  return JSON.stringify({
    model, messages: MESSAGES, max_tokens: 256, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
}

/**
 * The same request in the other dialects (CONTRACT section 6), non-streaming, for the CPU per
 * request of each route on the same pipeline: path, headers and body.
 */
export function dialectRequests(key, model) {
  const system = MESSAGES[0].content;
  const user = MESSAGES[1].content;
  return {
    messages: {
      path: '/v1/messages',
      headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model, max_tokens: 256, system, messages: [{ role: 'user', content: user }] }),
      ok: (json) => json.type === 'message' && json.content?.[0]?.type === 'text' && json.usage?.output_tokens > 0,
    },
    responses: {
      path: '/v1/responses',
      headers: headersFor(key),
      body: JSON.stringify({ model, instructions: system, input: user, max_output_tokens: 256, store: false }),
      ok: (json) => json.object === 'response' && json.status === 'completed' && json.usage?.output_tokens > 0,
    },
  };
}

/**
 * The same request as a legacy completion (POST /v1/completions, issue #32): the system prompt
 * and the question as one plain-text prompt, for `model` (served by the bench's own
 * completions upstream: the shared one has no such route).
 */
export function completionsRequest(key, model) {
  return {
    path: '/v1/completions',
    headers: headersFor(key),
    body: JSON.stringify({ model, prompt: `${MESSAGES[0].content}\n\n${MESSAGES[1].content}\n`, max_tokens: 256 }),
    ok: (json) => json.object === 'text_completion' && typeof json.choices?.[0]?.text === 'string' && json.usage?.completion_tokens > 0,
  };
}

/** One request of each dialect: a 200 with the dialect's own answer, else throws. */
export async function dialectCheck(target, requests) {
  const client = new Client(target.origin);
  try {
    for (const [name, r] of Object.entries(requests)) {
      const res = await client.request({ method: 'POST', path: r.path, headers: r.headers, body: r.body });
      await expectOk(`${target.name} ${name}`, res);
      const json = await res.body.json();
      if (!r.ok(json)) throw new Error(`${target.name} ${name}: unexpected answer ${JSON.stringify(json).slice(0, 500)}`);
    }
  } finally {
    await client.close();
  }
}

export const headersFor = (key) => ({ 'content-type': 'application/json', authorization: `Bearer ${key}` });

export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

async function expectOk(label, res) {
  if (res.statusCode !== 200) {
    const text = await res.body.text().catch(() => '');
    throw new Error(`${label}: status ${res.statusCode}: ${text.slice(0, 500)}`);
  }
}

/** An autocannon run; throws unless every request got a 2xx answer. */
export async function cannon(label, origin, { headers, body, connections, seconds, path = PATH }) {
  const result = await autocannon({
    url: `${origin}${path}`, method: 'POST', headers, body, connections, pipelining: 1, duration: seconds, timeout: 10,
  });
  const bad = { non2xx: result.non2xx, errors: result.errors, timeouts: result.timeouts };
  if (bad.non2xx || bad.errors || bad.timeouts || result.requests.total === 0) {
    throw new Error(`${label}: ${JSON.stringify(bad)} of ${result.requests.total} requests ` +
      `(status codes ${JSON.stringify(result.statusCodeStats)}); the figures would be meaningless`);
  }
  return { rps: result.requests.average, total: result.requests.total };
}

/**
 * Waits (at most 10 s) until `pid` has been idle for 300 ms: requests queued in it by a
 * previous run must not be charged to the next one, nor share its CPU.
 */
export async function settle(pid) {
  const deadline = performance.now() + 10_000;
  let last = cpuTicks(pid);
  while (performance.now() < deadline) {
    await sleep(300);
    const now = cpuTicks(pid);
    if (now - last <= 1) return;
    last = now;
  }
}

/** An autocannon run with the CPU time of `pids` read around it: µs per request each. */
export async function cannonWithCpu(label, target, ticksPerSec, opts, extraPids = {}) {
  const pids = { [target.name]: target.pid, ...extraPids };
  await settle(target.pid);
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuTicks(pid)]));
  const run = await cannon(label, target.origin, opts);
  const cpuUs = {};
  for (const [k, pid] of Object.entries(pids)) cpuUs[k] = ((cpuTicks(pid) - before[k]) / ticksPerSec) * 1e6 / run.total;
  return { ...run, cpuUs: cpuUs[target.name], cpuUsOf: cpuUs };
}

/**
 * Sequential non-streaming requests on one keep-alive connection per target, alternating
 * between targets in quarter-second blocks so that drift hits all alike. Timed with
 * performance.now(): autocannon's 1 ms histogram is too coarse for this.
 */
export async function sequentialLatency(targets, seconds, headers, body, { afterWarmUp } = {}) {
  const clients = targets.map((t) => new Client(t.origin, { pipelining: 1, keepAliveTimeout: 60_000 }));
  const samples = targets.map(() => []);
  const one = async (i) => {
    const t0 = performance.now();
    const res = await clients[i].request({ method: 'POST', path: PATH, headers, body });
    await expectOk(`${targets[i].name} c1`, res);
    await res.body.dump();
    samples[i].push(performance.now() - t0);
  };
  try {
    for (let i = 0; i < targets.length; i++) for (let k = 0; k < 100; k++) await one(i); // warm the connection
    samples.forEach((s) => { s.length = 0; });
    await afterWarmUp?.();
    const blockMs = 250;
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
    return { n: s.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  });
}

/**
 * What the gateway's own /metrics (prom-client's default metrics) says about its GC pauses so
 * far: count and seconds per kind (minor, major, incremental, weakcb).
 */
export async function gcPauses(origin) {
  const res = await fetch(`${origin}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`GET ${origin}/metrics: status ${res.status}: ${text.slice(0, 300)}`);
  const out = {};
  for (const m of text.matchAll(/^tollgate_process_nodejs_gc_duration_seconds_(sum|count)\{kind="(\w+)"\} (\S+)$/gm)) {
    (out[m[2]] ??= { count: 0, sum: 0 })[m[1]] = Number(m[3]);
  }
  if (Object.keys(out).length === 0) throw new Error(`GET ${origin}/metrics: no tollgate_process_nodejs_gc_duration_seconds series`);
  return out;
}

/** Pauses between two gcPauses() readings: count, total and mean ms, all kinds together. */
export function gcDelta(a, b) {
  let count = 0;
  let sum = 0;
  for (const [kind, v] of Object.entries(b)) {
    count += v.count - (a[kind]?.count ?? 0);
    sum += v.sum - (a[kind]?.sum ?? 0);
  }
  return { count, ms: sum * 1000, meanMs: count > 0 ? (sum * 1000) / count : 0 };
}

/**
 * The duration_ms of the access log's chat records written to `path` after byte `from`: the
 * gateway's own account of each request, from its handler's start to the answer's last byte.
 */
export function loggedDurations(path, from) {
  const fd = openSync(path, 'r');
  let text;
  try {
    const buf = Buffer.alloc(Math.max(0, fstatSync(fd).size - from));
    text = buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, from));
  } finally {
    closeSync(fd);
  }
  const out = [];
  for (const line of text.split('\n')) {
    if (!line.includes('"msg":"request"')) continue;
    const r = JSON.parse(line);
    if (r.route === 'chat' && typeof r.duration_ms === 'number') out.push(r.duration_ms);
  }
  return out.sort((a, b) => a - b);
}

/**
 * Time from writing a streaming request (on an already open connection) to the first
 * `data:` byte of the event stream. The slow model sends its first chunk at once and the next
 * 50 ms later, so the first one travels alone as with a real model; the client then hangs up,
 * as a client that has seen enough does, and the target must cancel the upstream stream.
 */
async function firstByte(origin, headers, body) {
  const { hostname, port } = new URL(origin);
  const socket = connect(Number(port), hostname);
  socket.setNoDelay(true);
  try {
    await new Promise((resolve, reject) => { socket.once('connect', resolve); socket.once('error', reject); });
    const head = [`POST ${PATH} HTTP/1.1`, `host: ${hostname}:${port}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
      `content-length: ${Buffer.byteLength(body)}`, 'connection: close', '', ''].join('\r\n');
    const t0 = performance.now();
    socket.write(head + body);
    let buf = '';
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no first byte from ${origin} in 10 s`)), 10_000);
      socket.on('error', (err) => { clearTimeout(timer); reject(err); });
      socket.on('end', () => { clearTimeout(timer); reject(new Error(`${origin} closed before the first event: ${buf.slice(0, 300)}`)); });
      socket.on('data', (d) => {
        buf += d.toString('latin1');
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0 || !buf.includes('data:', end)) return;
        clearTimeout(timer);
        const ms = performance.now() - t0;
        if (!/^HTTP\/1\.1 200 /.test(buf)) reject(new Error(`${origin}: ${buf.slice(0, 300)}`));
        else resolve(ms);
      });
    });
  } finally {
    socket.destroy();
  }
}

/** p50 and p99 of `n` first-byte times per target, alternating request by request. */
export async function timeToFirstByte(targets, n, headers, body) {
  const samples = targets.map(() => []);
  for (let k = 0; k < 20; k++) for (const t of targets) { await firstByte(t.origin, headers, body); await sleep(2); }
  for (let k = 0; k < n; k++) {
    for (let i = 0; i < targets.length; i++) {
      samples[i].push(await firstByte(targets[i].origin, headers, body));
      await sleep(2); // let the hang-up be handled before the next sample
    }
  }
  return samples.map((s) => {
    const sorted = s.sort((a, b) => a - b);
    return { n: s.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
  });
}

/**
 * `n` clients each stream the slow model back to back for `seconds` (a stream lasts about a
 * second), their starts spread over the first second so that about `n` streams are open at
 * any moment; the target's RSS is sampled every 100 ms once all have started, until the first
 * one stops. Returns its RSS just before, the peak, and how many streams were in flight and
 * how many had their first event at the peak sample. Every stream must end with [DONE].
 */
export async function openStreams(target, n, seconds, headers, body, ticksPerSec) {
  await sleep(500);
  const rssBefore = rssKb(target.pid);
  const ticksBefore = cpuTicks(target.pid);
  // The streams come from as many client addresses as real clients would use (127.0.0.2 and up,
  // at most PER_ADDRESS connections from each): the gateway caps the connections one address
  // may hold (server.max_connections_per_ip, 256 by default), and 500 clients are not one.
  const addresses = Math.ceil(n / PER_ADDRESS);
  const pools = Array.from({ length: addresses }, (_, i) => new Pool(target.origin, {
    connections: Math.ceil(n / addresses) + 8, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 60_000, bodyTimeout: 60_000,
    localAddress: `127.0.0.${2 + i}`,
  }));
  let inflight = 0;
  let open = 0;
  let done = 0;
  let failure;
  const peak = { rssKb: NaN, inflight: 0, open: 0 };
  let maxOpen = 0;
  const start = performance.now();
  const ramp = start + 1000;
  const end = start + seconds * 1000;
  const worker = async (k) => {
    await sleep((k * 1000) / n);
    while (failure === undefined && performance.now() < end) {
      inflight++;
      let first = false;
      try {
        const res = await pools[k % addresses].request({ method: 'POST', path: PATH, headers, body });
        await expectOk(`${target.name} slow stream`, res);
        let tail = '';
        for await (const chunk of res.body) {
          if (!first) { first = true; open++; maxOpen = Math.max(maxOpen, open); }
          tail = (tail + chunk.toString('latin1')).slice(-64);
        }
        if (!tail.endsWith('data: [DONE]\n\n')) throw new Error(`${target.name} slow stream did not end with [DONE]: …${JSON.stringify(tail)}`);
        done++;
      } finally {
        inflight--;
        if (first) open--;
      }
    }
  };
  const sampler = setInterval(() => {
    const now = performance.now();
    if (now < ramp || now >= end) return;
    try {
      const rss = rssKb(target.pid);
      if (!(rss <= peak.rssKb)) Object.assign(peak, { rssKb: rss, inflight, open });
    } catch { /* the target died: the workers will see it */ }
  }, 100);
  try {
    const workers = Array.from({ length: n }, (_, k) => worker(k).catch((err) => { failure ??= err; }));
    const all = Promise.all(workers);
    const timeout = sleep((seconds + 60) * 1000, 'timeout', { ref: false });
    if ((await Promise.race([all, timeout])) === 'timeout') {
      // A stream that failed is the cause more often than not: say it first.
      throw new Error(`${target.name}: ${inflight} slow streams still open 60 s after the end (${done} done)${failure === undefined ? '' : `; a stream failed: ${failure.message}`}`, { cause: failure });
    }
    if (failure !== undefined) throw failure;
  } finally {
    clearInterval(sampler);
    await Promise.all(pools.map((p) => p.destroy().catch(() => {})));
  }
  // Each chunk of these streams arrives on its own, unlike the fast model's burst: the CPU per
  // stream shows the per-chunk cost a real model's pace causes.
  const cpuUs = ((cpuTicks(target.pid) - ticksBefore) / ticksPerSec) * 1e6 / done;
  return { n, rssBefore, rssPeak: peak.rssKb, inflightAtPeak: peak.inflight, openAtPeak: peak.open, maxOpen, streams: done, cpuUs };
}

/** One non-streaming and one streaming request, checked field by field. */
export async function sanityCheck(target, headers) {
  const client = new Client(target.origin);
  const label = `sanity (${target.name})`;
  try {
    let res = await client.request({ method: 'POST', path: PATH, headers, body: requestBody(FAST, false) });
    await expectOk(label, res);
    const json = await res.body.json();
    if (json.object !== 'chat.completion' || json.model !== FAST || !json.choices?.[0]?.message?.content || json.usage?.total_tokens !== 36) {
      throw new Error(`${label}: unexpected answer ${JSON.stringify(json).slice(0, 500)}`);
    }
    res = await client.request({ method: 'POST', path: PATH, headers, body: requestBody(FAST, true) });
    await expectOk(label, res);
    const text = await res.body.text();
    const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => e.slice(6));
    if (events.at(-1) !== '[DONE]') throw new Error(`${label}: no [DONE] at the end: ${text.slice(-300)}`);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const content = chunks.filter((c) => c.choices?.[0]?.delta?.content).length;
    const finish = chunks.filter((c) => c.choices?.[0]?.finish_reason === 'stop').length;
    const usage = chunks.filter((c) => c.choices?.length === 0 && c.usage?.total_tokens === 44).length;
    if (content !== 20 || finish !== 1 || usage !== 1) {
      throw new Error(`${label}: ${content} content chunks, ${finish} finish, ${usage} usage chunks (want 20, 1, 1)`);
    }
  } finally {
    await client.close();
  }
}

/** `n` sequential requests on one connection (for counting what each one costs elsewhere). */
export async function sequential(target, n, headers, body) {
  const client = new Client(target.origin, { pipelining: 1, keepAliveTimeout: 60_000 });
  try {
    for (let k = 0; k < n; k++) {
      const res = await client.request({ method: 'POST', path: PATH, headers, body });
      await expectOk(`${target.name} sequential`, res);
      await res.body.dump();
    }
  } finally {
    await client.close();
  }
}

/**
 * Redis's read events, commands and per-command calls so far (one INFO command). A read event
 * is one read from a client's socket: commands sent together (pipelined) arrive in one, so
 * around sequential requests it counts the round trips each waits for (at most its commands).
 * Commands include those run inside Lua scripts.
 */
export async function redisCounters(redis) {
  const info = await redis.info('all');
  const num = (name) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? NaN);
  const commands = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) commands[m[1]] = Number(m[2]);
  return { reads: num('total_reads_processed'), commands: num('total_commands_processed'), perCommand: commands };
}

export function counterDelta(a, b) {
  const perCommand = {};
  for (const [k, v] of Object.entries(b.perCommand)) if (v - (a.perCommand[k] ?? 0) > 0) perCommand[k] = v - (a.perCommand[k] ?? 0);
  return { reads: b.reads - a.reads, commands: b.commands - a.commands, perCommand };
}
