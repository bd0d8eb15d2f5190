// Issue #40 finding 5, as the attack ran it, through `tollgate serve --config FILE` (CONTRACT
// section 21, "one path, one decision"): a sidecar in front of a model server that it both
// meters (a provider) and passes through (`server.passthrough`, without passthrough_auth).
// Before, `POST /./v1/chat/completions`, `/x/../v1/completions` and `//v1/chat/completions`
// were "not /v1" to the dispatch and /v1 to the passthrough's proxy: the model server answered
// them with no key, no hold, no debit and no record. Now each is the metered route (401 without
// a key; with one, charged exactly as `/v1/chat/completions` is), and an encoded '.' or '/'
// (`/v1/%2e%2e/admin/keys`, `/%2Fv1/chat/completions`) is refused 400 invalid_value. The model
// server gets none of them through the passthrough, only the gateway's own provider calls.

import t from 'tap';
import { rawRequest, type RawResponse } from '../helpers/raw-request.js';
import { ADMIN, KEY, PRICE, metric, operatorConfig, serveFile, statusOf, wallet } from '../helpers/operator.js';
import { completionBody, json, startUpstream } from '../helpers/upstream.js';

const UPSTREAM_KEY = 'sk-model-server-own-key-0123';
/** A vLLM-like model server: chat and completions under /v1, its own /version; anything else 404. */
const ms = await startUpstream(async (req, res) => {
  if (req.method === 'GET' && req.url === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: 'served-model', object: 'model' }] });
  if (req.method === 'POST' && req.url === '/v1/chat/completions') {
    return json(res, 200, completionBody('Hello from the model server', { usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } }));
  }
  if (req.method === 'POST' && req.url === '/v1/completions') {
    return json(res, 200, {
      id: 'cmpl-ms', object: 'text_completion', created: 1700000000, model: 'served-model',
      choices: [{ index: 0, text: ' world', logprobs: null, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
    });
  }
  if (req.url === '/version') return json(res, 200, { version: '0.9.0' });
  json(res, 404, { detail: 'Not Found' });
});
t.teardown(() => ms.close());

const CHAT = JSON.stringify({ model: 'served', messages: [{ role: 'user', content: 'Say hello' }] });
const COMPLETION = JSON.stringify({ model: 'served', prompt: 'hello' });
const CHAT_COST = 12 + 2 * 7;
const COMPLETION_COST = 5 + 2 * 2;

async function post(url: string, path: string, body: string, key: string | undefined, requestId: string): Promise<RawResponse & { json: any }> {
  const headers: Array<[string, string]> = [['content-type', 'application/json'], ['content-length', String(Buffer.byteLength(body))], ['x-request-id', requestId], ['connection', 'close']];
  if (key !== undefined) headers.push(['authorization', `Bearer ${key}`]);
  const { responses } = await rawRequest(url, { method: 'POST', path, headers, body: Buffer.from(body) });
  if (responses.length !== 1) throw new Error(`${path}: ${responses.length} answers`);
  const res = responses[0]!;
  return { ...res, json: res.body === '' ? undefined : JSON.parse(res.body) };
}

/** The contract's error envelope, exactly (CONTRACT section 4). */
function envelope(t: any, res: RawResponse & { json: any }, status: number, code: string, requestId: string, what: string): void {
  t.equal(res.status, status, `${what}: ${status}`);
  t.match(res.headers['content-type'], /^application\/json/, `${what}: JSON`);
  t.equal(res.headers['x-request-id'], requestId, `${what}: x-request-id kept`);
  const { message, type, param } = res.json;
  t.ok(typeof message === 'string' && message.length > 0, `${what}: a message`);
  t.same(res.json, { message, type: 'invalid_request_error', param: null, code, request_id: requestId, error: { message, type: 'invalid_request_error', param: null, code } }, `${what}: the envelope`);
  t.equal(type, 'invalid_request_error');
  t.equal(param, null);
}

t.test('tollgate serve --config: a path that normalises into /v1 is metered or refused, never passed through', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, passthrough: ms.url, passthrough_auth: false },
    providers: { vllm: { kind: 'openai', base_url: ms.baseUrl, api_key: UPSTREAM_KEY } },
    models: [{ id: 'served', provider: 'vllm', upstream_model: 'served-model', price: PRICE }],
  }));
  const url = served.url;
  t.equal(await statusOf(`${url}/readyz`, 200), 200, 'ready');

  // Passthrough itself still works: the model server's own path, with x-forwarded-for from the proxy.
  const version = await rawRequest(url, { method: 'GET', path: '/version', headers: [['connection', 'close']], body: Buffer.alloc(0) });
  t.equal(version.responses[0]!.status, 200);
  t.same(JSON.parse(version.responses[0]!.body), { version: '0.9.0' });
  t.equal(ms.requests.length, 1);
  t.ok(ms.requests[0]!.headers['x-forwarded-for'], 'a passthrough request carries x-forwarded-for');
  ms.requests.length = 0;

  const before = await wallet(url);
  const unitsBefore = await metric(url, 'tollgate_units_charged_total');
  const hostile: Array<[string, string, 'chat' | 'completions' | 400]> = [
    ['/./v1/chat/completions', CHAT, 'chat'],
    ['/x/../v1/completions', COMPLETION, 'completions'],
    ['//v1/chat/completions', CHAT, 'chat'],
    ['/v1/%2e%2e/admin/keys', CHAT, 400],
    ['/%2Fv1/chat/completions', CHAT, 400],
  ];

  // Without a key: the metered routes want one (401 invalid_api_key); encoded '.' and '/' are refused 400.
  let n = 0;
  for (const [path, body, kind] of hostile) {
    const id = `path-nokey-${n++}`;
    const res = await post(url, path, body, undefined, id);
    if (kind === 400) envelope(t, res, 400, 'invalid_value', id, `${path} without a key`);
    else envelope(t, res, 401, 'invalid_api_key', id, `${path} without a key`);
  }
  t.equal(ms.requests.length, 0, 'the model server got none of them');
  t.same(await wallet(url), before, 'the wallet is unchanged');

  // With a key: the dot-segment and double-slash paths are the metered routes; the encoded ones still refused.
  let debited = 0;
  const charged: Record<string, string | undefined> = {};
  for (const [path, body, kind] of hostile) {
    const id = `path-key-${n++}`;
    const res = await post(url, path, body, KEY, id);
    if (kind === 400) {
      envelope(t, res, 400, 'invalid_value', id, `${path} with a key`);
      continue;
    }
    t.equal(res.status, 200, `${path} with a key: 200`);
    t.equal(res.json.model, 'served', `${path}: the catalog's slug`);
    const cost = kind === 'chat' ? CHAT_COST : COMPLETION_COST;
    t.equal(res.headers['x-tollgate-units-charged'], String(cost), `${path}: charged ${cost} units`);
    charged[path] = res.headers['x-tollgate-units-charged'];
    debited += cost;
  }
  // The same chat on its own path costs and records exactly the same.
  const plain = await post(url, '/v1/chat/completions', CHAT, KEY, 'path-key-plain');
  t.equal(plain.status, 200);
  t.equal(plain.headers['x-tollgate-units-charged'], charged['/./v1/chat/completions'], '/./v1/chat/completions is charged as /v1/chat/completions is');
  debited += CHAT_COST;

  const after = await wallet(url);
  t.equal(after.balance_units, before.balance_units - debited, `the wallet is debited exactly ${debited} units`);
  t.equal(after.held_units, 0, 'no hold left');
  t.equal(await metric(url, 'tollgate_units_charged_total'), unitsBefore + debited, 'metrics: the units charged');

  const records: any[] = (await (await fetch(`${url}/admin/usage/records?account=demo&limit=100`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as any).records;
  const byId = new Map(records.map((r) => [r.request_id, r]));
  const dotted = byId.get('path-key-5');
  const reference = byId.get('path-key-plain');
  t.ok(dotted && reference, 'a usage record for /./v1/chat/completions and for /v1/chat/completions');
  for (const k of ['route', 'model', 'status', 'prompt_tokens', 'completion_tokens', 'units']) t.equal(dotted?.[k], reference?.[k], `the records agree on ${k}`);
  t.equal(dotted?.route, '/v1/chat/completions');
  t.equal(byId.get('path-key-6')?.route, '/v1/completions', '/x/../v1/completions is recorded as /v1/completions');
  t.equal(byId.get('path-key-7')?.route, '/v1/chat/completions', '//v1/chat/completions is recorded as /v1/chat/completions');
  t.notOk(byId.has('path-key-8') || byId.has('path-key-9'), 'no record for a refused path');

  // The model server got only the gateway's own provider calls: its key, no client key, no proxy.
  t.same(ms.requests.map((r) => `${r.method} ${r.url}`), [
    'POST /v1/chat/completions', 'POST /v1/completions', 'POST /v1/chat/completions', 'POST /v1/chat/completions',
  ], 'one provider call per metered request');
  for (const r of ms.requests) {
    t.equal(r.headers.authorization, `Bearer ${UPSTREAM_KEY}`, 'the provider\'s key');
    t.notOk(r.headers['x-forwarded-for'], 'not through the passthrough');
    t.equal(r.body.model, 'served-model', 'the upstream model name: the gateway\'s call');
  }
  t.equal(await metric(url, 'tollgate_requests_total', { route: 'unknown', status: '400', code: 'invalid_value' }), 4, 'metrics: the four refused paths');
});

// Our own attack after the fix above: with passthrough_auth, a key limited to one model and two
// requests a minute got 200 from the model server's own names for metered routes (vLLM's
// /invocations, /rerank, /v2/rerank, /score, /pooling, /classify), five in a row, uncharged and
// unrecorded; and a target with a base path (`http://host/v1`) turned /chat/completions into the
// server's /v1/chat/completions. Each is now 404 unknown_url before any key is read, and the
// model server gets nothing; its other paths are still passed through.
t.test('tollgate serve --config: passthrough never reaches a generation endpoint, under any base path', async (t) => {
  const generation = ['/invocations', '/rerank', '/v2/rerank', '/score', '/pooling', '/classify', '/completion', '/embedding',
    '/infill', '/api/chat', '/api/generate', '/api/embed', '/generate', '/generate_stream', '/v2/models/served-model/infer',
    '/RERANK', '/rerank;x=1', '/x/..;/score', '/chat/completions', '/%72erank'];
  for (const [name, target, extra] of [
    ['root target, passthrough_auth', ms.url, ['/']],
    ['target under /v1', `${ms.url}/v1`, ['/models', '/version']],
  ] as const) {
    const served = await serveFile(t, operatorConfig({
      server: { port: 0, passthrough: target, passthrough_auth: name.includes('auth') },
      providers: { vllm: { kind: 'openai', base_url: ms.baseUrl, api_key: UPSTREAM_KEY } },
      models: [{ id: 'served', provider: 'vllm', upstream_model: 'served-model', price: PRICE }],
    }));
    const url = served.url;
    t.equal(await statusOf(`${url}/readyz`, 200), 200, `${name}: ready`);
    ms.requests.length = 0;
    const before = await wallet(url);
    let n = 0;
    for (const path of [...generation, ...extra]) {
      for (const key of [KEY, undefined]) {
        const id = `gen-${name.length}-${n++}`;
        const res = await post(url, path, CHAT, key, id);
        t.equal(res.status, 404, `${name}: POST ${path} ${key === undefined ? 'without' : 'with'} a key: 404`);
        t.equal(res.json?.error?.code, 'unknown_url', `${name}: POST ${path}: unknown_url`);
        t.equal(res.json?.error?.type, 'invalid_request_error');
        t.equal(res.headers['x-request-id'], id);
        t.match(res.json?.error?.message, /not passed through to the model server/);
      }
    }
    t.same(ms.requests.map((r) => `${r.method} ${r.url}`), [], `${name}: the model server got none of them`);
    t.same(await wallet(url), before, `${name}: the wallet is unchanged`);
    if (target === ms.url) {
      // The model server's other paths still go through (with the key passthrough_auth asks for).
      const version = await rawRequest(url, { method: 'GET', path: '/version', headers: [['authorization', `Bearer ${KEY}`], ['connection', 'close']], body: Buffer.alloc(0) });
      t.equal(version.responses[0]!.status, 200, `${name}: GET /version is passed through`);
      t.equal(ms.requests.length, 1);
      t.notOk(ms.requests[0]!.headers.authorization, 'the Tollgate key is not forwarded');
    }
  }
});
