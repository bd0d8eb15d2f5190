// Helpers every HTTP provider shares: defensive JSON reading, the "is this answer empty" rule,
// and the mapping of an upstream error (status + body) to the code clients see.

import type { Dispatcher } from 'undici';
import type { CompletionChoice, Usage } from '../hub/chat.js';
import { GatewayError, clip } from '../errors.js';
import type { ProviderCall } from './types.js';

export type Obj = Record<string, unknown>;

/** A translated answer, before the pipeline adds id, model and created. */
export interface ChoicesAndUsage {
  choices: CompletionChoice[];
  usage: Usage | undefined;
  /** The choices as the chat format writes them (exactly JSON.stringify of them), when the provider read them so. */
  chatJson?: string;
}

export function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * A token count an upstream reported, or undefined when it is not one: a count is a
 * non-negative safe integer. Anything else (1.5, -3, 1e300) is no usage at all, so the
 * gateway counts the tokens itself rather than bill a figure it cannot represent exactly.
 */
export function tokenCount(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
}

/** The breakdown an upstream may add to its usage, as it sent it (absent: undefined or null). */
export interface UsageDetails {
  /** Prompt tokens read from its prompt cache, part of the prompt count. */
  cached?: unknown;
  /** Prompt tokens written to its prompt cache, part of the prompt count. */
  writes?: unknown;
  /** Completion tokens spent reasoning, part of the completion count. */
  reasoning?: unknown;
}

/** An optional count: absent -> undefined; a count -> it; anything else -> NaN (implausible). */
function detail(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  return tokenCount(v) ?? Number.NaN;
}

/**
 * Usage from prompt and completion counts and their breakdown; undefined when a count is
 * missing, a sum is not exact, or the breakdown is implausible (a detail that is not a count,
 * cache reads and writes above the prompt, reasoning above the completion). Like any usage the
 * gateway cannot bill exactly, implausible usage is none at all: the gateway counts instead.
 */
export function usageFrom(prompt: number | undefined, completion: number | undefined, details: UsageDetails = {}): Usage | undefined {
  if (prompt === undefined || completion === undefined) return undefined;
  const total = prompt + completion;
  if (!Number.isSafeInteger(total)) return undefined;
  const usage: Usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total };
  const cached = detail(details.cached);
  const writes = detail(details.writes);
  const reasoning = detail(details.reasoning);
  // NaN fails every comparison, so each check is written to pass only for real counts.
  if (cached !== undefined) {
    if (!(cached <= prompt)) return undefined;
    usage.cached_tokens = cached;
  }
  if (writes !== undefined) {
    if (!(writes <= prompt - (cached ?? 0))) return undefined;
    usage.cache_write_tokens = writes;
  }
  if (reasoning !== undefined) {
    if (!(reasoning <= completion)) return undefined;
    usage.reasoning_tokens = reasoning;
  }
  return usage;
}

/** A token count an upstream may report: a non-negative safe integer. */
export function isCount(v: unknown): v is number {
  return tokenCount(v) !== undefined;
}

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function isEventStream(headers: Dispatcher.ResponseData['headers']): boolean {
  const ct = headers['content-type'];
  return typeof ct === 'string' && ct.toLowerCase().includes('text/event-stream');
}

/** Did the client send stop sequences? Then an answer they emptied is its own doing. */
export function hasStop(call: Pick<ProviderCall, 'request'>): boolean {
  const stop = call.request.body.stop;
  return typeof stop === 'string' ? stop !== '' : Array.isArray(stop) && stop.length > 0;
}

/**
 * The client's stop sequence that `v` names, if it is one: servers that say which stop string
 * ended an answer (vLLM's choices[].stop_reason, llama.cpp's stopping_word, Anthropic's
 * stop_sequence). A token id or any other string is not the client's sequence.
 */
export function matchedStop(call: Pick<ProviderCall, 'request'>, v: unknown): string | undefined {
  if (typeof v !== 'string' || v === '') return undefined;
  const stop = call.request.body.stop;
  return stop === v || (Array.isArray(stop) && stop.includes(v)) ? v : undefined;
}

/**
 * A legitimate answer has text, reasoning, tool calls or a refusal, or says why it has none:
 * length, content_filter, or a stop that the client's own stop sequences explain.
 */
export function isEmptyAnswer(c: CompletionChoice, call: ProviderCall): boolean {
  return (c.message.content === null || c.message.content === '') &&
    (c.message.reasoning_content === undefined || c.message.reasoning_content === '') &&
    c.message.tool_calls === undefined && c.message.refusal === null &&
    c.finish_reason !== 'length' && c.finish_reason !== 'content_filter' &&
    !(c.finish_reason === 'stop' && hasStop(call));
}

export const EMPTY_ANSWER = 'The model provider sent an empty answer.';

/**
 * An empty answer is tried on the next fallback, but it is not the upstream's fault (a model
 * may well answer nothing to some prompt), so it never opens a circuit for other accounts.
 */
export function emptyAnswer(): GatewayError {
  return new GatewayError('provider_error', EMPTY_ANSWER, { fault: false });
}
export const ENDED_EARLY = 'The model provider ended the stream before the answer was complete.';

const CONTEXT_ERROR = /context[ _-]?length|maximum context|context window|context size|too many tokens|prompt is too long|input is too long|exceeds? the (?:available )?context/i;

function errorFields(body: unknown): { message: string; code: unknown; status: unknown } {
  if (!isObj(body)) return { message: typeof body === 'string' ? body : '', code: undefined, status: undefined };
  const e = isObj(body.error) ? body.error : body;
  const message = typeof e.message === 'string' ? e.message
    : typeof body.error === 'string' ? body.error
      : typeof body.detail === 'string' ? body.detail : '';
  return { message, code: e.code ?? e.type, status: e.code ?? body.code };
}

/**
 * The upstream's words, with its internal model name replaced by the client's slug. Upstreams
 * often quote the request back, so the words are clipped like any echo of client input.
 */
export function sanitize(message: string, call: ProviderCall): string {
  return clip(message.split(call.upstreamModel).join(call.model.id).replace(/\s+/g, ' ').trim());
}

/** An upstream error (HTTP status + parsed body) -> the code clients see. */
export function mapErrorValue(status: number, body: unknown, call: ProviderCall, provider: string): GatewayError {
  const { message, code, status: inner } = errorFields(body);
  const effective = typeof inner === 'number' ? inner : status;
  if (code === 'context_length_exceeded' || CONTEXT_ERROR.test(message)) {
    return new GatewayError('context_length_exceeded', message !== ''
      ? `The request does not fit the model's context window: ${sanitize(message, call)}`
      : "The request does not fit the model's context window.", { param: 'messages' });
  }
  if (effective === 429 || effective === 503 || code === 'rate_limit_exceeded' || code === 'rate_limit_error' || code === 'overloaded_error') {
    return new GatewayError('model_unavailable', `The model provider '${provider}' is overloaded or rate-limited; retry later.`, {
      headers: { 'retry-after': '1', 'retry-after-ms': '1000' }, fault: effective !== 429 && code !== 'rate_limit_exceeded',
    });
  }
  if (effective === 400 || effective === 422) {
    return new GatewayError('invalid_value', `The model provider rejected the request${message !== '' ? `: ${sanitize(message, call)}` : '.'}`);
  }
  // The status the upstream really sent: an error body can come with a 200.
  const what = status >= 200 && status <= 299 ? 'sent an error' : 'failed';
  return new GatewayError('provider_error', `The model provider '${provider}' ${what} (upstream status ${status}).`);
}

export function mapErrorBody(status: number, text: string, call: ProviderCall, provider: string): GatewayError {
  const body = parseJson(text);
  return mapErrorValue(status, body === undefined ? text : body, call, provider);
}
