// For test/alerts/: a real HTTP webhook receiver whose behaviour a test switches (answer 2xx,
// fail 500, hang with no answer, answer slowly, go down and come back on the same port), and an
// in-process gateway with the alerts' clock and background work in the test's hands.

import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { request } from 'undici';
import { createGateway, type Gateway } from '../../lib/gateway.js';
import { listen, type RunningServer } from '../../lib/server.js';
import type { AlertsOptions } from '../../lib/alerts/alerts.js';

export const SECRET = 'whsec-test-0123456789';
export const ADMIN = 'alerts-admin-token';

/** The signature a receiver expects, computed here from scratch (not with the gateway's code). */
export function referenceSignature(secret: string, body: Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

export interface Received {
  headers: IncomingMessage['headers'];
  raw: Buffer;
  body: any;
  /** The signature checked against the reference HMAC with SECRET. */
  signed: boolean;
}

export type Mode = 'ok' | 'fail' | 'hang' | { slowMs: number };

export interface Receiver {
  url: string;
  port: number;
  mode: Mode;
  /** Every request that reached it (whatever it answered). */
  received: Received[];
  /** Requests answered 2xx. */
  delivered(): Received[];
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

/** A webhook receiver on 127.0.0.1, on a free port kept across down()/up(). */
export async function startReceiver(secret = SECRET, path = '/hook'): Promise<Receiver> {
  const sockets = new Set<Socket>();
  const answered = new Set<Received>();
  let server: Server;
  const r: Receiver = {
    url: '', port: 0, mode: 'ok', received: [],
    delivered: () => r.received.filter((x) => answered.has(x)),
    down: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
    up: async () => { server = make(); await new Promise<void>((resolve) => server.listen(r.port, '127.0.0.1', resolve)); },
    close: async () => { if (server.listening) await r.down(); },
  };
  const make = (): Server => {
    const s = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        let body: unknown;
        try { body = JSON.parse(raw.toString()); } catch { body = undefined; }
        const rec: Received = { headers: req.headers, raw, body, signed: req.headers['x-tollgate-signature'] === referenceSignature(secret, raw) };
        r.received.push(rec);
        const mode = r.mode;
        if (req.url !== path) { res.writeHead(404).end(); return; }
        if (mode === 'hang') return;
        if (mode === 'fail') { res.writeHead(500, { 'content-type': 'text/plain' }).end('down'); return; }
        const answer = () => { answered.add(rec); res.writeHead(204).end(); };
        if (mode === 'ok') answer();
        else setTimeout(answer, mode.slowMs);
      });
    });
    s.on('connection', (c: Socket) => { sockets.add(c); c.on('close', () => sockets.delete(c)); });
    return s;
  };
  server = make();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  r.port = (server.address() as AddressInfo).port;
  r.url = `http://127.0.0.1:${r.port}${path}`;
  return r;
}

/** A clock a test moves by hand. */
export class FakeClock {
  constructor(public t = Date.UTC(2026, 10, 27, 12, 0, 0)) {}
  now = (): number => this.t;
  advance(ms: number): void { this.t += ms; }
}

export interface AlertsGateway {
  url: string;
  gateway: Gateway;
  running: RunningServer;
  logs: () => string;
  close: () => Promise<void>;
}

export async function startAlertsGateway(config: Record<string, any>, alerts: AlertsOptions = {}): Promise<AlertsGateway> {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } });
  const gateway = createGateway(config, { logger: pino({ level: 'debug' }, sink), alerts });
  const running = await listen(gateway, '127.0.0.1', 0);
  return { url: running.url, gateway, running, logs: () => lines.join(''), close: () => running.drain(1000) };
}

/** A config with an admin token, the demo account and a model whose every completion token costs 1 unit. */
export function alertsConfig(alerts: Record<string, any>, extra: Record<string, any> = {}): Record<string, any> {
  return {
    server: { port: 0 },
    admin: { token: ADMIN },
    plans: { free: { paid: false } },
    accounts: [{ id: 'demo', plan: 'free', wallet_units: 1000, keys: ['tg_demo_0000000000000000'] }],
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'echo-small', provider: 'echo', context_window: 8192, max_output_tokens: 1024, price: { input_per_mtok: 0, output_per_mtok: 1_000_000 } }],
    alerts,
    ...extra,
  };
}

/** More words than `units`: the echo model answers max_tokens of them, so a request costs max_tokens units. */
export function words(units: number): string {
  return Array(units + 5).fill('one').join(' ');
}

export async function admin(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any; headers: Record<string, unknown> }> {
  const res = await request(`${url}${path}`, {
    method: method as 'GET',
    headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: text === '' ? undefined : JSON.parse(text), headers: res.headers };
}

/** A chat completion costing `units` (max_tokens) with `key`. */
export async function spend(url: string, key: string, units: number): Promise<{ status: number; json: any; headers: Record<string, unknown> }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo-small', max_tokens: units, messages: [{ role: 'user', content: words(units) }] }),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: JSON.parse(text), headers: res.headers };
}

/** Polls `check` until true or `ms` pass. */
export async function until(check: () => boolean | Promise<boolean>, ms = 5000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check();
}
