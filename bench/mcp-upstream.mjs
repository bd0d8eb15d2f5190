// The MCP server of `npm run bench`'s mcp phase: the official SDK's McpServer over its
// Streamable HTTP transport, stateless with JSON answers (a server and a transport per request,
// as the SDK's stateless example does), one tool `echo` answering its arguments as text. It runs
// on the load CPU; only the gateway's CPU is measured. Prints "upstream listening on" when ready.

import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

const { values } = parseArgs({ options: { host: { type: 'string', default: '127.0.0.1' }, port: { type: 'string', default: '0' } } });

function build() {
  const s = new McpServer({ name: 'bench-tools', version: '1.0.0' });
  s.registerTool('echo', { description: 'Echo', inputSchema: { text: z.string() } }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
  return s;
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let body;
    try {
      body = chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400).end();
      return;
    }
    const mcp = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => { transport.close().catch(() => {}); mcp.close().catch(() => {}); });
    mcp.connect(transport).then(() => transport.handleRequest(req, res, body)).catch((err) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(err));
    });
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(values.port), values.host, () => {
  process.stdout.write(`upstream listening on ${values.host}:${server.address().port}\n`);
});
