// Generators shared by the property tests, and the one runner they all use. Every property
// runs with a fixed seed (TOLLGATE_PROPERTY_SEED, default below) so CI is deterministic; a
// failure prints the seed and fast-check's replay path with the shrunk counterexample.
// TOLLGATE_PROPERTY_RUNS scales every run count (e.g. 10 for a long local hunt).

import fc from 'fast-check';

const DEFAULT_SEED = 20261123;

function seedFromEnv(): number {
  const raw = process.env.TOLLGATE_PROPERTY_SEED;
  if (raw === undefined || raw === '') return DEFAULT_SEED;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`TOLLGATE_PROPERTY_SEED must be an integer, got ${JSON.stringify(raw)}`);
  return n | 0; // fast-check seeds are 32-bit
}

export const SEED = seedFromEnv();
const FACTOR = Number(process.env.TOLLGATE_PROPERTY_RUNS ?? '1');

export function runs(n: number): number {
  return Math.max(1, Math.round(n * (Number.isFinite(FACTOR) && FACTOR > 0 ? FACTOR : 1)));
}

interface Tap { equal(...args: any[]): unknown; comment(...args: any[]): unknown }

/**
 * Checks a property with the fixed seed. Predicates throw (node:assert) on a violation, so
 * fast-check can shrink; the report (seed, path, shrunk input, error) becomes the failure's
 * message. Every run must have been checked: none skipped, none interrupted.
 */
export async function holds(t: Tap, name: string, property: fc.IRawProperty<any>, numRuns: number): Promise<void> {
  const wanted = runs(numRuns);
  const details = await fc.check(property, { seed: SEED, numRuns: wanted });
  if (details.failed) {
    const report = `${await fc.asyncDefaultReportMessage(details)}\nError: ${String((details.errorInstance as Error | undefined)?.message ?? details.errorInstance)}`;
    t.comment(`property "${name}" failed; replay with TOLLGATE_PROPERTY_SEED=${SEED}`);
    t.equal(details.failed, false, `${name} (seed ${SEED})\n${report}`);
    return;
  }
  t.equal(details.numRuns, wanted, `${name}: ${wanted} generated cases hold (seed ${SEED})`);
}

// ---- values --------------------------------------------------------------------------------

/** A number written into JSON exactly as given (`-0`, `1e999`, `9007199254740993`, `1.0`). */
export class RawNumber {
  constructor(readonly text: string) {}
  toString(): string { return this.text; }
}

const RAW_MARK = '\u0000raw\u0000';

/** JSON text of a value that may hold RawNumbers; what the server sees is JSON.parse of it. */
export function serialize(value: unknown): string {
  const text = JSON.stringify(value, (_k, v: unknown) => (v instanceof RawNumber ? `${RAW_MARK}${v.text}` : v));
  if (text === undefined) return '';
  return text.replace(/"\\u0000raw\\u0000([^"]*)"/g, '$1');
}

/** Numbers at the edges, as raw JSON literals. */
export const edgeNumber: fc.Arbitrary<RawNumber> = fc.oneof(
  fc.constantFrom(
    '-0', '0', '1', '-1', '2', '3', '20', '21', '64', '0.5', '1.5', '-0.5', '1.0', '1e2', '100e-2', '2.0000000000000001',
    '1e308', '-1e308', '1e999', '-1e999', '1E400', '4.9e-324', '1e-400',
    '9007199254740991', '9007199254740992', '9007199254740993', '-9007199254740991', '-9007199254740993',
    '18446744073709551616', '4096', '8192', '8193', '1024',
  ),
  fc.integer({ min: -5, max: 300 }).map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => (Object.is(d, -0) ? '-0' : String(d))),
).map((s) => new RawNumber(s));

/** Strings a careless parser takes for numbers. */
export const numberLikeString = fc.constantFrom('NaN', 'Infinity', '-Infinity', '1e3', '0x10', ' 7', '', '1', '-0', '1_000', 'null', 'true');

/** Lone surrogates, which JSON.stringify escapes as \udXXX. */
export const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));

/** Odd text: unicode of every kind, lone surrogates, control characters, long runs. */
export const oddString: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.string({ maxLength: 20 }) },
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  { weight: 2, arbitrary: fc.array(fc.oneof(fc.string({ maxLength: 3 }), loneSurrogate), { maxLength: 6 }).map((a) => a.join('')) },
  { weight: 1, arbitrary: fc.constantFrom('\u0000', '\u202e', '\ufeff', '🦜🦜', 'e\u0301', '\r\n', '<|endoftext|>', '${HOME}', '%s%n', '"\\', '\u2028') },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('a', 'ab ', '🦜', '\u00e9', ' '), fc.integer({ min: 200, max: 4000 })).map(([s, n]) => s.repeat(n)) },
);

/** Anything JSON can hold (and RawNumbers), small. */
export const oddValue: fc.Arbitrary<unknown> = fc.oneof(
  edgeNumber,
  numberLikeString,
  oddString,
  fc.constantFrom(null, true, false, [], {}),
  fc.array(fc.oneof(fc.integer(), fc.string({ maxLength: 4 }), fc.constant(null)), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.oneof(fc.integer(), fc.string({ maxLength: 4 })), { maxKeys: 3 }),
);

/** A value nested `depth` levels deep (arrays and objects alternating at random). */
export function nested(depth: number, kinds: boolean[], leaf: unknown): unknown {
  let v: unknown = leaf;
  for (let i = 0; i < depth; i++) v = kinds[i % kinds.length] ? [v] : { k: v };
  return v;
}

/** Depth per CONTRACT section 4: the top-level value is level 1, scalars add nothing. */
export function depthOf(v: unknown): number {
  if (v === null || typeof v !== 'object') return 0;
  let max = 0;
  for (const child of Object.values(v)) max = Math.max(max, depthOf(child));
  return max + 1;
}

/** `__proto__` keys, or a `constructor` object holding `prototype`, anywhere. */
export function hasPollutingKey(v: unknown): boolean {
  if (v === null || typeof v !== 'object') return false;
  for (const [k, child] of Object.entries(v)) {
    if (k === '__proto__') return true;
    if (k === 'constructor' && child !== null && typeof child === 'object' && !Array.isArray(child) && Object.hasOwn(child, 'prototype')) return true;
    if (hasPollutingKey(child)) return true;
  }
  return false;
}

// ---- headers -------------------------------------------------------------------------------

/** Characters Node accepts in a header value: HTAB, SP..~ and obs-text (0x80-0xff). */
export const headerChar = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 1, arbitrary: fc.constant(0x09) },
  { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
).map((c) => String.fromCharCode(c));

export const headerText = (maxLength: number) => fc.array(headerChar, { maxLength }).map((a) => a.join(''));

/** Content-Type values, JSON or not, with odd parameters and spelling. */
export const contentType: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constantFrom(
    undefined, 'application/json', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'Application/Json;charset=UTF-8',
    'application/json;charset=latin1', 'application/json; charset=utf-16', 'application/vnd.api+json', 'application/problem+json; q=1',
    'text/plain', 'text/json', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx',
    'application/json-patch', 'json', '', ' application/json ', 'application/xml', '*/*', 'application/*',
  ),
  headerText(30),
);

/** The media type is JSON: application/json or application/<something>+json, parameters ignored. */
export function isJsonMediaType(header: string | undefined): boolean {
  if (header === undefined) return false;
  const type = header.split(';')[0]!.replace(/^[ \t]+|[ \t]+$/g, '').toLowerCase();
  return type === 'application/json' || /^application\/[^/]+\+json$/.test(type);
}

/** x-request-id values, kept by the gateway iff they match the contract's pattern. */
export const SAFE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
export const requestId: fc.Arbitrary<string> = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/),
  fc.constantFrom('', 'a'.repeat(128), 'a'.repeat(129), 'has space', 'slash/id', 'ü', 'abc\t', 'x=1', '..', ':', '-'),
  headerText(140),
);

// ---- chat request bodies -------------------------------------------------------------------

/** Image URLs the contract accepts, and ones it refuses. */
export const imageUrl: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    'https://example.com/cat.png', 'https://x', 'https://example.com/a%20b.jpg?x=1#y', 'data:image/png;base64,iVBORw0KGgo=',
    'data:image/webp;base64,UklGRg==', 'data:image/jpeg;base64,/9j/4AAQ', 'data:image/gif;base64,R0lGODlh',
  ),
  fc.constantFrom(
    'http://example.com/cat.png', 'ftp://x/y.png', 'file:///etc/passwd', 'https://', 'javascript:alert(1)', '',
    'data:image/svg+xml;base64,PHN2Zz4=', 'data:image/png;base64,', 'data:image/png;base64,abc', 'data:image/png,abc',
    'data:image/png;base64,iVBO Rw0K', 'data:text/plain;base64,aGk=', 'https://exa mple.com/x.png', '//example.com/x.png',
  ),
  oddString,
  oddValue,
);

const text = fc.oneof({ weight: 4, arbitrary: fc.string({ maxLength: 30 }) }, { weight: 2, arbitrary: oddString });

export const contentPart: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ type: fc.constant('text'), text: fc.oneof({ weight: 5, arbitrary: text }, oddValue) }, { requiredKeys: ['type'] }) },
  {
    weight: 3,
    arbitrary: fc.record({
      type: fc.constant('image_url'),
      image_url: fc.oneof(
        { weight: 5, arbitrary: fc.record({ url: imageUrl, detail: fc.oneof(fc.constantFrom('auto', 'low', 'high', 'ultra', ''), oddValue) }, { requiredKeys: ['url'] }) },
        oddValue,
      ),
    }, { requiredKeys: ['type'] }),
  },
  { weight: 1, arbitrary: fc.record({ type: fc.oneof(fc.constantFrom('audio', 'input_audio', 'TEXT', 'image', 'refusal', 'file'), oddValue), text }) },
  { weight: 1, arbitrary: oddValue },
);

export const toolCall: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ id: fc.string({ maxLength: 12 }), type: fc.constant('function'), function: fc.record({ name: fc.string({ maxLength: 12 }), arguments: fc.oneof(fc.constant('{}'), fc.json(), text) }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      id: fc.oneof(fc.string({ maxLength: 8 }), oddValue),
      type: fc.oneof(fc.constantFrom('function', 'tool', 'Function'), oddValue),
      function: fc.oneof(fc.record({ name: fc.oneof(text, oddValue), arguments: fc.oneof(fc.json(), oddValue, fc.object({ maxDepth: 1 })) }, { requiredKeys: [] }), oddValue),
    }, { requiredKeys: [] }),
  },
  { weight: 1, arbitrary: oddValue },
);

const ROLE = fc.oneof({ weight: 8, arbitrary: fc.constantFrom('system', 'developer', 'user', 'assistant', 'tool') }, fc.constantFrom('wizard', 'User', 'function', ''), oddValue);

const validCall = fc.record({ id: fc.string({ maxLength: 12 }), type: fc.constant('function'), function: fc.record({ name: fc.string({ maxLength: 12 }), arguments: fc.oneof(fc.constant('{}'), fc.json(), text) }) });
const validImage = fc.record({ type: fc.constant('image_url'), image_url: fc.record({ url: fc.constantFrom('https://example.com/cat.png', 'data:image/png;base64,iVBORw0KGgo='), detail: fc.constantFrom('auto', 'low', 'high') }, { requiredKeys: ['url'] }) });
const textPart = fc.record({ type: fc.constant('text'), text });

/** Well-formed messages of every role (images only where the chat format allows them). */
const validMessage: fc.Arbitrary<unknown> = fc.oneof(
  fc.record({ role: fc.constantFrom('system', 'developer'), content: fc.oneof(text, fc.array(textPart, { maxLength: 2 })), name: fc.string({ maxLength: 8 }) }, { requiredKeys: ['role', 'content'] }),
  fc.record({ role: fc.constant('user'), content: fc.oneof(text, fc.array(fc.oneof({ weight: 3, arbitrary: textPart }, validImage), { maxLength: 3 })), name: fc.string({ maxLength: 8 }) }, { requiredKeys: ['role', 'content'] }),
  fc.record({ role: fc.constant('assistant'), content: fc.oneof(text, fc.constant(null)), tool_calls: fc.array(validCall, { maxLength: 2 }) }, { requiredKeys: ['role', 'content'] }),
  fc.record({ role: fc.constant('tool'), content: text, tool_call_id: fc.string({ maxLength: 10 }) }),
);

/** Messages with odd values anywhere in them. */
const oddMessage: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      role: ROLE,
      content: fc.oneof({ weight: 6, arbitrary: text }, { weight: 3, arbitrary: fc.array(contentPart, { maxLength: 4 }) }, fc.constant(null), oddValue),
      name: fc.oneof(fc.string({ maxLength: 10 }), oddValue),
      tool_calls: fc.oneof({ weight: 3, arbitrary: fc.array(toolCall, { maxLength: 3 }) }, oddValue),
      tool_call_id: fc.oneof({ weight: 3, arbitrary: fc.string({ maxLength: 10 }) }, oddValue),
    }, { requiredKeys: ['role'] }),
  },
  { weight: 1, arbitrary: oddValue },
);

export const message: fc.Arbitrary<unknown> = fc.oneof({ weight: 4, arbitrary: validMessage }, { weight: 1, arbitrary: oddMessage });

/** A plain user turn: most bodies keep one so that the valid path is walked often. */
export const userTurn = text.map((content) => ({ role: 'user', content: content === '' ? 'hi' : content }));

/** Known chat fields, each with well-formed values and odd ones. */
const FIELD_VALUES: Array<[string, fc.Arbitrary<unknown>]> = [
  ['max_tokens', fc.integer({ min: 1, max: 64 })],
  ['max_completion_tokens', fc.integer({ min: 1, max: 64 })],
  ['temperature', fc.double({ min: 0, max: 2, noNaN: true })],
  ['top_p', fc.double({ min: 0, max: 1, noNaN: true })],
  ['presence_penalty', fc.double({ min: -2, max: 2, noNaN: true })],
  ['frequency_penalty', fc.double({ min: -2, max: 2, noNaN: true })],
  ['n', fc.constant(1)],
  ['seed', fc.integer()],
  ['top_logprobs', fc.integer({ min: 0, max: 100 })],
  ['logprobs', fc.boolean()],
  ['parallel_tool_calls', fc.boolean()],
  ['stream', fc.boolean()],
  ['stop', fc.oneof(text, fc.array(text, { maxLength: 8 }))],
  ['tools', fc.array(fc.record({ type: fc.constant('function'), function: fc.record({ name: fc.string({ maxLength: 8 }), parameters: fc.object({ maxDepth: 2 }) }) }), { maxLength: 2 })],
  ['tool_choice', fc.oneof(fc.constantFrom('auto', 'none', 'required'), fc.record({ type: fc.constant('function'), function: fc.record({ name: fc.string({ maxLength: 8 }) }) }))],
  ['response_format', fc.constantFrom({ type: 'text' }, { type: 'json_object' })],
  ['logit_bias', fc.dictionary(fc.integer({ min: 0, max: 99999 }).map(String), fc.integer({ min: -100, max: 100 }), { maxKeys: 3 })],
  ['user', text],
  ['stream_options', fc.oneof(fc.record({ include_usage: fc.boolean() }), fc.record({ include_usage: oddValue }), fc.constant({}))],
];

/** Fields the contract does not list (never rejected), some of them deep or polluting. */
const unlisted: fc.Arbitrary<[string, unknown]> = fc.oneof(
  fc.tuple(fc.constantFrom('metadata', 'frobnicate', 'x', 'store', 'prompt_cache_key', 'constructor', 'toString', 'hasOwnProperty'), oddValue),
  fc.tuple(fc.constant('deep'), fc.tuple(fc.integer({ min: 55, max: 70 }), fc.array(fc.boolean(), { minLength: 1, maxLength: 3 })).map(([d, kinds]) => nested(d, kinds, 1))),
  fc.tuple(fc.constant('constructor'), fc.constantFrom({ prototype: { polluted: true } }, { prototype: null }, { name: 'x' })),
  fc.tuple(fc.constant('__proto__'), fc.constantFrom({ polluted: true }, 1)),
);

export const field: fc.Arbitrary<[string, unknown]> = fc.oneof(
  { weight: 6, arbitrary: fc.oneof(...FIELD_VALUES.map(([k, valid]) => fc.tuple(fc.constant(k), fc.oneof({ weight: 3, arbitrary: valid }, oddValue)))) },
  { weight: 2, arbitrary: unlisted },
);

/** Builds an object with own keys in order, `__proto__` included as a plain own key. */
export function objectOf(entries: Array<[string, unknown]>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
  return out;
}

export const MODELS = ['echo-small', 'echo-vision', 'auto'];

/** Chat bodies: mostly valid-shaped, with odd values in a few places. */
export const chatBody: fc.Arbitrary<Record<string, unknown>> = fc.record({
  model: fc.oneof({ weight: 12, arbitrary: fc.constantFrom(...MODELS) }, fc.string({ maxLength: 40 }), oddValue.filter((v) => typeof v !== 'string' || v.length <= 200)),
  messages: fc.oneof(
    { weight: 6, arbitrary: fc.tuple(fc.array(message, { maxLength: 3 }), userTurn).map(([ms, u]) => [...ms, u]) },
    { weight: 2, arbitrary: fc.array(message, { minLength: 1, maxLength: 4 }) },
    { weight: 1, arbitrary: fc.oneof(fc.constant([]), oddValue) },
  ),
  fields: fc.array(field, { maxLength: 4 }),
  omit: fc.constantFrom(null, null, null, null, null, null, null, null, null, null, 'model', 'messages'),
  stream: fc.constantFrom([], [], [['stream', true]], [['stream', true], ['stream_options', { include_usage: true }]], [['stream', false]]) as fc.Arbitrary<Array<[string, unknown]>>,
}).map(({ model, messages, fields, omit, stream }) => {
  const entries: Array<[string, unknown]> = [['model', model], ['messages', messages], ...stream, ...fields];
  return objectOf(entries.filter(([k]) => k !== omit));
});
