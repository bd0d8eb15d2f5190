// Clients for the early-answer tests (CONTRACT section 11): 45 MB bodies against a 40 MB
// limit, 50 tries each, every one of which must read the whole envelope. The gateway runs in a
// process of its own (`tollgate serve`, or embedded in an Express app): a client in the same
// event loop as the server paces it and hides the race these tests pin.

import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY } from './gateway.js';
import { serveChild } from './child.js';
import { parseResponses } from './raw-request.js';
import { schemas } from './schemas.js';

export const LIMIT = 40 * 1024 * 1024;
export const BODY = Buffer.alloc(45 * 1024 * 1024, 0x20);
export const TRIES = 50;
export const WRONG_KEY = 'tg_wrong_0000000000000000';

const CONFIG = {
  server: { port: 0, max_body_bytes: LIMIT },
  accounts: [{ id: 'demo', plan: 'free', keys: [DEMO_KEY] }],
  plans: { free: {} },
  providers: { echo: { kind: 'echo' } },
  models: [{ id: 'echo-small', provider: 'echo' }],
};

/** `tollgate serve` on a YAML file with the 40 MB limit; its URL. */
export async function serveEarly(t: any): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-early-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server:
  port: 0
  max_body_bytes: ${LIMIT}
accounts:
  - { id: demo, plan: free, keys: [${DEMO_KEY}] }
plans:
  free: {}
providers:
  echo: { kind: echo }
models:
  - { id: echo-small, provider: echo }
`);
  return (await serveChild(t, file)).url;
}

const EMBEDDED = fileURLToPath(new URL('../fixtures/embedded/express-server.mjs', import.meta.url));

/** The built gateway mounted in an Express app (no body parser before it), in a child; its URL. */
export async function serveEmbedded(t: any): Promise<string> {
  const proc = spawn(process.execPath, [EMBEDDED, JSON.stringify(CONFIG)], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const m = /listening on (\S+)/.exec(out);
  if (m === null) throw new Error(`the embedding app did not start: ${out}`);
  return m[1]!;
}

/** Is it the envelope of `code`, with its status and request id? Fails `t` when not. */
export function checkEnvelope(t: any, status: number, headers: { get(name: string): string | null }, text: string, want: number, code: string): boolean {
  let body: any;
  try { body = JSON.parse(text); } catch { body = undefined; }
  const ok = status === want && body?.code === code && body?.error?.code === code &&
    schemas.error(body).length === 0 && body.request_id === headers.get('x-request-id');
  if (!ok) t.fail(`expected ${want} ${code}, got ${status} ${text.slice(0, 200)}`);
  return ok;
}

/** Runs `one` TRIES times in a row; every one must read its envelope. */
export async function tries(t: any, what: string, one: () => Promise<boolean>): Promise<void> {
  const failures: string[] = [];
  let ok = 0;
  for (let i = 0; i < TRIES; i++) {
    try {
      if (await one()) ok++;
    } catch (err) {
      const e = err as Error & { cause?: { code?: string } };
      failures.push(`${e.message} ${e.cause?.code ?? ''}`.trim());
    }
  }
  t.equal(ok, TRIES, `${what}: every one of ${TRIES} tries read the whole envelope${failures.length > 0 ? ` (failures: ${[...new Set(failures)].join('; ')})` : ''}`);
}

export const jsonHeaders = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

/** fetch (undici) POSTing the 45 MB body with `key`; is the answer the envelope of `code`? */
export async function fetchOversize(t: any, url: string, key: string, status: number, code: string): Promise<boolean> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: jsonHeaders(key), body: BODY });
  return checkEnvelope(t, res.status, res.headers, await res.text(), status, code);
}

interface RawOutcome { text: Buffer; error: string | undefined }

/**
 * A client that writes before it reads, as a blocking client does: the headers and the first
 * MB, a pause of a second, then the rest, and only then reads the answer. A server that closed
 * with bytes unread reset the connection, and the reset discards the answer waiting unread.
 */
function pausingClient(url: string, key: string, chunked: boolean): Promise<RawOutcome> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.pause();
    const got: Buffer[] = [];
    let error: string | undefined;
    socket.on('data', (d: Buffer) => got.push(d));
    socket.on('error', (e: NodeJS.ErrnoException) => { error ??= e.code ?? e.message; });
    socket.on('close', () => resolve({ text: Buffer.concat(got), error }));
    const framing = chunked ? 'transfer-encoding: chunked' : `content-length: ${BODY.length}`;
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n${framing}\r\n\r\n`);
    const piece = (b: Buffer) => (chunked ? [Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')] : [b]);
    for (const p of piece(BODY.subarray(0, 1 << 20))) socket.write(p);
    void sleep(1000).then(() => {
      if (socket.destroyed) return;
      const rest: Buffer[] = [];
      for (let at = 1 << 20; at < BODY.length; at += 1 << 20) rest.push(...piece(BODY.subarray(at, at + (1 << 20))));
      if (chunked) rest.push(Buffer.from('0\r\n\r\n'));
      // Everything written (or the write failed): now read.
      rest.forEach((p, i) => socket.write(p, i === rest.length - 1 ? () => socket.resume() : undefined));
    });
  });
}

/** TRIES pausing clients at once (each pauses a second); every one reads the envelope, then a clean close. */
export async function pausing(t: any, url: string, key: string, chunked: boolean, status: number, code: string): Promise<void> {
  const outcomes = await Promise.all(Array.from({ length: TRIES }, () => pausingClient(url, key, chunked)));
  let ok = 0;
  const errors: string[] = [];
  for (const o of outcomes) {
    const [res] = parseResponses(o.text);
    if (o.error !== undefined) errors.push(o.error);
    if (res === undefined) continue;
    const h = { get: (n: string) => res.headers[n] ?? null };
    if (o.error === undefined && res.headers.connection === 'close' && checkEnvelope(t, res.status, h, res.body, status, code)) ok++;
  }
  t.equal(ok, TRIES, `every one of ${TRIES} pausing clients read the whole envelope, with Connection: close, and saw the socket close without a reset${errors.length > 0 ? ` (errors: ${[...new Set(errors)].join(', ')})` : ''}`);
}
