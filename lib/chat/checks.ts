// Checks that need the chosen model or the operator's policy: images, content policy and
// the context window. They run before anything is held or sent upstream.

import type { ModelConfig } from '../config/types.js';
import { GatewayError } from '../errors.js';
import { counter, estimatePromptTokens, imageCost } from '../tokens/count.js';
import type { ChatMessage, ChatRequest } from './types.js';

export function checkImages(req: ChatRequest, model: ModelConfig): void {
  if (req.imageCount === 0) return;
  if (!model.supports_vision) {
    throw new GatewayError('model_does_not_support_images', `The model '${model.id}' does not accept images.`, { param: 'messages' });
  }
  if (req.imageCount > model.max_images) {
    throw new GatewayError('too_many_images', `The model '${model.id}' accepts at most ${model.max_images} images per request; this one has ${req.imageCount}.`, { param: 'messages' });
  }
}

/**
 * content_policy.block: a match anywhere in the messages' text refuses the request: their
 * content, and the names and arguments of their tool calls, which go upstream as the model's
 * own earlier turns. Each string is tested once per pattern.
 */
export class ContentPolicy {
  readonly #patterns: RegExp[];

  constructor(block: readonly string[]) {
    this.#patterns = block.map((re) => new RegExp(re, 'u'));
  }

  check(messages: readonly ChatMessage[]): void {
    if (this.#patterns.length === 0) return;
    for (const m of messages) {
      if (typeof m.content === 'string') this.#test(m.content);
      else if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'text') this.#test(p.text);
      // Validation checks tool_calls on assistant messages only, and messages are forwarded as
      // they are, so whatever role carries them is scanned, defensively.
      const calls: unknown = m.tool_calls;
      if (Array.isArray(calls)) for (const c of calls) this.#testToolCall(c);
    }
  }

  #testToolCall(call: unknown): void {
    if (call === null || typeof call !== 'object') return;
    const fn: unknown = (call as { function?: unknown }).function;
    if (fn === null || typeof fn !== 'object') return;
    const { name, arguments: args } = fn as { name?: unknown; arguments?: unknown };
    if (typeof name === 'string') this.#test(name);
    if (typeof args === 'string') this.#test(args);
  }

  #test(text: string): void {
    for (const re of this.#patterns) {
      if (re.test(text)) throw new GatewayError('content_blocked', 'The request was blocked by the content policy of this service.', { param: 'messages' });
    }
  }
}

function textBytesUpperBound(messages: readonly ChatMessage[], imageTokens: number): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length * 3;
    else if (Array.isArray(m.content)) for (const p of m.content) n += p.type === 'text' ? p.text.length * 3 : imageCost(p.image_url.url, imageTokens);
    if (m.name !== undefined) n += m.name.length * 3 + 1;
    if (m.tool_calls !== undefined) for (const c of m.tool_calls) n += (c.function.name.length + c.function.arguments.length) * 3 + 3;
    n += 3;
  }
  return n + 3;
}

/**
 * The prompt estimate, or undefined when the prompt surely fits: a byte-level BPE token is at
 * least one byte, so a prompt whose UTF-8 size already fits skips the tokenizer.
 */
export function fitsContext(req: ChatRequest, model: ModelConfig): boolean {
  const output = req.maxOutputTokens ?? model.max_output_tokens;
  if (textBytesUpperBound(req.messages, model.image_tokens) + output <= model.context_window) return true;
  return promptTokens(req, model) + output <= model.context_window;
}

/** The prompt estimate with the model's tokenizer and image cost. */
export function promptTokens(req: ChatRequest, model: ModelConfig): number {
  return estimatePromptTokens(req.messages, counter(model.tokenizer), model.image_tokens);
}

/** Prompt estimate + requested output above the context window -> 422. */
export function checkContext(req: ChatRequest, model: ModelConfig, prompt: number): void {
  const output = req.maxOutputTokens ?? model.max_output_tokens;
  if (prompt + output > model.context_window) {
    throw new GatewayError(
      'context_length_exceeded',
      `This model's maximum context length is ${model.context_window} tokens; the request has about ${prompt} prompt tokens and asks for ${output} output tokens.`,
      { param: 'messages' },
    );
  }
}
