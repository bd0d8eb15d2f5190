// Token counting, local and synchronous: OpenAI's BPE encodings (bpe.ts, on the vocabularies
// gpt-tokenizer ships), or a model's own Hugging Face tokenizer.json read with
// @huggingface/tokenizers (nothing is downloaded). Each loads once, at gateway start (or
// reload), for the tokenizers the catalog names. `upstream` (the model server's own /tokenize, see upstream.ts) counts here with
// o200k_base: the estimate it falls back to.

import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Tokenizer } from '@huggingface/tokenizers';
import { LRUCache } from 'lru-cache';
import type { TokenizerName, TokenizerSpec } from './names.js';
import type { ChatMessage } from '../hub/chat.js';
import { Slice } from '../slice.js';
import { loadEncoding } from './bpe.js';

export type CountFn = (text: string) => number;

export const ENCODINGS: readonly TokenizerName[] = ['o200k_base', 'cl100k_base', 'p50k_base', 'r50k_base'];

function isEncoding(spec: string): spec is TokenizerName {
  return (ENCODINGS as readonly string[]).includes(spec);
}

const loaded = new Map<TokenizerSpec, LoadedTokenizer>();

// BPE merging is quadratic in the length of one pre-token, and a run of 100 KB without a
// break takes seconds: a hostile prompt could stall the event loop. A run of non-space (or of
// space) longer than RUN_PIECE characters is cut there; each cut adds at most one token.
// A plain scan, not a regular expression: a backtracking engine overflows on megabyte runs.
const RUN_PIECE = 256;
/**
 * A long text is counted in segments of about this many characters, each ending where a word
 * ends (the pre-tokenizer splits there too, so the count is the same), so that counting can
 * stop once it passes a limit and give the event loop back between segments.
 */
const SEGMENT = 8192;
/** Texts shorter than this are counted afresh: hashing them costs about as much. */
const MEMO_MIN_CHARS = 64;

function isSpace(c: number): boolean {
  return c <= 32 || c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

/**
 * Where the segment of `text` that starts at `from` ends: at a run of one kind (space or not)
 * RUN_PIECE long, or, past SEGMENT characters, where a word ends.
 */
function segmentEnd(text: string, from: number): number {
  const n = text.length;
  if (n - from <= RUN_PIECE) return n;
  let run = from;
  let space = isSpace(text.charCodeAt(from));
  for (let i = from + 1; i < n; i++) {
    const s = isSpace(text.charCodeAt(i));
    if (s !== space) {
      if (s && i - from >= SEGMENT) return i;
      space = s;
      run = i;
    } else if (i - run >= RUN_PIECE) {
      return i;
    }
  }
  return n;
}

/** A loaded tokenizer: its raw counter (one segment) and the counts of texts it saw. */
class LoadedTokenizer {
  readonly #raw: (text: string) => number;
  /**
   * The counts of texts seen (the same system prompt, tool list or earlier turn comes back in
   * request after request; a count is a pure function of the text, so a remembered one is
   * exact). Bounded by characters (4M, about 8 MB of strings; texts over 1M are not kept).
   */
  readonly #memo = new LRUCache<string, number>({ maxSize: 4_000_000, maxEntrySize: 1_000_000, sizeCalculation: (_n, text) => text.length });

  constructor(raw: (text: string) => number) {
    this.#raw = raw;
  }

  /** The whole count of `text`, at once (texts the gateway itself holds: bounded already). */
  readonly count: CountFn = (text) => {
    if (text.length < MEMO_MIN_CHARS) return text === '' ? 0 : this.#raw(text);
    let n = this.#memo.get(text);
    if (n === undefined) {
      n = 0;
      for (let at = 0; at < text.length;) {
        const end = segmentEnd(text, at);
        n += this.#raw(text.slice(at, end));
        at = end;
      }
      this.#memo.set(text, n);
    }
    return n;
  };

  /**
   * The count of `text` when it is at most `limit`; else some count above `limit`, reached by
   * counting no further than needed. A text longer than a segment gives the event loop back
   * as `slice` says (a promise then); a shorter one is counted at once.
   */
  upTo(text: string, limit: number, slice: Slice): number | Promise<number> {
    if (text.length <= SEGMENT) return this.count(text);
    const known = this.#memo.get(text);
    return known !== undefined ? known : this.#longUpTo(text, limit, slice);
  }

  async #longUpTo(text: string, limit: number, slice: Slice): Promise<number> {
    let n = 0;
    for (let at = 0; at < text.length;) {
      const end = segmentEnd(text, at);
      n += this.#raw(text.slice(at, end));
      const counted = end - at;
      at = end;
      if (n > limit) return n;
      const pause = slice.pause(counted);
      if (pause !== undefined) await pause;
    }
    this.#memo.set(text, n);
    return n;
  }
}

/**
 * A Hugging Face tokenizer.json (and the tokenizer_config.json beside it, when there is one).
 * Throws an Error naming the file when it cannot be read or is not a tokenizer.
 */
async function loadTokenizerJson(path: string): Promise<(text: string) => number> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new Error(`tokenizer ${path}: ${(err as Error).message}`);
  }
  let cfg: unknown = {};
  try {
    cfg = JSON.parse(await readFile(join(dirname(path), 'tokenizer_config.json'), 'utf8'));
  } catch { /* optional */ }
  // Imported here, at the load of the first tokenizer.json: a config that names none never loads it.
  const { Tokenizer: HfTokenizer } = await import('@huggingface/tokenizers');
  let tok: Tokenizer;
  try {
    tok = new HfTokenizer(json as object, cfg as object);
    tok.encode('probe');
  } catch (err) {
    throw new Error(`tokenizer ${path}: not a usable tokenizer.json (${(err as Error).message})`);
  }
  // Special-token text in user content is counted as what the server will see: ordinary text.
  return (text) => tok.encode(text, { add_special_tokens: false }).ids.length;
}

/** Loads the named tokenizers (encodings, tokenizer.json paths); call before counting with them. */
export async function loadTokenizers(specs: Iterable<TokenizerSpec>): Promise<void> {
  for (const spec of new Set(specs)) {
    const key = spec === 'upstream' ? 'o200k_base' : spec;
    if (loaded.has(key)) continue;
    let count: (text: string) => number;
    if (isEncoding(key)) {
      // Special-token text in user content is counted as ordinary text, never rejected.
      count = await loadEncoding(key);
    } else {
      count = await loadTokenizerJson(key);
    }
    loaded.set(key, new LoadedTokenizer(count));
  }
}

function tokenizer(spec: TokenizerSpec): LoadedTokenizer {
  const t = loaded.get(spec === 'upstream' ? 'o200k_base' : spec);
  if (t === undefined) throw new Error(`tokenizer ${spec} was not loaded`);
  return t;
}

/** The local counter of a tokenizer; for `upstream`, the o200k_base estimate. */
export function counter(spec: TokenizerSpec): CountFn {
  return tokenizer(spec).count;
}

// Per-message framing of the chat format (role markers), and the reply's priming tokens.
const PER_MESSAGE = 3;
const REPLY_PRIMING = 3;

/**
 * Decoded bytes per image token. Anthropic documents an image's tokens as width x height / 750;
 * Tollgate never decodes an image, so it takes one byte per pixel: a 64 KB image costs 85
 * tokens, 1 MB about 1400, 20 MB about 28,000 (refused by any 8k or 16k context).
 */
export const IMAGE_BYTES_PER_TOKEN = 750;

/**
 * An image's tokens: a data URL by its decoded size (ceil(bytes / IMAGE_BYTES_PER_TOKEN)), never
 * below the model's `image_tokens` (`base`); an https URL (not fetched) at `base`. The size comes
 * from the base64 text's length and padding, without decoding it: O(1) per image.
 */
export function imageCost(url: string, base: number): number {
  if (!url.startsWith('data:')) return base;
  const comma = url.indexOf(',');
  if (comma === -1) return base;
  const chars = url.length - comma - 1;
  const padding = url.endsWith('==') ? 2 : url.endsWith('=') ? 1 : 0;
  const bytes = Math.max(0, Math.floor(chars / 4) * 3 - padding);
  return Math.max(base, Math.ceil(bytes / IMAGE_BYTES_PER_TOKEN));
}

/**
 * What a conversation's prompt estimate adds up: the tokens of its texts, and `fixed`, the
 * rest (the chat format's framing, each image at imageCost(url, imageTokens)). Texts in the order met.
 */
export function promptParts(messages: readonly ChatMessage[], imageTokens: number): { fixed: number; texts: string[] } {
  let fixed = REPLY_PRIMING;
  const texts: string[] = [];
  for (const m of messages) {
    fixed += PER_MESSAGE;
    if (typeof m.content === 'string') texts.push(m.content);
    else if (Array.isArray(m.content)) {
      for (const part of m.content) {
        if (part.type === 'text') texts.push(part.text);
        else fixed += imageCost(part.image_url.url, imageTokens);
      }
    }
    if (m.name !== undefined) {
      texts.push(m.name);
      fixed += 1;
    }
    if (m.tool_calls !== undefined) {
      for (const c of m.tool_calls) {
        texts.push(c.function.name, c.function.arguments);
        fixed += PER_MESSAGE;
      }
    }
  }
  return { fixed, texts };
}

/** Estimated prompt tokens of a conversation, counted whole with `count`. */
export function estimatePromptTokens(messages: readonly ChatMessage[], count: CountFn, imageTokens: number): number {
  const { fixed, texts } = promptParts(messages, imageTokens);
  let total = fixed;
  for (const t of texts) total += count(t);
  return total;
}

/**
 * Tokens of `texts` under `spec` plus `fixed`, counted no further than needed to pass `limit`
 * (then some total above it), and giving the event loop back every few milliseconds: what a
 * request's prompt costs the gateway is bounded by what could fit, whatever its size (CONTRACT
 * section 16). Short prompts are counted without a pause.
 */
export async function countUpTo(spec: TokenizerSpec, texts: readonly string[], fixed: number, limit: number): Promise<number> {
  const t = tokenizer(spec);
  let total = fixed;
  // The usual prompt: a few KB, counted at once (no clock, no pause).
  let chars = 0;
  for (const text of texts) chars += text.length;
  if (chars <= SEGMENT) {
    for (const text of texts) {
      if (total > limit) break;
      total += t.count(text);
    }
    return total;
  }
  const slice = new Slice();
  for (const text of texts) {
    if (total > limit) break;
    const n = t.upTo(text, limit - total, slice);
    total += typeof n === 'number' ? n : await n;
    const pause = slice.pause(text.length);
    if (pause !== undefined) await pause;
  }
  return total;
}

/**
 * The tokens of each of `texts` under `spec`, each counted no further than needed to pass
 * `limit` (then some count above it): many texts of one request (rerank's documents, score's
 * pairs, embeddings' inputs) as one job, giving the event loop back every few milliseconds
 * however many there are (CONTRACT section 21), where counting each alone never would (a text
 * of a segment or less is counted at once).
 */
export async function countEach(spec: TokenizerSpec, texts: readonly string[], limit: number, slice = new Slice()): Promise<number[]> {
  const t = tokenizer(spec);
  const counts = new Array<number>(texts.length);
  for (let i = 0; i < texts.length; i++) {
    const text = texts[i]!;
    const n = t.upTo(text, limit, slice);
    counts[i] = typeof n === 'number' ? n : await n;
    const pause = slice.pause(text.length);
    if (pause !== undefined) await pause;
  }
  return counts;
}
