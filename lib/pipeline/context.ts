// The per-request context: what the request became as it went (its principal, model,
// provider, usage, charge...), read by the answer's headers and, once the answer is closed, by
// the access log, metrics, span and usage record (./finish.ts). The config state a request runs
// on is not part of it: the gateway pins that and hands it down.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Principal } from '../auth/principal.js';
import type { Charge } from '../billing/meter.js';
import type { Usage } from '../hub/chat.js';
import type { Dialect } from '../dialects/types.js';
import type { RequestSpan } from '../observe/trace.js';
import { merged } from '../objects.js';
import type { Attribution } from '../auth/attribution.js';
import type { Metrics } from '../observe/metrics.js';
import type { GatewayState } from '../state.js';

/**
 * One request as the pipeline serves it, handed down whole instead of five parameters: the
 * config state pinned for it, the gateway's metrics, its context, its HTTP request and answer.
 * Made once per /v1 request (routes/index.ts).
 */
export interface Exchange {
  readonly state: GatewayState;
  readonly metrics: Metrics;
  readonly ctx: RequestContext;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
}

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
  /** Time spent waiting in providers' queues (ms); undefined when none of its providers has one. */
  queueMs: number | undefined;
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
  /** The dialect of the route, whose shape errors take; undefined: the envelope. */
  dialect: Dialect | undefined;
  /** The request's tags and end user (CONTRACT section 20), once admitted. */
  attribution: Attribution | undefined;
  /** An MCP tools/call's tool as `<server>__<tool>` (CONTRACT section 17); undefined otherwise. */
  tool?: string;
}

export function newContext(id: string, route: string): RequestContext {
  return {
    id, start: performance.now(), route, principal: undefined, model: undefined, provider: undefined, upstreamModel: undefined,
    stream: false, code: '', usage: undefined, usageSource: undefined, charge: undefined, rateHeaders: undefined, upstreamMs: undefined, queueMs: undefined, ttfcMs: undefined,
    ttftMs: undefined, target: undefined, upstreamHeaders: undefined, requestModel: undefined, span: undefined, dialect: undefined,
    attribution: undefined,
  };
}

/**
 * A successful answer's headers: `own`'s in order (fixed headers, those forwarded from the
 * upstream's answer), then the request's x-ratelimit-* headers, its x-request-id and, for a
 * metered request, what it was charged and what the wallet has left, and its time queued. Built without a
 * spread-first literal (see objects.ts); the caller may add more.
 */
export function answerHeaders(ctx: RequestContext, ...own: Array<Record<string, string> | undefined>): Record<string, string> {
  const headers: Record<string, string> = merged(...own, ctx.rateHeaders);
  headers['x-request-id'] = ctx.id;
  const charge = ctx.charge;
  // Unmetered (store.on_error: open during an outage): no balance is known, none is claimed.
  if (charge?.charged !== undefined) headers['x-tollgate-units-charged'] = String(charge.charged);
  if (charge?.available !== undefined) headers['x-tollgate-wallet-balance-units'] = String(charge.available);
  // Behind a provider with a queue (CONTRACT section 13): how long the request waited in it.
  if (ctx.queueMs !== undefined) headers['x-tollgate-queue-ms'] = String(Math.round(ctx.queueMs));
  return headers;
}

