// Error messages about an upstream state the HTTP status it really sent: an error body, an
// invalid or empty body, or an error event can all come with a 200, and such an answer used
// to be described as "upstream status 502".

import t from 'tap';
import type { ServerResponse } from 'node:http';
import { baseConfig, postChat, startGateway, type TestGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, completionBody('hi')));
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 10_000, circuit_failures: 1000 };
  c.providers.ant = { kind: 'anthropic', base_url: up.url, timeout_ms: 10_000, circuit_failures: 1000 };
  c.models.push(
    { id: 'm', provider: 'up', upstream_model: 'm-7b' },
    { id: 'claude', provider: 'ant', upstream_model: 'claude-x' },
  );
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const ask = (model: string, extra: Record<string, any> = {}) => ({ model, messages: [{ role: 'user', content: 'go' }], max_tokens: 100, ...extra });

function expectError(t: any, res: Awaited<ReturnType<typeof postChat>>, status: number, code: string) {
  t.equal(res.status, status, `status ${status}`);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = res.json();
  t.same(schemas.error(body), [], 'envelope validates');
  t.equal(body.code, code);
  t.equal(body.error.code, code);
  t.equal(body.request_id, res.headers['x-request-id']);
  return body;
}

t.test('error messages state the status the upstream really sent', async (t) => {
  const cases: Array<[string, string, boolean, (res: ServerResponse) => void, string]> = [
    ['200 with a body that is not JSON', 'm', false, (res) => json(res, 200, 'not json'), 'The model provider sent an answer that is not valid JSON (upstream status 200).'],
    ['200 with an empty body', 'm', false, (res) => json(res, 200, ''), 'The model provider sent an answer that is not valid JSON (upstream status 200).'],
    ['200 with no choices', 'm', false, (res) => json(res, 200, { id: 'x', choices: [] }), 'The model provider sent an answer with no choices (upstream status 200).'],
    ['200 with an error body', 'm', false, (res) => json(res, 200, { error: { message: 'worker crashed' } }), "The model provider 'up' sent an error (upstream status 200)."],
    ['stream: 200 JSON instead of events, empty', 'm', true, (res) => json(res, 200, ''), "The model provider 'up' sent an error (upstream status 200)."],
    ['stream: 200 JSON error instead of events', 'm', true, (res) => json(res, 200, { error: { message: 'nope' } }), "The model provider 'up' sent an error (upstream status 200)."],
    ['stream: an error event first, on a 200', 'm', true, (res) => void writeSse(res, [`data: ${JSON.stringify({ error: { message: 'kaput' } })}\n\n`]), "The model provider 'up' sent an error (upstream status 200)."],
    ['a 500', 'm', false, (res) => json(res, 500, { error: { message: 'boom' } }), "The model provider 'up' failed (upstream status 500)."],
    ['anthropic: 200 with an error body', 'claude', false, (res) => json(res, 200, { type: 'error', error: { type: 'api_error', message: 'x' } }), "The model provider 'ant' sent an error (upstream status 200)."],
    ['anthropic: 200 with no content', 'claude', false, (res) => json(res, 200, { type: 'message' }), 'The model provider sent an answer with no content (upstream status 200).'],
    ['anthropic stream: an api_error event on a 200', 'claude', true, (res) => void writeSse(res, [`event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'x' } })}\n\n`]), "The model provider 'ant' sent an error (upstream status 200)."],
  ];
  for (const [name, model, stream, script, message] of cases) {
    up.setScript((_req, res) => script(res));
    const res = await postChat(gw.url, ask(model, stream ? { stream: true } : {}));
    const body = expectError(t, res, 502, 'provider_error');
    t.equal(body.message, message, name);
    t.notMatch(body.message, /502/, `${name}: no invented status`);
  }
  // An error event's own type still decides: Anthropic's rate limit is 503, whatever the status.
  up.setScript((_req, res) => void writeSse(res, [`event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'rate_limit_error', message: 'slow' } })}\n\n`]));
  expectError(t, await postChat(gw.url, ask('claude', { stream: true })), 503, 'model_unavailable');
});
