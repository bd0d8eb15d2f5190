// What prefix_affinity hashes: an explicit session key (the x-session-affinity header, else the
// body's prompt_cache_key, else its user), or the prompt's prefix (system message and first
// turns, roles included) up to affinity_prefix_tokens, taken as 4 characters a token. Hashed
// once per request and size, in place: no copy of the prompt, whatever its length.

import type { ChatRequest } from '../../hub/chat.js';

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
/** A token is taken as this many characters: cheap, and close enough for English and code. */
export const CHARS_PER_TOKEN = 4;
/** Session keys longer than this are cut: a key identifies, it does not need to be long. */
const MAX_SESSION_CHARS = 1024;

function fnv(h: number, text: string, max: number): number {
  const end = Math.min(text.length, max);
  for (let i = 0; i < end; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
  return h;
}

/** The session key a request names, if any. */
function sessionOf(request: ChatRequest, header: string | undefined): string | undefined {
  if (header !== undefined && header !== '') return header;
  const { prompt_cache_key: key, user } = request.body;
  if (typeof key === 'string' && key !== '') return key;
  if (typeof user === 'string' && user !== '') return user;
  return undefined;
}

/** Hash of the first `chars` characters of the prompt, message by message. */
export function prefixHash(request: ChatRequest, chars: number): number {
  let h = FNV_OFFSET;
  let left = chars;
  for (const m of request.messages) {
    if (left <= 0) break;
    // The role keeps "system: x" apart from "user: x"; a separator keeps turns apart.
    h = Math.imul(h ^ m.role.charCodeAt(0), FNV_PRIME);
    h = Math.imul(h ^ 0x1e, FNV_PRIME);
    const content = m.content;
    if (typeof content === 'string') {
      h = fnv(h, content, left);
      left -= content.length;
    } else if (Array.isArray(content)) {
      for (const part of content) {
        if (left <= 0) break;
        if (part.type !== 'text') continue;
        h = fnv(h, part.text, left);
        left -= part.text.length;
      }
    }
  }
  return h >>> 0;
}

/** A request's affinity key, computed on first use and kept for its further attempts. */
export class AffinityKey {
  readonly #request: ChatRequest;
  readonly #session: string | undefined;
  #chars = -1;
  #hash = 0;

  constructor(request: ChatRequest, sessionHeader: string | undefined) {
    this.#request = request;
    this.#session = sessionOf(request, sessionHeader);
  }

  /** The key for a provider that keys on `tokens` of prompt prefix. */
  hash(tokens: number): number {
    if (this.#session !== undefined) {
      if (this.#chars === -1) {
        this.#chars = 0;
        this.#hash = fnv(FNV_OFFSET ^ 0x5e, this.#session, MAX_SESSION_CHARS) >>> 0;
      }
      return this.#hash;
    }
    const chars = tokens * CHARS_PER_TOKEN;
    if (chars !== this.#chars) {
      this.#chars = chars;
      this.#hash = prefixHash(this.#request, chars);
    }
    return this.#hash;
  }
}
