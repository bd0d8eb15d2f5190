// Boundary 3 again, at the unit: the whole answers of one choice of text that the OpenAI
// provider reads by pattern (textAnswer) instead of by JSON.parse. For every input, an answer
// the pattern takes gives exactly the choices and usage the full parse gives, its chatJson is
// exactly JSON.stringify of those choices, and the chat dialect renders the same body from
// either; anything the pattern cannot vouch for is left to the full parse. Inputs: answers as
// OpenAI, vLLM and the bench's upstream write them (extra members around the choices and
// inside the message, any text, escapes spelled any way JSON allows), then the same with a
// byte inserted, deleted or changed anywhere, and arbitrary JSON.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parsedCompletion, textAnswer } from '../../lib/providers/openai/translate.js';
import type { ProviderCall } from '../../lib/providers/types.js';
import type { ChoicesAndUsage } from '../../lib/providers/shared.js';
import { chatDialect } from '../../lib/dialects/chat/index.js';
import type { ChatRequest } from '../../lib/hub/chat.js';
import { oddString, oddValue, serialize } from './arbitraries.js';
import { agreementSuite, ignoredMember, spelled } from './pattern-agreement.js';

const call = { request: { body: {} } } as unknown as ProviderCall;
const request = { includeUsage: false } as unknown as ChatRequest;

/** The full parse's answer, or the error it throws. */
function full(text: string, c: ProviderCall = call): ChoicesAndUsage | { threw: unknown } {
  try {
    return parsedCompletion(text, c, 'up', 200);
  } catch (err) {
    return { threw: err };
  }
}

/** The chat body, its id and time made constant. */
function rendered(answer: ChoicesAndUsage): string {
  const body = chatDialect.renderer(request, 'm/x-1', 0).complete({ choices: answer.choices, usage: answer.usage!, chatJson: answer.chatJson });
  return body.replace(/"id":"chatcmpl-[0-9a-f]{32}"/, '"id":"ID"').replace(/"created":\d+/, '"created":0');
}

/** When the pattern takes `text`, it must agree with the full parse exactly. Returns whether it took it. */
function agrees(text: string): boolean {
  const fast = textAnswer(text, call);
  if (fast === undefined) return false;
  const slow = full(text);
  assert.ok(!('threw' in slow), `the full parse threw on an answer the pattern took: ${JSON.stringify(text)}`);
  const { chatJson, ...rest } = fast;
  assert.deepStrictEqual(rest, slow, `same choices and usage: ${JSON.stringify(text)}`);
  assert.equal(chatJson, JSON.stringify(slow.choices), `chatJson as JSON.stringify writes it: ${JSON.stringify(text)}`);
  assert.equal(rendered(fast), rendered(slow), `the same chat body: ${JSON.stringify(text)}`);
  return true;
}

/** Any text but the empty one (an empty answer takes the full parse, which refuses it). */
const text = fc.oneof(
  fc.string({ minLength: 1, maxLength: 12 }),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8 }),
  oddString.filter((s) => s !== ''),
  fc.constantFrom(' the', '\n\n', 'a\\b', '"quoted"', '</s>', '🦜', 'caf\u00e9', '\u2028', '/'),
);

const KNOWN = ['"id":"chatcmpl-1"', '"object":"chat.completion"', '"created":1700000000', '"model":"m/x-1"',
  '"system_fingerprint":"fp_1"', '"service_tier":"default"', '"system_fingerprint":null', '"error":null', '"prompt_logprobs":null', '"kv_transfer_params":null'];
/** Members the full parse ignores: strings, numbers and nulls under names it does not read. */
const scalarMember = ignoredMember(KNOWN);
/** Any member at all, under any name. */
const anyMember = fc.oneof(fc.constantFrom(...KNOWN, '"usage":null', '"error":{"message":"x"}', '"stopping_word":"x"'),
  fc.tuple(fc.stringMatching(/^[a-z_]{1,8}$/), fc.oneof(oddValue, fc.constant(null))).map(([k, v]) => `${JSON.stringify(k)}:${serialize(v) || 'null'}`));
/** What servers add to a message, empty or null. */
const EMPTY_MEMBERS = ['"refusal":null', '"reasoning_content":null', '"reasoning":null', '"function_call":null', '"audio":null', '"annotations":[]', '"tool_calls":[]'];
const count = fc.oneof(fc.nat({ max: 5000 }), fc.constant(999_999_999_999_999));

/** One compact answer of text, in one of the shapes servers write, with `member`s around it. */
const answerWith = (member: fc.Arbitrary<string>) => fc.record({
  content: text.chain((s) => fc.oneof(fc.constant(JSON.stringify(s)), spelled(s))),
  index: fc.oneof(fc.constant(0), fc.nat({ max: 3 }), fc.constant(999_999_999_999_999)),
  before: fc.subarray(EMPTY_MEMBERS),
  after: fc.subarray(EMPTY_MEMBERS),
  logprobs: fc.boolean(),
  finish: fc.constantFrom('stop', 'length'),
  stopReason: fc.boolean(),
  prompt: count,
  completion: count,
  total: fc.oneof(fc.nat(), fc.constant('1e400'), fc.constant('1.5')),
  usageOrder: fc.constantFrom('openai', 'vllm'),
  details: fc.boolean(),
  members: fc.uniqueArray(member, { maxLength: 6, selector: (m) => m.slice(0, m.indexOf('":')) }),
  at: fc.nat(),
}).map((a) => {
  const message = `{"role":"assistant"${a.before.map((m) => `,${m}`).join('')},"content":${a.content}${a.after.map((m) => `,${m}`).join('')}}`;
  const choice = `{"index":${a.index},"message":${message}${a.logprobs ? ',"logprobs":null' : ''},"finish_reason":"${a.finish}"${a.stopReason ? ',"stop_reason":null' : ''}}`;
  const usage = a.usageOrder === 'openai'
    ? `{"prompt_tokens":${a.prompt},"completion_tokens":${a.completion},"total_tokens":${a.total}${a.details ? ',"prompt_tokens_details":null' : ''}}`
    : `{"prompt_tokens":${a.prompt},"total_tokens":${a.total},"completion_tokens":${a.completion}${a.details ? ',"prompt_tokens_details":null' : ''}}`;
  const all = [...a.members];
  all.splice(a.at % (all.length + 1), 0, `"choices":[${choice}],"usage":${usage}`);
  return `{${all.join(',')}}`;
});
const answer = answerWith(scalarMember);

agreementSuite(t, { noun: 'answers', agrees, conforming: answer, amongAny: answerWith(anyMember) });

t.test('what the pattern leaves to the full parse', async (t) => {
  const usage = '"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}';
  const base = (choice: string, rest = `,${usage}`) => `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[${choice}]${rest}}`;
  const choice = (message: string, rest = '"logprobs":null,"finish_reason":"stop"') => `{"index":0,"message":${message},${rest}}`;
  const hi = '{"role":"assistant","content":"hi","refusal":null}';
  const taken = textAnswer(base(choice(hi)), call)!;
  t.strictSame(taken.choices, [{ index: 0, message: { role: 'assistant', content: 'hi', refusal: null }, logprobs: null, finish_reason: 'stop' }], 'an answer of text is taken');
  t.strictSame(taken.usage, { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }, 'with its usage');
  const stops = { request: { body: { stop: ['x'] } } } as unknown as ProviderCall;
  t.equal(textAnswer(base(choice(hi)), stops), undefined, 'a request with stop sequences takes the full parse');
  const declined: Array<[string, string]> = [
    ['an empty text', base(choice('{"role":"assistant","content":""}'))],
    ['a null text', base(choice('{"role":"assistant","content":null}'))],
    ['a refusal', base(choice('{"role":"assistant","content":"hi","refusal":"no"}'))],
    ['reasoning', base(choice('{"role":"assistant","content":"hi","reasoning_content":"think"}'))],
    ['tool calls', base(choice('{"role":"assistant","content":"hi","tool_calls":[{"id":"a"}]}'))],
    ['logprobs', base(choice(hi, '"logprobs":{"content":[]},"finish_reason":"stop"'))],
    ['a tool_calls finish', base(choice(hi, '"logprobs":null,"finish_reason":"tool_calls"'))],
    ['a stop reason', base(choice(hi, '"logprobs":null,"finish_reason":"stop","stop_reason":"x"'))],
    ['two choices', base(`${choice(hi)},${choice(hi)}`)],
    ['no usage', base(choice(hi), '')],
    ['usage details', base(choice(hi), ',"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}')],
    ['a second usage', base(choice(hi), `,${usage},"usage":null`)],
    ['an error', base(choice(hi), `,${usage},"error":{"message":"x"}`)],
    ['an error string', base(choice(hi), `,${usage},"error":"x"`)],
    ['whitespace', base(choice(hi)).replace('"created":1', '"created": 1')],
    ['a nested member', base(choice(hi), `,${usage},"x":{"a":1}`)],
    ['llama.cpp timings', base(choice(hi), `,${usage},"timings":{"a":1}`)],
    ['a raw control character', base(choice('{"role":"assistant","content":"a\u0001"}'))],
    ['no closing brace', base(choice(hi)).slice(0, -1)],
    ['a leading zero', base('{"index":01,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"}')],
  ];
  for (const [what, data] of declined) t.equal(textAnswer(data, call), undefined, what);
  const escaped = textAnswer(base(choice('{"role":"assistant","content":"\\u00e9\\/\\n\\ud83e\\udd9c"}')), call)!;
  t.equal(escaped.choices[0]!.message.content, 'é/\n🦜', 'escapes decoded');
  t.equal(escaped.chatJson, '[{"index":0,"message":{"role":"assistant","content":"é/\\n🦜","refusal":null},"logprobs":null,"finish_reason":"stop"}]',
    'and spelled as JSON.stringify spells them');
});
