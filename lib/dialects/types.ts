// A dialect is the wire format a client speaks (chat completions, Anthropic Messages, OpenAI
// Responses...). The pipeline between (auth, policy, context, limits, hold, targets, fallbacks,
// debit, records) is one, and names no dialect: a dialect only parses its request into the
// internal ChatRequest and renders the internal answer, chunks and errors back (STYLE.md: a
// hub, N dialects + M providers rather than N x M translators).

import type { IncomingMessage } from 'node:http';
import type { ChatRequest, ChunkChoice, CompletionChoice, Usage } from '../hub/chat.js';
import type { GatewayError } from '../errors.js';
import type { Config } from '../config/types.js';
import type { Store } from '../store/types.js';
import type { NativeEvent } from '../hub/forms.js';

/** What a dialect may use once the caller is known (stored conversations, per account). */
export interface DialectEnv {
  store: Store;
  account: string;
  config: Config;
}

/** A whole answer, as the pipeline has it once the upstream answered and the debit landed. */
export interface Answer {
  choices: CompletionChoice[];
  usage: Usage;
  /** The upstream's own answer in the client's dialect (model rewritten), when it went natively. */
  native?: string;
  /** The choices as the chat format writes them (exactly JSON.stringify of them), when the provider had it. */
  chatJson?: string;
}

/** Renders one request's answer; created per request, so it may keep a stream's state. */
export interface Renderer {
  /** The JSON body of a non-streaming answer. */
  complete(answer: Answer): string;
  /** SSE frames sent when the stream commits (before any chunk); may be ''. */
  open(): string;
  /**
   * SSE frames for one upstream chunk's choices; may be ''. `native`: the upstream's own event
   * in this dialect (model rewritten, not yet framed), when the upstream speaks it natively.
   * `chatJson`: the choices as JSON, when the provider had it (ChoicesPart).
   */
  chunk(choices: readonly ChunkChoice[], native?: NativeEvent, chatJson?: string): string;
  /** SSE frames that end a whole answer, with its final usage. */
  close(usage: Usage): string;
  /** SSE frames telling of an error after the first byte; the stream then ends. */
  fail(err: GatewayError, requestId: string): string;
  /**
   * Optional: runs once the whole answer was rendered (complete or close) and debited, before
   * its last bytes are sent (Responses keeps what `store: true` asks for). Throws only what
   * the pipeline should log; the answer is sent all the same.
   */
  keep?(): Promise<void>;
}

export interface Dialect {
  readonly name: string;
  /** The caller's credential as an `Authorization` value (Messages also takes x-api-key). */
  credential(req: IncomingMessage): string | undefined;
  /** The validated internal request; throws GatewayError (400s) on a bad body. */
  parse(body: unknown, req: IncomingMessage): ChatRequest;
  /**
   * Optional: runs after parse, once the caller is authenticated and before the model is
   * resolved (Responses prepends the stored conversation of previous_response_id).
   */
  prepare?(request: ChatRequest, env: DialectEnv): Promise<void>;
  /**
   * A new renderer for this request, answering as `model` (the catalog slug); `prompt` is the
   * gateway's estimate of the prompt's tokens (Messages announces it before the answer).
   */
  renderer(request: ChatRequest, model: string, prompt: number): Renderer;
  /** The body of an error answer before the first byte, in this dialect's shape. */
  errorBody(err: GatewayError, requestId: string): string;
}
