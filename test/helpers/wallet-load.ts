// Chat requests against gateways that share one wallet, with the outcome of each: status,
// error code, Retry-After, units charged and how long it took. For the scale-out tests, which
// check that every answer is a 200 or a contract 503 and that the wallet moved by exactly what
// was charged.

import { request } from 'undici';
import { DEMO_KEY, baseConfig, type TestGateway } from './gateway.js';

export const ADMIN = 'scale-admin-token';
/** One unit per prompt and per completion token: the echo model's answers cost a known amount. */
export const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };

/** A gateway config on the given store section, with a priced echo model and generous limits. */
export function walletConfig(store: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'redis', ...store };
  c.plans.free = { paid: false, requests_per_minute: 1_000_000, tokens_per_minute: 1_000_000_000, max_concurrent: 1000 };
  c.models.push({ id: 'priced', provider: 'echo', price: PRICE });
  return c;
}

export interface Outcome {
  status: number;
  code: string | undefined;
  retryAfter: string | undefined;
  charged: number;
  ms: number;
}

export async function chat(gw: TestGateway, content = 'the same words every time', timeoutMs = 10_000): Promise<Outcome> {
  const started = Date.now();
  const res = await request(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'priced', messages: [{ role: 'user', content }], max_tokens: 20 }),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await res.body.text();
  let code: string | undefined;
  if (res.statusCode !== 200) {
    try { code = JSON.parse(text).code; } catch { code = `unparsable: ${text.slice(0, 80)}`; }
  }
  const header = (name: string) => {
    const v = res.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  return {
    status: res.statusCode,
    code,
    retryAfter: header('retry-after'),
    charged: Number(header('x-tollgate-units-charged') ?? 0),
    ms: Date.now() - started,
  };
}

/** The demo account as the admin API shows it; undefined while the store cannot answer. */
export async function account(gw: TestGateway, id = 'demo'): Promise<any> {
  const res = await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return res.status === 200 ? res.json() : undefined;
}

/** Polls until the account can be read (the gateway connected and seeded it). */
export async function accountWhenReady(gw: TestGateway, ms = 10_000): Promise<any> {
  const deadline = Date.now() + ms;
  for (;;) {
    const a = await account(gw).catch(() => undefined);
    if (a !== undefined) return a;
    if (Date.now() > deadline) throw new Error(`account not readable within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Is this the 503 a metered route answers for a store fault (with Retry-After)? */
export function isStoreFault(o: Outcome): boolean {
  return o.status === 503 && o.code === 'service_unavailable' && o.retryAfter !== undefined && Number(o.retryAfter) >= 1;
}

/** `n` requests at once, split over the gateways in turn. */
export function burst(gateways: TestGateway[], n: number): Promise<Outcome[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => chat(gateways[i % gateways.length]!)));
}
