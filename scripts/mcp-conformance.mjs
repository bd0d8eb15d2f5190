// The official MCP conformance suite's server scenarios (@modelcontextprotocol/conformance
// 0.1.13, the last release that runs on Node 20), run twice against one upstream that implements
// them: directly, and through `tollgate serve` at /mcp/conformance (issue #42). Prints both scores
// and each scenario whose outcome differs. Not part of `npm test`: it fetches the suite with npx.
//
//   npm run build && node scripts/mcp-conformance.mjs
//
// The suite's client sends no Authorization, so a loopback proxy in front of Tollgate adds the
// key, as an agent's MCP client would. The upstream is written here with the SDK's McpServer
// (stateful Streamable HTTP, so notifications can reach the client on the call's stream).

import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import YAML from 'yaml';
import { z } from 'zod';

const KEY = 'tg_conformance_0000000000000000';
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = Buffer.concat([Buffer.from('RIFF'), Buffer.from([36, 0, 0, 0]), Buffer.from('WAVEfmt '), Buffer.from([16, 0, 0, 0, 1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0x80, 0x3e, 0, 0, 2, 0, 16, 0]), Buffer.from('data'), Buffer.from([0, 0, 0, 0])]).toString('base64');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });

/** The scenarios' server, as their descriptions ask. */
function build() {
  const s = new McpServer({ name: 'conformance-upstream', version: '1.0.0' }, { capabilities: { logging: {}, completions: {} } });
  s.registerTool('test_simple_text', { description: 'Simple text' }, async () => text('This is a simple text response for testing.'));
  s.registerTool('test_image_content', { description: 'An image' }, async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }));
  s.registerTool('test_audio_content', { description: 'Audio' }, async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }));
  s.registerTool('test_embedded_resource', { description: 'An embedded resource' }, async () => ({
    content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }],
  }));
  s.registerTool('test_multiple_content_types', { description: 'Mixed content' }, async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } },
    ],
  }));
  s.registerTool('test_tool_with_logging', { description: 'Logs while it runs' }, async (_args, extra) => {
    for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await sleep(50);
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
    }
    return text('Tool with logging executed successfully');
  });
  s.registerTool('test_tool_with_progress', { description: 'Reports progress' }, async (_args, extra) => {
    const token = extra._meta?.progressToken;
    for (const [i, progress] of [0, 50, 100].entries()) {
      if (i > 0) await sleep(50);
      if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
    }
    return text('Tool with progress executed successfully');
  });
  s.registerTool('test_error_handling', { description: 'Always fails' }, async () => ({ isError: true, ...text('This tool intentionally returns an error for testing') }));
  s.registerPrompt('test_simple_prompt', { description: 'A simple prompt' }, () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
  }));
  s.registerPrompt('test_prompt_with_arguments', { description: 'Arguments', argsSchema: { arg1: z.string(), arg2: z.string() } }, ({ arg1, arg2 }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }],
  }));
  s.registerPrompt('test_prompt_with_embedded_resource', { description: 'A resource', argsSchema: { resourceUri: z.string() } }, ({ resourceUri }) => ({
    messages: [
      { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
      { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
    ],
  }));
  s.registerPrompt('test_prompt_with_image', { description: 'An image' }, () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
      { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
    ],
  }));
  s.registerResource('static-text', 'test://static-text', { description: 'Static text', mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
  s.registerResource('static-binary', 'test://static-binary', { description: 'Static binary', mimeType: 'image/png' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }],
  }));
  s.registerResource('template', new ResourceTemplate('test://template/{id}/data', { list: undefined }), { description: 'A template', mimeType: 'application/json' },
    async (uri, { id }) => ({ contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] }));
  return s;
}

/** The upstream: one McpServer and transport per session. */
async function startUpstream() {
  const sessions = new Map();
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const sid = req.headers['mcp-session-id'];
      let transport = typeof sid === 'string' ? sessions.get(sid) : undefined;
      if (transport === undefined && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => sessions.set(id, transport) });
        build().connect(transport).catch((err) => console.error(err));
      }
      if (transport === undefined) {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}');
        return;
      }
      transport.handleRequest(req, res, body).catch((err) => console.error(err));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}/mcp` };
}

/** A loopback proxy adding the key to every request, as an agent's MCP client would. */
async function startKeyProxy(target) {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const up = request({ host: t.hostname, port: t.port, method: req.method, path: t.pathname, headers: { ...req.headers, host: t.host, authorization: `Bearer ${KEY}` } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}/mcp` };
}

async function startTollgate(upstreamUrl) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-conformance-'));
  const file = join(dir, 'tollgate.yaml');
  writeFileSync(file, YAML.stringify({
    server: { port: 0 },
    plans: { conf: { paid: false, mcp_tools: ['conformance__*'] } },
    accounts: [{ id: 'conf', plan: 'conf', wallet_units: 1_000_000, keys: [KEY] }],
    mcp: { servers: { conformance: { url: upstreamUrl, price: { per_call_units: 1 } } } },
  }));
  const bin = fileURLToPath(new URL('../bin/tollgate.js', import.meta.url));
  const proc = spawn(process.execPath, [bin, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' } });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  for (let i = 0; i < 400 && !/listening on (\S+)/.test(out); i++) await sleep(25);
  const m = /listening on (\S+)/.exec(out);
  if (m === null) throw new Error(`tollgate did not start: ${out}`);
  return { proc, url: `${m[1]}/mcp/conformance` };
}

/** Runs the suite's active server scenarios against `url`: scenario -> passed. */
function runSuite(url) {
  return new Promise((resolve) => {
    execFile('npx', ['-y', '@modelcontextprotocol/conformance@0.1.13', 'server', '--url', url], { maxBuffer: 64 * 1024 * 1024, timeout: 600_000 }, (_err, stdout, stderr) => {
      resolve(`${stdout}\n${stderr}`);
    });
  });
}

/** Each scenario's outcome from the suite's output lines ("✓ id: 1 passed, 0 failed" / "✗ id: ..."). */
function outcomes(output) {
  const result = new Map();
  for (const line of output.split('\n')) {
    const m = /^\s*(?:[✓✔]|PASS)\s+([\w-]+)/u.exec(line) ?? /^\s*([\w-]+):?\s+SUCCESS\b/.exec(line);
    const f = /^\s*(?:[✗✘×]|FAIL)\s+([\w-]+)/u.exec(line) ?? /^\s*([\w-]+):?\s+(?:FAILURE|WARNING)\b/.exec(line);
    if (m !== null) result.set(m[1], true);
    else if (f !== null) result.set(f[1], false);
  }
  return result;
}

const upstream = await startUpstream();
const gateway = await startTollgate(upstream.url);
const proxy = await startKeyProxy(gateway.url);
try {
  const direct = await runSuite(upstream.url);
  const through = await runSuite(proxy.url);
  const a = outcomes(direct);
  const b = outcomes(through);
  const score = (m) => `${[...m.values()].filter(Boolean).length}/${m.size}`;
  const total = (out) => /Total: .*/.exec(out)?.[0] ?? '';
  console.log(`direct:        ${score(a)} scenarios (${total(direct)} checks)`);
  console.log(`through /mcp:  ${score(b)} scenarios (${total(through)} checks)`);
  for (const id of new Set([...a.keys(), ...b.keys()])) {
    if (a.get(id) !== b.get(id)) console.log(`  differs: ${id}: direct ${a.get(id) ?? 'absent'}, through Tollgate ${b.get(id) ?? 'absent'}`);
  }
  if (a.size === 0 || process.env.VERBOSE) console.log(direct, through);
} finally {
  gateway.proc.kill('SIGTERM');
  upstream.server.close();
  proxy.server.close();
  upstream.server.closeAllConnections();
  proxy.server.closeAllConnections();
}
