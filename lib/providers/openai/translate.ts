// OpenAI-compatible answers, chunks and errors -> ours. Upstreams differ in the details
// (vLLM, llama.cpp, Ollama and TGI each leave out or add fields), so everything is read
// defensively and rebuilt; nothing is passed through by reference.

import type {
  ChunkChoice, ChunkDelta, CompletionChoice, FinishReason, Logprobs, ToolCall, ToolCallDelta, Usage,
} from '../../hub/chat.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { emptyAnswer, hasStop, isCount, isEmptyAnswer, isObj, mapErrorValue, matchedStop, parseJson, tokenCount, usageFrom, type ChoicesAndUsage, type Obj } from '../shared.js';
import type { ChoicesPart, DiscoveredModel, ProviderCall, StreamPart } from '../types.js';

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

/**
 * A 2xx answer's body with at least one choice: not JSON, an error object (mapped as the
 * upstream's error) or no choices is thrown as ours.
 */
export function answerWithChoices(text: string, call: ProviderCall, provider: string, status: number): Obj & { choices: unknown[] } {
  const body = parseJson(text);
  if (!isObj(body)) throw new GatewayError('provider_error', `The model provider sent an answer that is not valid JSON (upstream status ${status}).`);
  if (body.error !== undefined && body.error !== null) throw mapErrorValue(status, body, call, provider);
  if (!Array.isArray(body.choices) || body.choices.length === 0) {
    throw new GatewayError('provider_error', `The model provider sent an answer with no choices (upstream status ${status}).`);
  }
  return body as Obj & { choices: unknown[] };
}

/** A 2xx answer (HTTP status `status`) -> our choices and usage, by pattern (textAnswer) where it can. */
export function normalizeCompletion(text: string, call: ProviderCall, provider: string, status: number): ChoicesAndUsage {
  return textAnswer(text, call) ?? parsedCompletion(text, call, provider, status);
}

/** normalizeCompletion by the full parse. */
export function parsedCompletion(text: string, call: ProviderCall, provider: string, status: number): ChoicesAndUsage {
  const body = answerWithChoices(text, call, provider, status);
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
 * `stop_reason` (the stop string; a token id or null otherwise), llama.cpp's `stopping_word`
 * (in its `__verbose` member, sent when the request asked `verbose: true`). Servers that say
 * nothing leave it unknown: never guessed from the text.
 */
function stopSequenceOf(c: Obj, body: Obj, call: ProviderCall): string | undefined {
  const verbose = isObj(body.__verbose) ? body.__verbose : undefined;
  return matchedStop(call, c.stop_reason) ?? matchedStop(call, c.stopping_word) ?? matchedStop(call, body.stopping_word) ??
    matchedStop(call, verbose?.stopping_word);
}

/** The client's stop sequence a llama.cpp chunk's `__verbose.stopping_word` names, if any. */
export function verboseStoppingWord(data: string, call: ProviderCall): string | undefined {
  const body = parseJson(data);
  return isObj(body) && isObj(body.__verbose) ? matchedStop(call, body.__verbose.stopping_word) : undefined;
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

// Most chunks of a stream carry one choice's next piece of text and nothing else. Written
// compactly, as OpenAI, vLLM, SGLang, Ollama and TGI write them (llama.cpp with its own field
// order), such a chunk is read by the patterns below instead of JSON.parse and the rebuild:
// the text's JSON literal is kept as it came (re-encoded only when it holds an escape or a
// surrogate, where JSON.stringify might spell it differently), and the choices' JSON, exactly
// as JSON.stringify writes them, goes with the part so the chat dialect need not build it
// again. Anything else (whitespace, a role, a finish, logprobs, tool calls, two choices, usage,
// an error, a member the slow path reads) is left to the full parse. The two paths give the
// same part for every input (test/property/text-chunk.test.ts).

/**
 * A JSON string literal, strictly as JSON allows it (so JSON.parse of a match cannot fail);
 * unrolled (runs of plain characters between escapes), so that it never backtracks.
 */
const STR = String.raw`"[^"\\\u0000-\u001f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\u0000-\u001f]*)*"`;
const NUM = String.raw`-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?`;
/** A member the slow path ignores: a string or a number under a name it does not read, or null under any name but choices. */
const MEMBER = String.raw`"(?:(?!error"|choices"|usage")[a-z_]+":(?:${STR}|${NUM})|(?!choices")[a-z_]+":null)`;
const INDEX = String.raw`(0|[1-9]\d{0,14})`;
const CHOICES = '"choices":[{';
/** Sticky: tried where CHOICES is found. */
const TEXT_CHOICE = new RegExp(String.raw`"choices":\[\{(?:"index":${INDEX},"delta":\{"content":(${STR})\}(,"logprobs":null)?,"finish_reason":null|"finish_reason":null,"index":${INDEX},"delta":\{"content":(${STR})\})\}\]`, 'y');
const BEFORE = new RegExp(String.raw`^\{(?:${MEMBER},)*$`);
const AFTER = new RegExp(String.raw`^(?:,${MEMBER})*\}$`);
/** Where JSON.stringify of the decoded text could spell it otherwise than the literal sent. */
const RESPELL = /[\\\ud800-\udfff]/;

/**
 * A JSON string literal as JSON.stringify would spell it, and its text: re-spelled only where it
 * holds an escape or a surrogate (JSON.stringify may spell those otherwise), else as it came.
 */
function respelled(literal: string): [literal: string, content: string] {
  if (!RESPELL.test(literal)) return [literal, literal.slice(1, -1)];
  const content = JSON.parse(literal) as string;
  return [JSON.stringify(content), content];
}

/**
 * The members one stream's chunks last had around their choices, found good: a stream repeats
 * its id, created and model in every chunk, so they are checked once, then compared.
 */
export interface TextChunkMemo { before: string | undefined; after: string | undefined }

/** The part of a chunk that carries only one choice's text, or undefined for the full parse. */
export function textChunk(data: string, memo: TextChunkMemo = { before: undefined, after: undefined }): ChoicesPart | undefined {
  const at = data.indexOf(CHOICES);
  if (at === -1) return undefined;
  TEXT_CHOICE.lastIndex = at;
  const m = TEXT_CHOICE.exec(data);
  if (m === null) return undefined;
  const before = data.slice(0, at);
  if (before !== memo.before) {
    if (!BEFORE.test(before)) return undefined;
    memo.before = before;
  }
  const after = data.slice(at + m[0].length);
  if (after !== memo.after) {
    if (!AFTER.test(after)) return undefined;
    memo.after = after;
  }
  const llama = m[1] === undefined;
  const index = Number(llama ? m[4] : m[1]);
  const [literal, content] = respelled(llama ? m[5]! : m[2]!);
  const logprobs = m[3] !== undefined;
  const choice: ChunkChoice = { index, delta: { content }, finish_reason: null };
  if (logprobs) choice.logprobs = null;
  return {
    kind: 'choices', choices: [choice],
    chatJson: `[{"index":${index},"delta":{"content":${literal}},"finish_reason":null${logprobs ? ',"logprobs":null' : ''}}]`,
  };
}

// A whole answer of one choice of text, written compactly (the members servers add to a message
// or a choice empty or null), with the three usage counts after its choices, is read by the
// patterns below in the same way: its text's literal is kept and the choices' JSON goes with
// the answer, so neither the full parse, the rebuild nor the chat dialect's serialisation of
// the choices is paid. An answer whose client sent stop sequences takes the full parse (which
// of them ended it is read from members the pattern does not take). Anything else takes the
// full parse too; test/property/text-answer.test.ts holds the two paths together.

/** A member of a whole answer the full parse ignores: a string, number or null under a name it does not read; a null error. */
const ANSWER_MEMBER = String.raw`"(?:(?!(?:error|choices|usage)")[a-z_]+":(?:${STR}|${NUM}|null)|error":null)`;
/** Members of a message or a choice that change nothing when empty or null (vLLM's, OpenAI's). */
const EMPTY = String.raw`,"(?:refusal|reasoning_content|reasoning|function_call|audio)":null|,"(?:annotations|tool_calls)":\[\]`;
const COUNT = '(0|[1-9]\\d{0,14})';
/** Sticky: tried where CHOICES is found. */
const TEXT_ANSWER = new RegExp(String.raw`"choices":\[\{"index":${INDEX},"message":\{"role":"assistant"(?:${EMPTY})*,"content":(${STR})(?:${EMPTY})*\}(?:,"logprobs":null)?,"finish_reason":"(stop|length)"(?:,"stop_reason":null)?\}\],` +
  String.raw`"usage":\{"prompt_tokens":${COUNT},(?:"completion_tokens":${COUNT},"total_tokens":${NUM}|"total_tokens":${NUM},"completion_tokens":${COUNT})(?:,"prompt_tokens_details":null)?\}`, 'y');
const ANSWER_BEFORE = new RegExp(String.raw`^\{(?:${ANSWER_MEMBER},)*$`);
const ANSWER_AFTER = new RegExp(String.raw`^(?:,${ANSWER_MEMBER})*\}$`);

/** A whole answer of one choice of text, read by pattern, or undefined for the full parse. */
export function textAnswer(text: string, call: Pick<ProviderCall, 'request'>): ChoicesAndUsage | undefined {
  const at = text.indexOf(CHOICES);
  if (at === -1 || hasStop(call)) return undefined;
  TEXT_ANSWER.lastIndex = at;
  const m = TEXT_ANSWER.exec(text);
  if (m === null || m[2] === '""') return undefined;
  if (!ANSWER_BEFORE.test(text.slice(0, at)) || !ANSWER_AFTER.test(text.slice(at + m[0].length))) return undefined;
  const index = Number(m[1]);
  const [literal, content] = respelled(m[2]!);
  const finish = m[3] as 'stop' | 'length';
  const prompt = Number(m[4]);
  const completion = Number(m[5] ?? m[6]);
  return {
    choices: [{ index, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: finish }],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
    chatJson: `[{"index":${index},"message":{"role":"assistant","content":${literal},"refusal":null},"logprobs":null,"finish_reason":"${finish}"}]`,
  };
}

/** One upstream event of a stream answered with HTTP status `status` -> 0..2 parts (its choices, then its usage). */
export function normalizeChunk(ev: SseEvent, call: ProviderCall, provider: string, status: number, memo?: TextChunkMemo): StreamPart[] {
  const text = ev.event === 'error' ? undefined : textChunk(ev.data, memo);
  return text === undefined ? parsedChunk(ev, call, provider, status) : [text];
}

/** normalizeChunk by the full parse. */
export function parsedChunk(ev: SseEvent, call: ProviderCall, provider: string, status: number): StreamPart[] {
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

/**
 * GET /models: `{data: [{id, max_model_len?}]}` (OpenAI, vLLM, llama.cpp, Ollama, TGI), and
 * whether the server is llama.cpp's (it lists its models `owned_by: "llamacpp"`).
 */
export function parseModelList(text: string): { models: DiscoveredModel[]; llamaCpp: boolean } {
  const body = parseJson(text);
  if (!isObj(body) || !Array.isArray(body.data)) throw new GatewayError('provider_error', 'GET /models did not answer a model list.');
  const models: DiscoveredModel[] = [];
  let llamaCpp = false;
  for (const m of body.data) {
    if (!isObj(m) || typeof m.id !== 'string' || m.id === '') continue;
    if (m.owned_by === 'llamacpp') llamaCpp = true;
    const len = m.max_model_len;
    models.push({ id: m.id, contextWindow: typeof len === 'number' && Number.isInteger(len) && len > 0 ? len : undefined });
  }
  return { models, llamaCpp };
}

/** llama.cpp GET /props: `default_generation_settings.n_ctx` (or a top-level `n_ctx`). */
export function parseLlamaCppContext(text: string): number | undefined {
  const body = parseJson(text);
  if (!isObj(body)) return undefined;
  const settings = isObj(body.default_generation_settings) ? body.default_generation_settings : body;
  const n = settings.n_ctx ?? body.n_ctx;
  return typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Is this GET /props answer llama.cpp's server's (its generation settings and slots)? */
export function isLlamaCppProps(text: string): boolean {
  const body = parseJson(text);
  return isObj(body) && (isObj(body.default_generation_settings) || typeof body.total_slots === 'number');
}

/** POST /tokenize: vLLM `{count, tokens}`, llama.cpp `{tokens}`. */
export function parseTokenizeCount(text: string): number | undefined {
  const body = parseJson(text);
  if (!isObj(body)) return undefined;
  if (tokenCount(body.count) !== undefined) return body.count as number;
  return Array.isArray(body.tokens) ? body.tokens.length : undefined;
}
