// The compact tiktoken counter (lib/tokens/bpe.ts) against the library whose vocabularies it
// reads: for every encoding, gpt-tokenizer's own count is the oracle, on generated text of every
// kind (fast-check, bounded: any UTF-16 including lone surrogates, whole graphemes, and texts
// built from the pieces that exercise the split patterns: contractions, digit runs, CRLF, emoji,
// special-token text), and on fixed texts that a prompt really holds. A vocabulary file is read
// exactly (holes, ranks out of order, CRLF) and a malformed one is refused naming the file.

import t from 'tap';
import fc from 'fast-check';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { loadEncoding, tiktokenCounter } from '../../lib/tokens/bpe.js';
import type { TokenizerName } from '../../lib/config/types.js';
import { settledMemory } from '../helpers/heap.js';

const SEED = Number(process.env.TOLLGATE_PROPERTY_SEED ?? 1123);
const NO_SPECIAL = { disallowedSpecial: new Set<string>() };
const ENCODINGS: TokenizerName[] = ['o200k_base', 'cl100k_base', 'p50k_base', 'r50k_base'];

const PIECES = [
  'the', ' ', '  ', '\n', '\n\n', '\r\n', '\t', 'ing', '1', '123', '4567', '.', '!?', '...', 'é', 'É', '日本語', '🎉', '👩‍💻',
  "'s", "'LL", "'ve", 'Ab', 'CD', 'x y', '<|endoftext|>', '<|im_start|>', '```js', '{"a":1}', '\u0301', 'ﬁ', 'Ω', '\ud800',
];

// First, before other tests leave garbage for the collector to free while it measures.
t.test('a loaded vocabulary stays out of the collected heap: o200k_base adds under 8 MB', async (t) => {
  // gpt-tokenizer's own o200k_base holds about 24 MB of heap (67 MB of RSS in the gateway); the
  // compact form is typed arrays (about 6 MB, outside the JS heap) and leaves no garbage.
  const settled = settledMemory;
  const before = await settled();
  const count = await tiktokenCounter(createRequire(import.meta.url).resolve('gpt-tokenizer/data/o200k_base.tiktoken'), /\S+|\s+/gu);
  const after = await settled();
  t.ok(count('a loaded encoding') > 0);
  const heap = after.heapUsed - before.heapUsed;
  const outside = after.arrayBuffers - before.arrayBuffers;
  t.ok(heap < 1_000_000, `heap grew ${heap} bytes`);
  t.ok(outside > 4_000_000 && outside < 8_000_000, `typed arrays: ${outside} bytes`);
});

for (const name of ENCODINGS) {
  t.test(`${name}: the same count as gpt-tokenizer, whatever the text`, async (t) => {
    const count = await loadEncoding(name);
    const { countTokens } = await import(`gpt-tokenizer/encoding/${name}`) as { countTokens: (s: string, o: object) => number };
    const oracle = (s: string) => countTokens(s, NO_SPECIAL);
    const fixed = [
      '', 'a', 'hello world', 'You are a helpful assistant. Answer concisely, and don\'t make things up.',
      'Привет, мир! 你好，世界 🎉🎉 naïve café ﬁnal', '\ud800 lone \udc00 halves \udbff',
      'x'.repeat(1000), ' '.repeat(300), 'def f(x):\n    return x ** 2  # square\n\n\n', '1234567890'.repeat(10),
      'The <|endoftext|> marker and <|fim_prefix|> are plain text here.',
    ];
    for (const s of fixed) t.equal(count(s), oracle(s), JSON.stringify(s.slice(0, 40)));
    const same = (s: string) => count(s) === oracle(s);
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 120 }), same), { seed: SEED, numRuns: 400 });
    fc.assert(fc.property(fc.string({ unit: 'grapheme', maxLength: 80 }), same), { seed: SEED, numRuns: 300 });
    fc.assert(fc.property(fc.array(fc.constantFrom(...PIECES), { maxLength: 50 }).map((a) => a.join('')), same), { seed: SEED, numRuns: 400 });
  });
}

t.test('counts stay exact when the remembered pieces are emptied (past 1M characters of them)', async (t) => {
  const count = await loadEncoding('o200k_base');
  const { countTokens } = await import('gpt-tokenizer/encoding/o200k_base');
  let seed = 7;
  const letter = () => String.fromCharCode(97 + ((seed = (seed * 1103515245 + 12345) % 2147483648) % 26));
  const words = Array.from({ length: 20_000 }, () => Array.from({ length: 60 }, letter).join(''));
  let mismatches = 0;
  for (let round = 0; round < 2; round++) {
    for (let i = 0; i < words.length; i += round === 0 ? 1 : 97) {
      if (count(words[i]!) !== countTokens(words[i]!, NO_SPECIAL)) mismatches++;
    }
  }
  t.equal(mismatches, 0, '1.2M characters of 60-letter pieces, then a sample again after the memo was emptied');
});

t.test('a .tiktoken file is read exactly: ranks out of order, holes, CRLF, padding', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bpe-'));
  const b64 = (s: string) => Buffer.from(s, 'latin1').toString('base64');
  // Single bytes a, b, c, then merges: "ab" (rank 10), "abc" (rank 11), "bc" (rank 12); rank 3..9 are holes.
  const lines = [`${b64('abc')} 11`, `${b64('a')} 0`, `${b64('bc')} 12`, `${b64('b')} 1`, `${b64('ab')} 10`, `${b64('c')} 2`];
  const file = join(dir, 'tiny.tiktoken');
  writeFileSync(file, `${lines.join('\r\n')}\r\n`);
  const count = await tiktokenCounter(file, /[a-c]+|./gu);
  t.equal(count('abc'), 1, 'a whole piece that is a token');
  t.equal(count('abab'), 2, 'ab + ab (rank 10 before anything else)');
  t.equal(count('cab'), 2, 'c + ab');
  t.equal(count('bcbc'), 2, 'bc + bc');
  t.equal(count('abcabc'), 2, 'ab+c then ab+c: abc, abc');
  t.equal(count('ca'), 2, 'no merge: two parts');
  t.equal(count('a-b'), 3);
  // A line longer than the 64 KB read buffer, and a last line without its newline.
  const long = join(dir, 'long.tiktoken');
  writeFileSync(long, `${b64('a')} 0\n${b64('a'.repeat(60_000))} 1\n${b64('-')} 2`);
  const longCount = await tiktokenCounter(long, /a+|./gu);
  t.equal(longCount('a'.repeat(60_000)), 1, 'the 60,000-byte token is read whole');
  t.equal(longCount('aa-'), 3, 'and the line after it');
});

t.test('a malformed .tiktoken file is refused, naming the file and the line', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bpe-'));
  const cases: [string, RegExp][] = [
    ['YQ== 0\nYg==\n', /bad\.tiktoken: line 2 is not '<base64> <rank>'/],
    ['YQ== 0\nYg== x1\n', /line 2 is not/],
    ['YQ== 0\n*** 1\n', /line 2 is not/],
    ['YQ== 0\nYg== 0\n', /bad\.tiktoken: rank 0 appears twice/],
    ['YQ== 0\nYg== 99999999999\n', /line 2 is not/],
  ];
  for (const [text, message] of cases) {
    const file = join(dir, 'bad.tiktoken');
    writeFileSync(file, text);
    await t.rejects(tiktokenCounter(file, /./gu), message, JSON.stringify(text));
  }
  await t.rejects(tiktokenCounter(join(dir, 'missing.tiktoken'), /./gu), /ENOENT/);
});
