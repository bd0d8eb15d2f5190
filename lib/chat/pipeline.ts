// POST /v1/chat/completions, in order: authenticate, read and validate the body, resolve the
// model, check images, policy and context, then call the model's targets (its provider, then
// its fallbacks) and answer as one JSON body or as an event stream. Each step throws a
// GatewayError; the router writes it.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, envelope, retryAfterHeaders } from '../errors.js';
import { isJsonContentType, readBody } from '../http/body.js';
import { parseJsonBody } from '../http/json.js';
import { sendJson, type RequestContext } from '../http/respond.js';
import type { Metrics } from '../observe/metrics.js';
import { TIMEOUT, type ProviderCall } from '../providers/types.js';
import { emptyAnswer, hasStop } from '../providers/shared.js';
import { DONE_FRAME, KEEPALIVE_FRAME, SSE_HEADERS, dataFrame, writeFrame } from '../sse/writer.js';
import type { GatewayState, Target } from '../state.js';
import type { Admission, Outcome } from '../upstream/health.js';
import { AffinityKey, type Replica } from '../upstream/balance/index.js';
import { isConnectFailure } from '../upstream/http.js';
import { hold, type Charge } from '../billing/meter.js';
import { checkContext, checkImages, fitsContext } from './checks.js';
import type { ChatCompletion, ChatRequest, ChunkChoice, Usage } from './types.js';
import { validateChatRequest } from './validate.js';
import type { ModelConfig } from '../config/types.js';

const CLIENT_GONE = Symbol('tollgate.client-gone');

/** Failures that another target may not repeat: the next fallback is worth a try. */
const FALLBACK_CODES: ReadonlySet<string> = new Set(['provider_error', 'provider_timeout', 'model_unavailable']);

function completionId(): string {
  return `chatcmpl-${randomUUID().replace(/-/g, '')}`;
}

/** Hold lifetime: every attempt may use its whole timeout, plus slack for the settle. */
const HOLD_SLACK_MS = 60_000;
/** Replicas of one target a request tries before it moves on to the next target. */
const MAX_REPLICA_TRIES = 3;

export async function handleChat(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse,
): Promise<void> {
  ctx.principal = await state.auth.authenticate(req.headers.authorization);
  if (!isJsonContentType(req.headers['content-type'])) {
    throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
  }
  const body = parseJsonBody(await readBody(req, state.config.server.max_body_bytes));
  const request = validateChatRequest(body);
  ctx.stream = request.stream;
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0, (m) => {
    if (!state.healthy(m)) return 'unhealthy';
    return fitsContext(request, m) ? null : 'context';
  });
  ctx.model = model.id;
  checkImages(request, model);
  state.policy.check(request.messages);
  const prompt = await state.promptTokens(request, model);
  checkContext(request, model, prompt);

  // Limits, then credits, then the upstream. The concurrency slot is held to the last byte of
  // the answer, whatever ends it.
  const grant = await state.limits.admit(ctx.principal, prompt + (request.maxOutputTokens ?? model.max_output_tokens));
  ctx.rateHeaders = grant.headers;
  res.once('close', grant.release);
  // The client may have left while the slot was being acquired: 'close' has fired already.
  if (res.destroyed) {
    grant.release();
    grant.correct(0);
    return;
  }
  const targets = state.targets(model);
  const ttl = targets.reduce((sum, t) => sum + t.provider.config.timeout_ms * Math.min(MAX_REPLICA_TRIES, t.provider.fleet.replicas.length), HOLD_SLACK_MS);
  let charge: Charge;
  try {
    // Billing has its own id: x-request-id may come from the client, and must not collide.
    charge = await hold(state.store, ctx.principal, randomUUID(), model, request, prompt, ttl, state.openMode);
  } catch (err) {
    grant.correct(0);
    throw err;
  }
  ctx.charge = charge;
  const session = req.headers['x-session-affinity'];
  const attempts = new Attempts(state, metrics, ctx, res, request, model, prompt, typeof session === 'string' ? session : undefined);
  try {
    if (request.stream) await streamAnswer(state, metrics, attempts, charge, ctx, res);
    else await completeAnswer(metrics, attempts, charge, ctx, res);
  } finally {
    attempts.finish();
    // Whatever did not settle (a failure before any output, a client gone before the answer)
    // is charged nothing; a store that cannot answer lets the hold expire.
    if (!charge.settled) await charge.release().catch(() => undefined);
    grant.correct(charge.settled && ctx.usage !== undefined ? ctx.usage.total_tokens : 0);
  }
}

/** One attempt: a target (provider and upstream model), its circuit's admission, a replica. */
interface Attempt { target: Target; admission: Admission; replica: Replica }

/**
 * Calls a model's targets in order, and within a target its replicas as the provider's
 * balancer picks them: a failure before anything reached the client moves to another replica
 * of the same target (up to MAX_REPLICA_TRIES), then to the next target. Each attempt has its
 * own timer (its provider's timeout_ms) and is aborted when the client goes. A target's
 * circuit is settled once for all its replicas' attempts. A target whose circuit is open, or
 * whose replicas are all ejected, is skipped; when every one is, the answer is 503 with the
 * time until the first of them may take requests again.
 */
class Attempts {
  readonly request: ChatRequest;
  readonly model: ModelConfig;
  /** The prompt estimate, with the model's tokenizer. */
  readonly prompt: number;
  readonly #targets: Target[];
  readonly #state: GatewayState;
  readonly #metrics: Metrics;
  readonly #ctx: RequestContext;
  readonly #res: ServerResponse;
  readonly #key: AffinityKey;
  #index = 0;
  #retryMs = Infinity;
  #last: GatewayError | undefined;
  /** The target being tried, and how its latest attempt went (settled into its circuit when left). */
  #current: { target: Target; admission: Admission; outcome: Outcome } | undefined;
  #tried: Replica[] = [];

  constructor(
    state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse, request: ChatRequest, model: ModelConfig,
    prompt: number, session: string | undefined,
  ) {
    this.request = request;
    this.model = model;
    this.prompt = prompt;
    this.#targets = state.targets(model);
    this.#state = state;
    this.#metrics = metrics;
    this.#ctx = ctx;
    this.#res = res;
    this.#key = new AffinityKey(request, session);
  }

  /** The next replica of the current target, else of the next target the circuits let through, or the error that ends the request. */
  next(): Attempt {
    for (;;) {
      const current = this.#current;
      if (current !== undefined) {
        const fleet = current.target.provider.fleet;
        const replica = this.#tried.length < MAX_REPLICA_TRIES ? fleet.pick(this.#key, this.#tried) : undefined;
        if (replica !== undefined) {
          this.#tried.push(replica);
          return { target: current.target, admission: current.admission, replica };
        }
        if (this.#tried.length === 0) this.#retryMs = Math.min(this.#retryMs, fleet.retryAfterMs());
        this.#leaveTarget();
      }
      if (this.#index >= this.#targets.length) break;
      const target = this.#targets[this.#index++]!;
      const admission = target.circuit.admit();
      if (admission.ok) {
        this.#current = { target, admission, outcome: 'neutral' };
        this.#tried = [];
      } else {
        this.#retryMs = Math.min(this.#retryMs, admission.retryMs);
      }
    }
    if (this.#last !== undefined) throw this.#last;
    throw new GatewayError('model_unavailable', `The model '${this.model.id}' is unavailable right now; retry later.`, {
      headers: retryAfterHeaders(this.#retryMs),
    });
  }

  /** Settles the current target's circuit with how its last attempt went. */
  #leaveTarget(): void {
    const current = this.#current;
    if (current === undefined) return;
    this.#current = undefined;
    current.target.circuit.settle(current.admission, current.outcome);
  }

  /** Ends the request's use of its targets: a circuit left mid-way is settled. */
  finish(): void {
    this.#leaveTarget();
  }

  /** Runs `fn` as one attempt on the attempt's replica; records its outcome and the error for fallback. */
  async run<T>(attempt: Attempt, fn: (call: ProviderCall) => Promise<T>): Promise<T> {
    const { target, replica } = attempt;
    const ac = new AbortController();
    const call: ProviderCall = { request: this.request, model: this.model, upstreamModel: target.upstreamModel, signal: ac.signal, replica };
    const res = this.#res;
    const onClose = () => { if (!res.writableFinished) ac.abort(CLIENT_GONE); };
    res.on('close', onClose);
    if (res.destroyed) ac.abort(CLIENT_GONE);
    const timer = setTimeout(() => ac.abort(TIMEOUT), target.provider.config.timeout_ms);
    const started = performance.now();
    this.#ctx.provider = target.provider.name;
    this.#ctx.upstreamModel = target.upstreamModel;
    const fleet = target.provider.fleet;
    const token = fleet.begin(replica);
    let outcome: Outcome = 'neutral';
    let connectFailure = false;
    try {
      const result = await fn(call);
      outcome = 'success';
      return result;
    } catch (err) {
      const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed while calling the provider.', { cause: err });
      if (ac.signal.reason !== CLIENT_GONE && FALLBACK_CODES.has(e.code) && e.fault) {
        outcome = 'failure';
        connectFailure = isConnectFailure(e);
      }
      this.#last = e;
      throw e;
    } finally {
      clearTimeout(timer);
      res.off('close', onClose);
      fleet.end(replica, token, outcome, connectFailure);
      if (this.#current !== undefined && this.#current.target === target) {
        this.#current.outcome = outcome;
        if (outcome === 'success') this.#leaveTarget();
      }
      this.#ctx.upstreamMs = performance.now() - started;
      this.#metrics.upstreamDuration.labels(target.provider.name).observe(this.#ctx.upstreamMs / 1000);
    }
  }

  /** Usage counted by the gateway: the prompt estimate and the tokens of `completion`. */
  async counted(completion: string): Promise<Usage> {
    const c = await this.#state.textTokens(completion, this.model);
    return { prompt_tokens: this.prompt, completion_tokens: c, total_tokens: this.prompt + c };
  }

  /**
   * May the request go on to another replica or target after `err`? Only if nothing reached
   * the client; next() says whether one is left (else it throws this error again).
   */
  canFallBack(err: unknown): boolean {
    return err instanceof GatewayError && FALLBACK_CODES.has(err.code) && !this.#res.destroyed;
  }
}

async function completeAnswer(metrics: Metrics, attempts: Attempts, charge: Charge, ctx: RequestContext, res: ServerResponse): Promise<void> {
  for (;;) {
    const attempt = attempts.next();
    const { target } = attempt;
    try {
      const started = performance.now();
      const result = await attempts.run(attempt, (call) => target.provider.complete(call));
      let usage = result.usage;
      ctx.usageSource = 'upstream';
      if (usage === undefined) {
        usage = await attempts.counted(result.choices.map((c) => (c.message.reasoning_content ?? '') + (c.message.content ?? '')).join(''));
        ctx.usageSource = 'counted';
      }
      ctx.usage = usage;
      ctx.ttfcMs = performance.now() - started;
      // A client that left after the answer arrived is charged its usage all the same; the
      // debit is durable before the answer reports it.
      await charge.settle(usage);
      const completion: ChatCompletion = {
        id: completionId(),
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: attempts.model.id,
        choices: result.choices,
        usage,
      };
      if (res.destroyed) return;
      sendJson(res, 200, JSON.stringify(completion), {
        ...result.headers,
        ...ctx.rateHeaders,
        'x-request-id': ctx.id,
        'x-tollgate-units-charged': String(charge.charged),
        'x-tollgate-wallet-balance-units': String(charge.available),
      });
      metrics.timeToFirstChunk.labels(target.provider.name).observe(ctx.ttfcMs / 1000);
      return;
    } catch (err) {
      if (!attempts.canFallBack(err)) throw err;
    }
  }
}

/**
 * A chunk "commits" the stream (sends the 200 and headers) only once it carries something:
 * text, reasoning, tool calls, a refusal, or a finish reason that explains an empty answer
 * (length, content_filter, or stop when the client's own stop sequences may have emptied it).
 * Until then chunks are held, so an upstream that fails or answers nothing still gets a real
 * status and the next fallback can be tried.
 */
function isSubstantive(choices: readonly ChunkChoice[], stopExplains: boolean): boolean {
  for (const c of choices) {
    const d = c.delta;
    if ((d.content !== undefined && d.content !== null && d.content !== '') || d.tool_calls !== undefined ||
      (d.reasoning_content !== undefined && d.reasoning_content !== '') ||
      (d.refusal !== undefined && d.refusal !== null && d.refusal !== '') ||
      (c.finish_reason !== null && (c.finish_reason !== 'stop' || stopExplains))) return true;
  }
  return false;
}

async function streamAnswer(
  state: GatewayState, metrics: Metrics, attempts: Attempts, charge: Charge, ctx: RequestContext, res: ServerResponse,
): Promise<void> {
  const includeUsage = attempts.request.includeUsage;
  const head = `{"id":"${completionId()}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(attempts.model.id)},"choices":`;
  const tail = includeUsage ? ',"usage":null}' : '}';
  const frame = (choices: readonly ChunkChoice[]) => dataFrame(head + JSON.stringify(choices) + tail);
  const started = performance.now();
  const stopExplains = hasStop({ request: attempts.request });

  // Keep-alives run from the moment the first upstream is called: one that is slow to send even
  // its headers is silent too. The first keep-alive commits the stream (200 + headers), and
  // from then on no fallback is tried.
  let committed = false;
  let upstreamHeaders: Record<string, string> = {};
  const commit = () => {
    committed = true;
    res.writeHead(200, { ...SSE_HEADERS, ...upstreamHeaders, ...ctx.rateHeaders, 'x-request-id': ctx.id });
    metrics.openStreams.inc();
  };
  const keepalive = setTimeout(function tick() {
    if (res.destroyed) return;
    if (!committed) commit();
    res.write(KEEPALIVE_FRAME);
    keepalive.refresh();
  }, state.config.server.sse_keepalive_ms);

  let text = '';
  try {
    for (;;) {
      const attempt = attempts.next();
      const { target } = attempt;
      const roleSent: boolean[] = [];
      const held: ChunkChoice[][] = [];
      text = '';
      let usage: Usage | undefined;
      try {
        const finished = await attempts.run(attempt, async (call) => {
          const upstream = await target.provider.stream(call);
          upstreamHeaders = upstream.headers;
          const iterator = upstream[Symbol.asyncIterator]();
          for (;;) {
            const step = await iterator.next();
            keepalive.refresh();
            if (step.done === true) break;
            const part = step.value;
            if (part.kind === 'usage') { usage = part.usage; continue; }
            for (const c of part.choices) {
              if (roleSent[c.index] !== true) {
                roleSent[c.index] = true;
                if (c.delta.role === undefined) c.delta = { role: 'assistant', ...c.delta };
              }
              if (typeof c.delta.content === 'string') text += c.delta.content;
              if (c.delta.reasoning_content !== undefined) text += c.delta.reasoning_content;
              if (c.delta.tool_calls !== undefined) for (const tc of c.delta.tool_calls) text += tc.function?.arguments ?? '';
            }
            if (!committed) {
              if (!isSubstantive(part.choices, stopExplains)) { held.push(part.choices); continue; }
              commit();
            }
            if (ctx.ttfcMs === undefined) {
              ctx.ttfcMs = performance.now() - started;
              metrics.timeToFirstChunk.labels(target.provider.name).observe(ctx.ttfcMs / 1000);
            }
            for (const h of held.splice(0)) res.write(frame(h));
            const ok = writeFrame(res, frame(part.choices), call.signal);
            if (ok !== true && !(await ok)) {
              // The client left, or stopped reading until the time ran out: the upstream is
              // aborted and what was generated so far is charged.
              void iterator.return?.();
              if (!res.destroyed) res.destroy();
              return false;
            }
          }
          if (!committed) throw emptyAnswer();
          return true;
        });
        if (!finished) {
          if (text !== '') {
            ctx.usageSource = 'counted';
            ctx.usage = await attempts.counted(text);
            await charge.settle(ctx.usage);
          }
          return;
        }
      } catch (err) {
        if (!committed && attempts.canFallBack(err)) continue;
        throw err;
      }
      ctx.usageSource = usage === undefined ? 'counted' : 'upstream';
      ctx.usage = usage ?? await attempts.counted(text);
      await charge.settle(ctx.usage);
      if (includeUsage) res.write(dataFrame(`${head}[],"usage":${JSON.stringify(ctx.usage)}}`));
      res.end(DONE_FRAME);
      return;
    }
  } catch (err) {
    // A stream cut short, by the client leaving or the upstream failing, is charged for what
    // reached the client (nothing, if only keep-alives did).
    if (committed && !charge.settled && text !== '') {
      ctx.usageSource = 'counted';
      ctx.usage = await attempts.counted(text);
      await charge.settle(ctx.usage).catch(() => undefined);
    }
    if (!committed || res.destroyed) throw err;
    // After the first byte an error can only be told in the stream: one envelope event, and no
    // [DONE], so the client knows the answer is incomplete.
    const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed mid-stream.', { cause: err });
    ctx.code = e.code;
    res.end(dataFrame(JSON.stringify(envelope(e, ctx.id))));
    if (!(err instanceof GatewayError)) throw err;
  } finally {
    clearTimeout(keepalive);
    if (committed) metrics.openStreams.dec();
  }
}
