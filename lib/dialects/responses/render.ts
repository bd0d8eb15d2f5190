// Renders the pipeline's answer as a Responses API object, and its chunks as the Responses
// stream: response.created / in_progress, then per output item (an assistant message, or a
// function call) added / deltas / done, then response.completed (or incomplete / failed). One
// renderer per request keeps the stream's state, so the final object carries what was streamed.

import { randomBytes } from 'node:crypto';
import type { ChatMessage, ChunkChoice, FinishReason, ToolCall, Usage } from '../../hub/chat.js';
import type { GatewayError } from '../../errors.js';
import type { Answer, Renderer } from '../types.js';
import { merged } from '../../objects.js';
import { eventFrame } from '../../sse/writer.js';

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

interface MessageItem { id: string; type: 'message'; role: 'assistant'; status: string; content: { type: 'output_text'; text: string; annotations: [] }[] }
interface CallItem { id: string; type: 'function_call'; call_id: string; name: string; arguments: string; status: string }
/** A reasoning model's thinking (the upstream's reasoning_content), as OpenAI's open models give it. */
interface ReasoningItem { id: string; type: 'reasoning'; summary: []; content: { type: 'reasoning_text'; text: string }[]; status: string }
/** An item of a response's `output`. */
export type OutputItem = MessageItem | CallItem | ReasoningItem;
type Item = OutputItem;

/**
 * The assistant's turn of a response's output, as a chat message: its text, and its function
 * calls (reasoning is left out, as the chat format has no place for it).
 */
export function assistantTurn(output: readonly Item[]): ChatMessage {
  const text = output.flatMap((i) => (i.type === 'message' ? i.content.map((c) => c.text) : [])).join('');
  const calls: ToolCall[] = output.flatMap((i) => (i.type === 'function_call'
    ? [{ id: i.call_id, type: 'function' as const, function: { name: i.name, arguments: i.arguments } }] : []));
  return { role: 'assistant', content: text === '' && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/** The Responses usage object; cached and reasoning tokens are 0 unless the upstream said. */
export function responsesUsage(u: Usage): Record<string, unknown> {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
    total_tokens: u.total_tokens,
  };
}

function statusOf(finish: FinishReason | null): { status: 'completed' | 'incomplete'; incomplete_details: { reason: string } | null } {
  if (finish === 'length') return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
  if (finish === 'content_filter') return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } };
  return { status: 'completed', incomplete_details: null };
}

/** Fields of the response object that come from the request. */
export interface ResponseHead {
  id: string;
  model: string;
  previousResponseId: string | null;
  store: boolean;
  metadata: Record<string, string>;
  echo: Record<string, unknown>;
}

export class ResponsesRenderer implements Renderer {
  readonly head: ResponseHead;
  readonly createdAt = Math.floor(Date.now() / 1000);
  /** The final response object, once complete() or close() built it. */
  final: Record<string, unknown> | undefined;
  #seq = 0;
  #items: Item[] = [];
  #message: MessageItem | undefined;
  #reasoning: ReasoningItem | undefined;
  /** Function calls being streamed, by the chunk's tool call index. */
  #calls = new Map<number, CallItem>();
  #open: Item | undefined;
  #finish: FinishReason | null = null;

  constructor(head: ResponseHead) {
    this.head = head;
  }

  object(status: string, output: Item[], usage: Usage | null, extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      id: this.head.id,
      object: 'response',
      created_at: this.createdAt,
      status,
      error: null,
      incomplete_details: null,
      model: this.head.model,
      output,
      previous_response_id: this.head.previousResponseId,
      store: this.head.store,
      metadata: this.head.metadata,
      ...this.head.echo,
      usage: usage === null ? null : responsesUsage(usage),
      ...extra,
    };
  }

  #whole(output: Item[], finish: FinishReason | null, usage: Usage): string {
    const s = statusOf(finish);
    this.final = this.object(s.status, output, usage, { incomplete_details: s.incomplete_details });
    return this.serialize(this.final);
  }

  /** The final object as JSON; a subclass may decide more about it first (Responses' `store`). */
  protected serialize(final: Record<string, unknown>): string {
    return JSON.stringify(final);
  }

  complete(answer: Answer): string {
    const choice = answer.choices[0];
    const output: Item[] = [];
    const status = choice?.finish_reason === 'length' ? 'incomplete' : 'completed';
    const calls = choice?.message.tool_calls ?? [];
    const text = choice?.message.content ?? '';
    const reasoning = choice?.message.reasoning_content ?? '';
    if (reasoning !== '') {
      output.push({ id: newId('rs'), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: reasoning }], status: 'completed' });
    }
    if (text !== '' || calls.length === 0) {
      output.push({ id: newId('msg'), type: 'message', role: 'assistant', status, content: [{ type: 'output_text', text, annotations: [] }] });
    }
    for (const c of calls) {
      output.push({ id: newId('fc'), type: 'function_call', call_id: c.id, name: c.function.name, arguments: c.function.arguments, status: 'completed' });
    }
    return this.#whole(output, choice?.finish_reason ?? null, answer.usage);
  }

  #event(type: string, fields: Record<string, unknown>): string {
    return eventFrame(type, JSON.stringify({ type, sequence_number: this.#seq++, ...fields }));
  }

  open(): string {
    const r = this.object('in_progress', [], null);
    return this.#event('response.created', { response: r }) + this.#event('response.in_progress', { response: r });
  }

  /** Ends the item being streamed: its done events. */
  #closeOpen(status: string): string {
    const item = this.#open;
    if (item === undefined) return '';
    this.#open = undefined;
    const index = this.#items.indexOf(item);
    item.status = status;
    let out = '';
    if (item.type === 'message') {
      const part = item.content[0]!;
      out += this.#event('response.output_text.done', { item_id: item.id, output_index: index, content_index: 0, text: part.text });
      out += this.#event('response.content_part.done', { item_id: item.id, output_index: index, content_index: 0, part });
    } else if (item.type === 'reasoning') {
      const part = item.content[0]!;
      out += this.#event('response.reasoning_text.done', { item_id: item.id, output_index: index, content_index: 0, text: part.text });
      out += this.#event('response.content_part.done', { item_id: item.id, output_index: index, content_index: 0, part });
    } else {
      out += this.#event('response.function_call_arguments.done', { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
    }
    return out + this.#event('response.output_item.done', { output_index: index, item });
  }

  #add(item: Item): string {
    this.#items.push(item);
    this.#open = item;
    const added = item.type === 'function_call' ? { ...item } : merged<Item>(item, { content: [] });
    return this.#event('response.output_item.added', { output_index: this.#items.length - 1, item: added });
  }

  chunk(choices: readonly ChunkChoice[]): string {
    let out = '';
    for (const c of choices) {
      if (c.index !== 0) continue; // Responses has one answer (no n)
      const d = c.delta;
      if (d.reasoning_content !== undefined && d.reasoning_content !== '') {
        if (this.#reasoning === undefined || this.#open !== this.#reasoning) {
          out += this.#closeOpen('completed');
          this.#reasoning = { id: newId('rs'), type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: '' }], status: 'in_progress' };
          out += this.#add(this.#reasoning);
          // The SDKs' accumulators expect the part announced before its deltas, as for text.
          out += this.#event('response.content_part.added', {
            item_id: this.#reasoning.id, output_index: this.#items.length - 1, content_index: 0, part: { type: 'reasoning_text', text: '' },
          });
        }
        this.#reasoning.content[0]!.text += d.reasoning_content;
        out += this.#event('response.reasoning_text.delta', {
          item_id: this.#reasoning.id, output_index: this.#items.indexOf(this.#reasoning), content_index: 0, delta: d.reasoning_content,
        });
      }
      if (typeof d.content === 'string' && d.content !== '') {
        if (this.#message === undefined || this.#open !== this.#message) {
          out += this.#closeOpen('completed');
          this.#message = { id: newId('msg'), type: 'message', role: 'assistant', status: 'in_progress', content: [{ type: 'output_text', text: '', annotations: [] }] };
          out += this.#add(this.#message);
          out += this.#event('response.content_part.added', {
            item_id: this.#message.id, output_index: this.#items.length - 1, content_index: 0, part: { type: 'output_text', text: '', annotations: [] },
          });
        }
        this.#message.content[0]!.text += d.content;
        out += this.#event('response.output_text.delta', {
          item_id: this.#message.id, output_index: this.#items.indexOf(this.#message), content_index: 0, delta: d.content,
        });
      }
      for (const tc of d.tool_calls ?? []) {
        let call = this.#calls.get(tc.index);
        if (call === undefined) {
          out += this.#closeOpen('completed');
          call = { id: newId('fc'), type: 'function_call', call_id: tc.id ?? newId('call'), name: tc.function?.name ?? '', arguments: '', status: 'in_progress' };
          this.#calls.set(tc.index, call);
          out += this.#add(call);
        }
        const args = tc.function?.arguments;
        if (args !== undefined && args !== '') {
          call.arguments += args;
          out += this.#event('response.function_call_arguments.delta', { item_id: call.id, output_index: this.#items.indexOf(call), delta: args });
        }
      }
      if (c.finish_reason !== null) this.#finish = c.finish_reason;
    }
    return out;
  }

  close(usage: Usage): string {
    const s = statusOf(this.#finish);
    let out = this.#closeOpen(s.status === 'incomplete' ? 'incomplete' : 'completed');
    if (this.#items.every((i) => i.type === 'reasoning')) {
      // An answer without text or calls is still one message, as a non-streamed one would be.
      this.#message = { id: newId('msg'), type: 'message', role: 'assistant', status: 'in_progress', content: [{ type: 'output_text', text: '', annotations: [] }] };
      out += this.#add(this.#message);
      out += this.#event('response.content_part.added', { item_id: this.#message.id, output_index: this.#items.length - 1, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
      out += this.#closeOpen(s.status);
    }
    const body = this.#whole(this.#items, this.#finish, usage);
    return out + eventFrame(`response.${s.status}`, `{"type":"response.${s.status}","sequence_number":${this.#seq++},"response":${body}}`);
  }

  fail(err: GatewayError, _requestId: string): string {
    for (const item of this.#items) if (item.status === 'in_progress') item.status = 'incomplete';
    const r = this.object('failed', this.#items, null, { error: { code: err.code, message: err.message } });
    return this.#event('response.failed', { response: r });
  }
}
