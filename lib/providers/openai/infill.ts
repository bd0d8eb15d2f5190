// Fill-in-the-middle on llama.cpp's server (issue #32). Its /v1/completions does none: older
// releases refuse `suffix` ("Unsupported param: suffix"), newer ones ignore it and answer the
// prompt alone. Its FIM is POST /infill, beside /v1, in its own native format.
// A legacy completions request with a suffix to a provider known to be llama.cpp goes there:
// the body translated (prompt -> input_prefix, suffix -> input_suffix, max_tokens -> n_predict,
// sampling fields by their shared names), and its native completion objects (`content`, `stop`,
// `stop_type`, `tokens_evaluated`/`tokens_predicted`, `timings`; streamed as `data:` events with
// no [DONE], the last one `stop: true`) read back into our choices and usage, which the
// completions dialect renders as text_completion objects and chunks.

import type { ChatRequest, ChunkChoice, CompletionChoice, FinishReason, Usage } from '../../hub/chat.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import type { StreamTranslator } from '../http-provider.js';
import { emptyAnswer, isEmptyAnswer, isObj, mapErrorValue, matchedStop, parseJson, sanitize, tokenCount, usageFrom, type ChoicesAndUsage, type Obj } from '../shared.js';
import type { ProviderCall, StreamPart } from '../types.js';
import { COMPLETIONS_DIALECT, HOLD_ALIASES, isCompletions } from './completions.js';
import { usageOf } from './translate.js';

/** A completions request that asks for fill-in-the-middle: it sent a `suffix` string ('' too: older llama.cpp refuses the key). */
export function wantsInfill(request: ChatRequest): boolean {
  return request.native?.dialect === COMPLETIONS_DIALECT && typeof request.native.body.suffix === 'string';
}

export function isInfill(call: ProviderCall): boolean {
  return isCompletions(call) && wantsInfill(call.request);
}

/** Sampling fields /infill reads under the names completions use (llama.cpp's completion parameters). */
const SAMPLING = ['temperature', 'top_p', 'seed', 'stop', 'presence_penalty', 'frequency_penalty'] as const;

/**
 * What /infill cannot do that the request asks for: one prefix and one answer per call, no
 * echo, and token probabilities only in its own shape. A refusal names the parameter
 * (400 unsupported_value), so the client can tell what to drop; undefined when it can serve.
 */
export function infillRefusal(request: ChatRequest): GatewayError | undefined {
  const p = request.prompts;
  if (p === undefined) return undefined;
  const body = request.native!.body;
  const refuse = (param: string, what: string) => new GatewayError('unsupported_value',
    `Fill-in-the-middle on this model (llama.cpp's /infill) takes ${what}; '${param}' cannot be used with 'suffix'.`, { param });
  if (p.texts.length > 1) return refuse('prompt', 'one prompt');
  if (p.n > 1) return refuse((body.n ?? null) === null ? 'n_cmpl' : 'n', 'one answer (n: 1)');
  if (typeof body.best_of === 'number' && body.best_of > 1) return refuse('best_of', 'one answer (best_of: 1)');
  if (p.echo) return refuse('echo', 'no echo');
  if (typeof body.logprobs === 'number' && body.logprobs > 0) return refuse('logprobs', 'no log probabilities');
  return undefined;
}

/**
 * The /infill body: the prompt and suffix around the hole, the output limit the hold was sized
 * for as n_predict, the sampling fields and the provider's forward_params as the client sent them.
 */
export function infillBody(call: ProviderCall, stream: boolean, forward: readonly string[]): string {
  const src = call.request.native!.body;
  const out: Obj = { input_prefix: call.request.prompts!.texts[0], input_suffix: src.suffix, n_predict: call.request.maxOutputTokens };
  for (const key of SAMPLING) {
    const v = src[key];
    if (v !== undefined && v !== null) out[key] = v;
  }
  for (const key of forward) {
    const v = src[key];
    if (v !== undefined && !HOLD_ALIASES.includes(key)) out[key] = v;
  }
  if (stream) out.stream = true;
  return JSON.stringify(out);
}

/** stop_type (recent servers: eos, word, limit) or the stopped_* flags of older ones -> ours. */
function finishOf(body: Obj): FinishReason {
  return body.stop_type === 'limit' || body.stopped_limit === true ? 'length' : 'stop';
}

/** llama.cpp's OpenAI-style usage when it sends one, else its native counts (the cached prompt tokens from its timings). */
function usageOfNative(body: Obj): Usage | undefined {
  const own = usageOf(body.usage);
  if (own !== undefined) return own;
  const cached = isObj(body.timings) ? body.timings.cache_n : undefined;
  return usageFrom(tokenCount(body.tokens_evaluated), tokenCount(body.tokens_predicted), { cached });
}

/** Text the server cut at the client's stop string: named by stopping_word (stop_type word). */
function stopSequence(call: ProviderCall, body: Obj): string | undefined {
  return matchedStop(call, body.stopping_word);
}

/** A whole /infill answer -> our choice and usage. */
export function infillAnswer(text: string, call: ProviderCall, provider: string, status: number): ChoicesAndUsage {
  const body = parseJson(text);
  if (!isObj(body)) throw new GatewayError('provider_error', `The model provider sent an answer that is not valid JSON (upstream status ${status}).`);
  if (body.error !== undefined && body.error !== null) throw mapErrorValue(status, body, call, provider);
  if (typeof body.content !== 'string') throw new GatewayError('provider_error', `The model provider sent an answer with no content (upstream status ${status}).`);
  const choice: CompletionChoice = {
    index: 0, message: { role: 'assistant', content: body.content, refusal: null }, logprobs: null, finish_reason: finishOf(body),
  };
  const seq = stopSequence(call, body);
  if (choice.finish_reason === 'stop' && seq !== undefined) choice.stop_sequence = seq;
  if (isEmptyAnswer(choice, call)) throw emptyAnswer();
  return { choices: [choice], usage: usageOfNative(body) };
}

/**
 * One /infill stream: each event's `content` a piece of text, the event with `stop: true` the
 * finish and the usage. llama.cpp sends no [DONE]: the stop event makes the answer whole.
 */
export class InfillTranslator implements StreamTranslator {
  ended = false;
  readonly #call: ProviderCall;
  readonly #provider: string;
  readonly #status: number;

  constructor(call: ProviderCall, provider: string, status: number) {
    this.#call = call;
    this.#provider = provider;
    this.#status = status;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (ev.data === '[DONE]') {
      this.ended = true;
      return [];
    }
    const body = parseJson(ev.data);
    if (!isObj(body)) throw new GatewayError('provider_error', 'The model provider sent an event that is not valid JSON.');
    if (ev.event === 'error' || (body.error !== undefined && body.error !== null)) throw mapErrorValue(this.#status, body, this.#call, this.#provider);
    const text = typeof body.content === 'string' ? body.content : '';
    if (body.stop !== true) return text === '' ? [] : [{ kind: 'choices', choices: [{ index: 0, delta: { content: text }, finish_reason: null }] }];
    this.ended = true;
    const last: ChunkChoice = { index: 0, delta: text === '' ? {} : { content: text }, finish_reason: finishOf(body) };
    const seq = stopSequence(this.#call, body);
    if (last.finish_reason === 'stop' && seq !== undefined) last.stop_sequence = seq;
    const parts: StreamPart[] = [{ kind: 'choices', choices: [last] }];
    const usage = usageOfNative(body);
    if (usage !== undefined) parts.push({ kind: 'usage', usage });
    return parts;
  }
}

/** llama.cpp answers /infill for a model without FIM tokens with 501 not_supported_error: the client's request, not a fault. */
export function infillUnsupported(status: number, text: string, call: ProviderCall): GatewayError | undefined {
  if (status !== 501) return undefined;
  const body = parseJson(text);
  const e = isObj(body) && isObj(body.error) ? body.error : undefined;
  if (e === undefined || e.type !== 'not_supported_error') return undefined;
  const why = typeof e.message === 'string' && e.message !== '' ? `: ${sanitize(e.message, call)}` : '.';
  return new GatewayError('unsupported_value', `The model '${call.model.id}' cannot fill in the middle${why}`, { param: 'suffix', fault: false });
}
