// The operator's content policy (content_policy.block), held against the hub's messages: built
// once per config state, checked on every generation and embedding before anything is held.

import { GatewayError } from '../errors.js';
import type { ChatMessage } from './chat.js';

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
