// A fake OpenAI-compatible model server on a real socket. Each test scripts its answers with
// raw control of the wire: split writes, CRLF, comments, pauses, resets. It records every
// request and whether the gateway aborted it.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { httpHandler } from './async-handler.js';

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: any;
  /** The body's bytes as received (a multipart body's file is binary). */
  raw: Buffer;
  /** Set when the client closed the connection before the answer ended. */
  aborted: boolean;
  abortedAt?: number;
}

export type Script = (req: IncomingMessage, res: ServerResponse, body: any, seen: SeenRequest) => void | Promise<void>;

export interface FakeUpstream {
  url: string;
  baseUrl: string;
  requests: SeenRequest[];
  setScript(script: Script): void;
  /** Open client connections (keep-alive sockets included). */
  connections(): Promise<number>;
  close(): Promise<void>;
}

/**
 * `props`: the script answers GET /props too (a llama.cpp fake). Otherwise the fake answers it
 * 404 without recording it, as vLLM and other OpenAI-compatible servers do: the question every
 * openai provider asks as it starts (is this llama.cpp's server?) is no part of what a test counts.
 */
export async function startUpstream(script: Script, opts: { props?: boolean; host?: string; port?: number } = {}): Promise<FakeUpstream> {
  let current = script;
  const requests: SeenRequest[] = [];
  const server: Server = createServer(httpHandler(async (req, res) => {
    if (opts.props !== true && req.method === 'GET' && req.url === '/props') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"detail":"Not Found"}');
      return;
    }
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const bytes = Buffer.concat(chunks);
    const raw = bytes.toString();
    let body: any = raw;
    try { body = JSON.parse(raw); } catch { /* not JSON */ }
    const seen: SeenRequest = { method: req.method!, url: req.url!, headers: req.headers, body, raw: bytes, aborted: false };
    requests.push(seen);
    res.on('close', () => {
      if (!res.writableFinished) { seen.aborted = true; seen.abortedAt = Date.now(); }
    });
    try {
      await current(req, res, body, seen);
    } catch {
      res.destroy();
    }
  }));
  server.keepAliveTimeout = 5000;
  // `host`/`port`: several replicas on one port, each on its own loopback address (127.0.0.2, ...).
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((r, j) => { server.once('error', j); server.listen(opts.port ?? 0, host, () => { server.off('error', j); r(); }); });
  const { port } = server.address() as AddressInfo;
  const url = `http://${host}:${port}`;
  return {
    url,
    baseUrl: `${url}/v1`,
    requests,
    setScript(s) { current = s; },
    connections: () => new Promise((r, j) => server.getConnections((err, n) => (err ? j(err) : r(n)))),
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

export function completionBody(content: string | null, extra: Record<string, any> = {}): any {
  return {
    id: 'cmpl-upstream-1',
    object: 'chat.completion',
    created: 1700000000,
    model: 'internal/model-7b',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop', logprobs: null }],
    usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
    ...extra,
  };
}

export function chunk(delta: Record<string, any>, finish: string | null = null, extra: Record<string, any> = {}): any {
  return {
    id: 'cmpl-upstream-1', object: 'chat.completion.chunk', created: 1700000000, model: 'internal/model-7b',
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }], ...extra,
  };
}

/** Frames for a whole streamed answer: role, words, finish, usage, [DONE]. */
export function streamFrames(words: string[], usage = { prompt_tokens: 12, completion_tokens: words.length, total_tokens: 12 + words.length }): string[] {
  return [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\n`,
    ...words.map((w) => `data: ${JSON.stringify(chunk({ content: w }))}\n\n`),
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    `data: ${JSON.stringify({ ...chunk({}), choices: [], usage })}\n\n`,
    'data: [DONE]\n\n',
  ];
}

/** Writes an SSE answer, each frame in pieces of `split` bytes, pausing `pauseMs` between. */
export async function writeSse(res: ServerResponse, frames: string[], opts: { split?: number; pauseMs?: number; crlf?: boolean; end?: boolean } = {}): Promise<void> {
  if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': 'up-123', 'set-cookie': 'secret=1' });
  for (const f of frames) {
    const text = opts.crlf ? f.replace(/\n/g, '\r\n') : f;
    const bytes = Buffer.from(text);
    const step = opts.split ?? bytes.length;
    for (let i = 0; i < bytes.length; i += step) {
      if (res.destroyed) return;
      res.write(bytes.subarray(i, i + step));
      if (opts.pauseMs) await sleep(opts.pauseMs);
    }
  }
  if (opts.end !== false) res.end();
}

export function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(text);
}
