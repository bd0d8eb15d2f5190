// What `tollgate serve` loads (issue #13, idle RSS): only what its config uses. A gateway
// without auth.jwt, tokenizer.json files, metrics scraping, Redis, tracing or a passthrough
// never loads jose, @huggingface/tokenizers, undici's or rate-limiter-flexible's or prom-client's
// index, the Prometheus text parser, ioredis, OpenTelemetry (SDK or API), http-proxy-3, Ajv, the
// MCP SDK or zod, or the audio routes' form parser (busboy), even after serving
// a request; one that sets auth.jwt and names a tokenizer.json loads jose and the tokenizer
// library when it starts, before its first request.

import t from 'tap';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { serveChild } from '../helpers/child.js';
import { PRO_KEY } from '../helpers/gateway.js';
import { completionBody, json, startUpstream } from '../helpers/upstream.js';

const PRELOAD = fileURLToPath(new URL('../fixtures/loaded-modules/preload.mjs', import.meta.url));
const TINY = fileURLToPath(new URL('../fixtures/tokenizers/tiny-bpe/tokenizer.json', import.meta.url));

const NEVER = {
  jose: /\/node_modules\/jose\//,
  'openid-client (the console\'s SSO)': /\/node_modules\/openid-client\//,
  '@huggingface/tokenizers': /\/node_modules\/@huggingface\/tokenizers\//,
  "undici's index": /\/node_modules\/undici\/index\.js$/,
  "rate-limiter-flexible's index": /\/node_modules\/rate-limiter-flexible\/index\.js$/,
  'RateLimiterRedis': /\/node_modules\/rate-limiter-flexible\/lib\/RateLimiterRedis\.js$/,
  "prom-client's index": /\/node_modules\/prom-client\/index\.js$/,
  'parse-prometheus-text-format': /\/node_modules\/parse-prometheus-text-format\//,
  ioredis: /\/node_modules\/ioredis\//,
  'OpenTelemetry SDK': /\/node_modules\/@opentelemetry\/sdk-trace-base\//,
  // prom-client's process CPU counters' module loads it for exemplars: observe/prom-client.ts makes them.
  'OpenTelemetry API': /\/node_modules\/@opentelemetry\/api\//,
  // The audio routes' form parser, loaded by the first audio request.
  '@fastify/busboy': /\/node_modules\/@fastify\/busboy\//,
  'http-proxy-3': /\/node_modules\/http-proxy-3\//,
  'fast-check': /\/node_modules\/fast-check\//,
  "Ajv's compiler (the config validator is compiled ahead of time)": /\/node_modules\/ajv\/dist\/(ajv|core)\.js$/,
  // The MCP gateway's SDK (and zod, its schemas), loaded once a config names an MCP server.
  '@modelcontextprotocol/sdk': /\/node_modules\/@modelcontextprotocol\/sdk\//,
  zod: /\/node_modules\/zod\//,
};

const up = await startUpstream((_req, res) => json(res, 200, completionBody('hi')));
const dir = await mkdtemp(join(tmpdir(), 'tollgate-idle-modules-'));
t.teardown(async () => { await up.close(); await rm(dir, { recursive: true, force: true }); });

function config(extra: string, tokenizer = ''): string {
  return `server: { port: 0, host: 127.0.0.1 }
accounts:
  - id: acme
    plan: pro
    keys: [${PRO_KEY}]
providers:
  up: { kind: openai, base_url: ${up.baseUrl} }
models:
  - { id: m, provider: up${tokenizer} }
${extra}`;
}

/** Starts `tollgate serve` with the preload, optionally sends one chat request, and lists the loaded modules. */
async function loaded(t: any, name: string, yaml: string, request: boolean): Promise<string[]> {
  const file = join(dir, `${name}.yaml`);
  const list = join(dir, `${name}.modules`);
  await writeFile(file, yaml);
  await writeFile(list, '');
  const { proc, url } = await serveChild(t, file, { LOADED_MODULES_FILE: list }, ['--import', PRELOAD]);
  if (request) {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${PRO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] }),
    });
    t.equal(res.status, 200, 'the request is served');
    await res.arrayBuffer();
  }
  proc.kill('SIGUSR2');
  let text = '';
  for (let i = 0; i < 400 && !text.includes('done\n'); i++) { await sleep(25); text = await readFile(list, 'utf8'); }
  t.match(text, /done\n/, 'the module list was written');
  return text.split('\n');
}

t.test('a config that uses none of them loads none, even once it served a request', async (t) => {
  const mods = await loaded(t, 'plain', config(''), true);
  t.ok(mods.some((m) => /\/node_modules\/undici\/lib\/dispatcher\/pool\.js$/.test(m)), 'the module list is read (undici\'s Pool is there)');
  for (const [name, re] of Object.entries(NEVER)) t.notOk(mods.some((m) => re.test(m)), `${name} is not loaded`);
});

t.test('auth.jwt and a tokenizer.json load jose and the tokenizer library at start', async (t) => {
  const mods = await loaded(t, 'jwt', config('auth: { jwt: { secret: a-dashboard-secret-of-enough-length-0123456789 } }', `, tokenizer: ${JSON.stringify(TINY)}`), false);
  t.ok(mods.some((m) => NEVER.jose.test(m)), 'jose is loaded before any request');
  t.ok(mods.some((m) => NEVER['@huggingface/tokenizers'].test(m)), '@huggingface/tokenizers is loaded before any request');
});
