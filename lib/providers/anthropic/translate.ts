// Our chat requests -> Anthropic Messages API requests, and its answers, events and errors
// back -> ours. A streamed answer is rebuilt chunk for chunk as an OpenAI-compatible server
// would have sent it, so clients cannot tell the two kinds of upstream apart. The wire shapes and
// the stop-reason map are hub/anthropic.ts, shared with the messages dialect.

import type {
  ChatMessage, ChunkChoice, ChunkDelta, CompletionChoice, ContentPart, FinishReason, ToolCall, Usage,
} from '../../hub/chat.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { emptyAnswer, isEmptyAnswer, isObj, mapErrorValue, matchedStop, parseJson, tokenCount, usageFrom, type Obj } from '../shared.js';
import type { ProviderCall, StreamPart } from '../types.js';
import {
  FINISH_REASON_OF,
  type ImageBlock, type MessageParam, type TextBlock, type MessagesRequest, type RequestBlock, type StopReason, type Tool, type ToolChoice,
} from '../../hub/anthropic.js';

type Block = RequestBlock;
type Turn = MessageParam;

// ---- request ---------------------------------------------------------------------------

/** A message's text: a string as is, text parts joined by newlines. */
function textOf(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((p) => (p.type === 'text' ? p.text : '')).filter((t) => t !== '').join('\n');
}

const DATA_URL = /^data:(image\/[A-Za-z0-9.+-]+);base64,(.*)$/s;

function partBlock(p: ContentPart): TextBlock | ImageBlock | undefined {
  if (p.type === 'text') return p.text === '' ? undefined : { type: 'text', text: p.text };
  const url = p.image_url.url;
  const m = DATA_URL.exec(url);
  if (m !== null) return { type: 'image', source: { type: 'base64', media_type: m[1]!, data: m[2]! } };
  return { type: 'image', source: { type: 'url', url } };
}

function contentOf(content: ChatMessage['content']): string | Block[] | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  return content.map(partBlock).filter((b): b is TextBlock | ImageBlock => b !== undefined);
}

function toolInput(args: string): Obj {
  const v = parseJson(args);
  return isObj(v) ? v : {};
}

function asBlocks(content: string | Block[]): Block[] {
  if (typeof content !== 'string') return content;
  return content === '' ? [] : [{ type: 'text', text: content }];
}

/** Appends a turn; Anthropic wants user and assistant to alternate, so a repeat is merged. */
function push(turns: Turn[], role: Turn['role'], content: string | Block[]): void {
  const last = turns.at(-1);
  if (last !== undefined && last.role === role) last.content = [...asBlocks(last.content), ...asBlocks(content)];
  else turns.push({ role, content });
}

function conversation(messages: readonly ChatMessage[]): { system: string; turns: Turn[] } {
  const system: string[] = [];
  const turns: Turn[] = [];
  for (const m of messages) {
    switch (m.role) {
      case 'system': case 'developer': {
        const text = textOf(m.content);
        if (text !== '') system.push(text);
        break;
      }
      case 'user': {
        const content = contentOf(m.content);
        if (content !== undefined) push(turns, 'user', content);
        break;
      }
      case 'tool':
        push(turns, 'user', [{ type: 'tool_result', tool_use_id: m.tool_call_id ?? '', content: textOf(m.content) }]);
        break;
      case 'assistant': {
        const calls = m.tool_calls ?? [];
        if (calls.length === 0) {
          const content = contentOf(m.content);
          if (content !== undefined) push(turns, 'assistant', content);
          break;
        }
        const text = textOf(m.content);
        const blocks: Block[] = text === '' ? [] : [{ type: 'text', text }];
        for (const c of calls) {
          blocks.push({ type: 'tool_use', id: c.id, name: c.function.name, input: toolInput(c.function.arguments) });
        }
        push(turns, 'assistant', blocks);
        break;
      }
    }
  }
  return { system: system.join('\n\n'), turns };
}

function tools(v: unknown): Tool[] {
  if (!Array.isArray(v)) return [];
  const out: Tool[] = [];
  for (const t of v) {
    if (!isObj(t) || t.type !== 'function' || !isObj(t.function)) continue;
    const { name, description, parameters } = t.function;
    if (typeof name !== 'string') continue;
    const schema = isObj(parameters) ? parameters : { type: 'object', properties: {} };
    // name, description, input_schema: in that order on the wire.
    out.push(typeof description === 'string' ? { name, description, input_schema: schema } : { name, input_schema: schema });
  }
  return out;
}

function toolChoice(v: unknown, parallel: unknown): ToolChoice | undefined {
  let choice: ToolChoice | undefined;
  if (v === 'auto') choice = { type: 'auto' };
  else if (v === 'required') choice = { type: 'any' };
  else if (v === 'none') choice = { type: 'none' };
  else if (isObj(v) && v.type === 'function' && isObj(v.function) && typeof v.function.name === 'string') {
    choice = { type: 'tool', name: v.function.name };
  }
  if (parallel === false) {
    choice ??= { type: 'auto' };
    if (choice.type !== 'none') choice.disable_parallel_tool_use = true;
  }
  return choice;
}

function stopSequences(v: unknown): string[] | undefined {
  const list = typeof v === 'string' ? [v] : Array.isArray(v) ? v.filter((s): s is string => typeof s === 'string') : [];
  return list.length > 0 ? list : undefined;
}

/** The body of POST /v1/messages, with the operator's forward_params added. */
export function buildRequest(call: ProviderCall, stream: boolean, forwardParams: readonly string[] = []): MessagesRequest & Obj {
  const request = call.request;
  const src = request.body;
  const { system, turns } = conversation(request.messages);
  const model = call.upstreamModel;
  const maxTokens = request.maxOutputTokens ?? call.model.max_output_tokens;
  // model, max_tokens, system, messages: in that order on the wire.
  const out: MessagesRequest & Obj = system !== ''
    ? { model, max_tokens: maxTokens, system, messages: turns }
    : { model, max_tokens: maxTokens, messages: turns };
  const stop = stopSequences(src.stop);
  if (stop !== undefined) out.stop_sequences = stop;
  if (typeof src.temperature === 'number') out.temperature = src.temperature;
  if (typeof src.top_p === 'number') out.top_p = src.top_p;
  if (typeof src.user === 'string') out.metadata = { user_id: src.user };
  const defs = tools(src.tools);
  if (defs.length > 0) {
    out.tools = defs;
    const choice = toolChoice(src.tool_choice, src.parallel_tool_calls);
    if (choice !== undefined) out.tool_choice = choice;
  }
  // The operator's forward_params (top_k, thinking...) go as they are; they never replace the
  // fields above.
  for (const key of forwardParams) {
    if (src[key] !== undefined && !(key in out)) out[key] = src[key];
  }
  if (stream) out.stream = true;
  return out;
}

// ---- answers -----------------------------------------------------------------------------

export function finishReason(v: unknown): FinishReason {
  // Any newer reason than the schema knows is a stop.
  return typeof v === 'string' && Object.hasOwn(FINISH_REASON_OF, v) ? FINISH_REASON_OF[v as StopReason] : 'stop';
}

/**
 * Anthropic usage -> ours. Its input_tokens excludes the tokens read from and written to the
 * cache; our prompt_tokens counts them all (input + reads + writes), with the reads and writes
 * kept apart for their prices. A read or write count that is there but not a count makes the
 * usage implausible (none: the gateway counts).
 */
export function usageOf(v: unknown): Usage | undefined {
  if (!isObj(v)) return undefined;
  const input = tokenCount(v.input_tokens);
  const output = tokenCount(v.output_tokens);
  if (input === undefined || output === undefined) return undefined;
  const reads = v.cache_read_input_tokens ?? undefined;
  const writes = v.cache_creation_input_tokens ?? undefined;
  const r = reads === undefined ? 0 : tokenCount(reads);
  const w = writes === undefined ? 0 : tokenCount(writes);
  if (r === undefined || w === undefined) return undefined;
  const prompt = input + r + w;
  return usageFrom(Number.isSafeInteger(prompt) ? prompt : undefined, output, { cached: reads, writes });
}

/** A 2xx answer (HTTP status `status`) -> our choices and usage. */
export function toCompletion(text: string, call: ProviderCall, provider: string, status: number): { choices: CompletionChoice[]; usage: Usage | undefined } {
  const body = parseJson(text);
  if (!isObj(body)) throw new GatewayError('provider_error', `The model provider sent an answer that is not valid JSON (upstream status ${status}).`);
  if (body.type === 'error' || (body.error !== undefined && body.error !== null)) throw mapErrorValue(status, body, call, provider);
  if (!Array.isArray(body.content)) throw new GatewayError('provider_error', `The model provider sent an answer with no content (upstream status ${status}).`);
  let content: string | null = null;
  let reasoning = '';
  const calls: ToolCall[] = [];
  for (const b of body.content) {
    if (!isObj(b)) continue;
    if (b.type === 'text' && typeof b.text === 'string') content = (content ?? '') + b.text;
    else if (b.type === 'thinking' && typeof b.thinking === 'string') reasoning += b.thinking;
    else if (b.type === 'tool_use') {
      calls.push({
        id: typeof b.id === 'string' ? b.id : `call_${calls.length}`,
        type: 'function',
        function: { name: typeof b.name === 'string' ? b.name : '', arguments: JSON.stringify(b.input ?? {}) },
      });
    }
  }
  const message: CompletionChoice['message'] = { role: 'assistant', content, refusal: null };
  if (reasoning !== '') message.reasoning_content = reasoning;
  if (calls.length > 0) message.tool_calls = calls;
  const choice: CompletionChoice = { index: 0, message, logprobs: null, finish_reason: finishReason(body.stop_reason) };
  const seq = body.stop_reason === 'stop_sequence' ? matchedStop(call, body.stop_sequence) : undefined;
  if (seq !== undefined) choice.stop_sequence = seq;
  if (isEmptyAnswer(choice, call)) throw emptyAnswer();
  return { choices: [choice], usage: usageOf(body.usage) };
}

// ---- streams -----------------------------------------------------------------------------

function choices(delta: ChunkDelta, finish: FinishReason | null = null, stopSequence?: string): StreamPart {
  const choice: ChunkChoice = { index: 0, delta, finish_reason: finish, logprobs: null };
  if (stopSequence !== undefined) choice.stop_sequence = stopSequence;
  return { kind: 'choices', choices: [choice] };
}

/** One stream's events -> parts. Remembers which block is which tool call, and the usage. */
export class StreamTranslator {
  readonly #call: ProviderCall;
  readonly #provider: string;
  /** Content block index -> tool call index (tool blocks counted from 0). */
  readonly #tools = new Map<number, number>();
  readonly #usage: Obj = {};
  readonly #status: number;
  #finished = false;
  /** message_stop was seen: the answer is complete. */
  ended = false;

  constructor(call: ProviderCall, provider: string, status: number) {
    this.#call = call;
    this.#provider = provider;
    this.#status = status;
  }

  /** The usage counts the stream has told so far (later events' values over earlier ones'). */
  get usageSeen(): Readonly<Obj> {
    return this.#usage;
  }

  #addUsage(v: unknown): void {
    if (!isObj(v)) return;
    // Later events repeat or update earlier counts; a value that is not a count is kept too,
    // so that usageOf finds the usage implausible rather than bill a part of it.
    for (const [k, n] of Object.entries(v)) if (n !== undefined && n !== null) this.#usage[k] = n;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (this.ended) return [];
    const body = parseJson(ev.data);
    if (!isObj(body)) throw new GatewayError('provider_error', 'The model provider sent an event that is not valid JSON.');
    const type = typeof body.type === 'string' ? body.type : ev.event;
    // An error event's own type decides (overloaded and rate-limited: 503; a too-long prompt:
    // 422); the message states the stream's real HTTP status, not an invented one.
    if (type === 'error' || ev.event === 'error') throw mapErrorValue(this.#status, body, this.#call, this.#provider);
    switch (type) {
      case 'message_start':
        this.#addUsage(isObj(body.message) ? body.message.usage : undefined);
        return [choices({ role: 'assistant', content: '' })];
      case 'content_block_start': return this.#blockStart(body);
      case 'content_block_delta': return this.#blockDelta(body);
      case 'message_delta': {
        this.#addUsage(body.usage);
        const reason = isObj(body.delta) ? body.delta.stop_reason : undefined;
        if (typeof reason !== 'string' || this.#finished) return [];
        this.#finished = true;
        const seq = reason === 'stop_sequence' && isObj(body.delta) ? matchedStop(this.#call, body.delta.stop_sequence) : undefined;
        return [choices({}, finishReason(reason), seq)];
      }
      case 'message_stop': {
        this.ended = true;
        const parts = this.#finished ? [] : [choices({}, 'stop')];
        this.#finished = true;
        const usage = usageOf(this.#usage);
        if (usage !== undefined) parts.push({ kind: 'usage', usage });
        return parts;
      }
      default: return []; // ping, content_block_stop, and event types added later
    }
  }

  #blockStart(body: Obj): StreamPart[] {
    const block = body.content_block;
    if (!isObj(block) || typeof body.index !== 'number') return [];
    if (block.type === 'text') return typeof block.text === 'string' && block.text !== '' ? [choices({ content: block.text })] : [];
    if (block.type !== 'tool_use') return [];
    const index = this.#tools.size;
    this.#tools.set(body.index, index);
    return [choices({
      tool_calls: [{
        index,
        id: typeof block.id === 'string' ? block.id : `call_${index}`,
        type: 'function',
        function: { name: typeof block.name === 'string' ? block.name : '', arguments: '' },
      }],
    })];
  }

  #blockDelta(body: Obj): StreamPart[] {
    const d = body.delta;
    if (!isObj(d)) return [];
    if (d.type === 'text_delta') return typeof d.text === 'string' && d.text !== '' ? [choices({ content: d.text })] : [];
    if (d.type === 'thinking_delta') {
      return typeof d.thinking === 'string' && d.thinking !== '' ? [choices({ reasoning_content: d.thinking })] : [];
    }
    if (d.type !== 'input_json_delta' || typeof d.partial_json !== 'string' || d.partial_json === '') return [];
    const index = typeof body.index === 'number' ? this.#tools.get(body.index) : undefined;
    if (index === undefined) return [];
    return [choices({ tool_calls: [{ index, function: { arguments: d.partial_json } }] })];
  }
}
