// Every section 7 error through POST /v1/responses, on both upstream kinds: before the first
// byte the envelope of CONTRACT section 4 with the real status and nothing consumed; after it one
// response.failed event whose response.error is {code, message}, no response.completed, charged
// once for what was delivered.

import t from 'tap';
import { schemas } from '../helpers/schemas.js';
import { envelopeFields, runErrorTable, type DialectSpec } from '../helpers/error-table.js';
import { namedEvents } from '../helpers/error-rig.js';

const spec: DialectSpec = {
  name: 'responses',
  path: '/v1/responses',
  streams: true,
  images: true,
  models: { main: 'm', paid: 'paid', tiny: 'tiny' },
  headers: (credential) => ({ authorization: `Bearer ${credential}`, 'content-type': 'application/json' }),
  body: ({ model, text, stream, images }) => ({
    model, max_output_tokens: 50, stream: stream ?? false,
    input: images === undefined ? text : [{
      type: 'message', role: 'user',
      content: [...images.map((url) => ({ type: 'input_image', image_url: url })), { type: 'input_text', text }],
    }],
  }),
  invalid: () => [
    ['missing_required_parameter', 'input', { model: 'm' }],
    ['invalid_type', 'store', { model: 'm', input: 'Hi', store: 'yes' }],
    ['invalid_value', 'max_output_tokens', { model: 'm', input: 'Hi', max_output_tokens: 0 }],
    ['unsupported_value', 'input[0].role', { model: 'm', input: [{ type: 'message', role: 'wizard', content: 'Hi' }] }],
  ],
  badImage: () => ({ model: 'mv', input: [{ type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'http://example.com/cat.png' }] }] }),
  errorFields: envelopeFields,
  streamError: (t: any, text: string) => {
    const evs = namedEvents(text);
    t.equal(evs[0]![0], 'response.created', 'the stream had begun');
    t.ok(evs.some(([name, d]) => name === 'response.output_text.delta' && d.delta === 'one two three'), 'the delivered text');
    const [name, body] = evs.at(-1)!;
    t.equal(name, 'response.failed', 'the last event is response.failed');
    // OpenAI's schema lists its own error codes; CONTRACT section 6 puts our stable code there.
    // Everything else about the event must validate.
    const asOpenAI = { ...body, response: { ...body.response, error: { ...body.response.error, code: 'server_error' } } };
    t.same(schemas.responseEvent(asOpenAI), [], 'response.failed validates against ResponseStreamEvent (but for our code)');
    t.notOk(evs.some(([n]) => n === 'response.completed' || n === 'response.incomplete'), 'no response.completed');
    t.equal(body.response.status, 'failed');
    t.same(Object.keys(body.response.error).sort(), ['code', 'message']);
    t.same(evs.map(([, d]) => d.sequence_number), evs.map((_e, i) => i), 'sequence numbers still rise');
    return body.response.error.code;
  },
};

runErrorTable(t, spec, ['openai', 'anthropic']);
