// MCP servers for tests of lib/mcp/ (CONTRACT section 17), made with the official SDK's server
// classes (McpServer over StreamableHTTPServerTransport, stateless: a server and transport per
// request) on a loopback port. Every request that reaches one is recorded (its headers and its
// JSON body), so a test can say what was forwarded, and that nothing was.

import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { httpHandler } from './async-handler.js';

export interface Recorded { headers: IncomingMessage['headers']; body: any }

export interface FakeMcp {
  url: string;
  /** Every request received, in order. */
  seen: Recorded[];
  /** The tools/call requests received: their params. */
  calls(): any[];
  close(): Promise<void>;
}

/** The tools: search (text), echo (its arguments back), fail (isError: true), slow (3 s), secret (never granted in tests); a prompt and a resource. */
function build(): McpServer {
  const s = new McpServer({ name: 'fake-files', version: '1.0.0' });
  s.registerTool('search', { description: 'Search files', inputSchema: { q: z.string() } }, async ({ q }) => ({
    content: [{ type: 'text', text: `found: ${q}` }],
  }));
  s.registerTool('echo', { description: 'Echo', inputSchema: { value: z.unknown().optional() } }, async (args) => ({
    content: [{ type: 'text', text: JSON.stringify(args) }],
  }));
  s.registerTool('fail', { description: 'Always fails' }, async () => ({ content: [{ type: 'text', text: 'it failed' }], isError: true }));
  s.registerTool('slow', { description: 'Answers after 3 s' }, async () => {
    await new Promise((resolve) => setTimeout(resolve, 3000));
    return { content: [{ type: 'text', text: 'late' }] };
  });
  s.registerTool('secret', { description: 'Not for everyone' }, async () => ({ content: [{ type: 'text', text: 'the secret' }] }));
  s.registerPrompt('greet', { description: 'A greeting', argsSchema: { name: z.string() } }, ({ name }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}` } }],
  }));
  s.registerResource('readme', 'file:///readme', { description: 'The readme' }, async (uri) => ({
    contents: [{ uri: uri.href, text: 'read me' }],
  }));
  return s;
}

export async function startFakeMcp(): Promise<FakeMcp> {
  const seen: Recorded[] = [];
  const server: Server = createServer(httpHandler(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const body = text === '' ? undefined : JSON.parse(text);
    seen.push({ headers: req.headers, body });
    const mcp = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => { void transport.close(); void mcp.close(); });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
  }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    seen,
    calls: () => seen.filter((r) => r.body?.method === 'tools/call').map((r) => r.body.params),
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

/** A loopback port nothing listens on. */
export async function deadUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return `http://127.0.0.1:${port}/mcp`;
}
