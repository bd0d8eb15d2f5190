// The chat completions dialect (POST /v1/chat/completions): the service's own schema, which is
// also the pipeline's internal form, so parsing is validation and rendering adds the envelope
// fields (id, object, created, model) around what the providers produced.

import { randomFillSync } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { ChatRequest, ChunkChoice, Usage } from '../../hub/chat.js';
import { validateChatRequest } from '../../hub/validate.js';
import { envelope, type GatewayError } from '../../errors.js';
import { DONE_FRAME, dataFrame } from '../../sse/writer.js';
import type { Answer, Dialect, Renderer } from '../types.js';
import type { NativeEvent } from '../../hub/forms.js';

/**
 * The usage object of chat completions: the three counts, and the upstream's breakdown where it
 * reported one (prompt_tokens_details.cached_tokens / cache_write_tokens,
 * completion_tokens_details.reasoning_tokens, as OpenAI's schema spells them).
 */
export function chatUsage(u: Usage): Record<string, unknown> {
  const out: Record<string, unknown> = { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens };
  if (u.cached_tokens !== undefined || u.cache_write_tokens !== undefined) {
    const d: Record<string, number> = { cached_tokens: u.cached_tokens ?? 0 };
    if (u.cache_write_tokens !== undefined) d.cache_write_tokens = u.cache_write_tokens;
    out.prompt_tokens_details = d;
  }
  if (u.reasoning_tokens !== undefined) out.completion_tokens_details = { reasoning_tokens: u.reasoning_tokens };
  return out;
}

/**
 * Choices as the chat format has them: the client's stop sequence that ended a choice, when the
 * upstream said which, is its `stop_reason` (as vLLM reports it; CONTRACT section 11), in place
 * of the internal stop_sequence.
 */
function chatChoices<T extends { stop_sequence?: string }>(choices: readonly T[]): readonly T[] {
  if (!choices.some((c) => c.stop_sequence !== undefined)) return choices;
  return choices.map((c) => {
    const { stop_sequence: seq, ...rest } = c;
    return (seq === undefined ? rest : { ...rest, stop_reason: seq }) as T;
  });
}

/** Random bytes for answers' ids, drawn 4 KiB at a time (as randomUUID draws its own). */
const POOL = Buffer.alloc(4096);
let pooled = POOL.length;

/**
 * `chatcmpl-` and 32 random hex digits: 16 bytes of the pool, one flat string (randomUUID's
 * 36 characters are a tree of concatenations, which the regex that took its dashes out
 * flattened and scanned: about 0.6% of a request's CPU).
 */
function completionId(): string {
  if (pooled === POOL.length) {
    randomFillSync(POOL);
    pooled = 0;
  }
  const hex = POOL.toString('hex', pooled, pooled + 16);
  pooled += 16;
  return `chatcmpl-${hex}`;
}

class ChatRenderer implements Renderer {
  readonly #model: string;
  readonly #includeUsage: boolean;
  /** Every chunk of one stream shares its id and created; serialized once. */
  #head: string | undefined;

  constructor(request: ChatRequest, model: string) {
    this.#model = model;
    this.#includeUsage = request.includeUsage;
  }

  complete(answer: Answer): string {
    // The choices as the provider read them (textAnswer): the same bytes JSON.stringify writes below.
    if (answer.chatJson !== undefined) {
      return `{"id":"${completionId()}","object":"chat.completion","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(this.#model)},` +
        `"choices":${answer.chatJson},"usage":${JSON.stringify(chatUsage(answer.usage))}}`;
    }
    return JSON.stringify({
      id: completionId(),
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: this.#model,
      choices: chatChoices(answer.choices),
      usage: chatUsage(answer.usage),
    });
  }

  #chunkHead(): string {
    this.#head ??= `{"id":"${completionId()}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(this.#model)},"choices":`;
    return this.#head;
  }

  open(): string {
    return '';
  }

  chunk(choices: readonly ChunkChoice[], _native?: NativeEvent, chatJson?: string): string {
    // Without include_usage chunks have no usage member; with it, null until the last.
    return dataFrame(this.#chunkHead() + (chatJson ?? JSON.stringify(chatChoices(choices))) + (this.#includeUsage ? ',"usage":null}' : '}'));
  }

  close(usage: Answer['usage']): string {
    const last = this.#includeUsage ? dataFrame(`${this.#chunkHead()}[],"usage":${JSON.stringify(chatUsage(usage))}}`) : '';
    return last + DONE_FRAME;
  }

  fail(err: GatewayError, requestId: string): string {
    // One envelope event and no [DONE]: its absence tells the client the answer is incomplete.
    return dataFrame(JSON.stringify(envelope(err, requestId)));
  }
}

export const chatDialect: Dialect = {
  name: 'chat',
  credential: (req: IncomingMessage) => req.headers.authorization,
  parse: validateChatRequest,
  renderer: (request, model) => new ChatRenderer(request, model),
  errorBody: (err, requestId) => JSON.stringify(envelope(err, requestId)),
};
