// Starts a real gateway on a real socket (port 0) with a config built from a base plus
// overrides, and captures its log lines for assertions.

import { Writable } from 'node:stream';
import pino from 'pino';
import { createGateway, type Gateway } from '../../lib/gateway.js';
import { listen, type RunningServer } from '../../lib/server.js';

export const DEMO_KEY = 'tg_demo_0000000000000000';
export const PRO_KEY = 'tg_pro_11111111111111111111';

export function baseConfig(): Record<string, any> {
  return {
    server: { port: 0 },
    plans: {
      free: { paid: false },
      pro: { paid: true },
    },
    accounts: [
      { id: 'demo', plan: 'free', wallet_units: 1000000, keys: [DEMO_KEY] },
      { id: 'acme', plan: 'pro', wallet_units: 1000000, keys: [PRO_KEY] },
    ],
    providers: { echo: { kind: 'echo' } },
    models: [
      { id: 'echo-small', provider: 'echo', context_window: 8192, max_output_tokens: 1024 },
      { id: 'echo-vision', provider: 'echo', supports_vision: true, max_images: 2, paid_only: true },
    ],
    routing: { auto: ['echo-vision', 'echo-small'] },
  };
}

export interface TestGateway {
  url: string;
  gateway: Gateway;
  running: RunningServer;
  logs: () => string;
  close: () => Promise<void>;
}

export async function startGateway(config: Record<string, any> = baseConfig()): Promise<TestGateway> {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } });
  const logger = pino({ level: 'debug' }, sink);
  const gateway = createGateway(config, { logger });
  const running = await listen(gateway, '127.0.0.1', 0);
  return {
    url: running.url,
    gateway,
    running,
    logs: () => lines.join(''),
    close: () => running.drain(1000),
  };
}

export function authHeaders(key = DEMO_KEY): Record<string, string> {
  return { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
}

/** POSTs a chat request with undici's request (no client-side retries or parsing). */
export async function postChat(url: string, body: unknown, headers: Record<string, string> = authHeaders()) {
  const { request } = await import('undici');
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

/** Parses an SSE body as our clients must: `data:` lines, ending in [DONE] or not. */
export function sseData(text: string): { events: any[]; done: boolean; comments: number } {
  const events: any[] = [];
  let done = false;
  let comments = 0;
  for (const block of text.split('\n\n')) {
    if (block === '') continue;
    if (block.startsWith(':')) { comments++; continue; }
    if (!block.startsWith('data: ')) throw new Error(`unexpected SSE block: ${JSON.stringify(block)}`);
    const data = block.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    events.push(JSON.parse(data));
  }
  return { events, done, comments };
}
