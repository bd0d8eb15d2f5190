// A fleet of fake replicas (test/helpers/upstream.ts) behind one real gateway: each replica
// answers with its own name unless a test scripts it otherwise, so a test sees where every
// request went.

import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, startGateway, type TestGateway } from './gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type Script } from './upstream.js';

export const ADMIN = 'fleet-admin-token';

/** Answers a chat request with the replica's name, streamed or not; GETs (health checks) with 200. */
export function answerAs(name: string): Script {
  return async (req, res, body) => {
    if (req.method === 'GET') { json(res, 200, { object: 'list', data: [] }); return; }
    if (body?.stream === true) await writeSse(res, streamFrames([name]));
    else json(res, 200, completionBody(name));
  };
}

export interface Fleet {
  gw: TestGateway;
  replicas: FakeUpstream[];
  /** Chat requests (POSTs) each replica has seen. */
  chats: () => number[];
  admin: (path: string) => Promise<any>;
  metrics: () => Promise<string>;
}

/**
 * `n` replicas as the targets of provider `fleet`, serving model `m`. `provider` overrides
 * provider keys; `targets(urls)` may shape the targets list.
 */
export async function startFleet(t: any, n: number, provider: Record<string, any> = {}, opts: {
  targets?: (urls: string[]) => any[];
  config?: (c: Record<string, any>) => void;
} = {}): Promise<Fleet> {
  const replicas: FakeUpstream[] = [];
  for (let i = 0; i < n; i++) replicas.push(await startUpstream(answerAs(`r${i}`)));
  const urls = replicas.map((r) => r.baseUrl);
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.fleet = {
    kind: 'openai', timeout_ms: 2000, targets: opts.targets ? opts.targets(urls) : urls.map((url) => ({ url })), ...provider,
  };
  c.models.push({ id: 'm', provider: 'fleet', upstream_model: 'fleet-7b', price: { input_per_mtok: 1000, output_per_mtok: 1000 } });
  opts.config?.(c);
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); for (const r of replicas) await r.close(); });
  const admin = async (path: string) => {
    const res = await fetch(`${gw.url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    return res.json();
  };
  return {
    gw,
    replicas,
    chats: () => replicas.map((r) => r.requests.filter((s) => s.method === 'POST').length),
    admin,
    metrics: () => fetch(`${gw.url}/metrics`).then((r) => r.text()),
  };
}

/** The chat request body for model `m`. */
export function ask(content: string, extra: Record<string, any> = {}): Record<string, any> {
  return { model: 'm', messages: [{ role: 'user', content }], max_tokens: 16, ...extra };
}

/** Polls `check` every 20 ms until it holds (up to `ms`); returns whether it did. */
export async function until(check: () => boolean | Promise<boolean>, ms = 3000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > end) return false;
    await sleep(20);
  }
}

/** A script that holds every chat request until `release()`; GETs answer 200 at once. */
export function holding(name: string): { script: Script; release: () => void; waiting: () => number } {
  let waiters: Array<() => void> = [];
  return {
    script: async (req, res, body) => {
      if (req.method === 'GET') { json(res, 200, {}); return; }
      await new Promise<void>((r) => waiters.push(r));
      await answerAs(name)(req, res, body, undefined as any);
    },
    release: () => { const w = waiters; waiters = []; for (const r of w) r(); },
    waiting: () => waiters.length,
  };
}
