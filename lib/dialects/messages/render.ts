// The internal answer and chunks -> Anthropic Messages answers and named SSE events. A stream is
// rebuilt block by block (text, thinking, tool_use with its arguments as input_json_delta), as
// Anthropic would have sent it; the closing message_delta and message_stop wait for close(),
// which the pipeline calls only once the debit is durable. On the native path the upstream's own
// events ({event, data}) are framed as they came, their closing ones held the same way.

import { randomUUID } from 'node:crypto';
import type { ChatRequest, ChunkChoice, FinishReason, Usage } from '../../hub/chat.js';
import type { GatewayError } from '../../errors.js';
import type { Answer, Renderer } from '../types.js';
import type { NativeEvent } from '../../hub/forms.js';
import { eventFrame } from '../../sse/writer.js';
import {
  STOP_REASON_OF,
  type AnthropicUsage, type BlockDelta, type ContentBlock, type ContentBlockDeltaEvent, type ContentBlockStartEvent,
  type Message, type MessageDeltaEvent, type MessageStartEvent, type StopReason, type StreamEventType,
} from '../../hub/anthropic.js';
import { errorJson } from './errors.js';

/**
 * A stop caused by one of the client's stop_sequences is `stop_sequence` when the upstream said
 * which one ended it (Anthropic itself, vLLM's stop_reason, llama.cpp's stopping_word); an
 * upstream that only says "stop" cannot be told apart from a natural end, so that is end_turn.
 */
function stopReason(f: FinishReason | null | undefined, stopSequence: string | undefined): StopReason {
  const reason = f === null || f === undefined || !Object.hasOwn(STOP_REASON_OF, f) ? 'end_turn' : STOP_REASON_OF[f];
  return reason === 'end_turn' && stopSequence !== undefined ? 'stop_sequence' : reason;
}

export function messageId(): string {
  return `msg_${randomUUID().replace(/-/g, '')}`;
}

/**
 * Anthropic's usage: input_tokens excludes the tokens read from and written to the cache, which
 * it reports apart (our prompt_tokens counts all three).
 */
export function usageJson(u: Usage): AnthropicUsage {
  const reads = u.cached_tokens ?? 0;
  const writes = u.cache_write_tokens ?? 0;
  return { input_tokens: u.prompt_tokens - reads - writes, output_tokens: u.completion_tokens, cache_read_input_tokens: reads, cache_creation_input_tokens: writes };
}

function toolInput(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v as Record<string, unknown> : {};
  } catch {
    return {};
  }
}

/** A named event of the Messages stream (its names checked against the wire schema). */
const event: (name: StreamEventType, json: string) => string = eventFrame;

type BlockKind = 'text' | 'thinking' | 'tool';

export class MessagesRenderer implements Renderer {
  readonly #model: string;
  readonly #prompt: number;
  #started = false;
  /** The open block's index and kind; -1 before the first. */
  #index = -1;
  #kind: BlockKind | undefined;
  /** Chat tool call index -> content block index. */
  readonly #tools = new Map<number, number>();
  #finish: FinishReason | null = null;
  #stopSequence: string | undefined;
  /** The upstream's own closing events (native path), framed, held until close(): after the debit. */
  #nativeEnd: string | undefined;

  constructor(_request: ChatRequest, model: string, prompt: number) {
    this.#model = model;
    this.#prompt = prompt;
  }

  complete(answer: Answer): string {
    if (answer.native !== undefined) return answer.native;
    const choice = answer.choices[0];
    const content: ContentBlock[] = [];
    const m = choice?.message;
    if (m?.reasoning_content !== undefined && m.reasoning_content !== '') content.push({ type: 'thinking', thinking: m.reasoning_content, signature: '' });
    if (m?.content !== undefined && m.content !== null && m.content !== '') content.push({ type: 'text', text: m.content });
    for (const c of m?.tool_calls ?? []) content.push({ type: 'tool_use', id: c.id, name: c.function.name, input: toolInput(c.function.arguments) });
    const message: Message = {
      id: messageId(), type: 'message', role: 'assistant', model: this.#model, content,
      stop_reason: stopReason(choice?.finish_reason, choice?.stop_sequence), stop_sequence: choice?.stop_sequence ?? null, usage: usageJson(answer.usage),
    };
    return JSON.stringify(message);
  }

  #start(): string {
    if (this.#started) return '';
    this.#started = true;
    const message: Message = {
      id: messageId(), type: 'message', role: 'assistant', model: this.#model, content: [], stop_reason: null, stop_sequence: null,
      usage: { input_tokens: this.#prompt, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
    };
    return event('message_start', JSON.stringify({ type: 'message_start', message } satisfies MessageStartEvent)) + event('ping', '{"type":"ping"}');
  }

  /** Closes the open block, if any, and opens a new one of `kind`. */
  #open(kind: BlockKind, block: ContentBlock): string {
    const out = this.#stop();
    this.#index++;
    this.#kind = kind;
    return out + event('content_block_start', JSON.stringify({ type: 'content_block_start', index: this.#index, content_block: block } satisfies ContentBlockStartEvent));
  }

  #stop(): string {
    if (this.#kind === undefined) return '';
    this.#kind = undefined;
    return event('content_block_stop', `{"type":"content_block_stop","index":${this.#index}}`);
  }

  #delta(index: number, delta: BlockDelta): string {
    return event('content_block_delta', JSON.stringify({ type: 'content_block_delta', index, delta } satisfies ContentBlockDeltaEvent));
  }

  open(): string {
    // message_start goes with the first chunk: until then keep-alives (SSE comments) are all
    // a client sees, and a stream failing before any chunk is one `error` event.
    return '';
  }

  chunk(choices: readonly ChunkChoice[], native?: NativeEvent): string {
    if (native !== undefined) {
      const frame = eventFrame(native.event, native.data); // any name the upstream sent, newer ones too
      if (native.event === 'message_delta' || native.event === 'message_stop') {
        this.#nativeEnd = (this.#nativeEnd ?? '') + frame;
        return '';
      }
      this.#started = true;
      return frame;
    }
    let out = this.#start();
    for (const c of choices) {
      if (c.index !== 0) continue; // Messages has one answer
      const d = c.delta;
      if (d.reasoning_content !== undefined && d.reasoning_content !== '') {
        if (this.#kind !== 'thinking') out += this.#open('thinking', { type: 'thinking', thinking: '', signature: '' });
        out += this.#delta(this.#index, { type: 'thinking_delta', thinking: d.reasoning_content });
      }
      if (typeof d.content === 'string' && d.content !== '') {
        if (this.#kind !== 'text') out += this.#open('text', { type: 'text', text: '' });
        out += this.#delta(this.#index, { type: 'text_delta', text: d.content });
      }
      for (const tc of d.tool_calls ?? []) {
        let index = this.#tools.get(tc.index);
        if (index === undefined) {
          out += this.#open('tool', { type: 'tool_use', id: tc.id ?? `toolu_${randomUUID().replace(/-/g, '')}`, name: tc.function?.name ?? '', input: {} });
          index = this.#index;
          this.#tools.set(tc.index, index);
        }
        const args = tc.function?.arguments;
        if (args !== undefined && args !== '') out += this.#delta(index, { type: 'input_json_delta', partial_json: args });
      }
      if (c.finish_reason !== null) {
        this.#finish = c.finish_reason;
        this.#stopSequence = c.stop_sequence;
      }
    }
    return out;
  }

  close(usage: Usage): string {
    if (this.#nativeEnd !== undefined) return this.#nativeEnd;
    const delta = { stop_reason: stopReason(this.#finish, this.#stopSequence), stop_sequence: this.#stopSequence ?? null };
    return this.#start() + this.#stop() +
      event('message_delta', JSON.stringify({ type: 'message_delta', delta, usage: usageJson(usage) } satisfies MessageDeltaEvent)) +
      event('message_stop', '{"type":"message_stop"}');
  }

  fail(err: GatewayError, requestId: string): string {
    return event('error', errorJson(err, requestId));
  }
}
