// One metered generation, whatever dialect the client speaks, in order: authenticate, read the
// body and let the dialect parse it, resolve the model, check images, policy and context, admit
// (limits), hold, then call the model's targets (its provider, then its fallbacks) and let the
// dialect render the answer as one JSON body or as an event stream. Each step throws a
// GatewayError; the router writes it in the dialect's shape.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, retryAfterHeaders } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { answerHeaders, sendJson, type RequestContext } from '../http/respond.js';
import type { Metrics } from '../observe/metrics.js';
import { AttemptCall, CallAbort, TIMEOUT, type ChoicesPart, type ProviderCall } from '../providers/types.js';
import { emptyAnswer, hasStop } from '../providers/shared.js';
import { KEEPALIVE_FRAME, SSE_HEADERS, writeFrame } from '../sse/writer.js';
import type { Dialect, Renderer } from '../dialects/types.js';
import type { GatewayState, Target } from '../state.js';
import type { Admission, Outcome } from '../upstream/health.js';
import { AffinityKey, type Replica } from '../upstream/balance/index.js';
import { isConnectFailure } from '../upstream/http.js';
import { hold, type Charge } from '../billing/meter.js';
import { checkContext, checkImages, contextFit, promptRoom } from './checks.js';
import type { Principal } from '../auth/principal.js';
import type { ChatRequest, ChunkChoice, Usage } from './types.js';
import type { ModelConfig } from '../config/types.js';

const CLIENT_GONE = Symbol('tollgate.client-gone');

/** Failures that another target may not repeat: the next fallback is worth a try. */
const FALLBACK_CODES: ReadonlySet<string> = new Set(['provider_error', 'provider_timeout', 'model_unavailable']);

/**
 * A hold lives for the attempt chain's budget (chainBudgetMs), then store.settle_wait_ms for a
 * settle whose outcome must be learned, then this: the rest of the settle and what follows it
 * (counting a cut stream's tokens, keeping a response). The chain's deadline is the hold's
 * start plus the budget, so no attempt outlives the hold, and neither does the settle.
 */
const HOLD_SLACK_MS = 60_000;
/** A stream's frames written together are cut at this length, so backpressure is felt. */
const MAX_BATCH_CHARS = 16_384;
/** Replicas of one target a request tries before it moves on to the next target. */
const MAX_REPLICA_TRIES = 3;

export async function handleGeneration(
  dialect: Dialect, state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse,
): Promise<void> {
  ctx.principal = await authenticateMetered(state, dialect.credential(req), req);
  const body = await readJsonBody(req, state.config.server);
  const request = dialect.parse(body, req);
  ctx.stream = request.stream;
  ctx.requestModel = request.model;
  if (dialect.prepare !== undefined) await dialect.prepare(request, { store: state.store, account: ctx.principal.accountId, config: state.config });
  const fit = request.model === 'auto' ? await contextFit(request, state.catalog.autoModels) : undefined;
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0, (m) => {
    if (!state.healthy(m)) return 'unhealthy';
    return fit === undefined || fit(m) ? null : 'context';
  }, ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'chat');
  checkImages(request, model);
  state.policy.check(request.messages);
  // Counted no further than the model could take: a prompt past that is refused all the same.
  const prompt = await state.promptTokens(request, model, promptRoom(request, model));
  checkContext(request, model, prompt);

  const admitted = await admitAndHold(state, ctx, res, model, request, prompt);
  if (admitted === undefined) return;
  const session = req.headers['x-session-affinity'];
  const attempts = new Attempts(state, metrics, ctx, res, request, model, prompt, typeof session === 'string' ? session : undefined, admitted.deadline);
  const renderer = dialect.renderer(request, model.id, prompt);
  await settleAfter(admitted, ctx, () => attempts.using(request.stream
    ? () => streamAnswer(state, metrics, attempts, admitted.charge, ctx, res, renderer)
    : () => completeAnswer(metrics, attempts, admitted.charge, ctx, res, renderer)));
}

/**
 * Authenticates a request of a route that counts toward requests_per_minute. A principal whose
 * requests limit this instance saw spent is refused here, before its body is read (CONTRACT
 * section 16); should the request be refused for its content later, before admission, the
 * router spends a request for it (refusalSpends).
 */
export async function authenticateMetered(state: GatewayState, credential: string | undefined, req: IncomingMessage): Promise<Principal> {
  const principal = await state.auth.authenticate(credential, req);
  state.limits.gate(principal);
  return principal;
}

/** Statuses of refusals for a request's content (its body, model, size, time), which spend a request (CONTRACT section 16). */
const CONTENT_REFUSALS: ReadonlySet<number> = new Set([400, 403, 404, 408, 413, 415, 422]);

/**
 * When a metered route's request was refused for its content before its admission (which
 * counts every admitted request), it spends a request of its rate limits all the same; when
 * those were spent already, the answer is their 429 instead. Returns the error to answer with.
 */
export async function refusalSpends(state: GatewayState, ctx: RequestContext, err: unknown): Promise<unknown> {
  if (ctx.principal === undefined || ctx.rateHeaders !== undefined) return err;
  if (!(err instanceof GatewayError) || !CONTENT_REFUSALS.has(err.status)) return err;
  const spent = await state.limits.spend(ctx.principal);
  ctx.rateHeaders = spent.headers;
  return spent.refusal ?? err;
}

type Grant = Awaited<ReturnType<GatewayState['limits']['admit']>>;

/**
 * Limits, then credits: the concurrency slot (held to the last byte of the answer, whatever
 * ends it) and the worst-case hold. Undefined when the client left while waiting. Every metered
 * route (generation, embeddings) comes through here.
 */
export async function admitAndHold(
  state: GatewayState, ctx: RequestContext, res: ServerResponse, model: ModelConfig, request: ChatRequest, prompt: number,
): Promise<Admitted | undefined> {
  const principal = ctx.principal!;
  const budget = chainBudgetMs(state.targets(model));
  const ttl = budget + state.config.store.settle_wait_ms + HOLD_SLACK_MS;
  // Taken before the hold is asked for, so the chain ends within the hold's life.
  const deadline = performance.now() + budget;
  // The store's hold records the key's use at a time no earlier than this.
  const asked = Date.now();
  // Billing has its own id: x-request-id may come from the client, and must not collide.
  const holdNow = () => hold(state.store, principal, randomUUID(), model, request, prompt, ttl, state.openMode);
  // Where the limits had ample room at this principal's last request, the hold goes out with
  // them (one round trip to the store); a refusal by the limits then releases it at once.
  const early = state.limits.roomy(principal)
    ? holdNow().then((c) => ({ charge: c }), (err: unknown) => ({ err }))
    : undefined;
  const dropEarly = () => { void early?.then((r) => ('charge' in r ? r.charge.release() : undefined)).catch(() => undefined); };
  let grant: Grant;
  try {
    grant = await state.limits.admit(principal, prompt + (request.maxOutputTokens ?? model.max_output_tokens));
  } catch (err) {
    dropEarly();
    throw err;
  }
  ctx.rateHeaders = grant.headers;
  // Released with the answer's last writes (the usage record): one round trip after it.
  res.once('close', () => queueMicrotask(grant.release));
  // The client may have left while the slot was being acquired: 'close' has fired already.
  if (res.destroyed) {
    grant.release();
    grant.correct(0);
    dropEarly();
    return undefined;
  }
  let charge: Charge;
  try {
    if (early === undefined) {
      charge = await holdNow();
    } else {
      const r = await early;
      if ('err' in r) throw r.err;
      charge = r.charge;
    }
  } catch (err) {
    // Refused by the wallet, the key's budget or a quota: it takes nothing from the limits.
    grant.cancel();
    throw err;
  }
  ctx.charge = charge;
  if (charge.held) state.auth.held(principal, asked);
  return { grant, charge, deadline };
}

/** An admitted request: its limits' grant, its credit hold, and when its attempt chain must end. */
export interface Admitted {
  grant: Grant;
  charge: Charge;
  /** performance.now() by which every attempt is over (Attempts): the hold outlives it. */
  deadline: number;
}

/**
 * The whole attempt chain's time: each target's timeout_ms once. A target's replicas share its
 * timeout (one that stalls leaves no time for another, though one that fails fast does), so a
 * fleet of stalled replicas costs its timeout_ms, not a multiple of it, and each fallback still
 * gets its own.
 */
function chainBudgetMs(targets: readonly Target[]): number {
  let ms = 0;
  for (const t of targets) ms += t.provider.config.timeout_ms;
  return ms;
}

/** Runs the answer; whatever it did not settle is released, and the rate limit corrected. */
export async function settleAfter(admitted: Admitted, ctx: RequestContext, work: () => Promise<void>): Promise<void> {
  const { grant, charge } = admitted;
  try {
    await work();
  } finally {
    // Whatever did not settle (a failure before any output, a client gone before the answer)
    // is charged nothing; a store that cannot answer lets the hold expire.
    if (!charge.settled) await charge.release().catch(() => undefined);
    grant.correct(charge.settled && ctx.usage !== undefined ? ctx.usage.total_tokens : 0);
  }
}

/** A route serves one model type: chat models generate, embedding models embed. */
export function checkModelType(model: ModelConfig, type: ModelConfig['type']): void {
  if (model.type === type) return;
  throw new GatewayError('unsupported_value',
    `The model '${model.id}' is ${model.type === 'embedding' ? 'an embedding' : 'a chat'} model; ${type === 'embedding' ? 'use a chat route for it' : 'use POST /v1/embeddings for it'}.`,
    { param: 'model' });
}

/** A dialect's keep step failing costs the client nothing more: the answer is paid and goes out. */
async function keep(work: Promise<void>, ctx: RequestContext): Promise<void> {
  try {
    await work;
  } catch (err) {
    ctx.state?.logger.warn({ request_id: ctx.id, err: (err as Error).message }, 'the answer was not kept (store)');
  }
}

/** One attempt: a target (provider and upstream model), its circuit's admission, a replica. */
interface Attempt { target: Target; admission: Admission; replica: Replica }

/**
 * Calls a model's targets in order, and within a target its replicas as the provider's
 * balancer picks them: a failure before anything reached the client moves to another replica
 * of the same target (up to MAX_REPLICA_TRIES), then to the next target. A target's attempts
 * share its provider's timeout_ms from when it is first tried, and the whole chain ends at the
 * request's deadline (admitAndHold: within its credit hold's life); each attempt's timer is
 * what is left of both, and a chain out of time ends in 504 provider_timeout. Each attempt is
 * aborted when the client goes. A target's circuit is settled once for all its replicas'
 * attempts. A target whose circuit is open, or whose replicas are all ejected, is skipped;
 * when every one is, the answer is 503 with the time until the first of them may take
 * requests again.
 */
export class Attempts {
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
  /** performance.now() by which the chain ends (Admitted.deadline). */
  readonly #deadline: number;
  /** performance.now() by which the current target's attempts end: its timeout_ms, within the deadline. */
  #targetEnd = 0;
  #index = 0;
  #retryMs = Infinity;
  #last: GatewayError | undefined;
  /** The target being tried, and how its latest attempt went (settled into its circuit when left). */
  #current: { target: Target; admission: Admission; outcome: Outcome } | undefined;
  #tried: Replica[] = [];

  constructor(
    state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse, request: ChatRequest, model: ModelConfig,
    prompt: number, session: string | undefined, deadline: number,
  ) {
    this.request = request;
    this.#deadline = deadline;
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
        const replica = this.#tried.length < MAX_REPLICA_TRIES && performance.now() < this.#targetEnd ? fleet.pick(this.#key, this.#tried) : undefined;
        if (replica !== undefined) {
          this.#tried.push(replica);
          return { target: current.target, admission: current.admission, replica };
        }
        if (this.#tried.length === 0) this.#retryMs = Math.min(this.#retryMs, fleet.retryAfterMs());
        this.#leaveTarget();
      }
      if (this.#index >= this.#targets.length) break;
      const now = performance.now();
      if (now >= this.#deadline) throw this.#last?.code === 'provider_timeout' ? this.#last : outOfTime();
      const target = this.#targets[this.#index++]!;
      const admission = target.circuit.admit();
      if (admission.ok) {
        this.#current = { target, admission, outcome: 'neutral' };
        this.#tried = [];
        this.#targetEnd = Math.min(now + target.provider.config.timeout_ms, this.#deadline);
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

  /** Runs the answer; then a circuit left mid-way (a failure with no fallback left, a client gone) is settled. */
  async using(work: () => Promise<void>): Promise<void> {
    try {
      await work();
    } finally {
      this.#leaveTarget();
    }
  }

  /** Runs `fn` as one attempt on the attempt's replica; records its outcome and the error for fallback. */
  async run<T>(attempt: Attempt, fn: (call: ProviderCall) => Promise<T>): Promise<T> {
    const { target, replica } = attempt;
    const ac = new CallAbort();
    const call: ProviderCall = new AttemptCall(this.request, this.model, target.upstreamModel, ac, replica, this.#ctx.upstreamHeaders);
    const res = this.#res;
    const onClose = () => { if (!res.writableFinished) ac.abort(CLIENT_GONE); };
    res.on('close', onClose);
    if (res.destroyed) ac.abort(CLIENT_GONE);
    const timer = setTimeout(() => ac.abort(TIMEOUT), Math.max(0, this.#targetEnd - performance.now()));
    const started = performance.now();
    this.#ctx.provider = target.provider.name;
    this.#ctx.upstreamModel = target.upstreamModel;
    const fleet = target.provider.fleet;
    this.#ctx.target = fleet.addressed ? replica.url : null;
    const token = fleet.begin(replica);
    let outcome: Outcome = 'neutral';
    let connectFailure = false;
    try {
      const result = await fn(call);
      outcome = 'success';
      return result;
    } catch (err) {
      const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed while calling the provider.', { cause: err });
      if (ac.reason !== CLIENT_GONE && FALLBACK_CODES.has(e.code) && e.fault) {
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
      this.#metrics.observe(this.#metrics.upstreamDuration, target.provider.name, this.#ctx.upstreamMs / 1000);
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

/** The chain's deadline passed before a target could be tried. */
function outOfTime(): GatewayError {
  return new GatewayError('provider_timeout', 'The model provider did not answer in time.');
}

async function completeAnswer(
  metrics: Metrics, attempts: Attempts, charge: Charge, ctx: RequestContext, res: ServerResponse, renderer: Renderer,
): Promise<void> {
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
      if (res.destroyed) return;
      const answer = renderer.complete({ choices: result.choices, usage, native: result.native });
      if (renderer.keep !== undefined) await keep(renderer.keep(), ctx);
      ctx.ttftMs = performance.now() - ctx.start;
      sendJson(res, 200, answer, answerHeaders(ctx, result.headers));
      metrics.observe(metrics.timeToFirstChunk, target.provider.name, ctx.ttfcMs / 1000);
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
  renderer: Renderer,
): Promise<void> {
  const started = performance.now();
  const stopExplains = hasStop({ request: attempts.request });

  // Keep-alives run from the moment the first upstream is called: one that is slow to send even
  // its headers is silent too. The first keep-alive commits the stream (200 + headers), and
  // from then on no fallback is tried.
  let committed = false;
  let upstreamHeaders: Record<string, string> = {};
  const commit = () => {
    committed = true;
    res.writeHead(200, answerHeaders(ctx, SSE_HEADERS, upstreamHeaders));
    const opening = renderer.open();
    if (opening !== '') res.write(opening);
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
      const held: ChoicesPart[] = [];
      text = '';
      let usage: Usage | undefined;
      try {
        const finished = await attempts.run(attempt, async (call) => {
          const upstream = await target.provider.stream(call);
          upstreamHeaders = upstream.headers;
          const iterator = upstream[Symbol.asyncIterator]();
          // The frames of the parts one upstream read brought, written together: one chunk of
          // the answer's chunked encoding instead of one per frame. Never held past that read.
          let out = '';
          for (;;) {
            let part = upstream.take?.();
            if (part === undefined || out.length >= MAX_BATCH_CHARS) {
              if (out !== '') {
                const ok = writeFrame(res, out, call.abort ?? call.signal);
                out = '';
                if (ok !== true && !(await ok)) {
                  // The client left, or stopped reading until the time ran out: the upstream is
                  // aborted and what was generated so far is charged.
                  void iterator.return?.();
                  if (!res.destroyed) res.destroy();
                  return false;
                }
              }
              if (part === undefined) {
                const step = await iterator.next();
                keepalive.refresh();
                if (step.done === true) break;
                part = step.value;
              }
            }
            if (part.kind === 'usage') { usage = part.usage; continue; }
            for (const c of part.choices) {
              if (roleSent[c.index] !== true) {
                roleSent[c.index] = true;
                if (c.delta.role === undefined) {
                  c.delta = { role: 'assistant', ...c.delta };
                  part.chatJson = undefined;
                }
              }
              if (typeof c.delta.content === 'string') text += c.delta.content;
              if (c.delta.reasoning_content !== undefined) text += c.delta.reasoning_content;
              if (c.delta.tool_calls !== undefined) for (const tc of c.delta.tool_calls) text += tc.function?.arguments ?? '';
            }
            if (!committed) {
              if (!isSubstantive(part.choices, stopExplains)) { held.push(part); continue; }
              commit();
            }
            if (ctx.ttfcMs === undefined) {
              ctx.ttfcMs = performance.now() - started;
              ctx.ttftMs = performance.now() - ctx.start;
              metrics.observe(metrics.timeToFirstChunk, target.provider.name, ctx.ttfcMs / 1000);
            }
            if (held.length > 0) for (const h of held.splice(0)) out += renderer.chunk(h.choices, h.native, h.chatJson);
            out += renderer.chunk(part.choices, part.native, part.chatJson);
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
      const last = renderer.close(ctx.usage);
      if (renderer.keep !== undefined) await keep(renderer.keep(), ctx);
      res.end(last);
      return;
    }
  } catch (err) {
    // A stream cut short, by the client leaving or the upstream failing, is charged for what
    // reached the client (nothing, if only keep-alives did). Not one whose settle was tried and
    // failed (a store fault): that settle's figures were the only ones, and it debited nothing.
    if (committed && charge.pending && text !== '') {
      ctx.usageSource = 'counted';
      ctx.usage = await attempts.counted(text);
      await charge.settle(ctx.usage).catch(() => undefined);
    }
    if (!committed || res.destroyed) throw err;
    // After the first byte an error can only be told in the stream, in the dialect's way; the
    // stream then ends without its normal close, so the client knows the answer is incomplete.
    const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed mid-stream.', { cause: err });
    ctx.code = e.code;
    res.end(renderer.fail(e, ctx.id));
    if (!(err instanceof GatewayError)) throw err;
  } finally {
    clearTimeout(keepalive);
    if (committed) metrics.openStreams.dec();
  }
}
