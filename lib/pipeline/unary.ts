// One metered unary call: a request that is not a generation (embeddings, rerank and score,
// audio) and gets one whole answer, on the pieces every metered route uses: the model resolved
// for the principal and of the route's type, content policy, limits and the hold
// (./admit.ts), the model's targets x replicas x circuits with fallbacks (./attempts.ts), one
// debit of the upstream's token count (else the gateway's) or of a price known before the call,
// and the answer with the request's headers. A route parses its body, counts its prompt and
// says what to ask of a target's provider and how to render what it answers.

import { GatewayError } from '../errors.js';
import { sendWhole } from '../http/respond.js';
import type { Provider, ProviderCall } from '../providers/types.js';
import type { ChatRequest } from '../hub/chat.js';
import type { ModelConfig, ModelType } from '../config/types.js';
import { admitAndHold, settleAfter } from './admit.js';
import { Attempts } from './attempts.js';
import { checkModelType } from './checks.js';
import { answerHeaders, type Exchange } from './context.js';

/** A unary answer: its body and content type, the upstream's forwarded headers, and any of the route's own (after the request's). */
export interface UnaryAnswer {
  body: string | Buffer;
  type: string;
  headers: Record<string, string>;
  own?: Record<string, string>;
}

/** What a unary route asks of the call, once its body is parsed and its prompt counted. */
export interface UnaryWork<R> {
  /** The internal request the shared pieces take (unaryRequest). */
  readonly request: ChatRequest;
  /** The prompt's tokens: held, and charged when the upstream reports none. */
  readonly prompt: number;
  /** A price known before the call (audio's, by its length): held and charged instead of the tokens'. */
  readonly units?: bigint;
  /** What the model cannot do on a provider without the method: "cannot <verb> on this provider". */
  readonly verb: string;
  /** The target provider's method called, or undefined when the provider has none. */
  serve(provider: Provider, call: ProviderCall): Promise<R> | undefined;
  /** The tokens the upstream reported; undefined: the gateway's count (`prompt`) is charged. */
  tokens(result: R): number | undefined;
  /** The answer of `result`, `tokens` the ones charged. */
  answer(result: R, tokens: number): UnaryAnswer | Promise<UnaryAnswer>;
}

/** The model a unary request names, resolved for its principal among the healthy ones, and of the route's type. */
export function unaryModel({ state, ctx }: Exchange, name: string, type: ModelType): ModelConfig {
  const principal = ctx.principal!;
  ctx.requestModel = name;
  const model = state.catalog.resolve(name, principal.plan, false, (m) => (state.healthy(m) ? null : 'unhealthy'), principal.key);
  ctx.model = model.id;
  checkModelType(model, type);
  return model;
}

/**
 * The internal request the shared pieces take, its content policy checked: `texts` as user
 * turns, no output (the hold is the input's cost only); `user`, the body's (the end user).
 */
export function unaryRequest({ state }: Exchange, model: string, texts: readonly string[], user?: unknown): ChatRequest {
  const request: ChatRequest = {
    model, messages: texts.map((content) => ({ role: 'user', content })), stream: false, includeUsage: false,
    maxOutputTokens: 0, imageCount: 0, body: {}, user,
  };
  state.policy.check(request.messages);
  return request;
}

/**
 * Admits and holds `work`, calls the model's targets until one answers (a failure before
 * anything reached the client moves to the next replica or fallback), settles the hold once
 * (a client that left after the answer arrived is charged all the same; the debit is durable
 * before the answer reports it), then answers; whatever did not settle is released.
 */
export async function unaryCall<R>(x: Exchange, model: ModelConfig, work: UnaryWork<R>): Promise<void> {
  const admitted = await admitAndHold(x, model, work.request, work.prompt, work.units);
  if (admitted === undefined) return;
  const { ctx, res } = x;
  const attempts = new Attempts(x, work.request, model, work.prompt, admitted.deadline);
  await settleAfter(admitted, ctx, attempts, async () => {
    for (;;) {
      // No promise unless the attempt waits in a queue.
      const next = attempts.attempt();
      const attempt = next instanceof Promise ? await next : next;
      const provider = attempt.target.provider;
      try {
        // Inside the attempt: its replica is begun already, and run() ends it.
        const result = await attempts.run(attempt, (call) => {
          const answer = work.serve(provider, call);
          if (answer === undefined) throw new GatewayError('model_unavailable', `The model '${model.id}' cannot ${work.verb} on this provider.`, { fault: false });
          return answer;
        });
        const upstream = work.tokens(result);
        ctx.usageSource = upstream === undefined ? 'counted' : 'upstream';
        const tokens = upstream ?? work.prompt;
        ctx.usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
        await admitted.charge.settle(ctx.usage, work.units);
        if (res.destroyed) return;
        ctx.ttftMs = performance.now() - ctx.start;
        const answer = await work.answer(result, tokens);
        if (res.destroyed) return;
        const headers = answerHeaders(ctx, answer.headers);
        headers['content-type'] = answer.type;
        if (answer.own !== undefined) Object.assign(headers, answer.own);
        sendWhole(res, 200, answer.body, headers);
        return;
      } catch (err) {
        if (!attempts.canFallBack(err)) throw err;
      }
    }
  });
}
