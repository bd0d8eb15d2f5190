// The gateway: routes /v1, the health and metrics paths, and hands everything else to the host
// app (`next`) or answers 404. Works as a node:http request listener and as Express/Connect
// middleware. Owns the current config state, swapped whole on reload.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { handleGeneration, refusalSpends } from './chat/pipeline.js';
import { chatDialect } from './dialects/chat/index.js';
import { configWarnings } from './config/cross-check.js';
import { handleStoredResponse, responsesDialect } from './dialects/responses/index.js';
import { handleEmbeddings } from './dialects/embeddings/index.js';
import { countTokens } from './dialects/messages/count-tokens.js';
import { messagesDialect } from './dialects/messages/index.js';
import type { Dialect } from './dialects/types.js';
import { validateConfig } from './config/load.js';
import { checkRemovedPlans } from './config/removed-plans.js';
import type { Config } from './config/types.js';
import { GatewayError, MAX_ECHO, StoreUnavailableError, clip, retryAfterHeaders, toGatewayError } from './errors.js';
import { requestIdFor } from './http/request-id.js';
import { takeRequest } from './http/body.js';
import { answerHeaders, newContext, sendError, sendJson, sendWhole, type RequestContext } from './http/respond.js';
import { createLogger, type Logger } from './observe/log.js';
import { Metrics } from './observe/metrics.js';
import { createTracing, type Tracing } from './observe/trace.js';
import { TokenShapeError } from './auth/jwt-common.js';
import { GatewayState } from './state.js';
import { MemorySlots, RedisSlots, type Slots } from './limits/slots.js';
import { openStore, type StoreHandle } from './store/index.js';
import { Health } from './upstream/health.js';
import { Replicas } from './upstream/balance/index.js';

export type Next = (err?: unknown) => void;
export type Handler = (req: IncomingMessage, res: ServerResponse, next?: Next) => void;

export interface GatewayOptions {
  /** A pino logger; by default one writing JSON lines to stdout. */
  logger?: Logger;
}

type V1Route = 'chat' | 'messages' | 'messages_count_tokens' | 'responses' | 'response' | 'embeddings' | 'models' | 'model' | 'unknown';

function v1Route(path: string): V1Route {
  if (path === '/v1/chat/completions') return 'chat';
  if (path === '/v1/messages') return 'messages';
  if (path === '/v1/messages/count_tokens') return 'messages_count_tokens';
  if (path === '/v1/responses') return 'responses';
  if (path === '/v1/embeddings') return 'embeddings';
  if (path.startsWith('/v1/responses/') && path.length > 14 && path.indexOf('/', 14) === -1) return 'response';
  if (path === '/v1/models') return 'models';
  if (path.startsWith('/v1/models/') && path.length > 11) return 'model';
  return 'unknown';
}

/** The dialect whose error shape a path's answers take (unknown paths under it included). */
function dialectOf(path: string): Dialect | undefined {
  if (path === '/v1/messages' || path.startsWith('/v1/messages/')) return messagesDialect;
  return undefined;
}

/** The route paths usage records and spans name (CONTRACT section 8). */
const ROUTE_PATHS: Partial<Record<string, string>> = {
  chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses', embeddings: '/v1/embeddings',
  messages_count_tokens: '/v1/messages/count_tokens', models: '/v1/models', model: '/v1/models/{id}', response: '/v1/responses/{id}',
};

/** The GenAI operation of a route (gen_ai.operation.name); none for routes that generate nothing. */
const OPERATIONS: Partial<Record<string, string>> = { chat: 'chat', messages: 'chat', responses: 'chat', embeddings: 'embeddings' };
/** At most one store-fault log line per this many ms (the first of a run at once). */
const STORE_FAULT_LOG_MS = 5000;

const ALLOW: Record<V1Route, string> = {
  chat: 'POST', messages: 'POST', messages_count_tokens: 'POST', responses: 'POST', response: 'GET, DELETE', embeddings: 'POST',
  models: 'GET, HEAD', model: 'GET, HEAD', unknown: '',
};

export class Gateway {
  readonly metrics = new Metrics();
  readonly logger: Logger;
  readonly #health = new Health(this.metrics.upstreamHealthy, (healthy, target) => {
    if (healthy) this.logger.info(target, 'circuit closed: the upstream answers again');
    else this.logger.warn(target, 'circuit open: the upstream failed circuit_failures times in a row; requests go to fallbacks or get 503 until a probe succeeds');
  });
  /** Every replica's routing state, kept across reloads like the circuits. */
  readonly #replicas = new Replicas();
  #store: Promise<StoreHandle>;
  #storeConfig: string;
  /** Concurrency slots outlive reloads: requests in flight keep theirs. */
  #slots: Slots | undefined;
  #state: GatewayState | undefined;
  #pending: Promise<GatewayState>;
  #refs = new Map<GatewayState, number>();
  #retired = new Set<GatewayState>();
  #draining = false;
  #inflight = 0;
  /** Store faults answered since the last one logged, and when that was (ms). */
  #storeFaults = { suppressed: 0, loggedAt: -Infinity };
  #idleWaiters: Array<() => void> = [];
  /** Tracing as the current config asks (null: off), and what built it. */
  #tracing: Tracing | null = null;
  #tracingKey = 'null';
  /** Tracers of earlier configs: shut down a while after a reload, or at close. */
  readonly #oldTracing = new Set<Tracing>();

  constructor(config: Config | unknown, options: GatewayOptions = {}) {
    this.logger = options.logger ?? createLogger();
    // A Config validateConfig made (loadConfigFile's, as `serve` passes it) comes back as it is:
    // a config is validated once, where it enters; an embedder's plain object is validated here.
    const valid = validateConfig(config);
    this.#warn(valid);
    this.#storeConfig = JSON.stringify(valid.store);
    this.#store = openStore(valid.store, this.logger, valid.usage.retention_days);
    this.#pending = this.#build(valid).then((s) => (this.#state = s));
    this.metrics.upstreams = () => this.#state?.providers.values() ?? [];
  }

  async #build(config: Config): Promise<GatewayState> {
    const handle = await this.#store;
    this.#slots ??= handle.redis !== null
      ? new RedisSlots(handle.redis, config.store.prefix, config.store.on_error === 'open', this.logger, undefined, handle.retries)
      : new MemorySlots();
    // A store that is still connecting (at boot) gets a moment; one that is down does not hold
    // the start or a reload up any longer: the state seeds it once it answers.
    await handle.connected(config.store.timeout_ms);
    await this.#trace(config);
    const state = new GatewayState(config, handle, this.#slots, this.#health, this.logger, this.#replicas);
    try {
      await state.start();
    } catch (err) {
      await state.close();
      throw err;
    }
    return state;
  }

  /** Starts tracing as `config` asks, when that differs from what runs now. */
  async #trace(config: Config): Promise<void> {
    const key = config.observe.otlp_endpoint === null ? 'null' : JSON.stringify([config.observe, config.service.name]);
    if (key === this.#tracingKey) return;
    let next: Tracing | null = null;
    try {
      next = await createTracing(config, this.logger);
    } catch (err) {
      // Tracing is an aid, never a reason not to serve.
      this.logger.error({ err: (err as Error).message }, 'tracing could not start; requests are served without spans');
    }
    const old = this.#tracing;
    this.#tracing = next;
    this.#tracingKey = key;
    if (old !== null) {
      // Requests in flight still end their spans on the old tracer: it stops a while later.
      this.#oldTracing.add(old);
      setTimeout(() => { if (this.#oldTracing.delete(old)) void old.shutdown().catch(() => undefined); }, 60_000).unref();
    }
  }

  /** Resolves when tokenizers are loaded and the gateway serves. Rejects if it cannot. */
  get ready(): Promise<void> {
    return this.#pending.then(() => undefined);
  }

  get config(): Config | undefined {
    return this.#state?.config;
  }

  /** Requests being answered now. */
  get inflight(): number {
    return this.#inflight;
  }

  handler: Handler = (req, res, next) => {
    // The body deadline counts from here; an early answer drains the body within these bounds.
    takeRequest(req, this.#state?.config.server);
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (path === '/v1' || path.startsWith('/v1/')) {
      void this.#v1(req, res, path);
    } else if (path === '/healthz' || path === '/readyz' || path === '/metrics') {
      void this.#ops(req, res, path);
    } else if (path === '/admin' || path.startsWith('/admin/')) {
      void this.#admin(req, res, path);
    } else {
      void this.#elsewhere(req, res, path, next);
    }
  };

  /** /admin: the admin API when admin.token is set, else 404 for every path (CONTRACT section 5). */
  async #admin(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const ctx = newContext(requestIdFor(req.headers['x-request-id']), 'admin');
    await this.#track(ctx, res, async () => {
      const state = this.#state ?? (await this.#pending);
      if (state.admin === null) throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
      await state.admin.handle(req, res, path, ctx.id);
    });
  }

  /**
   * Runs one request's work and writes its record (metrics, access log, usage record) once
   * BOTH the answer is closed and the work is done: a client that leaves mid-stream closes the
   * answer before its debit lands, and the record must carry the debited figures (CONTRACT
   * section 10: ledger, usage records and metrics agree to the unit).
   */
  async #track(ctx: RequestContext, res: ServerResponse, work: () => Promise<void>): Promise<void> {
    this.#inflight++;
    const closed = new Promise<void>((resolve) => res.once('close', resolve));
    try {
      await work();
    } catch (err) {
      this.#fail(ctx, res, err);
    }
    await closed;
    this.#finished(ctx, res, ctx.state);
  }

  /** Paths the gateway does not own: passthrough when configured, else the host app, else 404. */
  async #elsewhere(req: IncomingMessage, res: ServerResponse, path: string, next: Next | undefined): Promise<void> {
    const requestId = requestIdFor(req.headers['x-request-id']);
    try {
      const state = this.#state ?? (await this.#pending);
      if (state.passthrough !== null) {
        if (state.config.server.passthrough_auth) await state.auth.authenticate(req.headers.authorization, req);
        res.once('close', () => this.metrics.countRequest('passthrough', res.statusCode, ''));
        state.passthrough.web(req, res, requestId);
      } else if (next !== undefined) {
        next();
      } else {
        throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
      }
    } catch (err) {
      const e = toGatewayError(err);
      this.metrics.countRequest('passthrough', e.status, e.code);
      sendError(res, e, requestId);
    }
  }

  /** The server's 'upgrade' listener: WebSocket upgrades go to the passthrough, if any. */
  upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    void this.#upgrade(req, socket, head);
  };

  async #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    const state = this.#state;
    const owned = path === '/v1' || path.startsWith('/v1/') || path === '/admin' || path.startsWith('/admin/') ||
      path === '/healthz' || path === '/readyz' || path === '/metrics';
    if (state?.passthrough != null && !owned) {
      try {
        if (state.config.server.passthrough_auth) await state.auth.authenticate(req.headers.authorization, req);
        state.passthrough.ws(req, socket, head);
        return;
      } catch {
        socket.end('HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
    }
    socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
  }

  async #v1(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const route = v1Route(path);
    const ctx = newContext(requestIdFor(req.headers['x-request-id']), route);
    ctx.dialect = dialectOf(path);
    await this.#track(ctx, res, async () => {
      if (route === 'unknown') throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
      if (!ALLOW[route].includes(req.method ?? '')) {
        throw new GatewayError('method_not_allowed', `Method ${clip(req.method ?? '', 16)} is not allowed on ${clip(path, MAX_ECHO - 16)}; use ${ALLOW[route]}.`, {
          headers: { allow: ALLOW[route] },
        });
      }
      const state = this.#state ?? (await this.#pending);
      // The state is pinned before any await below: a reload must not close its pools under us.
      ctx.state = state;
      this.#refs.set(state, (this.#refs.get(state) ?? 0) + 1);
      if (this.#tracing !== null) {
        ctx.span = this.#tracing.start(req.headers, req.method ?? 'GET', path, performance.timeOrigin + ctx.start);
        ctx.upstreamHeaders = ctx.span.upstreamHeaders;
      }
      if (route === 'models' || route === 'model' || route === 'response') {
        await this.#unmetered(state, ctx, req, res, path);
        return;
      }
      try {
        await this.#metered(state, ctx, req, res);
      } catch (err) {
        throw await refusalSpends(state, ctx, err);
      }
    });
  }

  /** The routes that count toward requests_per_minute (generations, embeddings, token counts). */
  async #metered(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const route = ctx.route;
    if (route === 'chat') {
      ctx.dialect = chatDialect;
      await handleGeneration(chatDialect, state, this.metrics, ctx, req, res);
    } else if (route === 'responses') {
      ctx.dialect = responsesDialect;
      await handleGeneration(responsesDialect, state, this.metrics, ctx, req, res);
    } else if (route === 'embeddings') await handleEmbeddings(state, this.metrics, ctx, req, res);
    else if (route === 'messages') await handleGeneration(messagesDialect, state, this.metrics, ctx, req, res);
    else await countTokens(state, ctx, req, res);
  }

  /** The routes that do not: model lists and stored responses. */
  async #unmetered(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (ctx.route === 'response') await handleStoredResponse(state, ctx, req, res, path.slice('/v1/responses/'.length));
    else await this.#models(state, ctx, req, res, path);
  }

  async #models(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const principal = await state.auth.authenticate(req.headers.authorization, req);
    ctx.principal = principal;
    ctx.rateHeaders = await state.limits.peek(principal);
    if (ctx.route === 'models') {
      if (state.catalog.size === 0) {
        throw new GatewayError('service_unavailable', 'The model catalog is not populated yet.', { headers: retryAfterHeaders(5000) });
      }
      sendJson(res, 200, state.catalog.listJson(principal.plan, principal.key), answerHeaders(ctx));
      return;
    }
    let id: string;
    try {
      id = decodeURIComponent(path.slice('/v1/models/'.length));
    } catch {
      id = path.slice('/v1/models/'.length);
    }
    ctx.model = id;
    const json = state.catalog.publicJson(id);
    if (json === undefined) {
      state.catalog.resolve(id, principal.plan, false, undefined, principal.key); // throws model_not_found with suggestions
      throw new GatewayError('model_not_found', `The model '${clip(id)}' does not exist.`, { param: 'model' });
    }
    sendJson(res, 200, json, answerHeaders(ctx));
  }

  #fail(ctx: RequestContext, res: ServerResponse, err: unknown): void {
    if (res.destroyed && !res.writableFinished) {
      ctx.code ||= 'client_closed_request';
      return;
    }
    if (err instanceof TokenShapeError) {
      // A malformed dashboard token: the spec's {"msg": ...} body, not the envelope (spec 5.4).
      ctx.code = 'invalid_token';
      if (!res.headersSent) sendJson(res, 422, JSON.stringify({ msg: err.message }), { 'x-request-id': ctx.id });
      return;
    }
    const e = toGatewayError(err);
    if (e.code === 'internal_error') {
      this.logger.error({ request_id: ctx.id, err: err instanceof Error ? err : String(err) }, 'unhandled error on the request path');
    } else if (err instanceof StoreUnavailableError) {
      this.#logStoreFault(ctx, err);
    }
    ctx.code = e.code;
    if (!res.headersSent) sendError(res, e, ctx.id, ctx.rateHeaders, ctx.dialect?.errorBody);
    else if (!res.writableEnded) res.destroy();
  }

  /**
   * Why the store failed, for the operator facing a run of 503s: the first fault, then at most
   * one line per STORE_FAULT_LOG_MS with how many were answered in between.
   */
  #logStoreFault(ctx: RequestContext, err: StoreUnavailableError): void {
    const now = Date.now();
    const s = this.#storeFaults;
    if (now - s.loggedAt < STORE_FAULT_LOG_MS) {
      s.suppressed++;
      return;
    }
    const cause = err.cause instanceof Error ? err.cause.message : String(err.cause);
    this.logger.warn({ request_id: ctx.id, err: cause, since_last: s.suppressed }, 'store fault: answered 503 service_unavailable');
    s.suppressed = 0;
    s.loggedAt = now;
  }

  #finished(ctx: RequestContext, res: ServerResponse, state: GatewayState | undefined): void {
    this.#inflight--;
    if (state !== undefined) this.#release(state);
    const completed = res.writableFinished;
    if (!completed && ctx.code === '') ctx.code = 'client_closed_request';
    const status = completed || res.headersSent ? res.statusCode : 499;
    this.metrics.countRequest(ctx.route, status, ctx.code);
    const charged = ctx.charge?.charged;
    if (ctx.usage !== undefined && charged !== undefined) {
      this.metrics.countTokens(ctx.usage.prompt_tokens, ctx.usage.completion_tokens);
    }
    if (charged !== undefined) this.metrics.countUnits(charged);
    if (state !== undefined && ctx.charge !== undefined && ctx.principal !== undefined) this.#record(state, ctx, status);
    ctx.span?.end({
      route: ROUTE_PATHS[ctx.route] ?? ctx.route, operation: OPERATIONS[ctx.route], requestModel: ctx.requestModel, responseModel: ctx.model,
      provider: ctx.provider, inputTokens: ctx.usage?.prompt_tokens, outputTokens: ctx.usage?.completion_tokens, status, code: ctx.code,
      account: ctx.principal?.accountId, units: charged, requestId: ctx.id, stream: ctx.stream,
    });
    this.logger.info({
      request_id: ctx.id,
      route: ctx.route,
      account: ctx.principal?.accountId,
      credential: ctx.principal?.credentialId,
      model: ctx.model,
      provider: ctx.provider,
      stream: ctx.stream,
      status,
      code: ctx.code || undefined,
      duration_ms: round(performance.now() - ctx.start),
      upstream_ms: ctx.upstreamMs === undefined ? undefined : round(ctx.upstreamMs),
      ttfc_ms: ctx.ttfcMs === undefined ? undefined : round(ctx.ttfcMs),
      prompt_tokens: ctx.usage?.prompt_tokens,
      completion_tokens: ctx.usage?.completion_tokens,
      usage_source: ctx.usageSource,
      units: charged,
    }, 'request');
    if (this.#inflight === 0) for (const w of this.#idleWaiters.splice(0)) w();
  }

  /**
   * One usage record per metered request (one that got its credit hold), charged or not, once
   * its answer is closed and its debit landed; none while the store is down with
   * store.on_error: open (nothing is metered then). A record the store cannot take at once is
   * retried until it lands (store/guard.ts).
   */
  #record(state: GatewayState, ctx: RequestContext, status: number): void {
    if (state.openMode?.isDown === true) return;
    const charged = ctx.charge?.charged;
    const usage = charged === undefined ? undefined : ctx.usage;
    const credential = ctx.principal!.credentialId;
    state.store.recordUsage({
      request_id: ctx.id,
      at: Date.now(),
      account: ctx.principal!.accountId,
      // Dashboard sessions (JWTs) are not keys: their records carry no key id.
      key_id: credential.startsWith('key_') ? credential : null,
      model: ctx.model ?? '',
      provider: ctx.provider ?? '',
      target: ctx.target ?? null,
      route: ROUTE_PATHS[ctx.route] ?? ctx.route,
      status,
      prompt_tokens: usage?.prompt_tokens ?? 0,
      cached_tokens: usage?.cached_tokens ?? 0,
      completion_tokens: usage?.completion_tokens ?? 0,
      units: charged ?? 0,
      usage_source: usage === undefined ? 'none' : ctx.usageSource ?? 'counted',
      duration_ms: round(performance.now() - ctx.start),
      ttft_ms: ctx.ttftMs === undefined ? null : round(ctx.ttftMs),
    }).catch((err: unknown) => this.logger.warn({ request_id: ctx.id, err: (err as Error).message }, 'usage record not written'));
  }

  async #ops(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const requestId = requestIdFor(req.headers['x-request-id']);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(res, new GatewayError('method_not_allowed', `Method ${clip(req.method ?? '', 16)} is not allowed on ${path}; use GET.`, {
        headers: { allow: 'GET, HEAD' },
      }), requestId);
      return;
    }
    if (path === '/healthz') {
      sendJson(res, 200, '{"status":"ok"}', { 'cache-control': 'no-store' });
    } else if (path === '/readyz') {
      const problems: string[] = [];
      if (this.#draining) problems.push('draining');
      if (this.#state === undefined) problems.push('starting');
      else {
        if (this.#state.catalog.size === 0) problems.push('catalog empty');
        if (!this.#state.seeded) problems.push('accounts not seeded');
        try {
          await this.#state.store.ping();
        } catch {
          problems.push('store unreachable');
        }
      }
      const ok = problems.length === 0;
      sendJson(res, ok ? 200 : 503, JSON.stringify(ok ? { status: 'ready' } : { status: 'not_ready', problems }), { 'cache-control': 'no-store' });
    } else {
      try {
        const text = await this.metrics.registry.metrics();
        sendWhole(res, 200, text, { 'content-type': this.metrics.registry.contentType, 'cache-control': 'no-store' });
      } catch (err) {
        this.logger.error({ err }, 'metrics collection failed');
        sendError(res, new GatewayError('internal_error', 'Metrics could not be collected.'), requestId);
      }
    }
  }

  #release(state: GatewayState): void {
    const n = (this.#refs.get(state) ?? 1) - 1;
    if (n > 0) { this.#refs.set(state, n); return; }
    this.#refs.delete(state);
    if (this.#retired.delete(state)) void state.close();
  }

  /**
   * Swaps in a new config: new requests use it, requests in flight finish on the old one,
   * whose upstream pools close once they are done. Throws ConfigError and keeps the old config
   * when the new one is invalid or drops a plan that stored accounts use.
   */
  async reload(config: Config | unknown): Promise<void> {
    const valid = validateConfig(config);
    const current = this.#state ?? (await this.#pending.catch(() => undefined));
    await checkRemovedPlans(current?.config, valid, this.#store.then((h) => h.store));
    this.#warn(valid);
    if (JSON.stringify(valid.store) !== this.#storeConfig) {
      this.logger.warn('the store section changed; it takes effect at the next restart');
    }
    const next = await this.#build(valid);
    const old = this.#state;
    this.#state = next;
    this.#pending = Promise.resolve(next);
    if (old !== undefined) {
      if (this.#refs.has(old)) this.#retired.add(old);
      else await old.close();
    }
  }

  /** Valid but unworkable values of a config go to the log (CONTRACT section 9). */
  #warn(config: Config): void {
    for (const warning of configWarnings(config)) this.logger.warn({ warning }, 'config warning');
  }

  /** Concurrency slots an account holds now (for operators' checks and tests). */
  async slotsInUse(account: string): Promise<number> {
    return this.#slots === undefined ? 0 : this.#slots.inUse(account);
  }

  /** Bytes an account's stored responses hold in the store (for operators' checks and tests). */
  async storedResponseBytes(account: string): Promise<number> {
    return (await this.#store).store.responseBytes(account);
  }

  /** Stops taking new work: /readyz answers 503 from now on. */
  startDrain(): void {
    this.#draining = true;
  }

  /** Resolves when no request is in flight, or after `timeoutMs`; true when idle. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.#inflight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.#idleWaiters.push(() => { clearTimeout(timer); resolve(true); });
    });
  }

  /** Closes upstream pools. Call after the server stopped taking requests. */
  close = async (): Promise<void> => {
    this.#draining = true;
    const states = new Set([...this.#retired, ...(this.#state ? [this.#state] : [])]);
    this.#retired.clear();
    await Promise.allSettled([...states].map((s) => s.close()));
    const tracers = [...this.#oldTracing, ...(this.#tracing === null ? [] : [this.#tracing])];
    this.#oldTracing.clear();
    this.#tracing = null;
    this.#tracingKey = 'null';
    await Promise.allSettled(tracers.map((t) => t.shutdown()));
    await this.#store.then((s) => s.close(), () => undefined);
    this.logger.flush();
  };
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** Creates an embeddable gateway: `{ handler, close }` and more. */
export function createGateway(config: Config | unknown, options?: GatewayOptions): Gateway {
  return new Gateway(config, options);
}
