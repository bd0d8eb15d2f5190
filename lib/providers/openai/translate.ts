// OpenAI-compatible answers, chunks and errors -> ours. Upstreams differ in the details
// (vLLM, llama.cpp, Ollama and TGI each leave out or add fields), so everything is read
// defensively and rebuilt; nothing is passed through by reference.

import type {
  ChunkChoice, ChunkDelta, CompletionChoice, FinishReason, Logprobs, ToolCall, ToolCallDelta, Usage,
} from '../../chat/types.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { emptyAnswer, isCount, isEmptyAnswer, isObj, mapErrorValue, matchedStop, parseJson, tokenCount, usageFrom, type Obj } from '../shared.js';
import type { DiscoveredModel, ProviderCall, StreamPart } from '../types.js';

function finishReason(v: unknown, hasToolCalls: boolean): FinishReason {
  switch (v) {
    case 'stop': case 'length': case 'tool_calls': case 'content_filter': return v;
    case 'function_call': return 'tool_calls';
    default: return hasToolCalls ? 'tool_calls' : 'stop';
  }
}

function logprobs(v: unknown): Logprobs | null {
  if (!isObj(v)) return null;
  return {
    content: Array.isArray(v.content) ? v.content : null,
    refusal: Array.isArray(v.refusal) ? v.refusal : null,
  };
}

/**
 * The upstream's usage, when it is one that can be charged exactly: counts that are safe
 * integers (JSON numbers past 2^53 have already lost their value). Otherwise none, and the
 * answer is counted.
 */
export function usageOf(v: unknown): Usage | undefined {
  if (!isObj(v)) return undefined;
  // Chat's spelling, else the Responses API's (input/output tokens) for a server that reports that.
  const chat = v.prompt_tokens !== undefined || v.completion_tokens !== undefined;
  const prompt = chat ? v.prompt_tokens : v.input_tokens;
  const completion = chat ? v.completion_tokens : v.output_tokens;
  const inDetails = chat ? v.prompt_tokens_details : v.input_tokens_details;
  const outDetails = chat ? v.completion_tokens_details : v.output_tokens_details;
  const pd = isObj(inDetails) ? inDetails : {};
  const cd = isObj(outDetails) ? outDetails : {};
  return usageFrom(tokenCount(prompt), tokenCount(completion), {
    cached: pd.cached_tokens, writes: pd.cache_write_tokens, reasoning: cd.reasoning_tokens,
  });
}

function toolCalls(v: unknown): ToolCall[] | undefined {
  if (!Array.isArray(v) || v.length === 0) return undefined;
  return v.filter(isObj).map((c, i) => {
    const fn = isObj(c.function) ? c.function : {};
    return {
      id: typeof c.id === 'string' ? c.id : `call_${i}`,
      type: 'function' as const,
      function: {
        name: typeof fn.name === 'string' ? fn.name : '',
        arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      },
    };
  });
}

/**
 * A reasoning model's thinking: `reasoning_content` (vLLM, llama.cpp, DeepSeek) or `reasoning`
 * (newer vLLM, OpenRouter-style servers). Passed on as reasoning_content (CONTRACT section 10).
 */
function reasoningOf(m: Obj): string | undefined {
  const r = typeof m.reasoning_content === 'string' ? m.reasoning_content : m.reasoning;
  return typeof r === 'string' && r !== '' ? r : undefined;
}

function toolCallDeltas(v: unknown): ToolCallDelta[] | undefined {
  if (!Array.isArray(v) || v.length === 0) return undefined;
  return v.filter(isObj).map((c, i) => {
    const d: ToolCallDelta = { index: isCount(c.index) ? c.index : i };
    if (typeof c.id === 'string') d.id = c.id;
    if (c.type === 'function' || typeof c.id === 'string') d.type = 'function';
    if (isObj(c.function)) {
      const f: { name?: string; arguments?: string } = {};
      if (typeof c.function.name === 'string') f.name = c.function.name;
      if (typeof c.function.arguments === 'string') f.arguments = c.function.arguments;
      d.function = f;
    }
    return d;
  });
}

/** A 2xx answer (HTTP status `status`) -> our choices and usage. */
export function normalizeCompletion(text: string, call: ProviderCall, provider: string, status: number): { choices: CompletionChoice[]; usage: Usage | undefined } {
  const body = parseJson(text);
  if (!isObj(body)) throw new GatewayError('provider_error', `The model provider sent an answer that is not valid JSON (upstream status ${status}).`);
  if (body.error !== undefined && body.error !== null) throw mapErrorValue(status, body, call, provider);
  if (!Array.isArray(body.choices) || body.choices.length === 0) {
    throw new GatewayError('provider_error', `The model provider sent an answer with no choices (upstream status ${status}).`);
  }
  const choices = body.choices.filter(isObj).map((c, i): CompletionChoice => {
    const m = isObj(c.message) ? c.message : {};
    const calls = toolCalls(m.tool_calls);
    const message: CompletionChoice['message'] = {
      role: 'assistant',
      content: typeof m.content === 'string' ? m.content : null,
      refusal: typeof m.refusal === 'string' ? m.refusal : null,
    };
    const reasoning = reasoningOf(m);
    if (reasoning !== undefined) message.reasoning_content = reasoning;
    if (calls !== undefined) message.tool_calls = calls;
    const choice: CompletionChoice = {
      index: isCount(c.index) ? c.index : i,
      message,
      logprobs: logprobs(c.logprobs),
      finish_reason: finishReason(c.finish_reason, calls !== undefined),
    };
    if (choice.finish_reason === 'stop') {
      const seq = stopSequenceOf(c, body, call);
      if (seq !== undefined) choice.stop_sequence = seq;
    }
    return choice;
  });
  if (choices.length === 0) throw new GatewayError('provider_error', 'The model provider sent an answer with no choices.');
  if (choices.every((c) => isEmptyAnswer(c, call))) throw emptyAnswer();
  return { choices, usage: usageOf(body.usage) };
}

/**
 * Which of the client's stop sequences ended a choice, when the server says: vLLM's
 * `stop_reason` (the stop string; a token id or null otherwise), llama.cpp's `stopping_word`.
 * Servers that say nothing leave it unknown.
 */
function stopSequenceOf(c: Obj, body: Obj, call: ProviderCall): string | undefined {
  return matchedStop(call, c.stop_reason) ?? matchedStop(call, c.stopping_word) ?? matchedStop(call, body.stopping_word);
}

function chunkChoice(c: Obj, i: number, body: Obj, call: ProviderCall): ChunkChoice {
  const d = isObj(c.delta) ? c.delta : {};
  const delta: ChunkDelta = {};
  if (d.role === 'assistant') delta.role = 'assistant';
  if (typeof d.content === 'string') delta.content = d.content;
  if (typeof d.refusal === 'string') delta.refusal = d.refusal;
  const reasoning = reasoningOf(d);
  if (reasoning !== undefined) delta.reasoning_content = reasoning;
  const calls = toolCallDeltas(d.tool_calls);
  if (calls !== undefined) delta.tool_calls = calls;
  const out: ChunkChoice = {
    index: isCount(c.index) ? c.index : i,
    delta,
    finish_reason: c.finish_reason === null || c.finish_reason === undefined ? null : finishReason(c.finish_reason, false),
  };
  if (c.logprobs !== undefined) out.logprobs = logprobs(c.logprobs);
  if (out.finish_reason === 'stop') {
    const seq = stopSequenceOf(c, body, call);
    if (seq !== undefined) out.stop_sequence = seq;
  }
  return out;
}

/** One upstream event of a stream answered with HTTP status `status` -> 0..2 parts (its choices, then its usage). */
export function normalizeChunk(ev: SseEvent, call: ProviderCall, provider: string, status: number): StreamPart[] {
  const body = parseJson(ev.data);
  if (!isObj(body)) throw new GatewayError('provider_error', 'The model provider sent an event that is not valid JSON.');
  if (ev.event === 'error' || (body.error !== undefined && body.error !== null)) {
    throw mapErrorValue(status, body, call, provider);
  }
  const parts: StreamPart[] = [];
  if (Array.isArray(body.choices) && body.choices.length > 0) {
    parts.push({ kind: 'choices', choices: body.choices.filter(isObj).map((c, i) => chunkChoice(c, i, body, call)) });
  }
  const usage = usageOf(body.usage);
  if (usage !== undefined) parts.push({ kind: 'usage', usage });
  return parts;
}

/** GET /models: `{data: [{id, max_model_len?}]}` (OpenAI, vLLM, llama.cpp, Ollama, TGI). */
export function parseModelList(text: string): DiscoveredModel[] {
  const body = parseJson(text);
  if (!isObj(body) || !Array.isArray(body.data)) throw new GatewayError('provider_error', 'GET /models did not answer a model list.');
  const out: DiscoveredModel[] = [];
  for (const m of body.data) {
    if (!isObj(m) || typeof m.id !== 'string' || m.id === '') continue;
    const len = m.max_model_len;
    out.push({ id: m.id, contextWindow: typeof len === 'number' && Number.isInteger(len) && len > 0 ? len : undefined });
  }
  return out;
}

/** llama.cpp GET /props: `default_generation_settings.n_ctx` (or a top-level `n_ctx`). */
export function parseLlamaCppContext(text: string): number | undefined {
  const body = parseJson(text);
  if (!isObj(body)) return undefined;
  const settings = isObj(body.default_generation_settings) ? body.default_generation_settings : body;
  const n = settings.n_ctx ?? body.n_ctx;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** POST /tokenize: vLLM `{count, tokens}`, llama.cpp `{tokens}`. */
export function parseTokenizeCount(text: string): number | undefined {
  const body = parseJson(text);
  if (!isObj(body)) return undefined;
  if (tokenCount(body.count) !== undefined) return body.count as number;
  return Array.isArray(body.tokens) ? body.tokens.length : undefined;
}
