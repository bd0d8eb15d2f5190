// Pins the SSE framers (lib/sse/writer.ts): the exact bytes of a data frame and of a named event,
// and that a named event whose data holds newlines reads back, through our own parser, as the
// same name and the same data (one `data:` line per line).

import t from 'tap';
import { DONE_FRAME, KEEPALIVE_FRAME, dataFrame, eventFrame } from '../../lib/sse/writer.js';
import { SseParser, type SseEvent } from '../../lib/sse/parser.js';

function parse(s: string): SseEvent[] {
  const p = new SseParser();
  return [...p.push(new TextEncoder().encode(s)), ...p.end()];
}

t.test('dataFrame and the constant frames', async (t) => {
  t.equal(dataFrame('{"a":1}'), 'data: {"a":1}\n\n');
  t.equal(DONE_FRAME, 'data: [DONE]\n\n');
  t.equal(KEEPALIVE_FRAME, ': keep-alive\n\n');
});

t.test('eventFrame: a one-line data is one event line and one data line', async (t) => {
  t.equal(eventFrame('ping', '{"type":"ping"}'), 'event: ping\ndata: {"type":"ping"}\n\n');
  t.equal(eventFrame('message_stop', ''), 'event: message_stop\ndata: \n\n');
});

t.test('eventFrame: multi-line data gets one data line per line', async (t) => {
  t.equal(eventFrame('content_block_delta', '{"a":\n1,\n"b":2}'), 'event: content_block_delta\ndata: {"a":\ndata: 1,\ndata: "b":2}\n\n');
  t.equal(eventFrame('x', 'a\n\nb'), 'event: x\ndata: a\ndata: \ndata: b\n\n', 'an empty line inside stays an empty data line');
  t.equal(eventFrame('x', 'a\n'), 'event: x\ndata: a\ndata: \n\n', 'a trailing newline is a last empty data line');
});

t.test('eventFrame round-trips through the parser', async (t) => {
  for (const data of ['{"type":"ping"}', '{"a":\n1}', 'a\n\nb', 'a\n', '\n', '', ' lead', 'x\n y']) {
    t.strictSame(parse(eventFrame('named', data)), [{ event: 'named', data }], JSON.stringify(data));
  }
  t.strictSame(parse(eventFrame('a', '1\n2') + eventFrame('b', '3')), [{ event: 'a', data: '1\n2' }, { event: 'b', data: '3' }], 'two in a row');
});
