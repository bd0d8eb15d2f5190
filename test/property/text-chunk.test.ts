// Boundary 3 again, at the unit: the chunks of text that the OpenAI provider reads by pattern
// (textChunk) instead of by JSON.parse. For every input, a chunk the pattern takes gives
// exactly the part the full parse gives, and its chatJson is exactly JSON.stringify of those
// choices; anything the pattern cannot vouch for is left to the full parse. Inputs: chunks as
// OpenAI, vLLM and llama.cpp write them (any member order, any extra members, any text,
// escapes spelled any way JSON allows), then the same with a byte inserted, deleted or
// changed anywhere, and arbitrary JSON.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parsedChunk, textChunk, type TextChunkMemo } from '../../lib/providers/openai/translate.js';
import type { ProviderCall, StreamPart } from '../../lib/providers/types.js';
import { oddString, oddValue, serialize } from './arbitraries.js';
import { agreementSuite, ignoredMember, spelled } from './pattern-agreement.js';

const call = { request: { body: {} } } as unknown as ProviderCall;

/** The full parse's answer, or the error it throws. */
function full(data: string): StreamPart[] | { threw: unknown } {
  try {
    return parsedChunk({ event: undefined, data }, call, 'up', 200);
  } catch (err) {
    return { threw: err };
  }
}

/** One memo across all inputs, as if one stream: members found good before never excuse a change. */
const memo: TextChunkMemo = { before: undefined, after: undefined };

/** When the pattern takes `data`, it must agree with the full parse exactly. Returns whether it took it. */
function agrees(data: string): boolean {
  const fast = textChunk(data, memo);
  assert.deepStrictEqual(textChunk(data), fast, 'the same without the memo');
  if (fast === undefined) return false;
  const slow = full(data);
  assert.ok(Array.isArray(slow), `the full parse threw on a chunk the pattern took: ${JSON.stringify(data)}`);
  const { chatJson, ...part } = fast;
  assert.deepStrictEqual([part], slow, `same part: ${JSON.stringify(data)}`);
  assert.equal(chatJson, JSON.stringify((slow[0] as { choices: unknown }).choices), `chatJson as JSON.stringify writes it: ${JSON.stringify(data)}`);
  return true;
}

const text = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'grapheme', maxLength: 8 }),
  oddString,
  fc.constantFrom('', ' the', '\n\n', 'a\\b', '"quoted"', '</s>', '🦜', 'caf\u00e9', '\u2028', '/'),
);

const KNOWN = ['"id":"chatcmpl-1"', '"object":"chat.completion.chunk"', '"created":1700000000', '"model":"m/x-1"',
  '"system_fingerprint":"fp_1"', '"service_tier":"default"', '"obfuscation":"a1b2"', '"usage":null', '"error":null', '"timings":null'];
/** Members the full parse ignores: strings, numbers and nulls under names it does not read. */
const scalarMember = ignoredMember(KNOWN);
/** Any member at all, under any name. */
const anyMember = fc.oneof(fc.constantFrom(...KNOWN), fc.tuple(fc.stringMatching(/^[a-z_]{1,8}$/), fc.oneof(oddValue, fc.constant(null)))
  .map(([k, v]) => `${JSON.stringify(k)}:${serialize(v) || 'null'}`));

/** One compact chunk of text, in one of the shapes servers write, with `member`s around it. */
const chunkWith = (member: fc.Arbitrary<string>) => fc.record({
  content: text.chain((s) => fc.oneof(fc.constant(JSON.stringify(s)), spelled(s))),
  index: fc.oneof(fc.constant(0), fc.nat({ max: 3 }), fc.constant(999_999_999_999_999)),
  shape: fc.constantFrom('openai', 'openai-no-logprobs', 'llama'),
  members: fc.uniqueArray(member, { maxLength: 7, selector: (m) => m.slice(0, m.indexOf('":')) }),
  at: fc.nat(),
}).map(({ content, index, shape, members, at }) => {
  const choice = shape === 'llama'
    ? `{"finish_reason":null,"index":${index},"delta":{"content":${content}}}`
    : `{"index":${index},"delta":{"content":${content}}${shape === 'openai' ? ',"logprobs":null' : ''},"finish_reason":null}`;
  const all = [...members];
  all.splice(at % (all.length + 1), 0, `"choices":[${choice}]`);
  return `{${all.join(',')}}`;
});
const chunk = chunkWith(scalarMember);

agreementSuite(t, { noun: 'chunks', agrees, conforming: chunk, amongAny: chunkWith(anyMember) });

t.test('what the pattern leaves to the full parse', async (t) => {
  const base = (choice: string, rest = '') => `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[${choice}]${rest}}`;
  const text = '{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}';
  t.ok(textChunk(base(text)), 'a chunk of text is taken');
  const declined: Array<[string, string]> = [
    ['a role', base('{"index":0,"delta":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":null}')],
    ['a finish', base('{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":"stop"}')],
    ['logprobs', base('{"index":0,"delta":{"content":"hi"},"logprobs":{"content":[]},"finish_reason":null}')],
    ['two choices', base(`${text},${text}`)],
    ['a usage', base(text, ',"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}')],
    ['an error', base(text, ',"error":{"message":"x"}')],
    ['an error string', base(text, ',"error":"x"')],
    ['a second choices', base(text, ',"choices":null')],
    ['whitespace', base(text).replace('"created":1', '"created": 1')],
    ['a nested member', base(text, ',"x":{"a":1}')],
    ['a raw control character', base('{"index":0,"delta":{"content":"a\u0001"},"logprobs":null,"finish_reason":null}')],
    ['a bad escape', base('{"index":0,"delta":{"content":"a\\q"},"logprobs":null,"finish_reason":null}')],
    ['no opening brace', `"choices":[${text}]}`],
    ['no closing brace', `{"choices":[${text}]`],
    ['a leading zero', base('{"index":01,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}')],
    ['an index of 16 digits (the pattern stops at 15; the full parse reads it)', base('{"index":90071992547409930,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}')],
  ];
  for (const [what, data] of declined) t.equal(textChunk(data), undefined, what);
  const escaped = textChunk(base('{"index":2,"delta":{"content":"\\u00e9\\/\\n\\ud83e\\udd9c"},"logprobs":null,"finish_reason":null}'))!;
  t.strictSame(escaped.choices, [{ index: 2, delta: { content: 'é/\n🦜' }, finish_reason: null, logprobs: null }], 'escapes decoded');
  t.equal(escaped.chatJson, '[{"index":2,"delta":{"content":"é/\\n🦜"},"finish_reason":null,"logprobs":null}]', 'and spelled as JSON.stringify spells them');
  const llama = textChunk('{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" Hello"}}],"created":1,"id":"c","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}')!;
  t.strictSame(llama.choices, [{ index: 0, delta: { content: ' Hello' }, finish_reason: null }], "llama.cpp's order, no logprobs member");
});
