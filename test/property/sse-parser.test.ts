// Boundary 3, the parser alone (lib/sse/parser.ts): any split of the same bytes gives the same
// events, and those are the events of the WHATWG algorithm run on the whole text (with
// Tollgate's one documented lenience: a last event without its blank line is dispatched).

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SseParser, type SseEvent } from '../../lib/sse/parser.js';
import { holds } from './arbitraries.js';

/** Text without line breaks: ASCII, any Unicode, colons and leading spaces. */
const value = fc.oneof(
  fc.string({ maxLength: 12 }).map((s) => s.replace(/[\r\n]/g, '')),
  fc.string({ unit: 'binary', maxLength: 8 }).map((s) => s.replace(/[\r\n]/g, '')),
  fc.constantFrom('', ' ', '  x', ':', 'a:b', '[DONE]', '{"choices":[]}', '\u00e9\u{1f99c}', '\ufeff'),
);

type Line = string | Uint8Array;

const line: fc.Arbitrary<Line> = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(fc.constantFrom('data:', 'data: ', 'data:  '), value).map(([f, v]) => f + v) },
  { weight: 2, arbitrary: fc.constant('') },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('event:', 'event: '), value).map(([f, v]) => f + v) },
  { weight: 1, arbitrary: value.map((v) => `:${v}`) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom('id:', 'retry:', 'foo:', 'data', 'event', 'Data:', ' data:'), value).map(([f, v]) => f + v) },
  // Bytes that are not UTF-8 (no CR or LF among them), inside a data line.
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 4 }).map((b) => Buffer.concat([Buffer.from('data:'), Buffer.from(b.map((x) => (x === 10 || x === 13 ? 0xff : x | 0x80)))])) },
);

const eol = fc.constantFrom('\n', '\r\n', '\r');

/** A stream: lines with their own line ending each, maybe a BOM, maybe no final line break. */
const stream = fc.record({
  bom: fc.boolean(),
  lines: fc.array(fc.tuple(line, eol), { maxLength: 30 }),
  tail: fc.oneof(fc.constant(''), value.map((v) => `data:${v}`)),
}).map(({ bom, lines, tail }) => Buffer.concat([
  Buffer.from(bom ? '\ufeff' : ''),
  ...lines.flatMap(([l, e]) => [typeof l === 'string' ? Buffer.from(l) : Buffer.from(l), Buffer.from(e)]),
  Buffer.from(tail),
]));

function parse(bytes: Buffer, cuts: number[]): { events: SseEvent[]; comments: number } {
  const p = new SseParser();
  const events: SseEvent[] = [];
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    events.push(...p.push(bytes.subarray(at, c)));
    at = c;
  }
  events.push(...p.end());
  return { events, comments: p.comments };
}

/** The WHATWG event stream interpretation, on the whole decoded text. */
function reference(bytes: Buffer): { events: SseEvent[]; comments: number } {
  const text = new TextDecoder('utf-8').decode(bytes);
  const events: SseEvent[] = [];
  let data: string[] = [];
  let event: string | undefined;
  let comments = 0;
  const dispatch = () => {
    if (data.length > 0) events.push({ event, data: data.join('\n') });
    data = [];
    event = undefined;
  };
  for (const l of text.split(/\r\n|\r|\n/)) {
    if (l === '') { dispatch(); continue; }
    if (l.startsWith(':')) { comments++; continue; }
    const colon = l.indexOf(':');
    const name = colon === -1 ? l : l.slice(0, colon);
    let v = colon === -1 ? '' : l.slice(colon + 1);
    if (v.startsWith(' ')) v = v.slice(1);
    if (name === 'data') data.push(v);
    else if (name === 'event') event = v;
  }
  dispatch(); // Tollgate's lenience: the body's end dispatches a last event without its blank line
  return { events, comments };
}

const cuts = (length: number) => fc.uniqueArray(fc.integer({ min: 0, max: Math.max(0, length) }), { maxLength: 12 }).map((a) => a.sort((x, y) => x - y));

t.test('any split of the same bytes gives the same events, those of the WHATWG algorithm', async (t) => {
  const withCuts = stream.chain((bytes) => fc.tuple(fc.constant(bytes), cuts(bytes.length)));
  await holds(t, 'random splits', fc.property(withCuts, ([bytes, c]) => {
    const whole = parse(bytes, []);
    assert.deepEqual(whole, reference(bytes), 'the whole stream parses as the reference does');
    assert.deepEqual(parse(bytes, c), whole, `split at ${c.join(',')}`);
  }), 1500);
});

t.test('split at every byte', async (t) => {
  await holds(t, 'byte by byte', fc.property(stream, (bytes) => {
    const every = Array.from({ length: bytes.length }, (_, i) => i);
    assert.deepEqual(parse(bytes, every), reference(bytes));
  }), 400);
});
