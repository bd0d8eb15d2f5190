// An answer given while the request's body is still arriving (413 on a declared length, 401 or
// 429 on the headers, 408) closes the connection, but not at once: a socket closed with request
// bytes unread makes the kernel send a reset, which throws away the answer waiting in the
// client's receive buffer, so a client still sending gets EPIPE or ECONNRESET instead of the
// envelope. The answer is written, the rest of the body read and thrown away, and only then the
// answer ended (node:http closes a `Connection: close` socket once its answer ends). Per
// request, so it works as well inside a host app's server as in ours.
//
// Bounded: at most body_timeout_ms after the answer, and for a chunked body (no declared
// length) at most max_body_bytes more; past either the socket closes whatever is left.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { boundsOf } from './body.js';

/** Is the request's body still (partly) on its way? A request without one never is. */
export function bodyUnread(req: IncomingMessage | undefined): req is IncomingMessage {
  if (req === undefined || req.complete) return false;
  const h = req.headers;
  return h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0');
}

/**
 * Writes `body` (the whole answer: its headers are written, Content-Length among them), reads
 * and discards the rest of `req`'s body, then ends the answer.
 */
export function endAfterBody(res: ServerResponse, req: IncomingMessage, body: string | Buffer): void {
  res.write(body);
  if (res.destroyed) return;
  const bounds = boundsOf(req);
  // A declared length ends the body by itself (the parser stops there); a chunked one may not.
  let allowance = req.headers['content-length'] === undefined ? bounds.max_body_bytes : Infinity;
  const done = () => {
    clearTimeout(timer);
    req.off('data', onData);
    req.off('end', done);
    res.off('close', done);
    if (!res.writableEnded) res.end();
  };
  const onData = (chunk: Buffer) => {
    allowance -= chunk.length;
    if (allowance < 0) done();
  };
  const timer = setTimeout(done, bounds.body_timeout_ms);
  req.on('data', onData);
  req.once('end', done);
  res.once('close', done);
  req.resume();
}
