// The MCP gateway as an operator runs it (CONTRACT section 17): a YAML file served by
// `tollgate serve`, an upstream MCP server made with the official SDK's server classes, and the
// official SDK's Client (Streamable HTTP, the key as Bearer through requestInit). Tools are listed
// by grant, calls are charged exactly once (per_call_units, a tool's own price, isError
// charged), a server that is down costs nothing, money refusals are JSON-RPC errors carrying
// Tollgate's code, sessions are bound to their key, the client's Authorization never reaches the
// server, and a body with a duplicate or case-variant member is refused with nothing forwarded.

import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { SignJWT } from 'jose';
import { ADMIN, KEY, metric, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { deadUrl, startFakeMcp } from '../helpers/mcp.js';

const OTHER = 'tg_other_1111111111111111';
const POOR = 'tg_poor_2222222222222222';
const TIGHT = 'tg_tight_3333333333333333';
const WHOLE = 'tg_whole_4444444444444444';
const JWT_SECRET = 'operator-jwt-secret-of-some-length';

const upstream = await startFakeMcp();
t.teardown(() => upstream.close());
const down = await deadUrl();

const gw = await serveFile(t, operatorConfig({
  plans: {
    free: { paid: false, requests_per_minute: 1000, mcp_tools: ['files__search', 'files__fail', 'files__echo', 'files__nosuch', 'down__*', 'hasty__slow'] },
    tight: { paid: false, requests_per_minute: 1, mcp_tools: ['files__*'] },
    whole: { paid: false, requests_per_minute: 1000, mcp_tools: ['files__*'] },
  },
  accounts: [
    { id: 'demo', plan: 'free', wallet_units: 1_000_000, keys: [KEY] },
    { id: 'other', plan: 'free', wallet_units: 1_000_000, keys: [OTHER] },
    { id: 'poor', plan: 'free', wallet_units: 10, keys: [POOR] },
    { id: 'tight', plan: 'tight', wallet_units: 1_000_000, keys: [TIGHT] },
    { id: 'whole', plan: 'whole', wallet_units: 1_000_000, keys: [WHOLE] },
  ],
  auth: { jwt: { secret: JWT_SECRET, issuer: 'dashboard' } },
  mcp: {
    servers: {
      files: { url: upstream.url, headers: { authorization: 'Bearer upstream-secret' }, timeout_ms: 5000, price: { per_call_units: 10 }, tools: { search: { per_call_units: 50 } } },
      down: { url: down, timeout_ms: 2000, price: { per_call_units: 7 } },
      // The same server with a short timeout: its `slow` tool never answers in time.
      hasty: { url: upstream.url, timeout_ms: 500, price: { per_call_units: 7 } },
    },
  },
}));

async function connect(t: any, path: string, key: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(gw.url + path), { requestInit: { headers: { authorization: `Bearer ${key}` } } });
  const client = new Client({ name: 'test', version: '1' });
  await client.connect(transport);
  t.teardown(() => client.close());
  return { client, transport };
}

async function rpcError(p: Promise<unknown>): Promise<McpError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof McpError) return err;
    throw err;
  }
  throw new Error('no error');
}

async function records(account: string): Promise<any[]> {
  const res = await fetch(`${gw.url}/admin/usage/records?account=${account}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).records;
}

/** Waits for `n` usage records of `account` (they are written once each answer has closed). */
async function recordsOf(account: string, n: number): Promise<any[]> {
  for (let i = 0; i < 200; i++) {
    const r = await records(account);
    if (r.length >= n) return r;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return records(account);
}

t.test('tools/list shows only granted tools, under their own names on /mcp/<server>', async (t) => {
  const { client } = await connect(t, '/mcp/files', KEY);
  const { tools } = await client.listTools();
  t.same(tools.map((x) => x.name).sort(), ['echo', 'fail', 'search']);
  t.equal(tools.find((x) => x.name === 'search')?.description, 'Search files');
});

t.test('a call is charged once: the tool\'s own price, else the server\'s; isError is charged', async (t) => {
  const { client } = await connect(t, '/mcp/files', KEY);
  const before = await wallet(gw.url);
  const r = await client.callTool({ name: 'search', arguments: { q: 'tollgate' } });
  t.same(r.content, [{ type: 'text', text: 'found: tollgate' }]);
  t.equal((await wallet(gw.url)).balance_units, before.balance_units - 50);
  const failed = await client.callTool({ name: 'fail', arguments: {} });
  t.equal(failed.isError, true);
  const after = await wallet(gw.url);
  t.equal(after.balance_units, before.balance_units - 60);
  t.equal(after.held_units, 0);
  const recs = (await recordsOf('demo', 2)).filter((x) => x.route === '/mcp');
  const search = recs.find((x) => x.tool === 'files__search');
  t.match(search, { tool: 'files__search', route: '/mcp', units: 50, status: 200, provider: 'files' });
  t.match(recs.find((x) => x.tool === 'files__fail'), { units: 10 });
  t.ok(await metric(gw.url, 'tollgate_mcp_calls_total', { server: 'files', tool: 'search', outcome: 'ok' }) >= 1);
  t.ok(await metric(gw.url, 'tollgate_mcp_calls_total', { server: 'files', tool: 'fail', outcome: 'tool_error' }) >= 1);
});

t.test('an ungranted tool and an unknown one get the same error, and neither is forwarded', async (t) => {
  const { client } = await connect(t, '/mcp/files', KEY);
  const calls = upstream.calls().length;
  const before = await wallet(gw.url);
  const secret = await rpcError(client.callTool({ name: 'secret', arguments: {} }));
  const nosuch = await rpcError(client.callTool({ name: 'nosuch', arguments: {} }));
  const never = await rpcError(client.callTool({ name: 'never', arguments: {} }));
  t.equal(secret.code, -32602);
  t.equal(secret.message, 'MCP error -32602: Unknown tool: secret');
  t.equal(nosuch.message, 'MCP error -32602: Unknown tool: nosuch');
  t.equal(never.message, 'MCP error -32602: Unknown tool: never');
  t.equal(upstream.calls().length, calls);
  t.same(await wallet(gw.url), before);
});

t.test('a server that cannot be reached: -32000 upstream_unavailable, nothing charged or held', async (t) => {
  const { client } = await connect(t, '/mcp/down', KEY);
  const before = await wallet(gw.url);
  const err = await rpcError(client.callTool({ name: 'anything', arguments: {} }));
  t.equal(err.code, -32000);
  t.match(err.data, { code: 'upstream_unavailable', request_id: String });
  t.same(await wallet(gw.url), before);
  const admin = await (await fetch(`${gw.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as any;
  t.match(admin.mcp_servers.down, { url: down, reachable: false });
  t.match(admin.mcp_servers.files, { url: upstream.url, reachable: true });
});

t.test('a server that times out: -32000 upstream_unavailable, nothing charged or held', async (t) => {
  const { client } = await connect(t, '/mcp/hasty', KEY);
  const before = await wallet(gw.url);
  const err = await rpcError(client.callTool({ name: 'slow', arguments: {} }));
  t.equal(err.code, -32000);
  t.match(err.data, { code: 'upstream_unavailable', request_id: String });
  t.same(await wallet(gw.url), before);
  t.ok(await metric(gw.url, 'tollgate_mcp_calls_total', { server: 'hasty', tool: 'slow', outcome: 'unavailable' }) >= 1);
});

t.test('a refusal for money is a JSON-RPC error whose data is the /v1 error\'s', async (t) => {
  const { client } = await connect(t, '/mcp/files', POOR);
  const err = await rpcError(client.callTool({ name: 'search', arguments: { q: 'x' } }));
  t.equal(err.code, -32000);
  t.match(err.data, { code: 'insufficient_credits', request_id: String, wallet_balance_units: 10 });
  t.match(await wallet(gw.url, 'poor'), { balance_units: 10, held_units: 0 });
  // A call within the wallet (the server's price, 10) is served.
  t.same((await client.callTool({ name: 'echo', arguments: {} })).isError, undefined);
  t.equal((await wallet(gw.url, 'poor')).balance_units, 0);
});

t.test('requests_per_minute: HTTP 429 with Retry-After', async (t) => {
  const { client, transport } = await connect(t, '/mcp/files', TIGHT);
  await client.callTool({ name: 'search', arguments: { q: 'a' } });
  const res = await fetch(`${gw.url}/mcp/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TIGHT}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': transport.sessionId! },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'search', arguments: { q: 'b' } } }),
  });
  t.equal(res.status, 429);
  t.ok(Number(res.headers.get('retry-after')) >= 1);
  t.match(await res.json(), { jsonrpc: '2.0', id: 9, error: { code: -32000, data: { code: 'rate_limit_exceeded' } } });
  t.equal((await wallet(gw.url, 'tight')).balance_units, 1_000_000 - 50);
});

t.test('a session is bound to the key that opened it and to its endpoint', async (t) => {
  const { transport } = await connect(t, '/mcp/files', KEY);
  const sid = transport.sessionId!;
  const post = (path: string, key: string) => fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json', 'mcp-session-id': sid },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.equal((await post('/mcp/files', KEY)).status, 200);
  const other = await post('/mcp/files', OTHER);
  t.equal(other.status, 404);
  t.match(await other.json(), { error: { code: -32001, message: 'Session not found' } });
  t.equal((await post('/mcp', KEY)).status, 404);
  const del = await fetch(`${gw.url}/mcp/files`, { method: 'DELETE', headers: { authorization: `Bearer ${KEY}`, 'mcp-session-id': sid } });
  t.equal(del.status, 200);
  t.equal((await post('/mcp/files', KEY)).status, 404);
});

t.test('401 envelope without a key; the client\'s Authorization never reaches the server', async (t) => {
  const res = await fetch(`${gw.url}/mcp/files`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  t.equal(res.status, 401);
  t.match(await res.json(), { error: { code: 'invalid_api_key' } });
  t.ok(upstream.seen.length > 0);
  // `files` sends its configured header; `hasty` (the same server) has none configured.
  const auths = new Set(upstream.seen.map((r) => r.headers.authorization));
  t.same([...auths].sort(), ['Bearer upstream-secret', undefined].sort());
  t.ok(upstream.seen.every((r) => r.headers.cookie === undefined));
});

t.test('duplicate and case-variant members: -32600, nothing forwarded', async (t) => {
  const { transport } = await connect(t, '/mcp/files', KEY);
  const seen = upstream.seen.length;
  const before = await wallet(gw.url);
  const send = (body: string) => fetch(`${gw.url}/mcp/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': transport.sessionId! },
    body,
  });
  for (const body of [
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","name":"secret","arguments":{}}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","Name":"secret","arguments":{}}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","n\\u0061me":"secret"}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"tools/list","params":{"name":"search"}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"value":1,"value":2}}}',
    '[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"a"}}}]',
  ]) {
    const res = await send(body);
    t.equal(res.status, 400, body);
    t.match(await res.json(), { jsonrpc: '2.0', error: { code: -32600 } });
  }
  t.equal(upstream.seen.length, seen);
  t.same(await wallet(gw.url), before);
});

t.test('the aggregate /mcp: every granted tool as <server>__<tool>', async (t) => {
  const { client } = await connect(t, '/mcp', KEY);
  const { tools } = await client.listTools();
  t.same(tools.map((x) => x.name).sort(), ['files__echo', 'files__fail', 'files__search', 'hasty__slow']);
  const before = await wallet(gw.url);
  const r = await client.callTool({ name: 'files__search', arguments: { q: 'agg' } });
  t.same(r.content, [{ type: 'text', text: 'found: agg' }]);
  t.equal((await wallet(gw.url)).balance_units, before.balance_units - 50);
  t.same(upstream.calls().at(-1), { name: 'search', arguments: { q: 'agg' } });
  const err = await rpcError(client.callTool({ name: 'files__secret', arguments: {} }));
  t.equal(err.message, 'MCP error -32602: Unknown tool: files__secret');
});

t.test('prompts and resources only with <server>__*', async (t) => {
  const narrow = await connect(t, '/mcp/files', KEY);
  t.equal((await rpcError(narrow.client.listPrompts())).code, -32601);
  const whole = await connect(t, '/mcp/files', WHOLE);
  t.same((await whole.client.listPrompts()).prompts.map((p) => p.name), ['greet']);
  const got = await whole.client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } });
  t.same(got.messages, [{ role: 'user', content: { type: 'text', text: 'Hello, Ada' } }]);
  const read = await whole.client.readResource({ uri: 'file:///readme' });
  t.same(read.contents, [{ uri: 'file:///readme', text: 'read me' }]);
  t.same((await whole.client.listTools()).tools.map((x) => x.name).sort(), ['echo', 'fail', 'search', 'secret', 'slow']);
});

t.test('a key\'s and its team\'s mcp_tools narrow the plan\'s (admin API and CLI)', async (t) => {
  const admin = (method: string, path: string, body?: unknown) => fetch(`${gw.url}/admin${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, body: await r.json() as any }));
  const made = await admin('POST', '/accounts/whole/keys', { mcp_tools: ['files__search', 'files__echo'] });
  t.equal(made.status, 201);
  const listed = async (key: string) => (await (await connect(t, '/mcp/files', key)).client.listTools()).tools.map((x) => x.name).sort();
  t.same(await listed(made.body.key), ['echo', 'search']);
  const view = (await admin('GET', '/accounts/whole/keys')).body.keys.find((k: any) => k.id === made.body.id);
  t.same(view.mcp_tools, ['files__search', 'files__echo']);
  // A narrowed key reaches no prompt: its grant is not the whole server.
  const { client } = await connect(t, '/mcp/files', made.body.key);
  t.equal((await rpcError(client.listPrompts())).code, -32601);
  t.equal((await rpcError(client.callTool({ name: 'secret', arguments: {} }))).message, 'MCP error -32602: Unknown tool: secret');

  const team = await admin('POST', '/accounts/whole/teams', { id: 'agents', mcp_tools: ['files__echo', 'files__fail'] });
  t.equal(team.status, 201, JSON.stringify(team.body));
  t.same(team.body.mcp_tools, ['files__echo', 'files__fail']);
  t.equal((await admin('PATCH', `/keys/${made.body.id}`, { team: 'agents' })).status, 200);
  t.same(await listed(made.body.key), ['echo']);

  // The CLI sets a key's list as `models` is set.
  const { execFile } = await import('node:child_process');
  const { BIN } = await import('../helpers/child.js');
  const out = await new Promise<string>((resolve, reject) => {
    execFile(process.execPath, [BIN, 'keys', 'update', made.body.id, '--mcp-tools', 'files__fail,files__echo', '--url', gw.url],
      { env: { PATH: process.env.PATH, TOLLGATE_ADMIN_TOKEN: ADMIN }, timeout: 20_000 }, (err, stdout, stderr) => (err === null ? resolve(stdout) : reject(new Error(stderr))));
  });
  t.match(out, /mcp tools: files__fail, files__echo/);
  t.same(await listed(made.body.key), ['echo', 'fail']);
  const refused = await admin('PATCH', `/keys/${made.body.id}`, { mcp_tools: 'files__*' });
  t.equal(refused.status, 400);
  t.match(refused.body, { error: { code: 'invalid_type', param: 'mcp_tools' } });
});

t.test('the transport: JWT, an event-stream answer, notifications, methods, sessions, versions', async (t) => {
  const token = await new SignJWT({ type: 'access', sub: 'demo', sid: 'mcp-session-1' })
    .setProtectedHeader({ alg: 'HS256' }).setIssuer('dashboard').setIssuedAt().setExpirationTime('10m')
    .sign(new TextEncoder().encode(JWT_SECRET));
  const { client } = await connect(t, '/mcp/files', token);
  const before = await wallet(gw.url);
  await client.callTool({ name: 'echo', arguments: { value: 1 } });
  t.equal((await wallet(gw.url)).balance_units, before.balance_units - 10, 'a dashboard session is charged to its account');

  const raw = (path: string, init: { method?: string; headers?: Record<string, string>; body?: unknown }) => fetch(`${gw.url}${path}`, {
    method: init.method ?? 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...init.headers },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
  const sse = await raw('/mcp/files', { headers: { accept: 'text/event-stream' }, body: init });
  t.equal(sse.status, 200);
  t.equal(sse.headers.get('content-type'), 'text/event-stream');
  const sid = sse.headers.get('mcp-session-id')!;
  const text = await sse.text();
  t.match(text, /^event: message\ndata: \{.*\}\n\n$/);
  t.match(JSON.parse(text.split('data: ')[1]!), { id: 1, result: { protocolVersion: '2025-03-26', capabilities: { tools: {} }, serverInfo: { name: 'tollgate' } } });
  const headers = { accept: 'application/json, text/event-stream', 'mcp-session-id': sid };
  const note = await raw('/mcp/files', { headers, body: { jsonrpc: '2.0', method: 'notifications/initialized' } });
  t.equal(note.status, 202);
  t.equal(await note.text(), '');
  t.match(await (await raw('/mcp/files', { headers, body: { jsonrpc: '2.0', id: 2, method: 'ping' } })).json(), { id: 2, result: {} });
  const sseError = await raw('/mcp/files', { headers: { ...headers, accept: 'text/event-stream' }, body: { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'secret' } } });
  t.equal(sseError.headers.get('content-type'), 'text/event-stream', 'a method\'s error is written as the Accept allows');
  t.match(await sseError.text(), /^event: message\ndata: \{"jsonrpc":"2.0","id":6,"error":\{"code":-32602,"message":"Unknown tool: secret"\}\}\n\n$/);
  t.match(await (await raw('/mcp/files', { headers, body: { jsonrpc: '2.0', id: 3, method: 'sampling/createMessage' } })).json(), { id: 3, error: { code: -32601 } });
  const get = await raw('/mcp/files', { method: 'GET', headers });
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST, DELETE');
  const noSession = await raw('/mcp/files', { headers: { accept: 'application/json' }, body: { jsonrpc: '2.0', id: 4, method: 'tools/list' } });
  t.equal(noSession.status, 400);
  t.match(await noSession.json(), { id: 4, error: { code: -32000 } });
  t.equal((await raw('/mcp/files', { headers, body: init })).status, 400, 'initialize inside a session');
  t.equal((await raw('/mcp/files', { headers: { ...headers, 'mcp-protocol-version': '1999-01-01' }, body: { jsonrpc: '2.0', id: 5, method: 'ping' } })).status, 400);
  t.equal((await raw('/mcp/files', { headers: { accept: 'text/html' }, body: init })).status, 406);
  t.equal((await raw('/mcp/files', { headers: { ...headers, 'content-type': 'text/plain' }, body: init })).status, 415);
  const unknown = await raw('/mcp/nosuch', { headers, body: init });
  t.equal(unknown.status, 404);
  t.match(await unknown.json(), { error: { code: 'unknown_url' } });
  const anonymous = await fetch(`${gw.url}/mcp/nosuch`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(init) });
  t.equal(anonymous.status, 401, 'a server name is not confirmed to a caller without a key');
  t.equal((await raw('/mcp/files/extra', { headers, body: init })).status, 404);
});
