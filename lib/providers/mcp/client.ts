// The way out to the operator's MCP servers (CONTRACT section 17): Tollgate is one MCP client
// of each configured server, carrying the headers the config names and nothing of any caller's.
// One upstream session per server, shared by every caller (the callers' sessions are the
// gateway's own, lib/mcp/sessions.ts), opened lazily by the official SDK's Client (the
// initialize handshake and version negotiation of its Streamable HTTP transport) and dropped on
// a transport failure so the next call opens a new one. The requests on it go out through an
// undici Pool, as every other upstream call does: the SDK's request path (global fetch, a zod
// parse of each result) cost five times a chat request's CPU per tools/call (docs/mcp.md,
// "Cost"). The gateway forwards what it checked and passes the answer back as the server gave
// it, after checking only what it reads and the spec's required arrays (a tool's output schema
// is the end client's business, and must not turn an answered, charged call into an error).
//
// Each server's tool list is cached (for tools/list, and so that a call of a tool the server
// does not have is answered exactly as an ungranted one, without a forward).

import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Readable } from 'node:stream';
import type { McpServerConfig } from '../../config/types.js';
import type { Logger } from '../../observe/log.js';
import { SseParser, type SseEvent } from '../../sse/parser.js';
import { Pool } from '../../upstream/undici.js';

/** A tool as the server listed it (name, description, schemas...): passed on as it came. */
export type UpstreamTool = { name: string } & Record<string, unknown>;

/** The server could not be reached, timed out or answered a transport error: nothing ran, nothing is charged. */
export class McpUnavailableError extends Error {
  constructor(server: string, cause: unknown) {
    super(`The MCP server '${server}' is unavailable.`, { cause });
    this.name = 'McpUnavailableError';
  }
}

/** The server answered the request with a JSON-RPC error (passed on to the client as it is). */
export class McpRpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  constructor(code: number, message: string, data: unknown) {
    super(message);
    this.name = 'McpRpcError';
    this.code = code;
    this.data = data;
  }
}

type Sdk = typeof import('./sdk.js');
let sdk: Promise<Sdk> | undefined;

/** The SDK's pieces (./sdk.ts), imported on first use: only a gateway with MCP servers loads them. */
export function loadSdk(): Promise<Sdk> {
  return (sdk ??= import('./sdk.js'));
}

/** The methods forwarded besides tools/call and tools/list (each with its result schema in ./sdk.ts). */
const FORWARDED = ['prompts/list', 'prompts/get', 'resources/list', 'resources/templates/list', 'resources/read', 'completion/complete'] as const;
export type ForwardedMethod = (typeof FORWARDED)[number];
type UpstreamMethod = ForwardedMethod | 'tools/list' | 'tools/call';
export const FORWARDED_METHODS: ReadonlySet<string> = new Set(FORWARDED);

/** How long a tool list is trusted for calls; a list asked for (its first page) is fetched again after a second. */
const TOOLS_FRESH_MS = 60_000;
const TOOLS_REFETCH_MS = 1000;
/** A server's tool list is read to at most this many pages. */
const MAX_TOOL_PAGES = 50;

/** Connections to one MCP server (calls beyond wait in the pool's queue). */
const MAX_CONNECTIONS = 64;
/** The most bytes an answer may have; a bigger one is an unreadable answer. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
/** JSON-RPC's "internal error". */
const RPC_INTERNAL = -32603;

/** An open upstream session: the SDK client that opened it, and the headers each request carries. */
interface Session {
  client: Client;
  headers: Record<string, string>;
}

type RpcAnswer = { result: unknown } | { error: { code: number; message: string; data: unknown } };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const listOf = (key: string) => (v: unknown): boolean => isObject(v) && Array.isArray(v[key]) && (v.nextCursor === undefined || typeof v.nextCursor === 'string');

/**
 * What each method's result must be for the gateway to pass it on: the parts the gateway reads
 * (a tool list's names, a call's isError) and the spec's required arrays. The rest is the end
 * client's to check, so a server's extension fields pass.
 */
const RESULT_CHECKS: Readonly<Record<UpstreamMethod, (v: unknown) => boolean>> = {
  'tools/list': (v) => listOf('tools')(v) && (v as { tools: unknown[] }).tools.every((t) => isObject(t) && typeof t.name === 'string'),
  'tools/call': (v) => isObject(v) && (v.content === undefined || Array.isArray(v.content)) && (v.isError === undefined || typeof v.isError === 'boolean'),
  'prompts/list': listOf('prompts'),
  'prompts/get': (v) => isObject(v) && Array.isArray(v.messages),
  'resources/list': listOf('resources'),
  'resources/templates/list': listOf('resourceTemplates'),
  'resources/read': (v) => isObject(v) && Array.isArray(v.contents),
  'completion/complete': (v) => isObject(v) && isObject(v.completion) && Array.isArray(v.completion.values),
};

/** The whole body as text; more than MAX_ANSWER_BYTES throws. */
async function readWhole(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES) {
      body.destroy();
      throw new Error(`the answer is over ${MAX_ANSWER_BYTES} bytes`);
    }
    parts.push(chunk);
  }
  return parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts).toString('utf8');
}

/** The JSON-RPC answer of id `id` in a message (or a batch of them); undefined if it is not there. */
function answerIn(message: unknown, id: number): RpcAnswer | undefined {
  if (Array.isArray(message)) {
    for (const m of message) {
      const a = answerIn(m, id);
      if (a !== undefined) return a;
    }
    return undefined;
  }
  if (!isObject(message) || message.id !== id || message.jsonrpc !== '2.0') return undefined;
  if ('result' in message) return { result: message.result };
  const e = message.error;
  if (isObject(e) && Number.isInteger(e.code) && typeof e.message === 'string') return { error: { code: e.code as number, message: e.message, data: e.data } };
  throw new Error('the answer is neither a result nor an error');
}

/** The answer of a JSON body. */
function jsonAnswer(text: string, id: number): RpcAnswer {
  const answer = answerIn(JSON.parse(text) as unknown, id);
  if (answer === undefined) throw new Error(`the answer does not answer request ${id}`);
  return answer;
}

/**
 * The answer in an event stream: each event's data one JSON-RPC message, those before the
 * answer (notifications, the server's own requests) passed over. Once it is there the rest of
 * the stream is read and dropped as it comes (not waited for), so the connection is kept.
 */
function streamedAnswer(body: Readable, id: number): Promise<RpcAnswer> {
  return new Promise((resolve, reject) => {
    const parser = new SseParser(MAX_ANSWER_BYTES);
    let done = false;
    const settle = (events: SseEvent[]): void => {
      for (const event of events) {
        if (event.data === '' || (event.event !== undefined && event.event !== 'message')) continue;
        const answer = answerIn(JSON.parse(event.data) as unknown, id);
        if (answer !== undefined) {
          done = true;
          resolve(answer);
          return;
        }
      }
    };
    const fail = (err: unknown): void => {
      if (done) return;
      done = true;
      body.destroy();
      reject(err instanceof Error ? err : new Error(String(err)));
    };
    body.on('data', (chunk: Buffer) => {
      if (done) return;
      try {
        settle(parser.push(chunk));
      } catch (err) {
        fail(err);
      }
    });
    body.on('end', () => {
      if (done) return;
      try {
        settle(parser.end());
      } catch (err) {
        fail(err);
        return;
      }
      if (!done) fail(new Error(`the event stream ended without the answer to request ${id}`));
    });
    body.on('error', fail);
  });
}

/** One server's reachability as GET /admin/upstreams shows it. */
export interface McpReachability {
  url: string;
  /** null: not tried yet. */
  reachable: boolean | null;
  checked_at: string | null;
  error: string | null;
  tools: number | null;
}

class McpUpstream {
  readonly name: string;
  readonly config: McpServerConfig;
  readonly #logger: Logger;
  readonly #url: URL;
  readonly #path: string;
  #session: Promise<Session> | undefined;
  #http: Pool | undefined;
  #nextId = 0;
  #tools: { at: number; list: UpstreamTool[]; byName: Map<string, UpstreamTool> } | undefined;
  #fetching: Promise<UpstreamTool[]> | undefined;
  #state: { reachable: boolean | null; at: number | null; error: string | null } = { reachable: null, at: null, error: null };
  #closed = false;

  constructor(name: string, config: McpServerConfig, logger: Logger) {
    this.name = name;
    this.config = config;
    this.#logger = logger;
    this.#url = new URL(config.url);
    this.#path = `${this.#url.pathname}${this.#url.search}`;
  }

  /** Opens the upstream session with the SDK's handshake (initialize, version check, initialized). */
  #connect(): Promise<Session> {
    if (this.#closed) return Promise.reject(new Error('closed'));
    this.#session ??= (async () => {
      const { Client, StreamableHTTPClientTransport } = await loadSdk();
      const client = new Client({ name: 'tollgate', version: '1' }, { capabilities: {} });
      const transport = new StreamableHTTPClientTransport(this.#url, { requestInit: { headers: { ...this.config.headers } } });
      await client.connect(transport, { timeout: this.config.timeout_ms });
      const headers: Record<string, string> = { ...this.config.headers, 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
      if (transport.sessionId !== undefined) headers['mcp-session-id'] = transport.sessionId;
      if (transport.protocolVersion !== undefined) headers['mcp-protocol-version'] = transport.protocolVersion;
      return { client, headers };
    })();
    return this.#session;
  }

  #pool(): Pool {
    return (this.#http ??= new Pool(this.#url.origin, {
      connections: MAX_CONNECTIONS, pipelining: 1, keepAliveTimeout: 30_000,
      headersTimeout: this.config.timeout_ms, bodyTimeout: this.config.timeout_ms,
    }));
  }

  /**
   * Sends one request on the session the SDK opened, through an undici Pool: the body the
   * gateway checked, the answer (JSON, or the event stream's message of this id) read within
   * MAX_ANSWER_BYTES and checked as the method's result. A JSON-RPC error is McpRpcError; a
   * transport failure, timeout, HTTP error status or unreadable answer drops the session and is
   * McpUnavailableError.
   */
  async request<T>(method: UpstreamMethod, params: Record<string, unknown>): Promise<T> {
    const opened = this.#session;
    let session: Session;
    try {
      session = await this.#connect();
    } catch (err) {
      if (this.#session === opened || opened === undefined) this.#session = undefined;
      throw this.#down(err);
    }
    const mine = this.#session;
    const id = ++this.#nextId;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(new Error(`no answer within ${this.config.timeout_ms} ms`)), this.config.timeout_ms);
    let answer: RpcAnswer;
    try {
      const res = await this.#pool().request({
        path: this.#path, method: 'POST', headers: session.headers, signal: abort.signal,
        body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
      });
      if (res.statusCode < 200 || res.statusCode > 299) {
        await res.body.dump();
        throw new Error(`the server answered HTTP ${res.statusCode}`);
      }
      const type = res.headers['content-type'];
      answer = typeof type === 'string' && type.startsWith('text/event-stream') ? await streamedAnswer(res.body, id) : jsonAnswer(await readWhole(res.body), id);
    } catch (err) {
      // Timed out, closed, refused, an HTTP error status, an unreadable answer: a new session next time.
      if (this.#session === mine) {
        this.#session = undefined;
        void mine?.then((s) => s.client.close()).catch(() => undefined); // close() of a dead session: nothing to wait for
      }
      throw this.#down(err);
    } finally {
      clearTimeout(timer);
    }
    this.#up();
    if ('error' in answer) throw new McpRpcError(answer.error.code, answer.error.message, answer.error.data);
    if (!RESULT_CHECKS[method](answer.result)) {
      throw new McpRpcError(RPC_INTERNAL, `The MCP server '${this.name}' answered ${method} with a result of the wrong shape.`, undefined);
    }
    return answer.result as T;
  }

  #up(): void {
    this.#state = { reachable: true, at: Date.now(), error: null };
  }

  #down(err: unknown): McpUnavailableError {
    const message = err instanceof Error ? err.message : String(err);
    if (this.#state.reachable !== false) this.#logger.warn({ mcp_server: this.name, err: message }, 'MCP server unavailable');
    this.#state = { reachable: false, at: Date.now(), error: message.slice(0, 200) };
    return new McpUnavailableError(this.name, err);
  }

  /** The server's whole tool list: cached for calls, fetched again when a list is asked for. */
  async tools(fresh: boolean): Promise<UpstreamTool[]> {
    const now = Date.now();
    const cached = this.#tools;
    if (cached !== undefined && now - cached.at < (fresh ? TOOLS_REFETCH_MS : TOOLS_FRESH_MS)) return cached.list;
    this.#fetching ??= this.#fetchTools().finally(() => { this.#fetching = undefined; });
    return this.#fetching;
  }

  /** The tool of that name, the list fetched again (at most once a second) when it is not in it. */
  async tool(name: string): Promise<UpstreamTool | undefined> {
    await this.tools(false);
    let found = this.#tools?.byName.get(name);
    if (found === undefined && Date.now() - (this.#tools?.at ?? 0) >= TOOLS_REFETCH_MS) {
      await this.tools(true);
      found = this.#tools?.byName.get(name);
    }
    return found;
  }

  async #fetchTools(): Promise<UpstreamTool[]> {
    const list: UpstreamTool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_TOOL_PAGES; page++) {
      const r = await this.request<{ tools: UpstreamTool[]; nextCursor?: string }>('tools/list', cursor === undefined ? {} : { cursor });
      list.push(...r.tools);
      cursor = r.nextCursor;
      if (cursor === undefined) break;
    }
    this.#tools = { at: Date.now(), list, byName: new Map(list.map((t) => [t.name, t])) };
    return list;
  }

  call(params: Record<string, unknown>): Promise<Record<string, unknown>> {
    return this.request('tools/call', params);
  }

  forward(method: ForwardedMethod, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    return this.request(method, params);
  }

  reachability(): McpReachability {
    const s = this.#state;
    return {
      url: this.config.url, reachable: s.reachable, checked_at: s.at === null ? null : new Date(s.at).toISOString(), error: s.error,
      tools: this.#tools?.list.length ?? null,
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    const s = this.#session;
    this.#session = undefined;
    await s?.then((x) => x.client.close()).catch(() => undefined);
    await this.#http?.close().catch(() => undefined);
  }
}

/** Every configured MCP server's upstream side. */
export class McpUpstreams {
  readonly #servers = new Map<string, McpUpstream>();

  constructor(servers: Readonly<Record<string, McpServerConfig>>, logger: Logger) {
    for (const [name, config] of Object.entries(servers)) this.#servers.set(name, new McpUpstream(name, config, logger));
  }

  get(name: string): McpUpstream | undefined {
    return this.#servers.get(name);
  }

  names(): string[] {
    return [...this.#servers.keys()];
  }

  /** Reads every server's tool list once, so reachability is known from the start (never throws). */
  probe(): void {
    for (const s of this.#servers.values()) void s.tools(true).catch(() => undefined); // the failure is recorded as reachability
  }

  reachability(): Record<string, McpReachability> {
    const out: Record<string, McpReachability> = {};
    for (const [name, s] of this.#servers) out[name] = s.reachability();
    return out;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.#servers.values()].map((s) => s.close()));
  }
}

export type { McpUpstream };
