// A fast fake OpenAI-compatible upstream for bench/run.js (node:http, keep-alive).
//
//   POST /v1/chat/completions
//     non-streaming            -> a small fixed chat.completion JSON body
//     "stream": true           -> SSE: 20 content chunks, a finish chunk ("stop"), a usage chunk
//                                 (choices: [], when stream_options.include_usage is true), [DONE]
//     stream + content "hold"  -> SSE: one content chunk, then the stream is held open until the
//                                 client goes away (or BENCH_HOLD_SECONDS pass, then it finishes)
//     stream + content "hold N" -> the same, but the rest follows after N ms: the first chunk
//                                 travels alone, as with a real model, for time-to-first-byte
//
// Usage: node bench/upstream.js [port]   (port 0 = any); prints "upstream listening on PORT".

import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 0);
const HOLD_MS = Number(process.env.BENCH_HOLD_SECONDS ?? 60) * 1000;
const CHUNKS = 20;
const ID = 'chatcmpl-fakeupstream0000000000000000';
const MODEL = 'fake';

const usage = { prompt_tokens: 12, completion_tokens: CHUNKS, total_tokens: 12 + CHUNKS };

const completionBody = JSON.stringify({
  id: ID,
  object: 'chat.completion',
  created: 1700000000,
  model: MODEL,
  system_fingerprint: 'fp_bench',
  choices: [{
    index: 0,
    message: { role: 'assistant', content: 'Hello! This is a fixed answer from the fake upstream used by the Tollgate benchmark.', refusal: null },
    logprobs: null,
    finish_reason: 'stop',
  }],
  usage,
});
const completionLength = String(Buffer.byteLength(completionBody));

function chunk(delta, finishReason = null) {
  return `data: ${JSON.stringify({
    id: ID,
    object: 'chat.completion.chunk',
    created: 1700000000,
    model: MODEL,
    system_fingerprint: 'fp_bench',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  })}\n\n`;
}

// Pre-rendered frames: the upstream should cost as little as possible.
const contentFrames = [];
for (let i = 0; i < CHUNKS; i++) {
  const content = `tok${i} `;
  contentFrames.push(chunk(i === 0 ? { role: 'assistant', content } : { content }));
}
const finishFrame = chunk({}, 'stop');
const usageFrame = `data: ${JSON.stringify({
  id: ID, object: 'chat.completion.chunk', created: 1700000000, model: MODEL, system_fingerprint: 'fp_bench', choices: [], usage,
})}\n\n`;
const doneFrame = 'data: [DONE]\n\n';

const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' };

function finishStream(res, includeUsage, from) {
  for (let i = from; i < CHUNKS; i++) res.write(contentFrames[i]);
  res.write(finishFrame);
  if (includeUsage) res.write(usageFrame);
  res.end(doneFrame);
}

let held = 0;

const server = createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  if (req.method === 'GET' && req.url === '/healthz') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ status: 'ok', held }));
    return;
  }
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"not found","type":"invalid_request_error"}}');
    return;
  }
  const parts = [];
  req.on('data', (b) => parts.push(b));
  req.on('end', () => {
    let body;
    try {
      body = JSON.parse(Buffer.concat(parts).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"invalid JSON","type":"invalid_request_error"}}');
      return;
    }
    if (body.stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': completionLength });
      res.end(completionBody);
      return;
    }
    const includeUsage = body.stream_options?.include_usage === true;
    res.writeHead(200, SSE_HEADERS);
    const last = Array.isArray(body.messages) ? body.messages[body.messages.length - 1] : undefined;
    const hold = typeof last?.content === 'string' ? /^hold(?: (\d+))?$/.exec(last.content) : null;
    if (hold !== null) {
      held++;
      res.write(contentFrames[0]);
      const timer = setTimeout(() => finishStream(res, includeUsage, 1), hold[1] === undefined ? HOLD_MS : Number(hold[1]));
      res.on('close', () => { clearTimeout(timer); held--; });
      return;
    }
    finishStream(res, includeUsage, 0);
  });
});

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`upstream listening on ${server.address().port}\n`);
});

const stop = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
