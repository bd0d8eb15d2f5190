// Token counting, local and synchronous: OpenAI's BPE encodings (bpe.ts, on the vocabularies
// gpt-tokenizer ships), or a model's own Hugging Face tokenizer.json read with
// @huggingface/tokenizers (nothing is downloaded). Each loads once, at gateway start (or
// reload), for the tokenizers the catalog names. `upstream` (the model server's own /tokenize, see upstream.ts) counts here with
// o200k_base: the estimate it falls back to.

import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Tokenizer } from '@huggingface/tokenizers';
import { LRUCache } from 'lru-cache';
import type { TokenizerName, TokenizerSpec } from '../config/types.js';
import type { ChatMessage } from '../chat/types.js';
import { loadEncoding } from './bpe.js';

export type CountFn = (text: string) => number;

export const ENCODINGS: readonly TokenizerName[] = ['o200k_base', 'cl100k_base', 'p50k_base', 'r50k_base'];

function isEncoding(spec: string): spec is TokenizerName {
  return (ENCODINGS as readonly string[]).includes(spec);
}

const loaded = new Map<TokenizerSpec, CountFn>();

// BPE merging is quadratic in the length of one pre-token, and a run of 100 KB without a
// break takes seconds: a hostile prompt could stall the event loop. A run of non-space (or of
// space) longer than RUN_PIECE characters is cut there; each cut adds at most one token.
// A plain scan, not a regular expression: a backtracking engine overflows on megabyte runs.
const RUN_PIECE = 256;

function isSpace(c: number): boolean {
  return c <= 32 || c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

function piecewise(count: (t: string) => number, text: string): number {
  if (text.length <= RUN_PIECE) return count(text);
  let total = 0;
  let segment = 0;
  let run = 0;
  let space = isSpace(text.charCodeAt(0));
  for (let i = 1; i < text.length; i++) {
    const s = isSpace(text.charCodeAt(i));
    if (s !== space) {
      space = s;
      run = i;
    } else if (i - run >= RUN_PIECE) {
      total += count(text.slice(segment, i));
      segment = i;
      run = i;
    }
  }
  return total + count(text.slice(segment));
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
    loaded.set(key, remembered((text) => piecewise(count, text)));
  }
}

/** Texts shorter than this are counted afresh: hashing them costs about as much. */
const MEMO_MIN_CHARS = 64;

/**
 * A counter that remembers the counts of the texts it saw (per tokenizer): the same system
 * prompt, tool list or earlier turn comes back in request after request, and a count is a pure
 * function of the text, so a remembered count is exact. Bounded by characters (4M per
 * tokenizer, about 8 MB of strings; texts over 1M characters are not kept).
 */
function remembered(count: CountFn): CountFn {
  const memo = new LRUCache<string, number>({ maxSize: 4_000_000, maxEntrySize: 1_000_000, sizeCalculation: (_n, text) => text.length });
  return (text) => {
    if (text.length < MEMO_MIN_CHARS) return text === '' ? 0 : count(text);
    let n = memo.get(text);
    if (n === undefined) {
      n = count(text);
      memo.set(text, n);
    }
    return n;
  };
}

/** The local counter of a tokenizer; for `upstream`, the o200k_base estimate. */
export function counter(spec: TokenizerSpec): CountFn {
  const fn = loaded.get(spec === 'upstream' ? 'o200k_base' : spec);
  if (fn === undefined) throw new Error(`tokenizer ${spec} was not loaded`);
  return fn;
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

/** Estimated prompt tokens of a conversation; each image costs imageCost(url, imageTokens). */
export function estimatePromptTokens(messages: readonly ChatMessage[], count: CountFn, imageTokens: number): number {
  let total = REPLY_PRIMING;
  for (const m of messages) {
    total += PER_MESSAGE;
    if (typeof m.content === 'string') total += count(m.content);
    else if (Array.isArray(m.content)) {
      for (const part of m.content) total += part.type === 'text' ? count(part.text) : imageCost(part.image_url.url, imageTokens);
    }
    if (m.name !== undefined) total += count(m.name) + 1;
    if (m.tool_calls !== undefined) {
      for (const c of m.tool_calls) total += count(c.function.name) + count(c.function.arguments) + PER_MESSAGE;
    }
  }
  return total;
}
