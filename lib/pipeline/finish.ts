// The end of every request the gateway owns: its error answer (the envelope, a dialect's
// shape, or the spec's {"msg"} for a malformed dashboard token) and, once the answer is closed
// and the work done, its record: metrics, the usage record, the span and the access log line.
// A client that leaves mid-stream closes the answer before its debit lands, and the record must
// carry the debited figures (CONTRACT section 10: ledger, usage records and metrics agree).

import type { ServerResponse } from 'node:http';
import { TokenShapeError } from '../auth/jwt-common.js';
import { StoreUnavailableError, toGatewayError } from '../errors.js';
import { sendError, sendJson } from '../http/respond.js';
import { writeAccessLine } from '../observe/access-line.js';
import type { Logger } from '../observe/log.js';
import type { Metrics } from '../observe/metrics.js';
import type { GatewayState } from '../state.js';
import type { RequestContext } from './context.js';

/** The route paths usage records and spans name (CONTRACT section 8). */
const ROUTE_PATHS: Partial<Record<string, string>> = {
  chat: '/v1/chat/completions', completions: '/v1/completions', messages: '/v1/messages', responses: '/v1/responses', embeddings: '/v1/embeddings',
  messages_count_tokens: '/v1/messages/count_tokens', models: '/v1/models', model: '/v1/models/{id}', response: '/v1/responses/{id}',
  rerank: '/v1/rerank', score: '/v1/score', audio_transcriptions: '/v1/audio/transcriptions', audio_translations: '/v1/audio/translations',
  key: '/v1/key', usage: '/v1/usage', mcp: '/mcp',
};
/** The GenAI operation of a route (gen_ai.operation.name); none for routes that generate nothing. */
const OPERATIONS: Partial<Record<string, string>> = { chat: 'chat', completions: 'text_completion', messages: 'chat', responses: 'chat', embeddings: 'embeddings' };
/** At most one store-fault log line per this many ms (the first of a run at once). */
const STORE_FAULT_LOG_MS = 5000;

export class Finish {
  readonly #metrics: Metrics;
  readonly #logger: Logger;
  /** Store faults answered since the last one logged, and when that was (ms). */
  #storeFaults = { suppressed: 0, loggedAt: -Infinity };

  constructor(metrics: Metrics, logger: Logger) {
    this.#metrics = metrics;
    this.#logger = logger;
  }

  /** Answers a request's error, unless the client left or the answer has begun (then the stream is cut). */
  fail(ctx: RequestContext, res: ServerResponse, err: unknown): void {
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
      this.#logger.error({ request_id: ctx.id, err: err instanceof Error ? err : String(err) }, 'unhandled error on the request path');
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
    this.#logger.warn({ request_id: ctx.id, err: cause, since_last: s.suppressed }, 'store fault: answered 503 service_unavailable');
    s.suppressed = 0;
    s.loggedAt = now;
  }

  /**
   * Writes a request's record once its answer is closed and its work done: metrics, the
   * usage record (a metered request's), the span and the access log line.
   */
  done(ctx: RequestContext, res: ServerResponse, state: GatewayState | undefined): void {
    const completed = res.writableFinished;
    if (!completed && ctx.code === '') ctx.code = 'client_closed_request';
    const status = completed || res.headersSent ? res.statusCode : 499;
    this.#metrics.countRequest(ctx.route, status, ctx.code);
    const charged = ctx.charge?.charged;
    if (ctx.usage !== undefined && charged !== undefined) {
      this.#metrics.countTokens(ctx.usage.prompt_tokens, ctx.usage.completion_tokens);
    }
    if (charged !== undefined) this.#metrics.countUnits(charged);
    if (state !== undefined && ctx.charge !== undefined && ctx.principal !== undefined) this.#record(state, ctx, status);
    ctx.span?.end({
      route: ROUTE_PATHS[ctx.route] ?? ctx.route, operation: OPERATIONS[ctx.route], requestModel: ctx.requestModel, responseModel: ctx.model,
      provider: ctx.provider, inputTokens: ctx.usage?.prompt_tokens, outputTokens: ctx.usage?.completion_tokens, status, code: ctx.code,
      account: ctx.principal?.accountId, units: charged, requestId: ctx.id, stream: ctx.stream, queueMs: ctx.queueMs,
    });
    writeAccessLine(this.#logger, {
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
      queue_ms: ctx.queueMs === undefined ? undefined : round(ctx.queueMs),
      ttfc_ms: ctx.ttfcMs === undefined ? undefined : round(ctx.ttfcMs),
      prompt_tokens: ctx.usage?.prompt_tokens,
      completion_tokens: ctx.usage?.completion_tokens,
      usage_source: ctx.usageSource,
      units: charged,
    });
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
      team: ctx.charge?.team ?? null,
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
      // Whole ms, as x-tollgate-queue-ms shows it; 0 behind no queue.
      queue_ms: ctx.queueMs === undefined ? 0 : Math.round(ctx.queueMs),
      tags: ctx.attribution?.tags ?? [],
      end_user: ctx.attribution?.endUser ?? null,
      ...(ctx.tool === undefined ? {} : { tool: ctx.tool }),
      ...(ctx.principal!.batch === undefined ? {} : { batch_id: ctx.principal!.batch.id, custom_id: ctx.principal!.batch.customId }),
    }).catch((err: unknown) => this.#logger.warn({ request_id: ctx.id, err: (err as Error).message }, 'usage record not written'));
  }
}

/**
 * One request the gateway tracks (gateway.ts #track): the config state it runs on, once pinned
 * (a reload leaves it in force for the request), and its record, written by whichever comes
 * last of its answer's 'close' and the end of its work (each calls `done`).
 */
export class Tracked {
  state: GatewayState | undefined = undefined;
  readonly ctx: RequestContext;
  readonly res: ServerResponse;
  readonly #record: (tracked: Tracked) => void;
  #waiting = 2;

  constructor(ctx: RequestContext, res: ServerResponse, record: (tracked: Tracked) => void) {
    this.ctx = ctx;
    this.res = res;
    this.#record = record;
  }

  readonly done = (): void => {
    if (--this.#waiting === 0) this.#record(this);
  };
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
