#!/usr/bin/env node
// The bench's own fake upstream for POST /v1/completions (the legacy completions route, issue
// #32): the shared one (../shared/bench/upstream.mjs, not ours to change) serves only chat. It
// answers the way that one answers chat, so the two CPU rows compare the routes and not the
// upstreams: one fixed, pre-serialised text_completion of the same size and shape class (the
// same reply text, id, fingerprint, one choice, usage 24 + 12), Content-Length, keep-alive.
// Non-streaming only: the bench's completions figure is per non-streaming request.
//
//   node completions-upstream.mjs [--host 127.0.0.1] [--port 18002]
//
// POST /v1/completions   the text_completion (model echoed from the request)
// GET  /healthz          200 ok
// GET  /_stats           request counters (JSON)
//
// Prints `upstream listening on http://HOST:PORT` when ready. SIGTERM/SIGINT: exit 0.
import http from 'node:http';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const HOST = arg('host', '127.0.0.1');
const PORT = Number(arg('port', 18002));
const CREATED = 1700000000;
const PROMPT_TOKENS = 24;

const stats = { completions: 0, other: 0, bad: 0 };

const cache = new Map();
function answer(model) {
  let b = cache.get(model);
  if (!b) {
    b = Buffer.from(JSON.stringify({
      id: 'cmpl-bench000000000000000001',
      object: 'text_completion',
      created: CREATED,
      model,
      system_fingerprint: 'fp_bench',
      choices: [{ text: 'Hello! This is a fixed reply from the benchmark upstream.', index: 0, logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: PROMPT_TOKENS, completion_tokens: 12, total_tokens: PROMPT_TOKENS + 12 },
    }));
    if (cache.size < 1000) cache.set(model, b);
  }
  return b;
}

function sendJson(res, status, buf) {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': buf.length });
  res.end(buf);
}

function sendError(res, status, message) {
  stats.bad++;
  sendJson(res, status, Buffer.from(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } })));
}

function handle(res, raw) {
  let body;
  try { body = JSON.parse(raw); } catch { return sendError(res, 400, 'invalid JSON body'); }
  if (!body || (typeof body.prompt !== 'string' && !Array.isArray(body.prompt))) return sendError(res, 400, 'prompt is required');
  if (body.stream) return sendError(res, 400, 'this bench upstream does not stream');
  stats.completions++;
  sendJson(res, 200, answer(typeof body.model === 'string' ? body.model : 'bench-model'));
}

const server = http.createServer((req, res) => {
  const url = req.url;
  if (req.method === 'POST' && (url === '/v1/completions' || url.startsWith('/v1/completions?'))) {
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => handle(res, parts.length === 1 ? parts[0] : Buffer.concat(parts)));
    return;
  }
  if (req.method === 'GET' && url === '/healthz') return sendJson(res, 200, Buffer.from('{"ok":true}'));
  if (req.method === 'GET' && url === '/_stats') return sendJson(res, 200, Buffer.from(JSON.stringify(stats)));
  stats.other++;
  req.resume();
  sendError(res, 404, `unknown path ${req.method} ${url}`);
});
// As the shared upstream: longer than any proxy's idle keep-alive, so the gateway closes first.
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;
server.requestTimeout = 0;
server.maxRequestsPerSocket = 0;
server.listen({ host: HOST, port: PORT, backlog: 4096 }, () => {
  console.log(`upstream listening on http://${HOST}:${server.address().port}`);
});
const stop = () => { server.close(); server.closeAllConnections?.(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
