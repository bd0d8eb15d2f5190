// The attempt chain of one admitted request: its model's targets (provider, then fallbacks) x
// their replicas x their circuits, within the chain's deadline (./admit.ts); where a target's
// replicas are all full, the wait in its provider's queue (CONTRACT section 13).

import { GatewayError, retryAfterHeaders } from '../errors.js';
import { AttemptCall, type ProviderCall } from '../providers/types.js';
import type { Target } from '../state.js';
import { CallAbort, TIMEOUT } from '../upstream/abort.js';
import type { Admission, Outcome } from '../upstream/health.js';
import { AffinityKey, type Fleet, type ProviderQueue, type Replica, type Slot } from '../upstream/balance/index.js';
import { isConnectFailure } from '../upstream/http.js';
import type { ChatRequest, Usage } from '../hub/chat.js';
import type { ModelConfig } from '../config/types.js';
import { inferenceHeaders, queuePriority } from '../auth/principal.js';
import type { Exchange } from './context.js';

const CLIENT_GONE = Symbol('tollgate.client-gone');

/** Failures that another target may not repeat: the next fallback is worth a try. */
const FALLBACK_CODES: ReadonlySet<string> = new Set(['provider_error', 'provider_timeout', 'model_unavailable']);

/** Replicas of one target a request tries before it moves on to the next target. */
const MAX_REPLICA_TRIES = 3;

/** One attempt: a target (provider and upstream model), its circuit's admission, a replica (begun: its token goes back to Fleet.end). */
export interface Attempt { target: Target; admission: Admission; replica: Replica; token: number }

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
 * requests again. A target whose provider has a queue and whose replicas are all full (or
 * that has others waiting already) is waited for there, its timeout_ms counted from the end of
 * the wait; a wait refused (max_queued, its place given up, max_wait_ms) ends the request in
 * 503 model_overloaded.
 */
export class Attempts {
  readonly request: ChatRequest;
  readonly model: ModelConfig;
  /** The prompt estimate, with the model's tokenizer. */
  readonly prompt: number;
  readonly #targets: Target[];
  readonly #x: Exchange;
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
  /** The inference gateway's headers of this request (#callHeaders). */
  #inference: Record<string, string> | undefined;

  /** `deadline`: Admitted.deadline; a request's x-session-affinity header keys its replica (AffinityKey). */
  constructor(x: Exchange, request: ChatRequest, model: ModelConfig, prompt: number, deadline: number) {
    this.request = request;
    this.#deadline = deadline;
    this.model = model;
    this.prompt = prompt;
    const targets = x.state.targets(model);
    // Fallback targets whose provider cannot answer this request at all are skipped.
    this.#targets = targets.some((t) => t.provider.refuses?.(request) !== undefined) ? targets.filter((t) => t.provider.refuses?.(request) === undefined) : targets;
    this.#x = x;
    const session = x.req.headers['x-session-affinity'];
    this.#key = new AffinityKey(request, typeof session === 'string' ? session : undefined);
  }

  /** The next replica of the current target, else of the next target the circuits let through, or the error that ends the request. */
  async next(): Promise<Attempt> {
    return this.attempt();
  }

  /**
   * next() without a promise unless the attempt waits in a provider's queue: throws the error
   * that ends the request.
   */
  attempt(): Attempt | Promise<Attempt> {
    for (;;) {
      const current = this.#current;
      if (current !== undefined) {
        const fleet = current.target.provider.fleet;
        const open = this.#tried.length < MAX_REPLICA_TRIES && performance.now() < this.#targetEnd;
        // A target's first attempt queues behind those already waiting, or when every replica is full.
        const queue = open && this.#tried.length === 0 ? fleet.queue : undefined;
        const slot = open && !(queue !== undefined && queue.size > 0) ? fleet.take(this.#key, this.#tried) : undefined;
        if (slot === undefined && queue !== undefined && fleet.available()) {
          return this.#queued(fleet, queue, current.target).then((queued) => {
            if (queued !== undefined) return this.#begun(current, queued);
            this.#noSlot(fleet);
            return this.attempt();
          });
        }
        if (slot !== undefined) return this.#begun(current, slot);
        this.#noSlot(fleet);
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
        if (target.provider.fleet.queue !== undefined) this.#x.ctx.queueMs ??= 0;
      } else {
        this.#retryMs = Math.min(this.#retryMs, admission.retryMs);
      }
    }
    if (this.#last !== undefined) throw this.#last;
    throw new GatewayError('model_unavailable', `The model '${this.model.id}' is unavailable right now; retry later.`, {
      headers: retryAfterHeaders(this.#retryMs),
    });
  }

  /** The attempt on `slot`, a replica of the current target. */
  #begun(current: { target: Target; admission: Admission }, slot: Slot): Attempt {
    this.#tried.push(slot.replica);
    return { target: current.target, admission: current.admission, replica: slot.replica, token: slot.token };
  }

  /** The current target has no replica to try: it is left (with its retry time, when none was tried). */
  #noSlot(fleet: Fleet): void {
    if (this.#tried.length === 0) this.#retryMs = Math.min(this.#retryMs, fleet.retryAfterMs());
    this.#leaveTarget();
  }

  /**
   * Waits in `queue` for a replica of `fleet`, for its max_wait_ms (or less: the chain's
   * deadline), leaving at once when the client goes; the target's time starts once it has one.
   * Its band is the key's priority, else the plan's; its share the plan's fair_weight.
   * Refused: the current target's circuit is left untouched and 503 model_overloaded ends the
   * request.
   */
  async #queued(fleet: Fleet, queue: ProviderQueue, target: Target): Promise<Slot | undefined> {
    const { ctx, res } = this.#x;
    const principal = ctx.principal;
    const plan = principal?.plan;
    const fairness = queue.config.fairness;
    const waiting = queue.wait({
      flow: principal === undefined || fairness === 'none' ? '' : fairness === 'key' ? principal.credentialId : principal.accountId,
      priority: principal === undefined ? 'normal' : queuePriority(principal),
      weight: plan?.fair_weight ?? 1,
      cost: this.prompt + (this.request.maxOutputTokens ?? this.model.max_output_tokens),
      home: fleet.home(this.#key),
      pick: () => fleet.pick(this.#key, this.#tried),
      waitMs: Math.min(queue.config.max_wait_ms, this.#deadline - performance.now()),
    });
    const onClose = () => { if (!res.writableFinished) waiting.leave(); };
    res.on('close', onClose);
    if (res.destroyed) waiting.leave();
    let result;
    try {
      result = await waiting.result;
    } finally {
      res.off('close', onClose);
    }
    const waited = result.waitedMs;
    ctx.queueMs = (ctx.queueMs ?? 0) + waited;
    this.#x.metrics.observeQueueWait(target.provider.name, 'slot' in result ? 'dispatched' : 'refused' in result ? 'refused' : 'gone', waited / 1000);
    if ('slot' in result) {
      this.#targetEnd = Math.min(performance.now() + target.provider.config.timeout_ms, this.#deadline);
      return result.slot;
    }
    // No attempt of the target was made: its circuit is settled as neutral (it learns nothing).
    this.#leaveTarget();
    const headers = retryAfterHeaders('retryMs' in result ? result.retryMs : queue.retryAfterMs());
    headers['x-tollgate-queue-ms'] = String(Math.round(ctx.queueMs));
    if ('gone' in result) throw new GatewayError('model_overloaded', 'The client left while its request was queued.', { headers });
    throw new GatewayError('model_overloaded', overloaded(this.model.id, result.refused, queue.config.max_wait_ms), { headers });
  }

  /** Settles the current target's circuit with how its last attempt went. */
  #leaveTarget(): void {
    const current = this.#current;
    if (current === undefined) return;
    this.#current = undefined;
    current.target.circuit.settle(current.admission, current.outcome);
  }

  /** Once the answer is done (settleAfter): a circuit left mid-way (a failure with no fallback left, a client gone) is settled. */
  leave(): void {
    this.#leaveTarget();
  }

  /** A call's own headers: tracing's; for a provider behind an inference gateway, the verified caller's too (made once per request). */
  #callHeaders(target: Target): Record<string, string> | undefined {
    const ctx = this.#x.ctx;
    const principal = ctx.principal;
    if (!target.provider.config.inference_gateway || principal === undefined) return ctx.upstreamHeaders;
    this.#inference ??= inferenceHeaders(principal, ctx.upstreamHeaders);
    return this.#inference;
  }

  /** Runs `fn` as one attempt on the attempt's replica; records its outcome and the error for fallback. */
  async run<T>(attempt: Attempt, fn: (call: ProviderCall) => Promise<T>): Promise<T> {
    const { target, replica } = attempt;
    const ac = new CallAbort();
    const call: ProviderCall = new AttemptCall(this.request, this.model, target.upstreamModel, ac, replica, this.#callHeaders(target));
    const { ctx, metrics, res } = this.#x;
    const onClose = () => { if (!res.writableFinished) ac.abort(CLIENT_GONE); };
    res.on('close', onClose);
    if (res.destroyed) ac.abort(CLIENT_GONE);
    const timer = setTimeout(() => ac.abort(TIMEOUT), Math.max(0, this.#targetEnd - performance.now()));
    const started = performance.now();
    ctx.provider = target.provider.name;
    ctx.upstreamModel = target.upstreamModel;
    const fleet = target.provider.fleet;
    ctx.target = fleet.addressed ? replica.url : null;
    const token = attempt.token;
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
      // The target's time ran out: no other replica of it is tried. (Its timer may fire a
      // millisecond before performance.now() reaches #targetEnd: node's timers count from the
      // loop's cached time, so the clock alone cannot tell.)
      if (ac.reason === TIMEOUT && this.#current?.target === target) this.#targetEnd = 0;
      throw e;
    } finally {
      clearTimeout(timer);
      res.off('close', onClose);
      fleet.end(replica, token, outcome, connectFailure);
      if (this.#current !== undefined && this.#current.target === target) {
        this.#current.outcome = outcome;
        if (outcome === 'success') this.#leaveTarget();
      }
      ctx.upstreamMs = performance.now() - started;
      metrics.observe(metrics.upstreamDuration, target.provider.name, ctx.upstreamMs / 1000);
    }
  }

  /** Usage counted by the gateway: the prompt estimate and the tokens of `completion`. */
  async counted(completion: string): Promise<Usage> {
    const c = await this.#x.state.textTokens(completion, this.model);
    return { prompt_tokens: this.prompt, completion_tokens: c, total_tokens: this.prompt + c };
  }

  /**
   * May the request go on to another replica or target after `err`? Only if nothing reached
   * the client; next() says whether one is left (else it throws this error again).
   */
  canFallBack(err: unknown): boolean {
    return err instanceof GatewayError && FALLBACK_CODES.has(err.code) && !this.#x.res.destroyed;
  }
}

/** Why a queued request was refused (WaitResult of ../upstream/balance/queue.ts). */
function overloaded(model: string, why: 'full' | 'displaced' | 'timeout', maxWaitMs: number): string {
  switch (why) {
    case 'full': return `The model '${model}' is overloaded: its queue is full; retry later.`;
    case 'displaced': return `The model '${model}' is overloaded: its queue is full and this request gave its place to one of a higher priority or of a tenant under its share; retry later.`;
    case 'timeout': return `The model '${model}' is overloaded: no replica had room within ${maxWaitMs} ms; retry later.`;
  }
}

/** The chain's deadline passed before a target could be tried. */
function outOfTime(): GatewayError {
  return new GatewayError('provider_timeout', 'The model provider did not answer in time.');
}

