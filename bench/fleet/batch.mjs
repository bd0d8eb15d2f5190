// Workload (d) of `npm run bench:fleet` (issue #43): a batch of `lines` chat requests through the
// Batch API (files.create + batches.create with the openai SDK, batches.retrieve polled every
// `pollMs`), alone or with an interactive tenant sending a Poisson stream of `rps` streamed
// requests meanwhile; or the interactive tenant alone for `seconds` (its idle TTFT). The batch's
// lines run in the admission queue's low band (CONTRACT section 18); the interactive tenant's
// plan has the default band (normal), so it goes first. Measured while the batch runs (from the
// first retrieve that shows it in_progress to the first that shows it completed): its time,
// the fleet's sequence-time over its capacity (`busy`: the servers' /stats), and the TTFT of the
// interactive requests begun in that time. Any failed line or request fails the run.

import OpenAI, { toFile } from 'openai';
import { ask, prompt, rng } from './overload.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The batch's input file: `lines` chat requests of about `promptTokens`, answers of `outputTokens`. */
function inputFile(lines, promptTokens, outputTokens, seed) {
  const next = rng(seed);
  let out = '';
  for (let i = 0; i < lines; i++) {
    const body = { model: 'sim', messages: [{ role: 'user', content: prompt(next, 700000000 + i, promptTokens) }], max_tokens: outputTokens };
    out += `${JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: '/v1/chat/completions', body })}\n`;
  }
  return Buffer.from(out);
}

/** The interactive tenant until `stop()` says so: a Poisson stream of `rps`; TTFTs of the requests begun while `measuring()`. */
async function interactive(origin, o, stop, measuring) {
  const next = rng(o.seed ^ 0x5eed);
  const ttftMs = [];
  const pending = [];
  const failures = [];
  let refused = 0;
  let at = performance.now();
  for (let i = 0; !stop(); i++) {
    at += (-Math.log(1 - next()) * 1000) / o.rps;
    await sleep(Math.max(0, at - performance.now()));
    if (stop()) break;
    const counted = measuring();
    pending.push(ask(origin, o.key, prompt(next, 900000000 + i, o.promptTokens), o.outputTokens).then((r) => {
      if (r.refused) { refused++; return; }
      if (counted) ttftMs.push(r.ttft);
    }, (err) => { failures.push(err); }));
  }
  await Promise.all(pending);
  if (failures.length > 0) throw failures[0];
  return { ttftMs, refused };
}

/**
 * One run against the gateway at `origin`: `batch` ({key, lines, promptTokens, outputTokens})
 * or null, `tenant` ({key, rps, promptTokens, outputTokens}) or null, `seconds` (the tenant
 * alone, after `warmupSeconds`), `busy()` the fleet's sequence-ms run so far.
 */
export async function runBatchWorkload({ origin, batch, tenant, seconds, warmupSeconds, seed, busy, upstreams, pollMs = 100 }) {
  let running = false;
  let over = false;
  const marks = {};
  // The gateway's requests in flight to the replicas and waiting in its queue, sampled while the batch runs.
  const samples = { outstanding: [], queued: [] };
  const sampler = (async () => {
    while (!over) {
      if (running) {
        const view = await upstreams();
        samples.outstanding.push(view.replicas.reduce((a, r) => a + r.outstanding, 0));
        samples.queued.push(view.queued);
      }
      await sleep(250);
    }
  })();
  const mean = (xs) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);
  const load = tenant === null ? Promise.resolve({ ttftMs: [], refused: 0 })
    : interactive(origin, { ...tenant, seed }, () => over, () => running);
  if (batch === null) {
    // The gateway's first requests load its tokenizer: not counted.
    await sleep(warmupSeconds * 1000);
    marks.start = await busy();
    running = true;
    await sleep(seconds * 1000);
    running = false;
    marks.end = await busy();
    over = true;
    const r = await load;
    await sampler;
    return { seconds: (marks.end.at - marks.start.at) / 1000, busySeqMs: marks.end.seqMs - marks.start.seqMs, ttftMs: r.ttftMs, refused: r.refused, outstanding: 0, queued: 0 };
  }
  try {
    const client = new OpenAI({ apiKey: batch.key, baseURL: `${origin}/v1`, maxRetries: 0, timeout: 600_000 });
    const file = await client.files.create({ file: await toFile(inputFile(batch.lines, batch.promptTokens, batch.outputTokens, seed), 'bench.jsonl'), purpose: 'batch' });
    let b = await client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { bench: 'fleet' } });
    for (;;) {
      if (b.status === 'in_progress' && !running) { marks.start = await busy(); running = true; }
      if (['completed', 'failed', 'expired', 'cancelled'].includes(b.status)) break;
      await sleep(pollMs);
      b = await client.batches.retrieve(b.id);
    }
    running = false;
    marks.end = await busy();
    if (b.status !== 'completed') throw new Error(`the batch ended ${b.status}: ${JSON.stringify(b.errors ?? null).slice(0, 300)}`);
    if (marks.start === undefined) throw new Error('the batch was never seen in progress (poll faster)');
    if (b.request_counts.failed > 0) throw new Error(`${b.request_counts.failed} of the batch's lines failed`);
    over = true;
    const r = await load;
    await sampler;
    return {
      seconds: (marks.end.at - marks.start.at) / 1000, busySeqMs: marks.end.seqMs - marks.start.seqMs, lines: b.request_counts.completed,
      ttftMs: r.ttftMs, refused: r.refused, outstanding: mean(samples.outstanding), queued: mean(samples.queued),
    };
  } finally {
    over = true;
    running = false;
    await load.catch(() => undefined);
    await sampler.catch(() => undefined);
  }
}
