// The gateway: owns the config's lifecycle (the current state, swapped whole on reload; a
// request keeps the state it started on) and the top-level dispatch: /v1 to the route table
// (routes/), the health and metrics paths (routes/ops.ts), /admin, and everything else to the
// passthrough, the host app (`next`) or 404, on the path http/path.ts normalised (CONTRACT
// section 21: one path, one decision). Works as a node:http request listener and as
// Express/Connect middleware.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { configWarnings } from './config/cross-check.js';
import { validateConfig } from './config/load.js';
import { checkRemovedPlans } from './store/removed-plans.js';
import type { Config } from './config/types.js';
import { GatewayError, clip, toGatewayError } from './errors.js';
import { requestIdFor } from './http/request-id.js';
import { takeRequest } from './http/body.js';
import { checkOutbound, normalisePath, normaliseTarget } from './http/path.js';
import { sendError } from './http/respond.js';
import { createLogger, type Logger } from './observe/log.js';
import { Metrics } from './observe/metrics.js';
import { createTracing, type Tracing } from './observe/trace.js';
import { newContext, type RequestContext } from './pipeline/context.js';
import { Finish, Tracked } from './pipeline/finish.js';
import { checkV1, dialectOf, serveV1, v1Route } from './routes/index.js';
import { serveOps } from './routes/ops.js';
import { GatewayState } from './state.js';
import { MemorySlots, RedisSlots, type Slots } from './limits/slots.js';
import { openStore, type StoreHandle } from './store/index.js';
import { Health } from './upstream/health.js';
import { Alerts, type AlertsOptions } from './alerts/alerts.js';
import { SECURITY_HEADERS } from './console/index.js';
import { Replicas } from './upstream/balance/index.js';
import { attachBatches, openBatchStore, type BatchRunner, type BatchStore } from './batch/open.js';

/** A raw path that begins as the console's (any case, any slashes before it). */
const CONSOLE_RAW = /^\/+console/i;

/**
 * A path refused before it could reach the console (/console/%2e%2e/x) still answers as the
 * console: with its security headers, as every console answer of every status (CONTRACT section 21).
 */
function consoleHeaders(res: ServerResponse, raw: string): void {
  if (CONSOLE_RAW.test(raw)) for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
}

export type Next = (err?: unknown) => void;
export type Handler = (req: IncomingMessage, res: ServerResponse, next?: Next) => void;

export interface GatewayOptions {
  /** A pino logger; by default one writing JSON lines to stdout. */
  logger?: Logger;
  /** Alerts' clock, jitter and background work (tests simulate hours with them). */
  alerts?: AlertsOptions;
}

export class Gateway {
  readonly metrics = new Metrics();
  readonly logger: Logger;
  /** Each request's error answer and record (pipeline/finish.ts). */
  readonly #finish: Finish;
  readonly #health = new Health(this.metrics.upstreamHealthy, (healthy, target) => {
    if (healthy) this.logger.info(target, 'circuit closed: the upstream answers again');
    else this.logger.warn(target, 'circuit open: the upstream failed circuit_failures times in a row; requests go to fallbacks or get 503 until a probe succeeds');
  });
  /** Every replica's routing state, kept across reloads like the circuits. */
  readonly #replicas = new Replicas();
  #store: Promise<StoreHandle>;
  /** Files and batches, and the runner of this instance's batch lines (batch/). */
  #batches: Promise<BatchStore>;
  #runner: BatchRunner | undefined;
  #storeConfig: string;
  /** Concurrency slots outlive reloads: requests in flight keep theirs. */
  #slots: Slots | undefined;
  #state: GatewayState | undefined;
  #pending: Promise<GatewayState>;
  #refs = new Map<GatewayState, number>();
  #retired = new Set<GatewayState>();
  #draining = false;
  /** Alert detection and delivery (alerts/), made with the store; outlives reloads. */
  #alerts: Alerts | undefined;
  readonly #alertsOptions: AlertsOptions | undefined;
  #inflight = 0;
  #idleWaiters: Array<() => void> = [];
  /** Tracing as the current config asks (null: off), and what built it. */
  #tracing: Tracing | null = null;
  #tracingKey = 'null';
  /** Tracers of earlier configs: shut down a while after a reload, or at close. */
  readonly #oldTracing = new Set<Tracing>();

  constructor(config: Config | unknown, options: GatewayOptions = {}) {
    this.logger = options.logger ?? createLogger();
    this.#finish = new Finish(this.metrics, this.logger);
    this.#alertsOptions = options.alerts;
    // A Config validateConfig made (loadConfigFile's, as `serve` passes it) comes back as it is:
    // a config is validated once, where it enters; an embedder's plain object is validated here.
    const valid = validateConfig(config);
    this.#warn(valid);
    this.#storeConfig = JSON.stringify(valid.store);
    this.#store = openStore(valid.store, this.logger, valid.usage.retention_days);
    this.#batches = this.#store.then((h) => openBatchStore(valid.store, h.redis));
    this.#pending = this.#build(valid).then((s) => (this.#state = s));
    this.metrics.upstreams = () => this.#state?.providers.values() ?? [];
  }

  async #build(config: Config): Promise<GatewayState> {
    const handle = await this.#store;
    this.metrics.usageRecordsRead = () => handle.store.usageRecordsRead();
    this.#slots ??= handle.redis !== null
      ? new RedisSlots(handle.redis, config.store.prefix, config.store.on_error === 'open', this.logger, undefined, handle.retries)
      : new MemorySlots();
    // A store that is still connecting (at boot) gets a moment; one that is down does not hold
    // the start or a reload up any longer: the state seeds it once it answers.
    await handle.connected(config.store.timeout_ms);
    await this.#trace(config);
    const state = new GatewayState(config, handle, this.#slots, this.#health, this.logger, this.#replicas, () => this.#reloadFromFile());
    if (this.#alerts === undefined) {
      const alerts = new Alerts(handle.store, this.logger, this.#alertsOptions);
      this.#alerts = alerts;
      this.#replicas.onEject = (provider, url, reason, until) => alerts.ejected(provider, url, reason, until);
    }
    if (!this.#draining) this.#alerts.configure(config.alerts);
    state.alerts = this.#alerts;
    this.#runner = await attachBatches(state, await this.#batches, () => this.#state, this.handler, this.#runner ?? (this.#draining ? null : undefined), this.metrics);
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

  /** How the console's "Reload" reloads the config (serve sets it: the file, as SIGHUP does). */
  #reloader: (() => Promise<string[]>) | undefined;

  /** Sets what the console's "Reload" runs; it resolves to the problems, [] when the new config took effect. */
  setReloader(reload: () => Promise<string[]>): void {
    this.#reloader = reload;
  }

  #reloadFromFile(): Promise<string[]> {
    if (this.#reloader === undefined) {
      return Promise.resolve(['reload: the gateway was not started with `tollgate serve --config FILE`; there is no file to reload']);
    }
    return this.#reloader();
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
    const raw = q === -1 ? url : url.slice(0, q);
    let path: string;
    try {
      path = normalisePath(raw);
    } catch (err) {
      consoleHeaders(res, raw);
      void this.#refusedPath(res, requestIdFor(req.headers['x-request-id']), err);
      return;
    }
    // One path, one decision (CONTRACT section 21): the normalised path decides below, and it is
    // what every handler, the passthrough's proxy and the host app read from req.url.
    if (path !== raw) req.url = q === -1 ? path : path + url.slice(q);
    if (path === '/v1' || path.startsWith('/v1/') || path === '/mcp' || path.startsWith('/mcp/')) {
      void this.#v1(req, res, path); // /mcp too: lib/mcp/ through the route table
    } else if (path === '/healthz' || path === '/readyz' || path === '/metrics') {
      void serveOps(req, res, path, { draining: this.#draining, state: this.#state, metrics: this.metrics, logger: this.logger });
    } else if (path === '/admin' || path.startsWith('/admin/')) {
      void this.#admin(req, res, path);
    } else if (this.#state?.console?.owns(path) === true) {
      void this.#console(req, res, path);
    } else {
      void this.#elsewhere(req, res, path, next);
    }
  };

  /** A path normalisePath or checkOutbound refused: 400 invalid_value, counted and logged as an unknown route. */
  async #refusedPath(res: ServerResponse, requestId: string, err: unknown): Promise<void> {
    await this.#track(newContext(requestId, 'unknown'), res, () => Promise.reject(err));
  }

  /** The paths the gateway answers itself: never passed through, a WebSocket upgrade included. */
  #owns(path: string): boolean {
    return path === '/v1' || path.startsWith('/v1/') || path === '/mcp' || path.startsWith('/mcp/') || path === '/admin' || path.startsWith('/admin/') ||
      path === '/healthz' || path === '/readyz' || path === '/metrics' || this.#state?.console?.owns(path) === true;
  }

  /** /admin: the admin API when admin.token is set, else 404 for every path (CONTRACT section 5). */
  async #admin(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const ctx = newContext(requestIdFor(req.headers['x-request-id']), 'admin');
    await this.#track(ctx, res, async () => {
      const state = this.#state ?? (await this.#pending);
      if (state.admin === null) throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
      // A Bearer token is the admin token's request; without one, a console session's.
      const session = req.headers.authorization === undefined && state.console?.hasCookie(req) === true
        ? await state.console.signedIn(req) : undefined;
      await state.admin.handle(req, res, path, ctx.id, session);
    });
  }

  /** /console and the SSO callback (lib/console/), when the console is on. */
  async #console(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const ctx = newContext(requestIdFor(req.headers['x-request-id']), 'console');
    await this.#track(ctx, res, async () => {
      const state = this.#state ?? (await this.#pending);
      if (state.console === null || !state.console.owns(path)) throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
      await state.console.handle(req, res, path, ctx.id);
    });
  }

  /**
   * Runs one request's work and writes its record (metrics, access log, usage record) once
   * BOTH the answer is closed and the work is done: a client that leaves mid-stream closes the
   * answer before its debit lands, and the record must carry the debited figures (CONTRACT
   * section 10: ledger, usage records and metrics agree to the unit).
   */
  async #track(ctx: RequestContext, res: ServerResponse, work: (pinned: Tracked) => Promise<void>): Promise<void> {
    this.#inflight++;
    const pinned = new Tracked(ctx, res, this.#recorded);
    res.once('close', pinned.done);
    try {
      await work(pinned);
    } catch (err) {
      this.#finish.fail(ctx, res, err);
    }
    pinned.done();
  }

  /** #track's record, once the answer is closed and the work done (no promise awaited for the close). */
  readonly #recorded = ({ ctx, res, state }: Tracked): void => {
    this.#inflight--;
    if (state !== undefined) this.#release(state);
    this.#finish.done(ctx, res, state);
    if (this.#inflight === 0) for (const w of this.#idleWaiters.splice(0)) w();
  };

  /** Paths the gateway does not own: passthrough when configured, else the host app, else 404. */
  async #elsewhere(req: IncomingMessage, res: ServerResponse, path: string, next: Next | undefined): Promise<void> {
    const requestId = requestIdFor(req.headers['x-request-id']);
    try {
      checkOutbound(path);
    } catch (err) {
      consoleHeaders(res, path); // /console%2F.. is refused as it would leave: a console answer still
      await this.#refusedPath(res, requestId, err);
      return;
    }
    try {
      const state = this.#state ?? (await this.#pending);
      if (state.passthrough !== null) {
        state.passthrough.refuseGeneration(path, req.method);
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
    let target: string;
    let path: string;
    try {
      target = normaliseTarget(req.url ?? '/');
      const q = target.indexOf('?');
      path = q === -1 ? target : target.slice(0, q);
      if (!this.#owns(path)) checkOutbound(path);
    } catch {
      socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    req.url = target;
    const state = this.#state;
    if (state?.passthrough != null && !this.#owns(path)) {
      try {
        state.passthrough.refuseGeneration(path, req.method);
      } catch {
        socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
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
    await this.#track(ctx, res, async (pinned) => {
      checkV1(route, req, path);
      const state = this.#state ?? (await this.#pending);
      // The state is pinned before any await below: a reload must not close its pools under us.
      pinned.state = state;
      this.#refs.set(state, (this.#refs.get(state) ?? 0) + 1);
      if (this.#tracing !== null) {
        ctx.span = this.#tracing.start(req.headers, req.method ?? 'GET', path, performance.timeOrigin + ctx.start);
        ctx.upstreamHeaders = ctx.span.upstreamHeaders;
      }
      await serveV1(state, this.metrics, ctx, req, res, path);
    });
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

  /** Alert detection and delivery, once the store is open (for operators' checks and tests). */
  get alerts(): Promise<Alerts> {
    return this.#pending.then(() => this.#alerts!);
  }

  /** Stops taking new work: /readyz answers 503 from now on, and batches start no new line. */
  startDrain(): void {
    this.#draining = true;
    // Batch lines in flight finish; no new one starts (the batch resumes at the next start).
    this.#runner?.stop().catch(() => undefined);
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
    await this.#runner?.stop();
    const states = new Set([...this.#retired, ...(this.#state ? [this.#state] : [])]);
    this.#retired.clear();
    await Promise.allSettled([...states].map((s) => s.close()));
    const tracers = [...this.#oldTracing, ...(this.#tracing === null ? [] : [this.#tracing])];
    this.#oldTracing.clear();
    this.#tracing = null;
    this.#tracingKey = 'null';
    await Promise.allSettled(tracers.map((t) => t.shutdown()));
    // Detected events are recorded and a delivery in flight finishes before the store closes.
    await this.#alerts?.stop();
    await this.#batches.then((b) => b.close(), () => undefined);
    await this.#store.then((s) => s.close(), () => undefined);
    this.logger.flush();
  };
}

/** Creates an embeddable gateway: `{ handler, close }` and more. */
export function createGateway(config: Config | unknown, options?: GatewayOptions): Gateway {
  return new Gateway(config, options);
}
