// Property (CONTRACT section 16): whatever shape a hostile body takes (one huge text, many
// messages, many parts, long tool arguments or names, images, many embedding inputs, deep
// nesting), refusing or serving it never holds the gateway's event loop for long, and the answer
// is a contract status and code, never a 500. Bodies are built before the measurement, so that
// only the gateway's work (in this process) is measured, by the event loop's own delay monitor.

import t from 'tap';
import fc from 'fast-check';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { request } from 'undici';
import { baseConfig, startGateway } from '../helpers/gateway.js';

const SEED = Number(process.env.TOLLGATE_PROPERTY_SEED ?? 16016);
const KEY = 'tg_hostile_000000000000000000';
/**
 * The longest the loop may be held (ms): the contract's bound for /healthz while a 20 MB prompt is
 * refused. Unloaded, the worst seen is 10-20 ms (GC included); before bounded counting, a 6 MB
 * prompt held it 0.5-2 s.
 */
const MAX_DELAY_MS = 100;

function words(chars: number, seed: number): string {
  const out: string[] = [];
  let x = seed >>> 0;
  let n = 0;
  while (n < chars) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    const w = (x % 4 === 0 ? 'Ω≈ç√' : 'abcdefghij').slice(0, 1 + (x % 9)) + String.fromCharCode(97 + (x % 26));
    out.push(w);
    n += w.length + 1;
  }
  return out.join(' ');
}

type Shape = { route: string; body: unknown };

const shapes = (size: number, seed: number, model: string): Record<string, Shape> => ({
  oneText: { route: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: words(size, seed) }] } },
  manyMessages: {
    route: '/v1/chat/completions',
    body: { model, messages: Array.from({ length: Math.floor(size / 40) }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: words(30, seed + i) })) },
  },
  manyParts: {
    route: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: Array.from({ length: Math.floor(size / 60) }, (_, i) => ({ type: 'text', text: words(40, seed + i) })) }] },
  },
  toolArguments: {
    route: '/v1/chat/completions',
    body: {
      model,
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: JSON.stringify({ q: words(size, seed) }) } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      ],
    },
  },
  longName: { route: '/v1/chat/completions', body: { model, messages: [{ role: 'user', name: 'n'.repeat(size), content: 'hi' }] } },
  messages: { route: '/v1/messages', body: { model, max_tokens: 16, messages: [{ role: 'user', content: words(size, seed) }] } },
  countTokens: { route: '/v1/messages/count_tokens', body: { model, messages: [{ role: 'user', content: words(size, seed) }] } },
  responses: { route: '/v1/responses', body: { model, input: words(size, seed) } },
  embeddings: { route: '/v1/embeddings', body: { model: 'embed', input: Array.from({ length: 64 }, (_, i) => words(Math.floor(size / 64), seed + i)) } },
  deep: { route: '/v1/chat/completions', body: JSON.parse(`{"model":"${model}","messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(60)}${']'.repeat(60)}}`) },
});

t.test('hostile bodies never hold the event loop, and get a contract answer', async (t) => {
  const config = baseConfig();
  config.plans.hostile = { paid: true };
  config.accounts.push({ id: 'hostile', plan: 'hostile', wallet_units: 1_000_000_000, keys: [KEY] });
  config.models = [
    { id: 'small', provider: 'echo', context_window: 8192, max_output_tokens: 64 },
    { id: 'huge', provider: 'echo', context_window: 2_000_000, max_output_tokens: 64 },
    { id: 'embed', type: 'embedding', provider: 'echo', context_window: 8192 },
  ];
  config.routing = { auto: ['small', 'huge'] };
  const gw = await startGateway(config);
  t.teardown(gw.close);

  const kinds = Object.keys(shapes(1, 1, 'small'));
  let runs = 0;
  let worst = { delay: 0, what: '' };
  await fc.assert(fc.asyncProperty(
    fc.constantFrom(...kinds), fc.integer({ min: 256 * 1024, max: 6 * 1024 * 1024 }), fc.constantFrom('small', 'huge', 'auto'), fc.nat(),
    async (kind, size, model, seed) => {
      const shape = shapes(size, seed, model)[kind]!;
      const body = Buffer.from(JSON.stringify(shape.body));
      const histogram = monitorEventLoopDelay({ resolution: 1 });
      histogram.enable();
      const res = await request(`${gw.url}${shape.route}`, {
        method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body,
      });
      const text = await res.body.text();
      histogram.disable();
      const delay = histogram.max / 1e6;
      runs++;
      const what = `${kind} ${model} ${(body.length / 1048576).toFixed(1)} MB -> ${res.statusCode}`;
      if (delay > worst.delay) worst = { delay, what };
      if (res.statusCode >= 500) throw new Error(`${what}: a 5xx: ${text.slice(0, 300)}`);
      if (![200, 400, 404, 422].includes(res.statusCode)) throw new Error(`${what}: not a contract answer: ${text.slice(0, 300)}`);
      if (res.statusCode !== 200) {
        const json = JSON.parse(text);
        const code = json.code ?? json.error?.code;
        if (typeof code !== 'string') throw new Error(`${what}: no code: ${text.slice(0, 300)}`);
      }
      if (delay > MAX_DELAY_MS) throw new Error(`${what}: the event loop was held ${delay.toFixed(1)} ms`);
    },
  ), { seed: SEED, numRuns: 30 });
  t.equal(runs, 30, 'every generated body was sent');
  t.comment(`worst event-loop delay: ${worst.delay.toFixed(1)} ms (${worst.what})`);
});
