// A simulated model server for `npm run bench:fleet`: an OpenAI-compatible chat endpoint that
// behaves like vLLM where it matters for routing, with simulated time in place of a GPU.
//
//   - At most MAX_SEQS sequences run at once; the others wait in a FIFO queue.
//   - A prefix cache of CACHE_TOKENS tokens, kept as hashes of BLOCK-token blocks of the prompt
//     (each block's hash chains the one before, as vLLM's automatic prefix caching does), with
//     LRU eviction. A prompt's cached part is its longest run of leading blocks in the cache.
//     As in vLLM, a sequence's blocks are released tail first, so among blocks used together
//     the tail is evicted before the head it depends on.
//   - Prefill is compute-bound, so prefills run one at a time: PREFILL_US microseconds per
//     prompt token NOT found in the cache. Then DECODE_MS per output token, all running
//     sequences in parallel. Tokens are taken as 4 characters.
//   - GET /metrics in vLLM's names (queue, running, KV-cache use, prefix-cache queries and hits).
//     As vLLM's scheduler counts it, `vllm:num_requests_waiting` is every request not started
//     yet: those queued for a sequence and those whose prefill has not begun (behind another's
//     prefill), so a replica that is not full can show a short queue while prefills line up;
//     GET /v1/models for health checks; POST /reset empties the cache and the counters;
//     GET /stats the counters and the sequence-milliseconds run so far (busy_seq_ms: utilisation).
//
// The answer is a deterministic function of the prompt, so a multi-turn conversation is the
// same request stream whichever replica serves it.
//
// Usage: node bench/fleet/server.mjs --port N [--name r0] [--max-seqs 4] [--prefill-us 150]
//        [--decode-ms 8] [--cache-tokens 48000] [--block 16]; prints "listening on URL".

import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    name: { type: 'string', default: 'sim' },
    'max-seqs': { type: 'string', default: '4' },
    'prefill-us': { type: 'string', default: '150' },
    'decode-ms': { type: 'string', default: '8' },
    'cache-tokens': { type: 'string', default: '48000' },
    block: { type: 'string', default: '16' },
  },
});
const MAX_SEQS = Number(opt['max-seqs']);
const PREFILL_US = Number(opt['prefill-us']);
const DECODE_MS = Number(opt['decode-ms']);
const BLOCK = Number(opt.block);
const CACHE_BLOCKS = Math.floor(Number(opt['cache-tokens']) / BLOCK);
const CHARS_PER_TOKEN = 4;
const BLOCK_CHARS = BLOCK * CHARS_PER_TOKEN;
/** Output tokens per streamed chunk: fewer frames, the same timing. */
const TOKENS_PER_CHUNK = 8;

/** Block hash -> true, in LRU order (oldest first). */
let cache = new Map();
let counters = { queries: 0, hits: 0, requests: 0 };
const waiting = [];
let running = 0;
/** Sequence-milliseconds of running sequences since the last reset, up to `busyAt` (utilisation). */
let busyMs = 0;
let busyAt = Date.now();
function account() {
  const now = Date.now();
  busyMs += running * (now - busyAt);
  busyAt = now;
}
let prefillFreeAt = 0;
/** When each admitted request's prefill begins (those still ahead count as waiting in /metrics). */
let prefillStarts = [];
function prefillWaiting() {
  const now = Date.now();
  prefillStarts = prefillStarts.filter((at) => at > now);
  return prefillStarts.length;
}

function fnv(h, text, from, to) {
  for (let i = from; i < to; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The prompt as a chat template would lay it out. */
function promptText(messages) {
  let out = '';
  for (const m of messages) {
    const content = typeof m.content === 'string' ? m.content : Array.isArray(m.content) ? m.content.map((p) => p.text ?? '').join('') : '';
    out += `<|${m.role}|>\n${content}<|end|>\n`;
  }
  return `${out}<|assistant|>\n`;
}

/** Hashes of the prompt's full blocks, each chained to the one before. */
function blockHashes(text) {
  const hashes = [];
  let h = 0x811c9dc5;
  for (let end = BLOCK_CHARS; end <= text.length; end += BLOCK_CHARS) {
    h = fnv(h, text, end - BLOCK_CHARS, end);
    hashes.push(h);
  }
  return hashes;
}

/** Tokens of the prompt found in the cache (leading blocks). */
function lookup(hashes) {
  let n = 0;
  while (n < hashes.length && cache.has(hashes[n])) n++;
  return n * BLOCK;
}

/** The prompt's blocks, most recently used now; the head last, so it is evicted last. */
function insert(hashes) {
  for (let i = hashes.length - 1; i >= 0; i--) {
    cache.delete(hashes[i]);
    cache.set(hashes[i], true);
  }
  while (cache.size > CACHE_BLOCKS) cache.delete(cache.keys().next().value);
}

/** A deterministic answer of `n` tokens (4-character words) for this prompt. */
function answer(text, n) {
  let s = fnv(0x811c9dc5, text, 0, text.length) || 1;
  const words = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    words.push(` ${String.fromCharCode(97 + (s % 26), 97 + ((s >>> 5) % 26), 97 + ((s >>> 10) % 26))}`);
  }
  return words;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function admit() {
  while (running < MAX_SEQS && waiting.length > 0) {
    const job = waiting.shift();
    if (job.gone) continue;
    account();
    running++;
    job.start();
  }
}

async function serve(job) {
  const { res, text, n, stream, promptTokens } = job;
  const hashes = blockHashes(text);
  const cached = Math.min(lookup(hashes), promptTokens);
  counters.queries += promptTokens;
  counters.hits += cached;
  const begin = Math.max(Date.now(), prefillFreeAt);
  if (begin > Date.now()) prefillStarts.push(begin);
  prefillFreeAt = begin + ((promptTokens - cached) * PREFILL_US) / 1000;
  await sleep(prefillFreeAt - Date.now());
  insert(hashes);
  const words = answer(text, n);
  const id = `cmpl-${job.seq}`;
  const usage = { prompt_tokens: promptTokens, completion_tokens: n, total_tokens: promptTokens + n, prompt_tokens_details: { cached_tokens: cached } };
  if (!stream) {
    await sleep(n * DECODE_MS);
    if (job.gone) return;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id, object: 'chat.completion', created: 0, model: job.model, choices: [{ index: 0, message: { role: 'assistant', content: words.join('') }, finish_reason: 'length' }], usage }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const frame = (delta, finish = null, extra = {}) => `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 0, model: job.model, choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;
  // The first token comes out of the prefill's last step.
  res.write(frame({ role: 'assistant', content: words[0] }));
  for (let i = 1; i < n && !job.gone; i += TOKENS_PER_CHUNK) {
    const piece = words.slice(i, i + TOKENS_PER_CHUNK);
    await sleep(piece.length * DECODE_MS);
    res.write(frame({ content: piece.join('') }));
  }
  if (job.gone) return;
  res.write(frame({}, 'length'));
  res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 0, model: job.model, choices: [], usage })}\n\n`);
  res.end('data: [DONE]\n\n');
}

function metrics() {
  const m = `model_name="${opt.name}"`;
  return [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    `vllm:num_requests_running{${m}} ${running - prefillWaiting()}`,
    '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
    '# TYPE vllm:num_requests_waiting gauge',
    `vllm:num_requests_waiting{${m}} ${waiting.filter((j) => !j.gone).length + prefillWaiting()}`,
    '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.',
    '# TYPE vllm:kv_cache_usage_perc gauge',
    `vllm:kv_cache_usage_perc{${m}} ${(cache.size / CACHE_BLOCKS).toFixed(4)}`,
    '# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.',
    '# TYPE vllm:prefix_cache_queries_total counter',
    `vllm:prefix_cache_queries_total{${m}} ${counters.queries}`,
    '# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.',
    '# TYPE vllm:prefix_cache_hits_total counter',
    `vllm:prefix_cache_hits_total{${m}} ${counters.hits}`,
    '# HELP vllm:request_success_total Count of successfully processed requests.',
    '# TYPE vllm:request_success_total counter',
    `vllm:request_success_total{${m}} ${counters.requests}`,
    '',
  ].join('\n');
}

let seq = 0;
const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  if (req.method === 'GET' && req.url === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(metrics());
    return;
  }
  if (req.method === 'GET' && req.url === '/v1/models') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ object: 'list', data: [{ id: 'sim', object: 'model', max_model_len: 32768 }] }));
    return;
  }
  if (req.method === 'GET' && req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' });
    account();
    res.end(JSON.stringify({ ...counters, cached_blocks: cache.size, running, waiting: waiting.length, busy_seq_ms: busyMs, max_seqs: MAX_SEQS, at: busyAt }));
    return;
  }
  if (req.method === 'POST' && req.url === '/reset') {
    cache = new Map();
    counters = { queries: 0, hits: 0, requests: 0 };
    res.writeHead(204).end();
    return;
  }
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
    return;
  }
  let body;
  try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { body = undefined; }
  if (!body || !Array.isArray(body.messages)) {
    res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"bad request"}}');
    return;
  }
  const text = promptText(body.messages);
  const job = {
    seq: ++seq, res, text, model: body.model, stream: body.stream === true, gone: false,
    n: Math.max(1, Math.min(Number(body.max_tokens) || 16, 4096)),
    promptTokens: Math.ceil(text.length / CHARS_PER_TOKEN),
  };
  res.on('close', () => { if (!res.writableFinished) job.gone = true; });
  await new Promise((resolve) => { job.start = resolve; waiting.push(job); admit(); });
  try {
    await serve(job);
    if (!job.gone) counters.requests++;
  } catch {
    if (!res.destroyed) res.destroy();
  } finally {
    account();
    running--;
    admit();
  }
});
server.keepAliveTimeout = 60_000;
server.listen(Number(opt.port), opt.host, () => {
  process.stdout.write(`listening on http://${opt.host}:${server.address().port}\n`);
});
process.on('SIGTERM', () => { server.closeAllConnections(); server.close(() => process.exit(0)); });
