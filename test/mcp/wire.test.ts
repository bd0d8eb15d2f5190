// The gateway's own MCP client on the wire (lib/upstream/mcp.ts): the SDK opens the upstream
// session, each call then goes out through undici. Here the upstream is a Streamable HTTP server
// written by hand, so the answers can be what real servers send and the SDK's own server never
// does: an event stream split across TCP packets with CRLF line ends, a comment and a progress
// notification before the answer, a stream kept open after its answer, a batch array, a result
// of the wrong shape, HTTP errors, an expired session, an answer over the size limit, a stream
// that ends with no answer. A YAML file served by `tollgate serve`, the official SDK's Client in
// front; each failure costs nothing and leaves nothing held.

import t from 'tap';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { KEY, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { asyncHandler } from '../helpers/async-handler.js';

const TOOLS = ['sse', 'open', 'batch', 'shape', 'http500', 'expire', 'huge', 'noanswer'].map((name) => ({ name, inputSchema: { type: 'object' } }));

/** A hand-written MCP server: counts sessions opened, holds the streams it keeps open. */
async function startWireServer() {
  let sessions = 0;
  let expireNext = false;
  const open: ServerResponse[] = [];
  const sockets = new Set<Socket>();
  const json = (res: ServerResponse, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(200, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };
  /** Writes an event stream in small pieces, each its own TCP write, with CRLF line ends. */
  const pieces = async (res: ServerResponse, text: string) => {
    for (let i = 0; i < text.length; i += 7) {
      res.write(text.slice(i, i + 7));
      await new Promise((r) => setImmediate(r));
    }
  };
  const server = createServer(asyncHandler(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = '';
    for await (const c of req) raw += c;
    if (req.method !== 'POST') { res.writeHead(405).end(); return; }
    const msg = JSON.parse(raw);
    if (msg.method === 'initialize') {
      sessions++;
      json(res, { jsonrpc: '2.0', id: msg.id, result: { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'wire', version: '1' } } },
        { 'mcp-session-id': `s${sessions}` });
      return;
    }
    if (req.headers['mcp-session-id'] !== `s${sessions}` || expireNext) {
      expireNext = false;
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
      return;
    }
    if (msg.id === undefined) { res.writeHead(202).end(); return; }
    if (msg.method === 'tools/list') { json(res, { jsonrpc: '2.0', id: msg.id, result: { tools: TOOLS } }); return; }
    const answer = { jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: `ran ${msg.params.name}` }] } };
    switch (msg.params.name) {
      case 'sse':
      case 'open': {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
        const progress = { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } };
        await pieces(res, `: warming up\r\n\r\nevent: message\r\ndata: ${JSON.stringify(progress)}\r\n\r\nevent: message\r\ndata: ${JSON.stringify(answer)}\r\n\r\n`);
        if (msg.params.name === 'open') open.push(res);
        else res.end();
        return;
      }
      case 'batch': json(res, [{ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } }, answer]); return;
      case 'shape': json(res, { jsonrpc: '2.0', id: msg.id, result: { content: 'not a list' } }); return;
      case 'http500': res.writeHead(500, { 'content-type': 'text/plain' }).end('boom'); return;
      case 'expire': expireNext = true; json(res, answer); return;
      case 'huge': json(res, { jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: 'x'.repeat(17 * 1024 * 1024) }] } }); return;
      case 'noanswer':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`event: message\r\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } })}\r\n\r\n`);
        return;
      default: json(res, { jsonrpc: '2.0', id: msg.id, error: { code: -32602, message: 'no such tool' } });
    }
  }));
  server.on('connection', (s: Socket) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    sessions: () => sessions,
    open,
    expireNext: () => { expireNext = true; },
    close: async () => {
      for (const r of open) r.end();
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

const wire = await startWireServer();
t.teardown(() => wire.close());

const gw = await serveFile(t, operatorConfig({
  plans: { free: { paid: false, requests_per_minute: 1000, mcp_tools: ['wire__*'] } },
  mcp: { servers: { wire: { url: wire.url, timeout_ms: 5000, price: { per_call_units: 3 } } } },
}));

const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp/wire`), { requestInit: { headers: { authorization: `Bearer ${KEY}` } } });
const client = new Client({ name: 'test', version: '1' });
await client.connect(transport);
t.teardown(() => client.close());

async function rpcError(p: Promise<unknown>): Promise<McpError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof McpError) return err;
    throw err;
  }
  throw new Error('no error');
}

t.test('an event stream in 7-byte writes, CRLF, a comment and a notification first: the answer, charged once', async (t) => {
  const before = await wallet(gw.url);
  const r = await client.callTool({ name: 'sse', arguments: {} });
  t.same(r.content, [{ type: 'text', text: 'ran sse' }]);
  const after = await wallet(gw.url);
  t.equal(after.balance_units, before.balance_units - 3);
  t.equal(after.held_units, 0);
});

t.test('a stream kept open after its answer: the call returns without waiting for its end', async (t) => {
  const r = await client.callTool({ name: 'open', arguments: {} });
  t.same(r.content, [{ type: 'text', text: 'ran open' }]);
  t.equal(wire.open.length, 1);
  t.equal(wire.open[0]!.writableEnded, false, 'the server had not ended the stream when the answer came back');
  wire.open[0]!.end();
  t.same((await client.callTool({ name: 'sse', arguments: {} })).content, [{ type: 'text', text: 'ran sse' }], 'the next call works');
});

t.test('a JSON batch holding a notification and the answer: the answer', async (t) => {
  t.same((await client.callTool({ name: 'batch', arguments: {} })).content, [{ type: 'text', text: 'ran batch' }]);
});

t.test('a server JSON-RPC error is passed on, nothing charged', async (t) => {
  const before = await wallet(gw.url);
  await client.listTools();
  const err = await rpcError(client.callTool({ name: 'nosuch', arguments: {} }));
  t.equal(err.code, -32602, 'the gateway answers a tool the server did not list as unknown');
  t.same(await wallet(gw.url), before);
});

t.test('a result of the wrong shape: -32603 naming the server, nothing charged or held', async (t) => {
  const before = await wallet(gw.url);
  const err = await rpcError(client.callTool({ name: 'shape', arguments: {} }));
  t.equal(err.code, -32603);
  t.match(err.message, /The MCP server 'wire' answered tools\/call with a result of the wrong shape/);
  t.same(await wallet(gw.url), before);
});

for (const [tool, why] of [['http500', 'HTTP 500'], ['huge', 'an answer over 16 MiB'], ['noanswer', 'a stream that ends without the answer']] as const) {
  t.test(`${why}: -32000 upstream_unavailable, nothing charged or held, a new session next time`, async (t) => {
    const before = await wallet(gw.url);
    const sessions = wire.sessions();
    const err = await rpcError(client.callTool({ name: tool, arguments: {} }));
    t.equal(err.code, -32000);
    t.match(err.data, { code: 'upstream_unavailable', request_id: String });
    t.same(await wallet(gw.url), before);
    t.same((await client.callTool({ name: 'sse', arguments: {} })).content, [{ type: 'text', text: 'ran sse' }]);
    t.equal(wire.sessions(), sessions + 1, 'the next call opened a new upstream session');
  });
}

t.test('an expired upstream session (404): that call is unavailable, the next opens a new session', async (t) => {
  const sessions = wire.sessions();
  t.same((await client.callTool({ name: 'expire', arguments: {} })).content, [{ type: 'text', text: 'ran expire' }]);
  const before = await wallet(gw.url);
  const err = await rpcError(client.callTool({ name: 'sse', arguments: {} }));
  t.match(err.data, { code: 'upstream_unavailable' });
  t.same(await wallet(gw.url), before);
  t.same((await client.callTool({ name: 'sse', arguments: {} })).content, [{ type: 'text', text: 'ran sse' }]);
  t.equal(wire.sessions(), sessions + 1);
});
