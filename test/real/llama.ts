// The harness of `npm run test:real`: a real llama.cpp `llama-server` (built and cached by
// scripts/real/llama-server.mjs, with its tiny random-weight Qwen2 model) and the real
// `tollgate serve` child in front of it, plus the clients the checks use: one for the server
// itself (the reference answer) and one for the gateway, and the admin API's figures.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { serveChild, type ChildGateway } from '../helpers/child.js';

const PREPARE = fileURLToPath(new URL('../../scripts/real/llama-server.mjs', import.meta.url));

export const ADMIN = 'real-admin-token';
export const KEY = 'tg_real_2222222222222222222222';
/** --ctx-size; what each slot gets of it (/props n_ctx) is what discovery must report. */
export const CTX = 4096;
export const SLOTS = 2;
/** What a discovered model holds (and sends upstream) when a client sets no output limit. */
export const DEFAULT_MAX_OUTPUT = 40;
export const PRICE = { input_per_mtok: 1500, output_per_mtok: 4000 };

export interface Prepared { bin: string; model: string; source: string; version: string }

/** The cached server and model (builds them on a cold cache: run `npm run test:real` for that). */
export function prepared(): Prepared {
  const r = spawnSync(process.execPath, [PREPARE, '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.status !== 0) throw new Error(`scripts/real/llama-server.mjs failed (${r.status ?? r.signal})`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

export interface LlamaOptions {
  port?: number;
  /** A chat template file instead of the model's own (Qwen2's). */
  templateFile?: string;
  reasoningFormat?: string;
  /** More of llama-server's switches (`--ignore-eos`: a request's default, for routes that cannot send it). */
  args?: string[];
}

export interface Llama {
  url: string;
  port: number;
  proc: ChildProcess;
  output: () => string;
  /** SIGKILL, and resolves once the process is gone. */
  kill: () => Promise<void>;
  /** /metrics as name -> value (llamacpp:* gauges and counters). */
  metrics: () => Promise<Record<string, number>>;
}

/** Starts llama-server and resolves once /health answers 200; killed at teardown. */
export async function startLlama(t: any, p: Prepared, opts: LlamaOptions = {}): Promise<Llama> {
  const port = opts.port ?? await freePort();
  const args = [
    '-m', p.model, '--host', '127.0.0.1', '--port', String(port), '--alias', 'tiny-qwen2',
    '--ctx-size', String(CTX), '--parallel', String(SLOTS), '--metrics', '--jinja',
    '--threads', '1', '--threads-http', '2', '--no-warmup', '--cache-ram', '0',
  ];
  if (opts.templateFile !== undefined) args.push('--chat-template-file', opts.templateFile);
  if (opts.reasoningFormat !== undefined) args.push('--reasoning-format', opts.reasoningFormat);
  if (opts.args !== undefined) args.push(...opts.args);
  const proc = spawn(p.bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const kill = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await gone;
  };
  t.teardown(kill);
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`llama-server exited (${proc.exitCode}):\n${out.slice(-4000)}`);
    const ok = await fetch(`${url}/health`).then((r) => r.status === 200, () => false);
    if (ok) break;
    if (i > 1200) throw new Error(`llama-server did not become healthy in 60 s:\n${out.slice(-4000)}`);
    await sleep(50);
  }
  const metrics = async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const m: Record<string, number> = {};
    for (const line of text.split('\n')) {
      const hit = /^llamacpp:(\w+) (\S+)$/.exec(line);
      if (hit !== null) m[hit[1]!] = Number(hit[2]);
    }
    return m;
  };
  return { url, port, proc, output: () => out, kill, metrics };
}

export interface Tollgate extends ChildGateway {
  dir: string;
}

/** The gateway's config: discovery on the plain server, and a fixed model on the reasoning one. */
export function tollgateYaml(llamaUrl: string, reasoningUrl?: string): string {
  const price = `{ input_per_mtok: ${PRICE.input_per_mtok}, output_per_mtok: ${PRICE.output_per_mtok} }`;
  return `server:
  host: 127.0.0.1
  port: 0
  sse_keepalive_ms: 60000
admin:
  token: ${ADMIN}
plans:
  pro: { paid: true, requests_per_minute: 100000, tokens_per_minute: 100000000, max_concurrent: 16 }
accounts:
  - { id: real, plan: pro, wallet_units: 1000000000, keys: [${KEY}] }
providers:
  llama:
    kind: openai
    base_url: ${llamaUrl}/v1
    timeout_ms: 120000
    discover_models: true
    discover_interval_ms: 1000
    circuit_failures: 2
    circuit_cooldown_ms: 1000
    # llama.cpp's own request fields the checks use: ignore_eos keeps a random model talking,
    # grammar constrains it, cache_prompt false computes every answer as the reference is.
    forward_params: [ignore_eos, cache_prompt, grammar]
    model_defaults:
      max_output_tokens: ${DEFAULT_MAX_OUTPUT}
      price: ${price}
${reasoningUrl === undefined ? '' : `  reasoning:
    kind: openai
    base_url: ${reasoningUrl}/v1
    timeout_ms: 120000
    forward_params: [ignore_eos, cache_prompt]
models:
  - { id: tiny-reasoner, provider: reasoning, upstream_model: tiny-qwen2, context_window: ${CTX / SLOTS}, max_output_tokens: 200, price: ${price} }
`}`;
}

export async function startTollgate(t: any, yaml: string): Promise<Tollgate> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-real-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  writeFileSync(file, yaml);
  const child = await serveChild(t, file);
  return { ...child, dir };
}

/** Waits until discovery has put `model` in the catalog; returns its public entry. */
export async function discovered(gw: { url: string }, model = 'tiny-qwen2'): Promise<any> {
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`${gw.url}/v1/models/${model}`, { headers: { authorization: `Bearer ${KEY}` } });
    if (r.status === 200) return r.json();
    await sleep(50);
  }
  throw new Error(`discovery never listed ${model}`);
}

export const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

/** POST a chat request (or to `path`); the whole body as text (an SSE stream too). */
export async function post(url: string, body: unknown, headers: Record<string, string> = auth, path = '/v1/chat/completions'): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** Asserts a status, showing the body only when it is not the one expected. */
export function answered(t: any, res: { status: number; text: string }, status: number): void {
  t.equal(res.status, status, res.status === status ? `answered ${status}` : `answered ${res.status}: ${res.text.slice(0, 1000)}`);
}

export async function account(gw: { url: string }): Promise<any> {
  const r = await fetch(`${gw.url}/admin/accounts/real`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return r.json();
}

export async function usage(gw: { url: string }): Promise<any> {
  const since = new Date(Date.now() - 3600_000).toISOString();
  const r = await fetch(`${gw.url}/admin/usage?account=real&since=${encodeURIComponent(since)}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return r.json();
}

/** ceil((prompt x input + completion x output) / 1e6), the contract's cost, exactly. */
export function cost(prompt: number, completion: number): number {
  const n = BigInt(prompt) * BigInt(PRICE.input_per_mtok) + BigInt(completion) * BigInt(PRICE.output_per_mtok);
  return Number((n + 999_999n) / 1_000_000n);
}

/** An SSE body as `data:` payloads (JSON, or the string '[DONE]'), whatever the server. */
export function events(text: string): any[] {
  const out: any[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    for (const line of block.split(/\r?\n/)) {
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      out.push(data === '[DONE]' ? data : JSON.parse(data));
    }
  }
  return out;
}
