// Workload (c) of `npm run bench:fleet` (issue #31): an overloaded fleet shared by two tenants.
// A batch tenant runs `batchClients` closed-loop clients (each sends its next request as soon as
// the last one ended: about 4x the sequences the fleet can run at once), with short prompts and
// long answers; an interactive tenant sends requests at `interactiveRps` (a Poisson stream,
// about 10% of what the fleet serves), longer prompts and short answers, and its time to first
// token is what it feels. Run against the same fleet with no batch tenant (idle), with no queue,
// and with Tollgate's queue (fairness, then fairness and priority), the interactive tenant's
// TTFT shows what the queue buys it, and the batch tenant's throughput what it costs.
// Also the queue's own CPU per request with 1,000 waiting (measureQueueCpu), on the built code.

import { request } from 'undici';

/** xorshift32: a small seeded generator. */
export function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

const VOCAB = 'time people year way day thing man world life hand part child eye woman place work week case point government company number group problem fact'.split(' ');

/** A prompt of about `tokens` tokens (4 characters each) that shares no prefix with another. */
export function prompt(next, i, tokens) {
  let out = `${i}-${Math.floor(next() * 1e9).toString(36)}`;
  while (out.length < tokens * 4) out += ` ${VOCAB[Math.floor(next() * VOCAB.length)]}`;
  return out;
}

/** One streamed request; resolves with the time to its first body byte, or the refusal's code. */
export async function ask(origin, key, content, maxTokens) {
  const t0 = performance.now();
  const res = await request(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content }], max_tokens: maxTokens, stream: true }),
    headersTimeout: 300_000, bodyTimeout: 300_000,
  });
  let ttft;
  let raw = '';
  for await (const chunk of res.body) {
    ttft ??= performance.now() - t0;
    raw += chunk.toString('utf8');
  }
  if (res.statusCode === 503 && raw.includes('model_overloaded')) return { refused: true };
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${raw.slice(0, 300)}`);
  if (!raw.includes('data: [DONE]')) throw new Error(`stream without [DONE]: ${raw.slice(-300)}`);
  return { ttft };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs both tenants for `warmupSeconds` + `seconds`; `onWindow('start' | 'end')` is called as the
 * measured window opens and closes. Counts requests finished in the window per tenant, and the
 * interactive TTFT of those begun in it.
 */
export async function runOverload({ origin, batchKey, interactiveKey, batchClients, interactiveRps, warmupSeconds, seconds, batch, interactive, seed, onWindow }) {
  const t0 = performance.now();
  const from = t0 + warmupSeconds * 1000;
  const end = from + seconds * 1000;
  const out = { batchDone: 0, batchRefused: 0, interactiveDone: 0, interactiveRefused: 0, ttftMs: [] };
  const windows = [sleep(warmupSeconds * 1000).then(() => onWindow?.('start')), sleep((warmupSeconds + seconds) * 1000).then(() => onWindow?.('end'))];
  const inWindow = (t) => t >= from && t <= end;

  const batchClient = async (c) => {
    const next = rng(seed ^ Math.imul(c + 1, 0x9e3779b1));
    await sleep((c * 1000) / Math.max(1, batchClients));
    for (let i = 0; performance.now() < end; i++) {
      const r = await ask(origin, batchKey, prompt(next, c * 100000 + i, batch.promptTokens), batch.outputTokens);
      if (r.refused) { out.batchRefused++; await sleep(100); continue; }
      if (inWindow(performance.now())) out.batchDone++;
    }
  };
  const interactiveStream = async () => {
    const next = rng(seed ^ 0x5eed);
    const pending = [];
    const failures = [];
    let at = performance.now();
    for (let i = 0; ; i++) {
      at += (-Math.log(1 - next()) * 1000) / interactiveRps;
      if (at >= end) break;
      await sleep(Math.max(0, at - performance.now()));
      const begun = performance.now();
      pending.push(ask(origin, interactiveKey, prompt(next, 900000000 + i, interactive.promptTokens), interactive.outputTokens).then((r) => {
        if (r.refused) { out.interactiveRefused++; return; }
        if (begun >= from && begun < end) out.ttftMs.push(r.ttft);
        if (inWindow(performance.now())) out.interactiveDone++;
      }, (err) => { failures.push(err); }));
    }
    await Promise.all(pending);
    if (failures.length > 0) throw failures[0];
  };
  await Promise.all([...Array.from({ length: batchClients }, (_v, c) => batchClient(c)), interactiveStream(), ...windows]);
  return out;
}

/**
 * The queue's CPU per request with `waiting` requests queued, in steady state: each step one
 * replica ends a request (the first in line is dispatched to it) and one more arrives, over
 * `accounts` accounts. Measured on the built ProviderQueue (dist/), promise and timer included.
 */
export async function measureQueueCpu(root, { waiting = 1000, steps = 20000, accounts = 50 } = {}) {
  const { ProviderQueue } = await import(`${root}/dist/lib/upstream/balance/queue.js`);
  const { Replica } = await import(`${root}/dist/lib/upstream/balance/replica.js`);
  const replica = new Replica('http://sim/v1');
  replica.maxOutstanding = 1;
  const q = new ProviderQueue('sim');
  q.config = { max_wait_ms: 600_000, max_queued: waiting * 2, fairness: 'account' };
  const pick = () => (replica.usable(Date.now()) ? replica : undefined);
  let n = 0;
  const enqueue = () => {
    n++;
    void q.wait({ flow: `a${n % accounts}`, priority: n % 10 === 0 ? 'high' : 'normal', cost: 100 + (n % 7) * 50, weight: 1, home: undefined, pick, waitMs: 600_000 }).result;
  };
  for (let i = 0; i <= waiting; i++) enqueue();
  const step = () => { replica.end(0, 'success', false, null); q.drain(); enqueue(); };
  for (let i = 0; i < 2000; i++) step();
  await sleep(0);
  const before = process.cpuUsage();
  for (let i = 0; i < steps; i++) step();
  const cpu = process.cpuUsage(before);
  const us = (cpu.user + cpu.system) / steps;
  // Let the resolved waits settle, then empty the queue.
  await sleep(0);
  for (let i = 0; i < waiting + 2; i++) { replica.end(0, 'success', false, null); q.drain(); }
  return { waiting, cpuUsPerRequest: us };
}
