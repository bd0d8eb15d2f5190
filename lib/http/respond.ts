// Everything that writes a whole answer: JSON bodies and the error envelope. Also the
// per-request context that the access log and metrics read when the answer is done.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Principal } from '../auth/principal.js';
import type { Charge } from '../billing/meter.js';
import type { Usage } from '../chat/types.js';
import type { GatewayState } from '../state.js';
import type { Dialect } from '../dialects/types.js';
import type { RequestSpan } from '../observe/trace.js';
import { envelope, type GatewayError } from '../errors.js';
import { merged } from '../objects.js';
import { bodyUnread, endAfterBody } from './linger.js';

export interface RequestContext {
  readonly id: string;
  readonly start: number;
  route: string;
  principal: Principal | undefined;
  model: string | undefined;
  provider: string | undefined;
  upstreamModel: string | undefined;
  stream: boolean;
  code: string;
  usage: Usage | undefined;
  usageSource: 'upstream' | 'counted' | undefined;
  /** x-ratelimit-* headers for the answer, once the account is known. */
  rateHeaders: Record<string, string> | undefined;
  /** The request's credit hold, once admitted. */
  charge: Charge | undefined;
  upstreamMs: number | undefined;
  ttfcMs: number | undefined;
  /** From the request's arrival to the first byte of the answer's content (usage records). */
  ttftMs: number | undefined;
  /**
   * The replica the request went to, for usage records: the provider's base_url until fleets
   * name replicas (null: none applies, as for echo); undefined before any upstream call.
   */
  target: string | null | undefined;
  /** Headers every upstream call of this request carries (traceparent when tracing). */
  upstreamHeaders: Record<string, string> | undefined;
  /** The model the client asked for (before `auto` or aliases resolved). */
  requestModel: string | undefined;
  /** The request's span, when tracing is on. */
  span: RequestSpan | undefined;
  /** The config state the request runs on, once pinned (a reload leaves it in force for it). */
  state: GatewayState | undefined;
  /** The dialect of the route, whose shape errors take; undefined: the envelope. */
  dialect: Dialect | undefined;
}

export function newContext(id: string, route: string): RequestContext {
  return {
    id, start: performance.now(), route, principal: undefined, model: undefined, provider: undefined, upstreamModel: undefined,
    stream: false, code: '', usage: undefined, usageSource: undefined, charge: undefined, rateHeaders: undefined, upstreamMs: undefined, ttfcMs: undefined,
    ttftMs: undefined, target: undefined, upstreamHeaders: undefined, requestModel: undefined, span: undefined, state: undefined, dialect: undefined,
  };
}

/**
 * A successful answer's headers: `own`'s in order (fixed headers, those forwarded from the
 * upstream's answer), then the request's x-ratelimit-* headers, its x-request-id and, for a
 * metered request, what it was charged and what the wallet has left. Built without a
 * spread-first literal (see objects.ts); the caller may add more.
 */
export function answerHeaders(ctx: RequestContext, ...own: Array<Record<string, string> | undefined>): Record<string, string> {
  const headers: Record<string, string> = merged(...own, ctx.rateHeaders);
  headers['x-request-id'] = ctx.id;
  const charge = ctx.charge;
  // Unmetered (store.on_error: open during an outage): no balance is known, none is claimed.
  if (charge?.charged !== undefined) headers['x-tollgate-units-charged'] = String(charge.charged);
  if (charge?.available !== undefined) headers['x-tollgate-wallet-balance-units'] = String(charge.available);
  return headers;
}

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
export function sendWhole(res: ServerResponse, status: number, body: string, headers: Record<string, string>): void {
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
