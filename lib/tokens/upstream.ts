// `tokenizer: upstream`: the model server counts the tokens itself (vLLM and llama.cpp serve
// POST /tokenize), so holds, context checks and abort charges follow the model's own
// vocabulary rather than an OpenAI encoding (3.7x off on Hindi for a Qwen model). Each piece
// of text is counted once and cached (a conversation resends its earlier turns every time),
// every call is bounded by the provider's tokenize_timeout_ms, and whatever the server does
// not answer in time is estimated locally (o200k_base) instead: counting never fails a request.

import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lru.js';
import type { ChatMessage } from '../hub/chat.js';
import { countUpTo, promptParts } from './count.js';

/** Texts shorter than this are cache keys themselves; longer ones by their SHA-256. */
const KEY_INLINE = 256;
/** Texts shorter than this are not worth a round trip: the local estimate counts them. */
const MIN_REMOTE = 16;
/**
 * How far a model's own vocabulary may count fewer tokens than the local estimate (o200k_base):
 * a text whose estimate passes a limit this many times over is not sent to be counted.
 */
const LOCAL_SLACK = 4;

/** A provider whose upstream counts tokens (providers/types.ts Provider, with tokenize). */
export interface TokenizingProvider {
  readonly config: { readonly tokenize_timeout_ms: number };
  /** The upstream's own token count of `text` (vLLM's and llama.cpp's POST /tokenize). */
  tokenize(text: string, upstreamModel: string, signal: AbortSignal): Promise<number>;
}

export class UpstreamTokens {
  readonly #provider: TokenizingProvider;
  readonly #cache = new LRUCache<string, number>(entryBound(20_000));
  readonly #timeoutMs: number;
  #failures = 0;

  constructor(provider: TokenizingProvider) {
    this.#provider = provider;
    this.#timeoutMs = provider.config.tokenize_timeout_ms;
  }

  /** Calls to the server that failed or ran out of time (and were estimated instead). */
  get failures(): number {
    return this.#failures;
  }

  /**
   * The token count of `text` as the server counts it, or the local estimate, counted no
   * further than `limit` (the server is not asked about a text whose local estimate already
   * passes it several times over: its count could not fit).
   */
  async count(text: string, upstreamModel: string, signal?: AbortSignal, limit = Infinity): Promise<number> {
    if (text.length < MIN_REMOTE) return countUpTo('upstream', [text], 0, limit);
    const key = `${upstreamModel}\u0000${text.length < KEY_INLINE ? text : createHash('sha256').update(text).digest('base64')}`;
    const hit = this.#cache.get(key);
    if (hit !== undefined) return hit;
    if (limit !== Infinity) {
      const local = await countUpTo('upstream', [text], 0, limit * LOCAL_SLACK);
      if (local > limit * LOCAL_SLACK) return local;
    }
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    try {
      const n = await this.#provider.tokenize(text, upstreamModel, signal === undefined ? timeout : AbortSignal.any([signal, timeout]));
      this.#cache.set(key, n);
      return n;
    } catch {
      this.#failures++;
      return countUpTo('upstream', [text], 0, limit);
    }
  }

  /** A conversation's prompt tokens: each message's text counted by the server, in parallel. */
  async prompt(messages: readonly ChatMessage[], upstreamModel: string, imageTokens: number, limit = Infinity): Promise<number> {
    const { fixed, texts } = promptParts(messages, imageTokens);
    const room = limit - fixed;
    const counts = await Promise.all([...new Set(texts)].map(async (t) => [t, await this.count(t, upstreamModel, undefined, room)] as const));
    const byText = new Map(counts);
    let total = fixed;
    for (const t of texts) total += byText.get(t) ?? 0;
    return total;
  }
}
