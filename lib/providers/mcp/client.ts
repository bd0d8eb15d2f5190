// The way out to the operator's MCP servers (CONTRACT section 17): Tollgate is one MCP client
// of each configured server, with the official SDK's Client over its Streamable HTTP client
// transport, carrying the headers the config names and nothing of any caller's. One upstream
// session per server, shared by every caller (the callers' sessions are the gateway's own,
// lib/mcp/sessions.ts), opened lazily and dropped on a transport failure so the next call
// opens a new one. Requests go out with `client.request` and the SDK's result schemas: the
// gateway forwards what it checked and passes the answer back as the server gave it (the SDK's
// own tool-output checks are the end client's business, and must not turn an answered, charged
// call into an error).
//
// Each server's tool list is cached (for tools/list, and so that a call of a tool the server
// does not have is answered exactly as an ungranted one, without a forward).

import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { McpServerConfig } from '../../config/types.js';
import type { Logger } from '../../observe/log.js';

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
  #client: Promise<Client> | undefined;
  #tools: { at: number; list: UpstreamTool[]; byName: Map<string, UpstreamTool> } | undefined;
  #fetching: Promise<UpstreamTool[]> | undefined;
  #state: { reachable: boolean | null; at: number | null; error: string | null } = { reachable: null, at: null, error: null };
  #closed = false;

  constructor(name: string, config: McpServerConfig, logger: Logger) {
    this.name = name;
    this.config = config;
    this.#logger = logger;
  }

  #connect(): Promise<Client> {
    if (this.#closed) return Promise.reject(new Error('closed'));
    this.#client ??= (async () => {
      const { Client, StreamableHTTPClientTransport } = await loadSdk();
      const client = new Client({ name: 'tollgate', version: '1' }, { capabilities: {} });
      const transport = new StreamableHTTPClientTransport(new URL(this.config.url), { requestInit: { headers: { ...this.config.headers } } });
      await client.connect(transport, { timeout: this.config.timeout_ms });
      return client;
    })();
    return this.#client;
  }

  /** Sends one request; a transport failure drops the session and becomes McpUnavailableError. */
  async request<T>(method: UpstreamMethod, params: Record<string, unknown>): Promise<T> {
    const { McpError, RpcCode, RESULT_SCHEMAS } = await loadSdk();
    const opened = this.#client;
    let client: Client;
    try {
      client = await this.#connect();
    } catch (err) {
      if (this.#client === opened || opened === undefined) this.#client = undefined;
      throw this.#down(err);
    }
    try {
      const result = await client.request({ method, params } as Parameters<Client['request']>[0], RESULT_SCHEMAS[method], { timeout: this.config.timeout_ms, maxTotalTimeout: this.config.timeout_ms });
      this.#up();
      return result as T;
    } catch (err) {
      if (err instanceof McpError && err.code !== RpcCode.RequestTimeout && err.code !== RpcCode.ConnectionClosed) {
        this.#up();
        throw new McpRpcError(err.code, err.message.replace(/^MCP error -?\d+: /, ''), err.data);
      }
      // Timed out, closed, refused, an HTTP error status, an unreadable answer: a new session next time.
      const dropped = this.#client;
      this.#client = undefined;
      void dropped?.then((c) => c.close()).catch(() => undefined); // close() of a dead session: nothing to wait for
      throw this.#down(err);
    }
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
    const c = this.#client;
    this.#client = undefined;
    await c?.then((x) => x.close()).catch(() => undefined);
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
