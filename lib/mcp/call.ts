// A tools/call is a metered request (CONTRACT section 17), on the pieces every /v1 route uses:
// the key's and plan's requests_per_minute and max_concurrent (limits/: HTTP 429 with
// Retry-After), `per_call_units` held before the call against key, team and account budgets
// and the wallet (billing/meter.ts), settled once the server answered (an answer with
// `isError: true` included: the tool ran) and released when it did not (unreachable, timed
// out, a transport error, a JSON-RPC error: nothing ran). The usage record, metrics and span
// are written by pipeline/finish.ts from the request's context.

import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { holdUnits } from '../billing/meter.js';
import { GatewayError } from '../errors.js';
import type { Metrics } from '../observe/metrics.js';
import type { RequestContext } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import { McpRpcError, McpUnavailableError, type McpUpstream } from '../providers/mcp/client.js';
import { RPC, RpcError } from './jsonrpc.js';

/** After the call's timeout, the hold outlives a settle whose outcome must be learned, and this. */
const HOLD_SLACK_MS = 60_000;
const ZERO_PRICE = Object.freeze({ input_per_mtok: 0, output_per_mtok: 0 });
const NO_TOKENS = Object.freeze({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });

/** The refusals for money, answered as JSON-RPC errors with HTTP 200 (the rest keep their HTTP status). */
const MONEY: ReadonlySet<string> = new Set(['insufficient_credits', 'budget_exceeded', 'quota_exceeded']);

/** A GatewayError of the metering as the JSON-RPC error the client gets: `data` as the /v1 error's fields. */
export function meteringError(err: GatewayError, requestId: string): RpcError {
  const data: Record<string, unknown> = { code: err.code, request_id: requestId };
  if (err.extras !== undefined) Object.assign(data, err.extras);
  return new RpcError(RPC.server, err.message, { data, status: MONEY.has(err.code) ? 200 : err.status, headers: err.headers });
}

/** The JSON-RPC error for a server that could not be reached, timed out or failed in transport. */
export function unavailable(server: string, requestId: string): RpcError {
  return new RpcError(RPC.server, `The MCP server '${server}' is unavailable; nothing was charged.`, {
    data: { code: 'upstream_unavailable', request_id: requestId },
  });
}

/**
 * Calls `tool` of `upstream` for the request's principal, metered; returns the server's result.
 * `params`: what is forwarded (the checked name, arguments and _meta, nothing else).
 */
export async function meteredCall(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse, upstream: McpUpstream, tool: string, params: Record<string, unknown>,
): Promise<Record<string, unknown> | undefined> {
  const principal = ctx.principal!;
  const server = upstream.name;
  const units = upstream.config.tools[tool]?.per_call_units ?? upstream.config.price.per_call_units;
  ctx.provider = server;
  ctx.model = `${server}__${tool}`;
  ctx.tool = ctx.model;
  ctx.target = upstream.config.url;
  let grant: Awaited<ReturnType<GatewayState['limits']['admit']>>;
  try {
    state.limits.gate(principal);
    grant = await state.limits.admit(principal, 1);
  } catch (err) {
    throw err instanceof GatewayError ? meteringError(err, ctx.id) : err;
  }
  ctx.rateHeaders = grant.headers;
  res.once('close', () => queueMicrotask(grant.release));
  if (res.destroyed) {
    grant.release();
    grant.correct(0);
    return undefined;
  }
  const asked = Date.now();
  const ttl = upstream.config.timeout_ms * 2 + state.config.store.settle_wait_ms + HOLD_SLACK_MS;
  let charge;
  try {
    charge = await holdUnits(state.store, principal, randomUUID(), BigInt(units), ZERO_PRICE, ttl, state.openMode);
  } catch (err) {
    grant.cancel();
    throw err instanceof GatewayError ? meteringError(err, ctx.id) : err;
  }
  ctx.charge = charge;
  charge.alerts = state.alerts;
  if (charge.held) state.auth.held(principal, asked);
  let outcome = 'ok';
  const sent = performance.now();
  try {
    const result = await upstream.call(params);
    ctx.upstreamMs = performance.now() - sent;
    if (result.isError === true) outcome = 'tool_error';
    try {
      await charge.settle(NO_TOKENS, BigInt(units));
    } catch (err) {
      outcome = 'store_error';
      throw err instanceof GatewayError ? meteringError(err, ctx.id) : err;
    }
    return result;
  } catch (err) {
    if (err instanceof McpUnavailableError) {
      outcome = 'unavailable';
      ctx.code = 'upstream_unavailable';
      throw unavailable(server, ctx.id);
    }
    if (err instanceof McpRpcError) {
      outcome = 'rpc_error';
      throw new RpcError(err.code, err.message, { data: err.data });
    }
    throw err;
  } finally {
    if (!charge.settled) await charge.release().catch(() => undefined);
    grant.correct(0);
    metrics.countMcpCall(server, tool, outcome);
  }
}
