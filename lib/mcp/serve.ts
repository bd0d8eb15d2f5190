// POST /mcp and /mcp/<server> (CONTRACT section 17): MCP's Streamable HTTP transport, server
// side. A caller authenticates as on /v1 (401 envelope otherwise), sends one JSON-RPC message
// per POST (read strictly: jsonrpc.ts), and gets the answer as JSON or as a one-event stream,
// as its Accept allows. `initialize` opens a session bound to the caller's credential
// (sessions.ts); every other request must carry it. Methods are answered from one resolved
// grant (grants.ts): tools/list shows granted tools only, a call of a tool that is unknown or
// not granted gets the same -32602, prompts and resources need the server's whole toolset.
// DELETE ends a session; GET (a server-to-client stream) is not offered: 405.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, clip } from '../errors.js';
import { readBody } from '../http/body.js';
import { sendJson, sendWhole } from '../http/respond.js';
import type { Metrics } from '../observe/metrics.js';
import { answerHeaders, type RequestContext } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import { FORWARDED_METHODS, McpRpcError, McpUnavailableError, loadSdk, type ForwardedMethod, type UpstreamTool } from '../providers/mcp/client.js';
import { meteredCall, unavailable } from './call.js';
import { SEPARATOR, grantOf, type ToolGrant } from './grants.js';
import { RPC, RpcError, errorText, parseMessage, resultText, type ClientMessage } from './jsonrpc.js';
import { sessionsOf } from './sessions.js';

/** Bodies above this are refused 413 (a tool's arguments are not a file upload), whatever max_body_bytes is. */
const MAX_MCP_BODY = 4 * 1024 * 1024;
const PAGE = 100;
const MAX_CURSOR = 512;
const SESSION_HEADER = 'mcp-session-id';
const SESSION_ID = /^[\x21-\x7e]{1,128}$/;

/** How the answer may be written: JSON, or an event stream. */
function acceptOf(req: IncomingMessage): 'json' | 'sse' {
  const accept = (req.headers.accept ?? '').toLowerCase();
  if (accept === '' || accept.includes('application/json') || accept.includes('*/*') || accept.includes('application/*')) return 'json';
  if (accept.includes('text/event-stream')) return 'sse';
  throw new RpcError(RPC.server, 'Not Acceptable: the client must accept application/json or text/event-stream', { status: 406 });
}

/** Serves a request of /mcp or /mcp/<server> (`path`), on the state pinned for it. */
export async function serveMcp(state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  const server = path === '/mcp' ? null : path.slice('/mcp/'.length);
  if (server === '' || server?.includes('/') === true) throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
  ctx.principal = await state.auth.authenticate(req.headers.authorization, req);
  const sessions = sessionsOf(state.config);
  // A server the config does not name is as absent as any other path: the caller learns nothing.
  if (server !== null && state.mcp.get(server) === undefined) throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
  let id: string | number | null = null;
  /** How a JSON-RPC answer is written once the request's Accept was read; refusals before that are JSON. */
  let mode: 'json' | 'sse' = 'json';
  try {
    if (req.method === 'DELETE') {
      const sid = sessionOf(req);
      if (sid === undefined || !sessions.valid(sid, ctx.principal.credentialId, server)) throw notFound();
      sessions.end(sid);
      sendWhole(res, 200, '', answerHeaders(ctx));
      return;
    }
    if (req.method !== 'POST') {
      throw new RpcError(RPC.server, 'Method Not Allowed: POST a JSON-RPC message (this gateway offers no server-to-client stream)', { status: 405, headers: { allow: 'POST, DELETE' } });
    }
    mode = acceptOf(req);
    const { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } = await loadSdk();
    const type = (req.headers['content-type'] ?? '').toLowerCase();
    if (!type.startsWith('application/json')) throw new RpcError(RPC.server, 'Unsupported Media Type: the body must be application/json', { status: 415 });
    const version = req.headers['mcp-protocol-version'];
    if (version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(String(version))) {
      throw new RpcError(RPC.server, `Bad Request: unsupported MCP-Protocol-Version ${JSON.stringify(clip(String(version), 64))}`, { status: 400 });
    }
    const limit = Math.min(MAX_MCP_BODY, state.config.server.max_body_bytes);
    const message = parseMessage(await readBody(req, limit, state.config.server.body_timeout_ms));
    if (message.kind === 'request') id = message.id;
    const sid = sessionOf(req);
    if (message.kind === 'request' && message.method === 'initialize') {
      if (sid !== undefined) throw new RpcError(RPC.invalidRequest, 'Invalid Request: initialize opens a session; send it without Mcp-Session-Id', { status: 400 });
      const result = initialize(message.params, grantOf(ctx.principal), server, SUPPORTED_PROTOCOL_VERSIONS, LATEST_PROTOCOL_VERSION);
      const opened = sessions.open(ctx.principal.credentialId, server);
      write(res, mode, 200, resultText(message.id, result), answerHeaders(ctx, { [SESSION_HEADER]: opened }));
      return;
    }
    if (sid === undefined) throw new RpcError(RPC.server, 'Bad Request: Mcp-Session-Id header is required (initialize first)', { status: 400 });
    if (!sessions.valid(sid, ctx.principal.credentialId, server)) throw notFound();
    if (message.kind !== 'request') {
      sendWhole(res, 202, '', answerHeaders(ctx));
      return;
    }
    const result = await dispatch(state, metrics, ctx, res, server, message);
    if (result === undefined || res.destroyed) return;
    write(res, mode, 200, resultText(message.id, result), answerHeaders(ctx));
  } catch (err) {
    if (!(err instanceof RpcError)) throw err;
    if (ctx.code === '') ctx.code = rpcCode(err);
    if (res.headersSent || res.destroyed) return;
    const headers = answerHeaders(ctx, err.headers);
    // An error of a method (HTTP 200) is the request's answer, written as its Accept allows; a refusal of the request itself is JSON.
    if (err.status === 200) write(res, mode, 200, errorText(id, err), headers);
    else sendJson(res, err.status, errorText(id, err), headers);
  }
}

/** The code access logs and metrics count a JSON-RPC refusal by. */
function rpcCode(err: RpcError): string {
  const data = err.data as { code?: unknown } | undefined;
  return typeof data?.code === 'string' ? data.code : `jsonrpc_${-err.code}`;
}

function notFound(): RpcError {
  return new RpcError(RPC.sessionNotFound, 'Session not found', { status: 404 });
}

function sessionOf(req: IncomingMessage): string | undefined {
  const v = req.headers[SESSION_HEADER];
  if (v === undefined) return undefined;
  // A malformed id names no session: it is answered as an unknown one.
  return typeof v === 'string' && SESSION_ID.test(v) ? v : '\u0000';
}

function write(res: ServerResponse, mode: 'json' | 'sse', status: number, text: string, headers: Record<string, string>): void {
  if (mode === 'json') {
    sendJson(res, status, text, headers);
    return;
  }
  headers['content-type'] = 'text/event-stream';
  headers['cache-control'] = 'no-cache';
  sendWhole(res, status, `event: message\ndata: ${text}\n\n`, headers);
}

function initialize(
  params: Record<string, unknown>, grant: ToolGrant, server: string | null, supported: readonly string[], latest: string,
): { protocolVersion: string } & Record<string, unknown> {
  const asked = params.protocolVersion;
  const protocolVersion = typeof asked === 'string' && supported.includes(asked) ? asked : latest;
  const capabilities: Record<string, unknown> = { tools: {} };
  if (server !== null && grant.whole(server)) {
    capabilities.prompts = {};
    capabilities.resources = {};
    capabilities.completions = {};
  }
  return { protocolVersion, capabilities, serverInfo: { name: 'tollgate', version: '1' } };
}

async function dispatch(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse, server: string | null,
  message: Extract<ClientMessage, { kind: 'request' }>,
): Promise<unknown> {
  const grant = grantOf(ctx.principal!);
  const { method, params } = message;
  switch (method) {
    case 'ping':
    case 'logging/setLevel':
      return {};
    case 'tools/list':
      return listTools(state, ctx, grant, server, params.cursor);
    case 'tools/call':
      return callTool(state, metrics, ctx, res, grant, server, params);
    default:
      if (server !== null && FORWARDED_METHODS.has(method) && grant.whole(server)) return forward(state, ctx, server, method as ForwardedMethod, params);
      throw new RpcError(RPC.methodNotFound, `Method not found: ${clip(method, 128)}`);
  }
}

async function forward(state: GatewayState, ctx: RequestContext, server: string, method: ForwardedMethod, params: Record<string, unknown>): Promise<unknown> {
  try {
    return await state.mcp.get(server)!.forward(method, params);
  } catch (err) {
    throw upstreamError(err, server, ctx.id);
  }
}

function upstreamError(err: unknown, server: string, requestId: string): unknown {
  if (err instanceof McpUnavailableError) return unavailable(server, requestId);
  if (err instanceof McpRpcError) return new RpcError(err.code, err.message, { data: err.data });
  return err;
}

function unknownTool(name: string): RpcError {
  return new RpcError(RPC.invalidParams, `Unknown tool: ${clip(name, 256)}`);
}

/** The server and tool a name stands for on this endpoint: `<server>__<tool>` on /mcp. */
function split(name: string, server: string | null): [string, string] | undefined {
  if (server !== null) return [server, name];
  const at = name.indexOf(SEPARATOR);
  return at <= 0 ? undefined : [name.slice(0, at), name.slice(at + SEPARATOR.length)];
}

async function callTool(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse, grant: ToolGrant, server: string | null, params: Record<string, unknown>,
): Promise<unknown> {
  const { name, arguments: args, _meta: meta } = params;
  if (typeof name !== 'string' || name === '') throw new RpcError(RPC.invalidParams, 'Invalid params: "name" must be a non-empty string');
  if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args))) {
    throw new RpcError(RPC.invalidParams, 'Invalid params: "arguments" must be an object');
  }
  if (meta !== undefined && (typeof meta !== 'object' || meta === null || Array.isArray(meta))) throw new RpcError(RPC.invalidParams, 'Invalid params: "_meta" must be an object');
  const parts = split(name, server);
  const upstream = parts === undefined ? undefined : state.mcp.get(parts[0]);
  // Ungranted and unknown are one answer, and an ungranted name is never sent anywhere.
  if (parts === undefined || upstream === undefined || !grant.tool(parts[0], parts[1])) throw unknownTool(name);
  let known: UpstreamTool | undefined;
  try {
    known = await upstream.tool(parts[1]);
  } catch (err) {
    ctx.code = 'upstream_unavailable';
    throw upstreamError(err, upstream.name, ctx.id);
  }
  if (known === undefined) throw unknownTool(name);
  const forwarded: Record<string, unknown> = { name: parts[1] };
  if (args !== undefined) forwarded.arguments = args;
  if (meta !== undefined) forwarded._meta = meta;
  return meteredCall(state, metrics, ctx, res, upstream, parts[1], forwarded);
}

async function listTools(state: GatewayState, ctx: RequestContext, grant: ToolGrant, server: string | null, cursor: unknown): Promise<unknown> {
  let offset = 0;
  if (cursor !== undefined) {
    const m = typeof cursor === 'string' && cursor.length <= MAX_CURSOR ? /^o(\d{1,9})$/.exec(cursor) : null;
    if (m === null) throw new RpcError(RPC.invalidParams, 'Invalid params: unknown cursor');
    offset = Number(m[1]);
  }
  const fresh = cursor === undefined;
  const names = server === null ? state.mcp.names() : [server];
  // Every server's list at once: one that is slow to fail holds the others up no longer than itself.
  const lists = await Promise.allSettled(names.map((name) => state.mcp.get(name)!.tools(fresh)));
  const tools: UpstreamTool[] = [];
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const got = lists[i]!;
    if (got.status === 'rejected') {
      // The aggregate lists the servers that answer; one server's own endpoint says it is down.
      if (server === null && got.reason instanceof McpUnavailableError) continue;
      throw upstreamError(got.reason, name, ctx.id);
    }
    const list = got.value;
    for (const t of list) {
      if (!grant.tool(name, t.name)) continue;
      tools.push(server === null ? { ...t, name: name + SEPARATOR + t.name } : t);
    }
  }
  const page = tools.slice(offset, offset + PAGE);
  return offset + PAGE < tools.length ? { tools: page, nextCursor: `o${offset + PAGE}` } : { tools: page };
}
