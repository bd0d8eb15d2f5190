// Every section 7 error through POST /v1/messages, on both upstream kinds (translated to an
// OpenAI-compatible server, native to an Anthropic one), in Anthropic's error shape: before the
// first byte with the real status and nothing consumed, after it as one `event: error` and no
// message_stop, charged once for what was delivered.

import t from 'tap';
import { runErrorTable, type Answer, type DialectSpec } from '../helpers/error-table.js';
import { namedEvents } from '../helpers/error-rig.js';

const ANTHROPIC_TYPE: Record<number, string> = {
  400: 'invalid_request_error', 401: 'authentication_error', 402: 'billing_error', 403: 'permission_error', 404: 'not_found_error',
  413: 'request_too_large', 415: 'invalid_request_error', 422: 'invalid_request_error', 429: 'rate_limit_error', 500: 'api_error',
  502: 'api_error', 503: 'overloaded_error', 504: 'timeout_error',
};

function checkBody(t: any, body: any, status: number, code: string, requestId: string | null): Record<string, any> {
  t.same(Object.keys(body).sort(), ['error', 'request_id', 'type'], `${code}: Anthropic's error shape`);
  t.equal(body.type, 'error');
  t.equal(body.error.type, ANTHROPIC_TYPE[status], `${code}: error.type for ${status}`);
  t.equal(body.error.code, code, `${code}: error.code`);
  t.equal(typeof body.error.message, 'string');
  t.equal(body.request_id, requestId, `${code}: request_id = x-request-id`);
  return body.error;
}

const spec: DialectSpec = {
  name: 'messages',
  path: '/v1/messages',
  streams: true,
  images: true,
  models: { main: 'm', paid: 'paid', tiny: 'tiny' },
  headers: (credential) => ({ 'x-api-key': credential, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }),
  body: ({ model, text, stream, images }) => ({
    model, max_tokens: 50, stream: stream ?? false,
    messages: [{
      role: 'user',
      content: images === undefined ? text : [
        ...images.map((url) => ({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: url.slice(url.indexOf(',') + 1) } })),
        { type: 'text', text },
      ],
    }],
  }),
  invalid: () => [
    ['missing_required_parameter', 'max_tokens', { model: 'm', messages: [{ role: 'user', content: 'Hi' }] }],
    ['invalid_type', 'temperature', { model: 'm', max_tokens: 5, temperature: 'hot', messages: [{ role: 'user', content: 'Hi' }] }],
    ['invalid_value', 'max_tokens', { model: 'm', max_tokens: 0, messages: [{ role: 'user', content: 'Hi' }] }],
    ['unsupported_value', 'messages[0].role', { model: 'm', max_tokens: 5, messages: [{ role: 'wizard', content: 'Hi' }] }],
  ],
  badImage: () => ({
    model: 'mv', max_tokens: 5,
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://example.com/cat.png' } }, { type: 'text', text: 'look' }] }],
  }),
  errorFields: (t: any, res: Answer, status: number, code: string) => checkBody(t, JSON.parse(res.text), status, code, res.headers.get('x-request-id')),
  streamError: (t: any, text: string, requestId: string) => {
    const evs = namedEvents(text);
    t.equal(evs[0]![0], 'message_start', 'the stream had begun');
    t.ok(evs.some(([name, d]) => name === 'content_block_delta' && d.delta.text === 'one two three'), 'the delivered text');
    const [name, body] = evs.at(-1)!;
    t.equal(name, 'error', 'the last event is an error');
    t.equal(evs.filter(([n]) => n === 'error').length, 1, 'one error event');
    t.notOk(evs.some(([n]) => n === 'message_stop' || n === 'message_delta'), 'no message_delta / message_stop');
    const code = body.error.code;
    const status = { provider_error: 502, provider_timeout: 504, model_unavailable: 503, context_length_exceeded: 422 }[code as string] ?? 500;
    checkBody(t, body, status, code, requestId);
    return code;
  },
};

runErrorTable(t, spec, ['openai', 'anthropic']);
