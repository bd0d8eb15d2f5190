// An error message never echoes more than 256 characters of client input (CONTRACT section
// 10). A property test through the real gateway: long random strings in every position that a
// message quotes (model names, ids and paths, enum values, plan names, bodies, and an
// upstream's words quoting the request) come back clipped to 256 characters and an ellipsis.

import t from 'tap';
import fc from 'fast-check';
import { request } from 'undici';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'echo-admin-token-0123';
const MAX_ECHO = 256;

let gw: TestGateway;
let up: FakeUpstream;
t.before(async () => {
  // An upstream that rejects every request, quoting the client's first message whole (`user`,
  // quoted before, is the gateway's own to check now: an end user, CONTRACT section 20).
  up = await startUpstream((_req, res, body) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: `Invalid 'messages[0].content': ${String(body.messages?.[0]?.content)}`, type: 'invalid_request_error' } }));
  });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, circuit_failures: 1000 };
  c.models.push({ id: 'strict', provider: 'up' });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

interface Answer { status: number; body: any }

async function call(method: string, path: string, opts: { key?: string; body?: unknown } = {}): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${opts.key ?? DEMO_KEY}` };
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  const res = await request(`${gw.url}${path}`, {
    method: method as any,
    headers,
    body: opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body),
  });
  return { status: res.statusCode, body: JSON.parse(await res.body.text()) };
}

const chat = (body: unknown) => call('POST', '/v1/chat/completions', { body });
const admin = (method: string, path: string, body?: unknown) => call(method, path, { key: ADMIN, body });
const user = (content: unknown) => [{ role: 'user', content }];

/**
 * Each position: how to send `s` there, the answer expected, and what the message quotes of
 * it (`s` itself, or its JSON form for values quoted as JSON).
 */
interface Position { name: string; send: (s: string) => Promise<Answer>; status: number; code: string; quoted: (s: string) => string }
const raw = (s: string) => s;
const asJson = (s: string) => JSON.stringify(s);

const POSITIONS: Position[] = [
  { name: 'chat model', send: (s) => chat({ model: s, messages: user('x') }), status: 404, code: 'model_not_found', quoted: raw },
  { name: 'chat role', send: (s) => chat({ model: 'echo-small', messages: [{ role: s, content: 'x' }] }), status: 400, code: 'unsupported_value', quoted: asJson },
  { name: 'content part type', send: (s) => chat({ model: 'echo-small', messages: user([{ type: s }]) }), status: 400, code: 'unsupported_value', quoted: asJson },
  { name: 'image detail', send: (s) => chat({ model: 'echo-small', messages: user([{ type: 'image_url', image_url: { url: 'https://x.test/a.png', detail: s } }]) }), status: 400, code: 'unsupported_value', quoted: asJson },
  { name: 'tool call type', send: (s) => chat({ model: 'echo-small', messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: s, function: { name: 'f', arguments: '{}' } }] }] }), status: 400, code: 'unsupported_value', quoted: asJson },
  { name: 'a body that is not JSON', send: (s) => chat(`{"model": ${s}`), status: 400, code: 'invalid_json', quoted: raw },
  { name: "an upstream's words quoting the request", send: (s) => chat({ model: 'strict', messages: user(s) }), status: 400, code: 'invalid_value', quoted: (s) => s.replace(/\s+/g, ' ').trim() },
  { name: 'admin plan', send: (s) => admin('POST', '/admin/accounts', { id: 'new-account', plan: s }), status: 400, code: 'unsupported_value', quoted: asJson },
  { name: 'admin usage account', send: (s) => admin('GET', `/admin/usage?account=${encodeURIComponent(s)}`), status: 404, code: 'account_not_found', quoted: raw },
  { name: 'admin credits account', send: (s) => admin('POST', `/admin/accounts/${encodeURIComponent(s)}/credits`, { units: 1, idempotency_key: 'k' }), status: 404, code: 'account_not_found', quoted: raw },
  { name: 'admin keys account', send: (s) => admin('POST', `/admin/accounts/${encodeURIComponent(s)}/keys`), status: 404, code: 'account_not_found', quoted: raw },
];

/** Positions in the URL path, echoed as sent: strings from URL-safe characters. */
const PATH_POSITIONS: Position[] = [
  { name: 'GET /v1/models/{id}', send: (s) => call('GET', `/v1/models/${s}`), status: 404, code: 'model_not_found', quoted: raw },
  { name: 'DELETE /v1/models/{id}', send: (s) => call('DELETE', `/v1/models/${s}`), status: 405, code: 'method_not_allowed', quoted: (s) => `/v1/models/${s}` },
  { name: 'unknown /v1 path', send: (s) => call('GET', `/v1/${s}`), status: 404, code: 'unknown_url', quoted: (s) => `/v1/${s}` },
  { name: 'admin account id', send: (s) => admin('GET', `/admin/accounts/${s}`), status: 404, code: 'account_not_found', quoted: raw },
  { name: 'admin key id', send: (s) => admin('DELETE', `/admin/keys/${s}`), status: 404, code: 'key_not_found', quoted: raw },
  { name: 'unknown /admin path', send: (s) => admin('GET', `/admin/${s}`), status: 404, code: 'unknown_url', quoted: (s) => `/admin/${s}` },
  { name: 'admin path, wrong method', send: (s) => admin('PUT', `/admin/accounts/${s}`), status: 405, code: 'method_not_allowed', quoted: (s) => `/admin/accounts/${s}` },
];

/** The message's length with a one-character input: what is not an echo. */
const template = new Map<string, number>();

async function check(p: Position, s: string): Promise<void> {
  const { status, body } = await p.send(s);
  if (status !== p.status || body.code !== p.code) throw new Error(`${p.name}: ${status} ${body.code}, expected ${p.status} ${p.code}`);
  if (schemas.error(body).length > 0) throw new Error(`${p.name}: not an envelope`);
  const message: string = body.message;
  if (body.error.message !== message) throw new Error(`${p.name}: the nested message differs`);
  const quoted = p.quoted(s);
  // Bounded: the message is its template plus at most 256 characters and the ellipsis.
  const extra = message.length - template.get(p.name)!;
  if (extra > MAX_ECHO + 1) throw new Error(`${p.name}: ${extra} characters more than the template`);
  // Clipped, not dropped: the first characters are echoed, 257 in a row never are.
  if (quoted.length > MAX_ECHO && message.includes(quoted.slice(0, MAX_ECHO + 1))) throw new Error(`${p.name}: more than ${MAX_ECHO} characters echoed`);
  if (p.code !== 'invalid_json' && !message.includes(quoted.slice(0, 64))) throw new Error(`${p.name}: the input's start is not quoted`);
  if (quoted.length > MAX_ECHO && p.code !== 'invalid_json' && !message.includes('…')) throw new Error(`${p.name}: no ellipsis marks the cut`);
}

t.before(async () => {
  for (const p of [...POSITIONS, ...PATH_POSITIONS]) {
    const { body } = await p.send('q');
    template.set(p.name, body.message.length - p.quoted('q').length + 1);
  }
});

t.test('each position with a short input answers as expected (the test sees what it checks)', async (t) => {
  for (const p of [...POSITIONS, ...PATH_POSITIONS]) {
    const { status, body } = await p.send('q');
    t.equal(status, p.status, `${p.name}: ${p.status}`);
    t.equal(body.code, p.code, `${p.name}: ${p.code}`);
  }
  // A 1 MB model name, the finding that started this: 256 characters and an ellipsis.
  const { status, body } = await chat({ model: 'm'.repeat(1024 * 1024), messages: user('x') });
  t.equal(status, 404);
  t.equal(body.message, `The model '${'m'.repeat(256)}…' does not exist.`);
});

t.test('property: any long string in a JSON position is echoed at most 256 characters long', async (t) => {
  let checked = 0;
  await fc.assert(
    fc.asyncProperty(fc.string({ unit: 'binary', minLength: 200, maxLength: 3000 }), async (s) => {
      for (const p of POSITIONS) { await check(p, s); checked++; }
    }),
    { numRuns: 12 },
  );
  t.equal(checked, 12 * POSITIONS.length, 'every position of every generated case held the bound');
});

const URL_SAFE = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~'.split('');

t.test('property: any long path segment is echoed at most 256 characters long', async (t) => {
  let checked = 0;
  await fc.assert(
    fc.asyncProperty(fc.string({ unit: fc.constantFrom(...URL_SAFE), minLength: 200, maxLength: 6000 }), async (s) => {
      for (const p of PATH_POSITIONS) { await check(p, s); checked++; }
    }),
    { numRuns: 12 },
  );
  t.equal(checked, 12 * PATH_POSITIONS.length, 'every position of every generated case held the bound');
});
