// `tokenizer: upstream`: the model server counts the tokens itself (vLLM and llama.cpp serve
// POST /tokenize), so holds, context checks and abort charges follow the model's own
// vocabulary rather than an OpenAI encoding (3.7x off on Hindi for a Qwen model). Each piece
// of text is counted once and cached (a conversation resends its earlier turns every time),
// every call is bounded by the provider's tokenize_timeout_ms, and whatever the server does
// not answer in time is estimated locally (o200k_base) instead: counting never fails a request.

import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lru.js';
import type { ChatMessage } from '../chat/types.js';
import type { Provider } from '../providers/types.js';
import { counter, estimatePromptTokens } from './count.js';

/** Texts shorter than this are cache keys themselves; longer ones by their SHA-256. */
const KEY_INLINE = 256;
/** Texts shorter than this are not worth a round trip: the local estimate counts them. */
const MIN_REMOTE = 16;

export class UpstreamTokens {
  readonly #provider: Provider & { tokenize: NonNullable<Provider['tokenize']> };
  readonly #cache = new LRUCache<string, number>(entryBound(20_000));
  readonly #timeoutMs: number;
  #failures = 0;

  constructor(provider: Provider & { tokenize: NonNullable<Provider['tokenize']> }) {
    this.#provider = provider;
    this.#timeoutMs = provider.config.tokenize_timeout_ms;
  }

  /** Calls to the server that failed or ran out of time (and were estimated instead). */
  get failures(): number {
    return this.#failures;
  }

  /** The token count of `text` as the server counts it, or the local estimate. */
  async count(text: string, upstreamModel: string, signal?: AbortSignal): Promise<number> {
    if (text.length < MIN_REMOTE) return counter('upstream')(text);
    const key = `${upstreamModel}\u0000${text.length < KEY_INLINE ? text : createHash('sha256').update(text).digest('base64')}`;
    const hit = this.#cache.get(key);
    if (hit !== undefined) return hit;
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    try {
      const n = await this.#provider.tokenize(text, upstreamModel, signal === undefined ? timeout : AbortSignal.any([signal, timeout]));
      this.#cache.set(key, n);
      return n;
    } catch {
      this.#failures++;
      return counter('upstream')(text);
    }
  }

  /** A conversation's prompt tokens: each message's text counted by the server, in parallel. */
  async prompt(messages: readonly ChatMessage[], upstreamModel: string, imageTokens: number): Promise<number> {
    const texts = new Map<string, number>();
    estimatePromptTokens(messages, (t) => { texts.set(t, 0); return 0; }, imageTokens);
    await Promise.all([...texts.keys()].map(async (t) => texts.set(t, await this.count(t, upstreamModel))));
    return estimatePromptTokens(messages, (t) => texts.get(t) ?? 0, imageTokens);
  }
}
