// The legacy completions dialect (POST /v1/completions, CONTRACT section 14): what code-completion
// clients and many model-server tools speak. Parsed into the internal request (parse.ts); an
// OpenAI-compatible upstream answers it natively (its own text_completion objects, model
// rewritten, passed on as they came, but for their id and usage), any other provider's answer is
// rendered here as text_completion objects and chunks, then `data: [DONE]`. One answer has one
// id, Tollgate's `cmpl-…`, on the JSON answer and on every chunk, the usage chunk too; the usage
// reported is the one charged. Errors are the chat envelope.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { ChunkChoice, CompletionChoice, FinishReason, Usage } from '../../hub/chat.js';
import { envelope, type GatewayError } from '../../errors.js';
import { DONE_FRAME, dataFrame } from '../../sse/writer.js';
import { chatUsage } from '../chat/index.js';
import type { Answer, Dialect, Renderer } from '../types.js';
import type { NativeEvent } from '../../hub/forms.js';
import { parseCompletions } from './parse.js';

/** Completions know stop, length and content_filter; a tool call (never asked for here) ends as stop. */
function finish(f: FinishReason | null): 'stop' | 'length' | 'content_filter' | null {
  return f === 'tool_calls' ? 'stop' : f;
}

function choiceJson(c: CompletionChoice): Record<string, unknown> {
  return { text: c.message.content ?? '', index: c.index, logprobs: null, finish_reason: finish(c.finish_reason) };
}

function chunkChoiceJson(c: ChunkChoice): Record<string, unknown> {
  return { text: c.delta.content ?? '', index: c.index, logprobs: null, finish_reason: finish(c.finish_reason) };
}

/**
 * An upstream's own object (its JSON, without id: providers/openai/completions.ts) with `id` put
 * first, and `last` (the usage member) at its end when given.
 */
function withId(id: string, native: string, last = ''): string {
  const members = native.length > 2 ? native.slice(1, -1) : '';
  return `{"id":"${id}"${members === '' ? '' : `,${members}`}${last}}`;
}

class CompletionsRenderer implements Renderer {
  readonly #model: string;
  readonly #includeUsage: boolean;
  /** The answer's one id: its JSON's, every chunk's. */
  readonly #id = completionId();
  /** Every chunk of one stream shares its id and created; serialized once. */
  #head: string | undefined;

  constructor(includeUsage: boolean, model: string) {
    this.#model = model;
    this.#includeUsage = includeUsage;
  }

  complete(answer: Answer): string {
    if (answer.native !== undefined) return withId(this.#id, answer.native, `,"usage":${JSON.stringify(chatUsage(answer.usage))}`);
    return JSON.stringify({
      id: this.#id, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: this.#model,
      choices: answer.choices.map(choiceJson), usage: chatUsage(answer.usage),
    });
  }

  #chunkHead(): string {
    this.#head ??= `{"id":"${this.#id}","object":"text_completion","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(this.#model)},"choices":`;
    return this.#head;
  }

  open(): string {
    return '';
  }

  chunk(choices: readonly ChunkChoice[], native?: NativeEvent): string {
    // The upstream's own chunk (model rewritten, usage as the client asked) goes as it came, with this answer's id.
    if (native !== undefined) return dataFrame(withId(this.#id, native.data));
    if (choices.length === 0) return '';
    return dataFrame(this.#chunkHead() + JSON.stringify(choices.map(chunkChoiceJson)) + (this.#includeUsage ? ',"usage":null}' : '}'));
  }

  close(usage: Usage): string {
    const last = this.#includeUsage ? dataFrame(`${this.#chunkHead()}[],"usage":${JSON.stringify(chatUsage(usage))}}`) : '';
    return last + DONE_FRAME;
  }

  fail(err: GatewayError, requestId: string): string {
    // One envelope event and no [DONE]: its absence tells the client the answer is incomplete.
    return dataFrame(JSON.stringify(envelope(err, requestId)));
  }
}

function completionId(): string {
  return `cmpl-${randomUUID().replace(/-/g, '')}`;
}

export const completionsDialect: Dialect = {
  name: 'completions',
  credential: (req: IncomingMessage) => req.headers.authorization,
  parse: parseCompletions,
  renderer: (request, model) => new CompletionsRenderer(request.includeUsage, model),
  errorBody: (err, requestId) => JSON.stringify(envelope(err, requestId)),
};
