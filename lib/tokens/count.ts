// Token counting with real BPE vocabularies shipped in gpt-tokenizer (nothing is downloaded).
// Encodings load once, at gateway start, for the tokenizers the catalog names.

import type { TokenizerName } from '../config/types.js';
import type { ChatMessage } from '../chat/types.js';

type CountFn = (text: string) => number;

const loaded = new Map<TokenizerName, CountFn>();
const NO_SPECIAL = { disallowedSpecial: new Set<string>() };

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

async function importEncoding(name: TokenizerName): Promise<{ countTokens: (t: string, o: object) => number }> {
  switch (name) {
    case 'o200k_base': return import('gpt-tokenizer/encoding/o200k_base');
    case 'cl100k_base': return import('gpt-tokenizer/encoding/cl100k_base');
    case 'p50k_base': return import('gpt-tokenizer/encoding/p50k_base');
    case 'r50k_base': return import('gpt-tokenizer/encoding/r50k_base');
  }
}

/** Loads the named encodings; call before counting with them. */
export async function loadTokenizers(names: Iterable<TokenizerName>): Promise<void> {
  for (const name of new Set(names)) {
    if (loaded.has(name)) continue;
    const mod = await importEncoding(name);
    // Special-token text in user content is counted as ordinary text, never rejected.
    const count = (text: string) => mod.countTokens(text, NO_SPECIAL);
    loaded.set(name, (text) => (text === '' ? 0 : piecewise(count, text)));
  }
}

export function counter(name: TokenizerName): CountFn {
  const fn = loaded.get(name);
  if (fn === undefined) throw new Error(`tokenizer ${name} was not loaded`);
  return fn;
}

// Per-message framing of the chat format (role markers), and the reply's priming tokens.
const PER_MESSAGE = 3;
const REPLY_PRIMING = 3;

/** Estimated prompt tokens of a conversation; each image costs `imageTokens`. */
export function estimatePromptTokens(messages: readonly ChatMessage[], count: CountFn, imageTokens: number): number {
  let total = REPLY_PRIMING;
  for (const m of messages) {
    total += PER_MESSAGE;
    if (typeof m.content === 'string') total += count(m.content);
    else if (Array.isArray(m.content)) {
      for (const part of m.content) total += part.type === 'text' ? count(part.text) : imageTokens;
    }
    if (m.name !== undefined) total += count(m.name) + 1;
    if (m.tool_calls !== undefined) {
      for (const c of m.tool_calls) total += count(c.function.name) + count(c.function.arguments) + PER_MESSAGE;
    }
  }
  return total;
}
