// Batches and files (CONTRACT section 18) for the operator tests: a fake chat upstream with a
// fixed usage, a config with a discounting plan and two accounts, input files, polling.

import { setTimeout as sleep } from 'node:timers/promises';
import { KEY, WALLET, operatorConfig } from './operator.js';
import { completionBody, json, startUpstream } from './upstream.js';

export const OTHER = 'tg_other_1111111111111111';
/** 12 prompt + 7 completion tokens a line at 1 and 2 units: 26 units, less 30%: 18.2, rounded up to 19. */
export const LINE_UNITS = 19;

export async function fakeChat(delayMs = 0) {
  return startUpstream(async (req, res, body) => {
    if (req.method === 'POST' && req.url === '/v1/embeddings') {
      return json(res, 200, { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }], model: body.model, usage: { prompt_tokens: 5, total_tokens: 5 } });
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') return json(res, 404, { error: { message: 'no such route' } });
    if (delayMs > 0) await sleep(delayMs);
    const said = String(body.messages?.[0]?.content ?? '');
    json(res, 200, completionBody(`echo ${said}`, { usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } }));
  });
}

export function batchConfig(baseUrl: string, extra: Record<string, any> = {}): Record<string, any> {
  return operatorConfig({
    plans: { pro: { paid: true, requests_per_minute: 100000, batch_discount_percent: 30 }, free: { paid: false } },
    accounts: [
      { id: 'demo', plan: 'pro', wallet_units: WALLET, keys: [KEY] },
      { id: 'other', plan: 'pro', wallet_units: WALLET, keys: [OTHER] },
    ],
    providers: { up: { kind: 'openai', base_url: baseUrl } },
    models: [{ id: 'm1', provider: 'up', price: { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 } }],
    batch: { max_file_bytes: 4096, concurrency: 2 },
    ...extra,
  });
}

export function lines(n: number, model = 'm1'): string {
  let s = '';
  for (let i = 0; i < n; i++) {
    s += JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: `line ${i}` }] } }) + '\n';
  }
  return s;
}

export async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  let v = await read();
  while (!done(v) && Date.now() < deadline) {
    await sleep(50);
    v = await read();
  }
  return v;
}

