// Pins the native Messages stream path below the sockets: an Anthropic upstream's events go
// through NativeTranslator as unframed {event, data} (ChoicesPart.native) and the messages
// renderer frames them; the bytes are the upstream's own (multi-line data stays multi-line, an
// unnamed event is named by its type), and message_delta / message_stop wait for close().

import t from 'tap';
import { NativeTranslator } from '../../lib/providers/anthropic/native.js';
import { StreamTranslator } from '../../lib/providers/anthropic/translate.js';
import { MessagesRenderer } from '../../lib/dialects/messages/render.js';
import type { ChatRequest } from '../../lib/hub/chat.js';
import type { ProviderCall, StreamPart } from '../../lib/providers/types.js';
import type { SseEvent } from '../../lib/sse/parser.js';

const call = { request: { body: {} } } as unknown as ProviderCall;
const request = { model: 'm', messages: [], stream: true, includeUsage: true, maxOutputTokens: 10, imageCount: 0, body: {} } as ChatRequest;

function run(events: SseEvent[]): { parts: StreamPart[]; out: string; closed: string } {
  const translator = new NativeTranslator(new StreamTranslator(call, 'up', 200), 'catalog/slug');
  const renderer = new MessagesRenderer(request, 'catalog/slug', 5);
  const parts: StreamPart[] = [];
  let out = '';
  for (const ev of events) {
    for (const p of translator.handle(ev)) {
      parts.push(p);
      if (p.kind === 'choices') out += renderer.chunk(p.choices, p.native);
    }
  }
  return { parts, out, closed: renderer.close({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }) };
}

const start = '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}}';

t.test('native events are carried unframed and framed by the renderer, byte for byte', async (t) => {
  const { parts, out, closed } = run([
    { event: 'message_start', data: start },
    { event: 'ping', data: '{"type":"ping"}' },
    { event: 'content_block_start', data: '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}' },
    // A data field the upstream sent over three lines (the parser joined them with LF).
    { event: 'content_block_delta', data: '{"type":"content_block_delta",\n"index":0,\n"delta":{"type":"text_delta","text":"Hi"}}' },
    { event: undefined, data: '{"type":"content_block_stop","index":0}' },
    { event: 'message_delta', data: '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}' },
    { event: 'message_stop', data: '{"type":"message_stop"}' },
  ]);
  const natives = parts.flatMap((p) => (p.kind === 'choices' && p.native !== undefined ? [p.native] : []));
  t.strictSame(natives.map((n) => n.event), ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  t.notOk(natives.some((n) => n.data.startsWith('event:') || n.data.startsWith('data:')), 'no part carries framed text');
  t.equal(out,
    'event: message_start\ndata: ' + start.replace('"claude-x"', '"catalog/slug"') + '\n\n' +
    'event: ping\ndata: {"type":"ping"}\n\n' +
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n' +
    'event: content_block_delta\ndata: {"type":"content_block_delta",\ndata: "index":0,\ndata: "delta":{"type":"text_delta","text":"Hi"}}\n\n' +
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    'the model rewritten, multi-line data kept multi-line, the unnamed event named by its type; the end held back');
  t.equal(closed,
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2,"input_tokens":3,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}\n\n' +
    'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    'message_delta (usage completed) and message_stop come at close()');
});
