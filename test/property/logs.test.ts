// Boundary 8: credentials never appear in the gateway's logs (CONTRACT section 4), whatever
// the request and whatever the upstream does: developer keys, dashboard JWTs (valid or not),
// the admin token, the JWT secret and the upstream keys. Upstreams here are hostile: they
// echo the credentials they were sent back in error messages, bodies and stream events. The
// operator's secrets must not reach a client's answer either.

import t from 'tap';
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import fc from 'fast-check';
import { SignJWT } from 'jose';
import { request } from 'undici';
import { baseConfig, startGateway, DEMO_KEY, PRO_KEY, type TestGateway } from '../helpers/gateway.js';
import { startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { holds } from './arbitraries.js';
import { assertNoCredentials } from './invariants.js';

const ADMIN = 'admin-token-logs-0123456789abcdef';
const JWT_SECRET = 'jwt-secret-logs-0123456789abcdef';
const UP_KEY = 'sk-upstream-logs-0123456789abcdef';
const ANT_KEY = 'sk-ant-logs-0123456789abcdef';
const HEADER_SECRET = 'hdr-secret-logs-0123456789abcdef';
/** Secrets of the operator: in no log and in no answer. */
const OPERATOR = [ADMIN, JWT_SECRET, UP_KEY, ANT_KEY, HEADER_SECRET];

let up: FakeUpstream;
let gw: TestGateway;
let behaviour = 'ok';

/** What the upstream received that is secret, echoed back as hostile upstreams do. */
function echoed(req: IncomingMessage): string {
  return `auth=${req.headers.authorization ?? ''} key=${req.headers['x-api-key'] ?? ''} extra=${req.headers['x-extra-auth'] ?? ''}`;
}

function upstream(req: IncomingMessage, res: ServerResponse): void {
  const anthropic = req.url === '/v1/messages';
  const secret = echoed(req);
  const send = (status: number, body: unknown, type = 'application/json') => {
    res.writeHead(status, { 'content-type': type, 'set-cookie': `s=${UP_KEY}` });
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  };
  switch (behaviour) {
    case 'ok':
      return anthropic
        ? send(200, { type: 'message', role: 'assistant', content: [{ type: 'text', text: 'hi' }], stop_reason: 'end_turn', usage: { input_tokens: 3, output_tokens: 1 } })
        : send(200, { choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1 } });
    case '400': return send(400, { error: { message: `Incorrect API key provided: ${secret}`, type: 'invalid_request_error' } });
    case '422': return send(422, { detail: `bad request ${secret}` });
    case 'context': return send(400, { error: { message: `maximum context length exceeded; ${secret}`, code: 'context_length_exceeded' } });
    case '401': return send(401, { error: { message: `Invalid key ${secret}` } });
    case '500': return send(500, `internal error while using ${secret}`, 'text/plain');
    case '429': return send(429, { error: { message: secret } });
    case 'badjson': return send(200, `{"choices": [${secret}`);
    case 'sse-error':
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(anthropic ? 'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":1}}}\n\n' : `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'partial' }, finish_reason: null }] })}\n\n`);
      res.end(anthropic ? `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: secret } })}\n\n` : `data: ${JSON.stringify({ error: { message: secret, code: 400 } })}\n\n`);
      return;
    default: res.destroy();
  }
}

t.before(async () => {
  up = await startUpstream((req, res) => upstream(req, res));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.auth = { jwt: { secret: JWT_SECRET } };
  const common = { timeout_ms: 3000, circuit_failures: 1_000_000, headers: { 'x-extra-auth': HEADER_SECRET } };
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, api_key: UP_KEY, ...common };
  c.providers.ant = { kind: 'anthropic', base_url: up.url, api_key: ANT_KEY, ...common };
  c.models.push({ id: 'llama', provider: 'oai', upstream_model: 'internal/llama', max_output_tokens: 64 });
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'internal/claude', max_output_tokens: 64 });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const secretKey = new TextEncoder().encode(JWT_SECRET);
async function jwt(kind: string): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const claims: Record<string, unknown> = { type: kind === 'refresh' ? 'refresh' : 'access', sub: kind === 'unknown' ? 'nobody' : 'demo', sid: `s-${kind}` };
  const token = new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setExpirationTime(kind === 'expired' ? now - 3600 : now + 3600);
  return token.sign(kind === 'badsig' ? new TextEncoder().encode(`${JWT_SECRET}x`) : secretKey);
}

const step = fc.record({
  credential: fc.constantFrom('demo', 'pro', 'jwt', 'expired', 'badsig', 'refresh', 'unknown', 'admin', 'garbled', 'none'),
  header: fc.constantFrom('authorization', 'authorization', 'x-api-key'),
  route: fc.constantFrom('chat', 'chat-stream', 'models', 'model', 'admin', 'admin-credit', 'elsewhere'),
  model: fc.constantFrom('llama', 'claude', 'echo-small', 'nope'),
  behaviour: fc.constantFrom('ok', '400', '422', 'context', '401', '500', '429', 'badjson', 'sse-error', 'reset'),
});

/** Every credential a step may have sent; none of them may be logged. */
const sent = new Set<string>([DEMO_KEY, PRO_KEY, ...OPERATOR]);

t.test('no credential reaches the logs (nor an operator secret an answer), whatever happens', async (t) => {
  let offset = 0;
  await holds(t, 'credentials stay out of logs', fc.asyncProperty(step, async (s) => {
    behaviour = s.behaviour;
    const credential = s.credential === 'demo' ? DEMO_KEY : s.credential === 'pro' ? PRO_KEY : s.credential === 'admin' ? ADMIN
      : s.credential === 'garbled' ? `${DEMO_KEY}x${UP_KEY}` : s.credential === 'none' ? '' : await jwt(s.credential);
    if (credential !== '') sent.add(credential);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (credential !== '') headers[s.header] = s.header === 'authorization' ? `Bearer ${credential}` : credential;
    const body = JSON.stringify({ model: s.model, messages: [{ role: 'user', content: `use ${credential.slice(0, 4)}` }], stream: s.route === 'chat-stream' });
    const [method, path, payload] = {
      chat: ['POST', '/v1/chat/completions', body], 'chat-stream': ['POST', '/v1/chat/completions', body],
      models: ['GET', '/v1/models', undefined], model: ['GET', `/v1/models/${s.model}`, undefined],
      admin: ['GET', '/admin/accounts/demo', undefined], 'admin-credit': ['POST', '/admin/accounts/demo/credits', '{"units":1,"idempotency_key":"k"}'],
      elsewhere: ['GET', `/elsewhere?key=x`, undefined],
    }[s.route] as [string, string, string | undefined];
    const res = await request(`${gw.url}${path}`, { method: method as 'GET', headers, body: payload, headersTimeout: 10_000, bodyTimeout: 10_000 });
    const text = await res.body.text();
    const answer = `${JSON.stringify(res.headers)}\n${text}`;
    for (const secret of OPERATOR) {
      if (credential.includes(secret)) continue; // a client's own words may come back to it
      assert.ok(!answer.includes(secret), `an operator secret (${secret.slice(0, 8)}…) is not in the answer: ${text.slice(0, 300)}`);
    }
    assert.notEqual(res.statusCode, 500, `never a 500: ${text.slice(0, 200)}`);
    // Lines are written when the answer is done; the new ones must hold no credential.
    const logs = gw.logs();
    const fresh = logs.slice(offset);
    offset = logs.length;
    for (const c of sent) assert.ok(!fresh.includes(c), `a credential (${c.slice(0, 8)}…) is not in the logs`);
  }), 150);
});

t.test('the whole log holds none of the credentials sent', async (t) => {
  assertNoCredentials(t, gw.logs(), [...sent]);
});
