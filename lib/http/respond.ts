// Everything that writes a whole answer: JSON bodies and the error envelope.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { envelope, type GatewayError } from '../errors.js';
import { bodyUnread, endAfterBody } from './linger.js';

/**
 * An answer given while the request's body is still arriving (an error before the body was
 * read, or a route that never reads one) closes the connection. Otherwise node:http would
 * keep reading and discarding the rest to reuse the connection, and a client trickling an
 * endless body could hold it open forever, whatever server timeouts the host app set.
 */
export function closeIfBodyUnread(res: ServerResponse, headers: Record<string, string>): Record<string, string> {
  if (bodyUnread(res.req as IncomingMessage | undefined)) headers.connection = 'close';
  return headers;
}

/**
 * Writes a whole answer. One given while the request's body is still arriving closes the
 * connection (see closeIfBodyUnread), after the rest of the body was read (linger.ts), so
 * that a client still sending reads the answer rather than a reset.
 */
export function sendWhole(res: ServerResponse, status: number, body: string | Buffer, headers: Record<string, string>): void {
  const req = res.req as IncomingMessage | undefined;
  const unread = bodyUnread(req);
  if (unread) headers.connection = 'close';
  headers['content-length'] = String(Buffer.byteLength(body));
  res.writeHead(status, headers);
  if (unread) endAfterBody(res, req, body);
  else res.end(body);
}

export function sendJson(res: ServerResponse, status: number, json: string, headers: Record<string, string>): void {
  headers['content-type'] = 'application/json';
  sendWhole(res, status, json, headers);
}

/**
 * The one function that writes an error answer: the envelope, or the body a dialect gives
 * (Anthropic's shape on /v1/messages).
 */
export function sendError(
  res: ServerResponse, err: GatewayError, requestId: string, extraHeaders?: Record<string, string>,
  body: (err: GatewayError, requestId: string) => string = envelopeJson,
): void {
  // A socket already ended (the server's clientError answer went out on it) takes nothing more.
  if (res.headersSent || res.destroyed || res.socket?.writableEnded === true) return;
  const headers: Record<string, string> = { 'x-request-id': requestId, ...extraHeaders, ...err.headers };
  sendJson(res, err.status, body(err, requestId), headers);
}

function envelopeJson(err: GatewayError, requestId: string): string {
  return JSON.stringify(envelope(err, requestId));
}
