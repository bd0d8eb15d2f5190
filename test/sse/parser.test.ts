// Pins the SSE parser (lib/sse/parser.ts): WHATWG line rules, any packet split, UTF-8 split
// inside a character, comments, multi-line data, and the flush at the end of the body.

import t from 'tap';
import { MAX_SSE_LINE_BYTES, SseLimitError, SseParser, type SseEvent } from '../../lib/sse/parser.js';

const enc = new TextEncoder();
const bytes = (s: string): Uint8Array => enc.encode(s);

/** Feeds the pieces in order, then ends; returns every event and the comment count. */
function feed(pieces: Uint8Array[]): { events: SseEvent[]; comments: number } {
  const p = new SseParser();
  const events: SseEvent[] = [];
  for (const piece of pieces) events.push(...p.push(piece));
  events.push(...p.end());
  return { events, comments: p.comments };
}

const whole = (s: string) => feed([bytes(s)]);

function oneByteAtATime(s: string) {
  const b = bytes(s);
  const pieces: Uint8Array[] = [];
  for (let i = 0; i < b.length; i++) pieces.push(b.subarray(i, i + 1));
  return feed(pieces);
}

/** Two pieces split at byte i, for every i from 0 to length (empty pieces included). */
function everySplit(s: string): Array<{ at: number; result: ReturnType<typeof feed> }> {
  const b = bytes(s);
  const out = [];
  for (let at = 0; at <= b.length; at++) out.push({ at, result: feed([b.slice(0, at), b.slice(at)]) });
  return out;
}

t.test('LF line endings', async (t) => {
  const r = whole('data: one\n\ndata: two\n\n');
  t.strictSame(r.events, [{ event: undefined, data: 'one' }, { event: undefined, data: 'two' }]);
  t.equal(r.comments, 0);
});

t.test('CRLF line endings', async (t) => {
  const r = whole('data: one\r\n\r\nevent: error\r\ndata: two\r\n\r\n');
  t.strictSame(r.events, [{ event: undefined, data: 'one' }, { event: 'error', data: 'two' }]);
});

t.test('lone CR line endings', async (t) => {
  const r = whole('data: one\r\rdata: a\rdata: b\r\r');
  t.strictSame(r.events, [{ event: undefined, data: 'one' }, { event: undefined, data: 'a\nb' }]);
});

t.test('mixed line endings in one stream', async (t) => {
  const r = whole('data: a\r\n\ndata: b\r\rdata: c\n\r\n');
  t.strictSame(r.events, [{ event: undefined, data: 'a' }, { event: undefined, data: 'b' }, { event: undefined, data: 'c' }]);
});

t.test('push returns an event as soon as its blank line arrives', async (t) => {
  const p = new SseParser();
  t.strictSame(p.push(bytes('data: x\n')), []);
  t.strictSame(p.push(bytes('\n')), [{ event: undefined, data: 'x' }]);
  t.strictSame(p.push(bytes('data: y\n\ndata: z\n\n')), [{ event: undefined, data: 'y' }, { event: undefined, data: 'z' }]);
  t.strictSame(p.end(), []);
});

// A stream exercising every rule at once: LF, CRLF, lone CR, comments, id/retry, an event name,
// multi-line data, no-space data, a multi-byte string, and an event without data.
const MIXED =
  ': keep-alive\n' +
  'id: 1\n' +
  'retry: 3000\n' +
  'data: {"a":1}\n' +
  '\n' +
  'event: error\r\n' +
  'data:héllo 😀 世界\r\n' +
  '\r\n' +
  ':\r' +
  'data: a\r' +
  'data: b\r' +
  '\r' +
  'event: ignored\n' +
  '\n' +
  'data\n' +
  '\n' +
  'data: [DONE]\r\n' +
  '\r\n' +
  'data: tail';
const MIXED_EVENTS: SseEvent[] = [
  { event: undefined, data: '{"a":1}' },
  { event: 'error', data: 'héllo 😀 世界' },
  { event: undefined, data: 'a\nb' },
  { event: undefined, data: '' },
  { event: undefined, data: '[DONE]' },
  { event: undefined, data: 'tail' },
];

t.test('the mixed stream fed whole', async (t) => {
  const r = whole(MIXED);
  t.strictSame(r.events, MIXED_EVENTS);
  t.equal(r.comments, 2);
});

t.test('the mixed stream fed one byte at a time gives the same events', async (t) => {
  const r = oneByteAtATime(MIXED);
  t.strictSame(r.events, MIXED_EVENTS);
  t.equal(r.comments, 2);
});

t.test('the mixed stream split in two at every byte position gives the same events', async (t) => {
  const splits = everySplit(MIXED);
  t.equal(splits.length, bytes(MIXED).length + 1);
  const bad = splits.filter(({ result }) => JSON.stringify(result.events) !== JSON.stringify(MIXED_EVENTS) || result.comments !== 2);
  t.strictSame(bad.map((b) => b.at), [], 'no split position changes the events or the comment count');
  // and one direct deep comparison per split, so a failure shows the difference
  for (const { at, result } of splits) t.strictSame(result.events, MIXED_EVENTS, `split at ${at}`);
});

t.test('a CRLF split between CR and LF is one line break, not two', async (t) => {
  // With an extra empty line the first event would be dispatched before `data: b`.
  const p = new SseParser();
  t.strictSame(p.push(bytes('data: a\r')), []);
  t.strictSame(p.push(bytes('\ndata: b\r')), []);
  t.strictSame(p.push(bytes('\n\r')), [], 'the CR may still be half of a CRLF');
  t.strictSame(p.push(bytes('\ndata: c\r\n\r\n')), [{ event: undefined, data: 'a\nb' }, { event: undefined, data: 'c' }]);
  t.strictSame(p.end(), []);

  const q = new SseParser();
  const out = [...q.push(bytes('event: x\r')), ...q.push(bytes('\n')), ...q.push(bytes('data: 1\r')), ...q.push(bytes('\n\r')), ...q.push(bytes('\n'))];
  t.strictSame(out, [{ event: 'x', data: '1' }]);
  t.strictSame(q.end(), []);
});

t.test('a trailing lone CR is a line break once the next byte is not LF', async (t) => {
  const p = new SseParser();
  t.strictSame(p.push(bytes('data: a\r\r')), [], 'the last CR could still be half of a CRLF');
  t.strictSame(p.push(bytes('data: b\n\n')), [{ event: undefined, data: 'a' }, { event: undefined, data: 'b' }]);
  const q = new SseParser();
  t.strictSame(q.push(bytes('data: a\r\r')), []);
  t.strictSame(q.end(), [{ event: undefined, data: 'a' }], 'at the end of the body the CR counts');
});

t.test('comments are ignored and counted', async (t) => {
  const p = new SseParser();
  t.strictSame(p.push(bytes(': keep-alive\n\n')), []);
  t.equal(p.comments, 1);
  t.strictSame(p.push(bytes(':\n: another one\ndata: x\n: inside an event\n\n')), [{ event: undefined, data: 'x' }]);
  t.equal(p.comments, 4);
  t.strictSame(p.push(bytes(': split com')), []);
  t.equal(p.comments, 4, 'an incomplete comment line is not counted yet');
  t.strictSame(p.push(bytes('ment\r\n')), []);
  t.equal(p.comments, 5);
  t.strictSame(p.end(), []);
  t.equal(p.comments, 5);
});

t.test('multi-line data joins with LF', async (t) => {
  t.strictSame(whole('data: a\ndata: b\n\n').events, [{ event: undefined, data: 'a\nb' }]);
  t.strictSame(whole('data: a\ndata:\ndata: c\n\n').events, [{ event: undefined, data: 'a\n\nc' }]);
});

t.test('one leading space is removed, no more; no space is fine', async (t) => {
  t.strictSame(whole('data:x\n\n').events, [{ event: undefined, data: 'x' }]);
  t.strictSame(whole('data: x\n\n').events, [{ event: undefined, data: 'x' }]);
  t.strictSame(whole('data:  x \n\n').events, [{ event: undefined, data: ' x ' }]);
  t.strictSame(whole('data: a: b\n\n').events, [{ event: undefined, data: 'a: b' }], 'only the first colon separates');
  t.strictSame(whole('event:error\ndata:{}\n\n').events, [{ event: 'error', data: '{}' }]);
});

t.test('event: sets the event name, and it resets after dispatch', async (t) => {
  const r = whole('event: error\ndata: {"error":1}\n\ndata: next\n\nevent: a\nevent: b\ndata: last\n\n');
  t.strictSame(r.events, [
    { event: 'error', data: '{"error":1}' },
    { event: undefined, data: 'next' },
    { event: 'b', data: 'last' },
  ]);
});

t.test('a field with no colon is a field with an empty value', async (t) => {
  t.strictSame(whole('data\n\n').events, [{ event: undefined, data: '' }]);
  t.strictSame(whole('data\ndata\n\n').events, [{ event: undefined, data: '\n' }]);
  t.strictSame(whole('foo\ndata: x\nbar\n\n').events, [{ event: undefined, data: 'x' }], 'unknown fields are ignored');
});

t.test('an event with no data lines dispatches nothing and forgets its name', async (t) => {
  t.strictSame(whole('event: ping\n\n').events, []);
  t.strictSame(whole('event: ping\n\ndata: x\n\n').events, [{ event: undefined, data: 'x' }]);
  t.strictSame(whole('\n\n\n\n').events, [], 'blank lines alone dispatch nothing');
  t.strictSame(whole('id: 7\nretry: 10\n\n').events, []);
});

t.test('id: and retry: lines are ignored and break nothing', async (t) => {
  const r = whole('id: 1\ndata: a\nretry: 500\nid\ndata: b\n\nretry: x\nid: 2\r\ndata: c\r\n\r\n');
  t.strictSame(r.events, [{ event: undefined, data: 'a\nb' }, { event: undefined, data: 'c' }]);
  t.equal(r.comments, 0);
});

t.test('multi-byte UTF-8 split inside a character decodes correctly', async (t) => {
  const text = 'data: héllo 😀 世界\n\n';
  const b = bytes(text);
  const expected = [{ event: undefined, data: 'héllo 😀 世界' }];
  // the emoji is 4 bytes, each CJK character 3 and é 2: split inside each of them
  const emojiAt = b.indexOf(0xf0);
  t.ok(emojiAt > 0);
  for (const at of [emojiAt + 1, emojiAt + 2, emojiAt + 3, b.indexOf(0xc3) + 1, b.indexOf(0xe4) + 1, b.indexOf(0xe4) + 2]) {
    t.strictSame(feed([b.slice(0, at), b.slice(at)]).events, expected, `split at byte ${at}`);
  }
  t.strictSame(oneByteAtATime(text).events, expected);
  // three pieces, the emoji's 4 bytes spread over all three
  t.strictSame(feed([b.slice(0, emojiAt + 1), b.slice(emojiAt + 1, emojiAt + 3), b.slice(emojiAt + 3)]).events, expected);
  // the parser never returns a replacement character mid-stream
  const p = new SseParser();
  t.strictSame(p.push(b.slice(0, emojiAt + 2)), []);
  t.strictSame(p.push(b.slice(emojiAt + 2)), expected);
});

t.test('end() flushes a last event that lacked its blank line', async (t) => {
  const p = new SseParser();
  t.strictSame(p.push(bytes('data: a\n\ndata: b\n')), [{ event: undefined, data: 'a' }]);
  t.strictSame(p.end(), [{ event: undefined, data: 'b' }]);

  const q = new SseParser();
  t.strictSame(q.push(bytes('event: error\ndata: {"x":')), []);
  t.strictSame(q.end(), [{ event: 'error', data: '{"x":' }], 'even without a final line break');

  const r = new SseParser();
  t.strictSame(r.push(bytes('data: a\n\n')), [{ event: undefined, data: 'a' }]);
  t.strictSame(r.end(), [], 'nothing left, nothing flushed');

  const s = new SseParser();
  t.strictSame(s.push(bytes(': only a comment')), []);
  t.strictSame(s.end(), []);
  t.equal(s.comments, 1, 'a comment ending the body is still counted');
});

t.test('an empty push changes nothing', async (t) => {
  const p = new SseParser();
  t.strictSame(p.push(new Uint8Array(0)), []);
  t.strictSame(p.push(bytes('data: a\n')), []);
  t.strictSame(p.push(new Uint8Array(0)), []);
  t.strictSame(p.push(bytes('\n')), [{ event: undefined, data: 'a' }]);
  t.strictSame(p.end(), []);
});

t.test('an OpenAI-style stream split at every byte position', async (t) => {
  const frames = [
    'data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
    'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Grüße "}}]}',
    ': ping',
    'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"🚀"}}]}',
    'data: [DONE]',
  ];
  const text = frames.join('\r\n\r\n') + '\r\n\r\n';
  const expected = frames.filter((f) => f.startsWith('data: ')).map((f) => ({ event: undefined, data: f.slice(6) }));
  t.strictSame(whole(text).events, expected);
  for (const { at, result } of everySplit(text)) {
    t.strictSame(result.events, expected, `split at ${at}`);
    t.equal(result.comments, 1, `split at ${at}: one comment`);
  }
});

// ---- bounded, linear work (CONTRACT section 10) --------------------------------------------

t.test('linear work: a 1 MiB line fed in 64-byte pieces is searched once and copied once', async (t) => {
  const line = `data: ${'x'.repeat(MAX_SSE_LINE_BYTES - 6)}`;
  const b = bytes(`${line}\n\n`);
  const p = new SseParser();
  const events: SseEvent[] = [];
  for (let i = 0; i < b.length; i += 64) events.push(...p.push(b.subarray(i, i + 64)));
  t.equal(events.length, 1);
  t.equal(events[0]!.data.length, MAX_SSE_LINE_BYTES - 6, 'a line of exactly the limit is accepted');
  // Each byte is passed over by the LF search, the CR search and the one copy at the line's
  // end: at most 3 per byte, however the line was split. Re-scanning the pending line on every
  // push would be ~16,000 pushes x ~0.5 MiB.
  t.ok(p.work <= 3 * b.length, `work ${p.work} <= 3 x ${b.length} bytes`);
});

t.test('linear work: one byte per push', async (t) => {
  const b = bytes(`data: ${'y'.repeat(100_000)}\r\n\r\n`);
  const p = new SseParser();
  const events: SseEvent[] = [];
  for (let i = 0; i < b.length; i++) events.push(...p.push(b.subarray(i, i + 1)));
  t.equal(events.length, 1);
  t.equal(events[0]!.data.length, 100_000);
  t.ok(p.work <= 3 * b.length, `work ${p.work} <= 3 x ${b.length} bytes`);
});

t.test('linear work: a packet of many short lines is not re-searched per line', async (t) => {
  // A packet of LF lines has no CR: searching for one from each line would re-scan the
  // packet's rest every time. So would a CR-only packet searching for LF.
  for (const [name, sep] of [['LF', '\n'], ['CR', '\r'], ['CRLF', '\r\n']] as const) {
    const text = `data: x${sep}${sep}`.repeat(50_000);
    const b = bytes(text);
    const p = new SseParser();
    const events = [...p.push(b), ...p.end()];
    t.equal(events.length, 50_000, `${name}: every event`);
    t.ok(p.work <= 3 * b.length, `${name}: work ${p.work} <= 3 x ${b.length} bytes`);
  }
});

t.test('a line above the limit throws SseLimitError as soon as it passes, having kept no more', async (t) => {
  const p = new SseParser(1000);
  const piece = bytes('a'.repeat(100));
  for (let i = 0; i < 10; i++) t.strictSame(p.push(piece), [], `piece ${i + 1}: ${100 * (i + 1)} bytes is within the limit`);
  t.throws(() => p.push(piece), SseLimitError, 'the piece that passes 1000 bytes throws');

  // The same with the line break in the same packet, and for comments and event names.
  t.strictSame(new SseParser(10).push(bytes('data: 1234\n\n')), [{ event: undefined, data: '1234' }], '10 bytes: fine');
  for (const line of ['data: 12345', ': 123456789', 'event: 1234']) {
    t.throws(() => new SseParser(10).push(bytes(`${line}\n\n`)), SseLimitError, `${JSON.stringify(line)}: 11 bytes throws`);
  }
  t.throws(() => new SseParser(10).push(bytes('data: 12345')), SseLimitError, 'an unfinished line throws once it is too long');
  const q = new SseParser(10);
  t.strictSame(q.push(bytes('data: 1234')), []);
  t.strictSame(q.end(), [{ event: undefined, data: '1234' }], 'an unfinished line of exactly the limit ends the body fine');
});

t.test('the default limit is 1 MiB: a 2 MiB line throws once 1 MiB has passed, never buffered whole', async (t) => {
  t.equal(MAX_SSE_LINE_BYTES, 1024 * 1024);
  const b = bytes(`data: ${'z'.repeat(2 * 1024 * 1024)}\n\n`);
  const p = new SseParser();
  const step = 16 * 1024;
  let fed = 0;
  let error: unknown;
  try {
    for (let i = 0; i < b.length; i += step) {
      fed = Math.min(b.length, i + step);
      p.push(b.subarray(i, i + step));
    }
  } catch (err) {
    error = err;
  }
  t.ok(error instanceof SseLimitError, 'SseLimitError');
  t.equal((error as SseLimitError).limit, MAX_SSE_LINE_BYTES);
  t.ok(fed > MAX_SSE_LINE_BYTES && fed <= MAX_SSE_LINE_BYTES + step, `thrown after ${fed} bytes: within one piece of the limit`);
});

t.test('an event whose data lines add up past the limit throws; the count restarts per event', async (t) => {
  const line = `data: ${'a'.repeat(400)}\n`;
  const p = new SseParser(1000);
  // 400 + 1 (the joining LF) + 400 = 801 bytes of data: fine, ten times over.
  for (let i = 0; i < 10; i++) t.strictSame(p.push(bytes(`${line}${line}\n`)), [{ event: undefined, data: `${'a'.repeat(400)}\n${'a'.repeat(400)}` }]);
  t.strictSame(p.push(bytes(`${line}${line}`)), []);
  t.throws(() => p.push(bytes(line)), SseLimitError, 'a third line makes 1202 bytes');
});

t.test('a leading BOM is dropped once, however the stream is split; anywhere else it is content', async (t) => {
  const text = '\uFEFFdata: a\n\n';
  t.strictSame(whole(text).events, [{ event: undefined, data: 'a' }]);
  t.strictSame(oneByteAtATime(text).events, [{ event: undefined, data: 'a' }]);
  for (const { at, result } of everySplit(text)) t.strictSame(result.events, [{ event: undefined, data: 'a' }], `split at ${at}`);
  t.strictSame(whole('data: \uFEFFa\n\n').events, [{ event: undefined, data: '\uFEFFa' }], 'inside a line it stays');
  t.strictSame(whole('\uFEFF\uFEFFdata: a\n\n').events, [], 'only one BOM is dropped: the next one makes an unknown field');
  t.strictSame(whole('data: a\n\n\uFEFFdata: b\n\n').events, [{ event: undefined, data: 'a' }], 'a BOM after the start is content');
  t.strictSame(feed([bytes('da'), bytes('ta: short start\n\n')]).events, [{ event: undefined, data: 'short start' }], 'a first packet shorter than a BOM');
  t.strictSame(feed([bytes(':')]).comments, 1, 'a body shorter than a BOM');
  t.strictSame(feed([Uint8Array.of(0xef, 0xbb), bytes('\ndata: z\n\n')]).events, [{ event: undefined, data: 'z' }], 'half a BOM is content, not dropped');
});
