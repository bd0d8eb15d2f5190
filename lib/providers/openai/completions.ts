// Legacy completions, natively: a client speaking POST /v1/completions to an OpenAI-compatible
// upstream (vLLM, llama.cpp, TGI, OpenAI) gets its body sent as it is to the upstream's own
// {base_url}/completions, the model rewritten, and the upstream's text_completion answers and
// chunks back as they came, the model rewritten to the slug. Each is still read once, for its
// text (commit, empty answers, a client that leaves) and usage (metering). They go on without
// the upstream's `id` and `usage`: the completions dialect gives one answer one id, Tollgate's
// (llama.cpp names its completions `chatcmpl-…`), and reports the usage it charged.

import type { ChunkChoice, CompletionChoice, FinishReason } from '../../hub/chat.js';
import { GatewayError } from '../../errors.js';
import { merged } from '../../objects.js';
import type { SseEvent } from '../../sse/parser.js';
import type { StreamTranslator } from '../http-provider.js';
import { emptyAnswer, isCount, isEmptyAnswer, isObj, mapErrorValue, matchedStop, parseJson, type ChoicesAndUsage, type Obj } from '../shared.js';
import type { ProviderCall, StreamPart } from '../types.js';
import { answerWithChoices, usageOf } from './translate.js';
import { PerChoiceUsage } from '../choices-usage.js';
import type { WholeCompletion } from './completions-whole.js';

/** The dialect (dialects/completions) whose requests go natively; named here, as anthropic/native.ts names its own. */
export const COMPLETIONS_DIALECT = 'completions';

/**
 * Fields llama.cpp's server reads before the OpenAI ones the hold is sized by (n_predict before
 * max_tokens, n_cmpl before n): never sent upstream as the client wrote them, forward_params or not.
 */
export const HOLD_ALIASES: readonly string[] = ['n_predict', 'n_cmpl'];

export function isCompletions(call: ProviderCall): boolean {
  return call.request.native?.dialect === COMPLETIONS_DIALECT;
}

/**
 * The upstream body: the client's, the model rewritten; the output limit the hold was sized for
 * made explicit (servers differ in their default: vLLM and OpenAI 16, llama.cpp unbounded); in a
 * stream, usage asked for as the chat path asks for it (`stream_usage`).
 */
export function completionsBody(call: ProviderCall, stream: boolean, streamUsage: boolean): string {
  const src = call.request.native!.body;
  const out = merged<Obj>(src, { model: call.upstreamModel });
  out.max_tokens = call.request.maxOutputTokens;
  // llama.cpp's names for the output limit and n, which it reads before OpenAI's: never sent, so
  // what the server obeys is the figure held (dialects/completions/parse.ts folds them in).
  for (const key of HOLD_ALIASES) delete out[key];
  const p = call.request.prompts;
  if (p !== undefined && (src.n_cmpl ?? null) !== null) out.n = p.n;
  // A null suffix is no suffix (OpenAI's reading); older llama.cpp refuses the key whatever its value.
  if (out.suffix === null) delete out.suffix;
  if (stream) {
    out.stream = true;
    if (streamUsage) out.stream_options = merged<Obj>(isObj(src.stream_options) ? src.stream_options : {}, { include_usage: true });
  } else {
    delete out.stream;
    delete out.stream_options;
  }
  return JSON.stringify(out);
}

function finishReason(v: unknown): FinishReason {
  return v === 'length' || v === 'content_filter' ? v : 'stop';
}

/** A 2xx answer -> our choices and usage, and the answer itself for the client (model rewritten). */
export function completionsAnswer(text: string, call: ProviderCall, provider: string, status: number): ChoicesAndUsage & { native: string } {
  const body = answerWithChoices(text, call, provider, status);
  const choices = body.choices.filter(isObj).map((c, i): CompletionChoice => {
    const choice: CompletionChoice = {
      index: isCount(c.index) ? c.index : i,
      message: { role: 'assistant', content: typeof c.text === 'string' ? c.text : null, refusal: null },
      logprobs: null,
      finish_reason: finishReason(c.finish_reason),
    };
    const seq = matchedStop(call, c.stop_reason);
    if (choice.finish_reason === 'stop' && seq !== undefined) choice.stop_sequence = seq;
    return choice;
  });
  if (choices.length === 0) throw new GatewayError('provider_error', 'The model provider sent an answer with no choices.');
  if (choices.every((c) => isEmptyAnswer(c, call))) throw emptyAnswer();
  return { choices, usage: usageOf(body.usage), native: JSON.stringify(nativeOf(body, call)) };
}

/** The upstream's object as the client gets it: the model the slug; no id nor usage (the dialect's). */
function nativeOf(body: Obj, call: ProviderCall): Obj {
  const out = merged<Obj>(body, { model: call.model.id });
  delete out.id;
  delete out.usage;
  return out;
}

/** What only llama.cpp's server writes on each choice's last event: its timings (and there, that choice's usage). */
const PER_CHOICE_MARK = '"timings":{';

/**
 * One stream's chunks -> parts, each choices part carrying the upstream's chunk (model
 * rewritten, no id; `usage` null on every chunk when the client asked for usage, absent
 * otherwise: the usage chunk itself is the dialect's to send, after the debit), or, for a client
 * that asked for no stream, fed to `whole`. Whole at [DONE], or once every answer asked for
 * (prompts x n) has its finish reason (some servers omit [DONE]). llama.cpp's usage on a
 * choice's last event is that choice's alone: with several answers asked, they are added up.
 */
export class CompletionsTranslator implements StreamTranslator {
  readonly #call: ProviderCall;
  readonly #provider: string;
  readonly #status: number;
  readonly #finished = new Set<number>();
  readonly #answers: number;
  readonly #whole: WholeCompletion | undefined;
  /** With several answers asked: llama.cpp's usage per choice, added up. */
  readonly #perChoice: PerChoiceUsage | undefined;
  #done = false;

  constructor(call: ProviderCall, provider: string, status: number, whole?: WholeCompletion) {
    this.#call = call;
    this.#provider = provider;
    this.#status = status;
    // The choices it returns: prompts x n (best_of above n generates more, but returns n per prompt).
    const p = call.request.prompts;
    this.#answers = p === undefined ? call.request.answers ?? 1 : p.texts.length * p.n;
    this.#whole = whole;
    this.#perChoice = this.#answers > 1 ? new PerChoiceUsage(p?.n ?? 1, this.#answers) : undefined;
  }

  get ended(): boolean {
    return this.#done || this.#finished.size >= this.#answers;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (ev.data === '[DONE]') {
      this.#done = true;
      return [];
    }
    const body = parseJson(ev.data);
    if (!isObj(body)) throw new GatewayError('provider_error', 'The model provider sent an event that is not valid JSON.');
    if (ev.event === 'error' || (body.error !== undefined && body.error !== null)) throw mapErrorValue(this.#status, body, this.#call, this.#provider);
    const parts: StreamPart[] = [];
    let only: number | undefined;
    if (Array.isArray(body.choices) && body.choices.length > 0) {
      const choices = body.choices.filter(isObj).map((c, i): ChunkChoice => {
        const index = isCount(c.index) ? c.index : i;
        const done = c.finish_reason !== null && c.finish_reason !== undefined;
        if (done) this.#finished.add(index);
        const out: ChunkChoice = { index, delta: typeof c.text === 'string' ? { content: c.text } : {}, finish_reason: done ? finishReason(c.finish_reason) : null };
        const seq = matchedStop(this.#call, c.stop_reason);
        if (out.finish_reason === 'stop' && seq !== undefined) out.stop_sequence = seq;
        return out;
      });
      if (choices.length === 1) only = choices[0]!.index;
      const native: Obj = merged<Obj>(body, { model: this.#call.model.id });
      if (this.#whole !== undefined) {
        this.#whole.add(native);
        parts.push({ kind: 'choices', choices });
      } else {
        delete native.id;
        if (this.#call.request.includeUsage) native.usage = null;
        else delete native.usage;
        parts.push({ kind: 'choices', choices, native: { data: JSON.stringify(native) } });
      }
    }
    const usage = usageOf(body.usage);
    if (usage === undefined) return parts;
    if (this.#perChoice !== undefined && only !== undefined && ev.data.includes(PER_CHOICE_MARK)) {
      const sum = this.#perChoice.add(only, usage);
      parts.push(this.#perChoice.complete ? { kind: 'usage', usage: sum, perChoice: true } : { kind: 'usage', usage: sum });
    } else {
      parts.push({ kind: 'usage', usage });
    }
    return parts;
  }
}
