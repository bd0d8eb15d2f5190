// Token counting for OpenAI's tiktoken encodings (o200k_base, cl100k_base, p50k_base,
// r50k_base), compact in memory. The vocabularies and split patterns are the ones gpt-tokenizer
// ships (its data/*.tiktoken files, read once at load; its split regular expressions); the
// byte-pair merge is tiktoken's. gpt-tokenizer itself keeps each vocabulary as a Map of 200,000
// strings plus the array they came from: about 67 MB of heap for o200k_base alone, in old space
// where every major collection walks it. Here the same vocabulary is two typed arrays (the
// token bytes end to end, and an open-addressing table of ranks): about 4 MB, invisible to the
// collector. Counts are the library's, exactly (test/tokens/bpe.test.ts checks them against it).

import { open } from 'node:fs/promises';
import { createRequire } from 'node:module';
import {
  CL100K_TOKEN_SPLIT_REGEX, O200K_TOKEN_SPLIT_REGEX, R50K_TOKEN_SPLIT_REGEX,
} from 'gpt-tokenizer/encodingParams/constants';
import type { TokenizerName } from './names.js';

const SPLIT: Record<TokenizerName, RegExp> = {
  o200k_base: O200K_TOKEN_SPLIT_REGEX,
  cl100k_base: CL100K_TOKEN_SPLIT_REGEX,
  p50k_base: R50K_TOKEN_SPLIT_REGEX,
  r50k_base: R50K_TOKEN_SPLIT_REGEX,
};

/** One encoding's mergeable tokens: the bytes of token r are pool[offsets[r]..offsets[r+1]). */
interface Vocabulary {
  readonly pool: Uint8Array;
  readonly offsets: Uint32Array;
  /** Open addressing by FNV-1a of the token's bytes: rank + 1, 0 for an empty slot. */
  readonly table: Int32Array;
  readonly mask: number;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

function hashBytes(bytes: Uint8Array, start: number, end: number): number {
  let h = FNV_OFFSET;
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i]!, FNV_PRIME);
  return h >>> 0;
}

/** The rank of bytes[start..end), or -1 when it is not a token. */
function rankOf(v: Vocabulary, bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  const { pool, offsets, table, mask } = v;
  for (let slot = hashBytes(bytes, start, end) & mask; ; slot = (slot + 1) & mask) {
    const entry = table[slot]!;
    if (entry === 0) return -1;
    const rank = entry - 1;
    const at = offsets[rank]!;
    if (offsets[rank + 1]! - at !== length) continue;
    let i = 0;
    while (i < length && pool[at + i] === bytes[start + i]) i++;
    if (i === length) return rank;
  }
}

const BASE64 = new Int8Array(256).fill(-1);
for (let i = 0; i < 64; i++) {
  BASE64['ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.charCodeAt(i)] = i;
}

/** Bytes that base64 text[start..end) decodes to (padding stripped), or -1 when it is not base64. */
function base64Length(text: Uint8Array, start: number, end: number): number {
  while (end > start && text[end - 1] === 0x3d) end--;
  for (let i = start; i < end; i++) if (BASE64[text[i]!]! < 0) return -1;
  const n = end - start;
  return n % 4 === 1 ? -1 : Math.floor((n * 3) / 4);
}

function decodeBase64(text: Uint8Array, start: number, end: number, out: Uint8Array, at: number): void {
  let bits = 0;
  let held = 0;
  for (let i = start; i < end; i++) {
    const c = text[i]!;
    if (c === 0x3d) break;
    bits = (bits << 6) | BASE64[c]!;
    held += 6;
    if (held >= 8) {
      held -= 8;
      out[at++] = (bits >> held) & 0xff;
    }
  }
}

/**
 * Calls `line` with each line of a file (its bytes buf[start..end), without CR LF; `index`
 * counts from 0), reading 64 KB at a time into one buffer.
 */
async function eachLine(path: string, line: (buf: Buffer, start: number, end: number, index: number) => void): Promise<void> {
  const file = await open(path, 'r');
  try {
    let buf = Buffer.allocUnsafe(1 << 16);
    let held = 0; // the start of a line not finished in the last read, moved to buf[0..held)
    let index = 0;
    const emit = (start: number, end: number): void => {
      line(buf, start, end > start && buf[end - 1] === 0x0d ? end - 1 : end, index++);
    };
    for (;;) {
      if (held === buf.length) {
        const bigger = Buffer.allocUnsafe(buf.length * 2);
        buf.copy(bigger, 0, 0, held);
        buf = bigger;
      }
      const { bytesRead } = await file.read(buf, held, buf.length - held, null);
      const end = held + bytesRead;
      let start = 0;
      for (let eol = buf.indexOf(0x0a, held); eol !== -1 && eol < end; eol = buf.indexOf(0x0a, start)) {
        emit(start, eol);
        start = eol + 1;
      }
      if (bytesRead === 0) {
        if (start < end) emit(start, end);
        return;
      }
      buf.copy(buf, 0, start, end);
      held = end - start;
    }
  } finally {
    await file.close();
  }
}

/**
 * Reads a .tiktoken file (a line per token: its bytes in base64, a space, its rank) straight into
 * typed arrays, in three passes over the file (ranks, lengths, bytes): no string or object per
 * token and no copy of the file, so loading leaves next to no garbage behind. Throws an Error
 * naming the file when a line is malformed or a rank repeats.
 */
async function readVocabulary(path: string): Promise<Vocabulary> {
  const malformed = (index: number): Error => new Error(`tokenizer ${path}: line ${index + 1} is not '<base64> <rank>'`);
  // A line's rank, or -1 for an empty line; the base64 ends at `space`.
  let space = 0;
  const parse = (buf: Buffer, start: number, end: number, index: number): number => {
    if (end === start) return -1;
    space = buf.indexOf(0x20, start);
    if (space <= start || space >= end - 1) throw malformed(index);
    let rank = 0;
    for (let i = space + 1; i < end; i++) {
      const d = buf[i]! - 0x30;
      if (d < 0 || d > 9 || rank > 0x7ffffff) throw malformed(index);
      rank = rank * 10 + d;
    }
    return rank;
  };
  let maxRank = -1;
  let tokens = 0;
  await eachLine(path, (buf, start, end, index) => {
    const rank = parse(buf, start, end, index);
    if (rank < 0) return;
    const length = base64Length(buf, start, space);
    if (length <= 0 || length > 0xffff) throw malformed(index);
    if (rank > maxRank) maxRank = rank;
    tokens++;
  });
  const lengths = new Uint16Array(maxRank + 1);
  await eachLine(path, (buf, start, end, index) => {
    const rank = parse(buf, start, end, index);
    if (rank < 0) return;
    if (lengths[rank] !== 0) throw new Error(`tokenizer ${path}: rank ${rank} appears twice`);
    lengths[rank] = base64Length(buf, start, space);
  });
  const offsets = new Uint32Array(maxRank + 2);
  for (let r = 0; r <= maxRank; r++) offsets[r + 1] = offsets[r]! + lengths[r]!;
  const pool = new Uint8Array(offsets[maxRank + 1]!);
  await eachLine(path, (buf, start, end, index) => {
    const rank = parse(buf, start, end, index);
    if (rank >= 0) decodeBase64(buf, start, space, pool, offsets[rank]!);
  });
  let size = 1;
  while (size < tokens * 2) size *= 2;
  const table = new Int32Array(size);
  const mask = size - 1;
  for (let r = 0; r <= maxRank; r++) {
    const start = offsets[r]!;
    const end = offsets[r + 1]!;
    if (end === start) continue;
    let slot = hashBytes(pool, start, end) & mask;
    while (table[slot] !== 0) slot = (slot + 1) & mask;
    table[slot] = r + 1;
  }
  return { pool, offsets, table, mask };
}

/** Scratch space for one piece: its UTF-8 bytes, part boundaries and pair ranks. Grown on demand. */
let bytes = new Uint8Array(1024);
let starts = new Int32Array(1025);
let pairRanks = new Float64Array(1025);

function ensureScratch(byteLength: number): void {
  if (byteLength <= bytes.length) return;
  let size = bytes.length;
  while (size < byteLength) size *= 2;
  bytes = new Uint8Array(size);
  starts = new Int32Array(size + 1);
  pairRanks = new Float64Array(size + 1);
}

/**
 * Writes the UTF-8 of text[from..to) into the scratch bytes; returns the byte length. A lone
 * surrogate becomes U+FFFD, as TextEncoder writes it.
 */
function utf8(text: string, from: number, to: number): number {
  ensureScratch((to - from) * 3);
  let n = 0;
  for (let i = from; i < to; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      bytes[n++] = c;
    } else if (c < 0x800) {
      bytes[n++] = 0xc0 | (c >> 6);
      bytes[n++] = 0x80 | (c & 0x3f);
    } else {
      if (c >= 0xd800 && c <= 0xdfff) {
        const next = i + 1 < to ? text.charCodeAt(i + 1) : 0;
        if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
          i++;
          bytes[n++] = 0xf0 | (c >> 18);
          bytes[n++] = 0x80 | ((c >> 12) & 0x3f);
          bytes[n++] = 0x80 | ((c >> 6) & 0x3f);
          bytes[n++] = 0x80 | (c & 0x3f);
          continue;
        }
        c = 0xfffd;
      }
      bytes[n++] = 0xe0 | (c >> 12);
      bytes[n++] = 0x80 | ((c >> 6) & 0x3f);
      bytes[n++] = 0x80 | (c & 0x3f);
    }
  }
  return n;
}

const NONE = Number.POSITIVE_INFINITY;

/**
 * Tokens in the piece held in the scratch bytes[0..n), n >= 2, that is not itself a token:
 * tiktoken's byte-pair merge (repeatedly
 * join the adjacent pair of lowest rank, the leftmost on a tie), counting the parts left.
 */
function mergeCount(v: Vocabulary, n: number): number {
  let parts = n;
  for (let i = 0; i <= n; i++) starts[i] = i;
  for (let i = 0; i < n - 1; i++) {
    const r = rankOf(v, bytes, i, i + 2);
    pairRanks[i] = r < 0 ? NONE : r;
  }
  pairRanks[n - 1] = NONE;
  for (;;) {
    let lowest = NONE;
    let at = -1;
    for (let i = 0; i < parts - 1; i++) {
      const r = pairRanks[i]!;
      if (r < lowest) {
        lowest = r;
        at = i;
      }
    }
    if (at < 0) return parts;
    // Part at+1 joins part at: drop its start and the rank of the pair just merged.
    starts.copyWithin(at + 1, at + 2, parts + 1);
    pairRanks.copyWithin(at, at + 1, parts);
    parts--;
    pairRanks[at] = pairRank(v, at, parts);
    if (at > 0) pairRanks[at - 1] = pairRank(v, at - 1, parts);
  }
}

/** The rank of joining part i with part i+1, of `parts` parts; NONE when there is no such token. */
function pairRank(v: Vocabulary, i: number, parts: number): number {
  if (i + 1 >= parts) return NONE;
  const r = rankOf(v, bytes, starts[i]!, starts[i + 2]!);
  return r < 0 ? NONE : r;
}

/**
 * Loads an encoding's vocabulary and returns its counter: the number of tokens the encoding
 * gives a text, special-token text counted as ordinary text.
 */
export function loadEncoding(name: TokenizerName): Promise<(text: string) => number> {
  const path = createRequire(import.meta.url).resolve(`gpt-tokenizer/data/${name}.tiktoken`);
  return tiktokenCounter(path, SPLIT[name]);
}

/**
 * Pieces that are not one token, and their counts, kept per encoding up to this many characters
 * in all (2 MB of one-byte text): merging is quadratic in a piece's length and the same pieces
 * recur (a word's inflections, a repeated run cut at the same length). Emptied when full:
 * cheaper than ordering entries, and refilled at once.
 */
const MERGED_CHARS = 1_000_000;

/** The counter of the vocabulary in a .tiktoken file, its pieces cut by `split` (a /g regex). */
export async function tiktokenCounter(path: string, split: RegExp): Promise<(text: string) => number> {
  const vocab = await readVocabulary(path);
  const pieces = new RegExp(split.source, split.flags);
  const merged = new Map<string, number>();
  let mergedChars = 0;
  return (text) => {
    let total = 0;
    pieces.lastIndex = 0;
    for (let m = pieces.exec(text); m !== null; m = pieces.exec(text)) {
      const piece = m[0];
      if (piece.length === 1 && piece.charCodeAt(0) < 0x80) {
        total++;
        continue;
      }
      const n = utf8(piece, 0, piece.length);
      if (n === 1 || rankOf(vocab, bytes, 0, n) >= 0) {
        total++;
        continue;
      }
      let count = merged.get(piece);
      if (count === undefined) {
        count = mergeCount(vocab, n);
        if (mergedChars + piece.length > MERGED_CHARS) {
          merged.clear();
          mergedChars = 0;
        }
        merged.set(piece, count);
        mergedChars += piece.length;
      }
      total += count;
    }
    return total;
  };
}
