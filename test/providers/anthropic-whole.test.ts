// An Anthropic Messages client that asked for no stream, to an `anthropic` provider with
// `stream_upstream: always` (llama.cpp serves /v1/messages too, and cancels only streamed
// work): the upstream is called streaming and the message is built from its events as its
// whole answer would have been: thinking with its signature, text with citations, a tool call's
// input from its JSON pieces, the stop and the usage with all four counts; the client that
// leaves closes the upstream call and pays nothing. Through the official Anthropic SDK.

import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import { DEMO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { json, startUpstream, writeSse } from '../helpers/upstream.js';

const ADMIN = 'anthropic-whole-admin-token';
const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const citation = { type: 'char_location', cited_text: 'the sky', document_index: 0, document_title: null, start_char_index: 0, end_char_index: 7 };

const EVENTS = [
  event('message_start', { message: { id: 'msg_whole', type: 'message', role: 'assistant', model: 'claude-up', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 21, output_tokens: 1, cache_read_input_tokens: 4 } } }),
  event('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
  event('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'The sky ' } }),
  event('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'is blue.' } }),
  event('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'sig-123' } }),
  event('content_block_stop', { index: 0 }),
  event('content_block_start', { index: 1, content_block: { type: 'text', text: '' } }),
  event('ping', {}),
  event('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'It is ' } }),
  event('content_block_delta', { index: 1, delta: { type: 'citations_delta', citation } }),
  event('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'blue.' } }),
  event('content_block_stop', { index: 1 }),
  event('content_block_start', { index: 2, content_block: { type: 'tool_use', id: 'toolu_1', name: 'paint', input: {} } }),
  event('content_block_delta', { index: 2, delta: { type: 'input_json_delta', partial_json: '{"colour": ' } }),
  event('content_block_delta', { index: 2, delta: { type: 'input_json_delta', partial_json: '"blue"}' } }),
  event('content_block_stop', { index: 2 }),
  event('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 17 } }),
  event('message_stop', {}),
];

t.test('a non-streaming Messages client, the upstream streamed: the message built from its events', async (t) => {
  let hang = false;
  const up = await startUpstream(async (req, res) => {
    if (req.url !== '/v1/messages') return json(res, 404, { type: 'error', error: { type: 'not_found_error', message: 'no' } });
    if (hang) {
      await writeSse(res, EVENTS.slice(0, 3), { end: false });
      await new Promise<void>((resolve) => res.on('close', () => resolve()));
      return;
    }
    await writeSse(res, EVENTS, { split: 17 });
  });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.ant = { kind: 'anthropic', base_url: up.url, stream_upstream: 'always' };
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'claude-up', price: { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 } });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  const balance = async () => ((await (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any);

  const client = new Anthropic({ apiKey: DEMO_KEY, baseURL: gw.url, maxRetries: 0 });
  const before = (await balance()).balance_units;
  const msg = await client.messages.create({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'What colour is the sky?' }] });
  t.equal(up.requests.at(-1)!.body.stream, true, 'called streaming');
  t.same(msg, {
    id: 'msg_whole', type: 'message', role: 'assistant', model: 'claude', stop_reason: 'tool_use', stop_sequence: null,
    content: [
      { type: 'thinking', thinking: 'The sky is blue.', signature: 'sig-123' },
      { type: 'text', text: 'It is blue.', citations: [citation] },
      { type: 'tool_use', id: 'toolu_1', name: 'paint', input: { colour: 'blue' } },
    ],
    usage: { input_tokens: 21, output_tokens: 17, cache_read_input_tokens: 4, cache_creation_input_tokens: 0 },
  }, 'the message as a whole answer has it, the model the slug');
  for (let i = 0; i < 100 && (await balance()).held_units > 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(before - (await balance()).balance_units, (21 + 4) + 2 * 17, 'charged its usage (cache reads are prompt tokens)');

  // A client that leaves: the upstream's stream is closed, nothing charged.
  hang = true;
  const before2 = (await balance()).balance_units;
  const ac = new AbortController();
  const pending = client.messages.create({ model: 'claude', max_tokens: 100, messages: [{ role: 'user', content: 'again' }] }, { signal: ac.signal }).catch((e: unknown) => e);
  for (let i = 0; i < 500 && up.requests.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
  ac.abort();
  await pending;
  const call = up.requests.at(-1)!;
  for (let i = 0; i < 500 && !call.aborted; i++) await new Promise((r) => setTimeout(r, 10));
  t.ok(call.aborted, 'the upstream call was closed');
  for (let i = 0; i < 100 && (await balance()).held_units > 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal((await balance()).balance_units, before2, 'nothing charged');
});
