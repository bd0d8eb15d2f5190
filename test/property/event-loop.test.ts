// Property (CONTRACT sections 16 and 21): whatever shape a hostile body takes (one huge text, many
// messages, many parts, long tool arguments or names, many embedding inputs, many rerank
// documents or score pairs, many small values
// in an ignored member, deep nesting), refusing or serving it never holds the gateway's event loop for long, and the answer
// is a contract status and code, never a 500. The gateway runs as the operator runs it (`tollgate
// serve` on a YAML file); its own event-loop delay monitor (a preload, event-loop-probe.mjs)
// reports the longest stall while each body is answered, so this process's work is not counted.

import t from 'tap';
import fc from 'fast-check';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { serveChild } from '../helpers/child.js';
import { PROBE, stallSince } from '../helpers/event-loop.js';

const SEED = Number(process.env.TOLLGATE_PROPERTY_SEED ?? 16016);
const KEY = 'tg_hostile_000000000000000000';
/**
 * The longest the loop may be held (ms): the contract's bound for /healthz while a 20 MB prompt is
 * refused. GC pauses of the gateway count too; before bounded counting, a 4 MB
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

/** `size` characters as up to 2,048 texts of at least 1,000 characters each. */
function many(size: number, seed: number): string[] {
  const count = Math.min(2048, Math.max(1, Math.floor(size / 1000)));
  return Array.from({ length: count }, (_, i) => words(Math.floor(size / count), seed + i));
}

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
  // Many texts of one request (CONTRACT section 21): up to 2,048 documents, pairs or inputs.
  rerankMany: { route: '/v1/rerank', body: { model: 'rr', query: words(64, seed), documents: many(size, seed) } },
  scoreMany: { route: '/v1/score', body: { model: 'rr', text_1: words(64, seed), text_2: many(size, seed) } },
  embeddingsMany: { route: '/v1/embeddings', body: { model: 'embed', input: many(size, seed) } },
  // Many small values rather than long strings: each costs the main thread once parsed.
  junkKeys: { route: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: 'hi' }], junk: Object.fromEntries(Array.from({ length: Math.floor(size / 12) }, (_, i) => [`k${i}`, 0])) } },
  emptyMessages: { route: '/v1/messages/count_tokens', body: { model, messages: Array.from({ length: Math.floor(size / 30) }, () => ({ role: 'user', content: '' })) } },
  numbers: { route: '/v1/embeddings', body: { model: 'embed', input: 'hi', junk: new Array(Math.floor(size / 2)).fill(7) } },
  deep: { route: '/v1/chat/completions', body: JSON.parse(`{"model":"${model}","messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(60)}${']'.repeat(60)}}`) },
});

// Counting megabytes is seconds of CPU in all: on a loaded CI host this file needs more than tap's 300 s.
t.setTimeout(900_000);

t.test('hostile bodies never hold the event loop, and get a contract answer', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-event-loop-'));
  const file = join(dir, 'tollgate.yaml');
  writeFileSync(file, `server: { port: 0 }
plans: { hostile: { paid: true } }
accounts: [{ id: hostile, plan: hostile, wallet_units: 1000000000, keys: [${KEY}] }]
providers: { echo: { kind: echo } }
models:
  - { id: small, provider: echo, context_window: 8192, max_output_tokens: 64 }
  - { id: huge, provider: echo, context_window: 400000, max_output_tokens: 64 }
  - { id: embed, type: embedding, provider: echo, context_window: 8192 }
  - { id: rr, type: rerank, provider: echo, context_window: 8192 }
routing: { auto: [small, huge] }
`);
  const gw = await serveChild(t, file, {}, ['--import', PROBE]);
  const seen = { n: 0 };

  const kinds = Object.keys(shapes(1, 1, 'small'));
  let runs = 0;
  let worst = { delay: 0, what: '' };
  const tried = new Map<string, number>();
  await fc.assert(fc.asyncProperty(
    fc.constantFrom(...kinds), fc.integer({ min: 256 * 1024, max: 4 * 1024 * 1024 }), fc.constantFrom('small', 'huge', 'auto'), fc.nat(),
    async (kind, size, model, seed) => {
      const shape = shapes(size, seed, model)[kind]!;
      const body = Buffer.from(JSON.stringify(shape.body));
      const send = async () => {
        await stallSince(gw, seen);
        const res = await request(`${gw.url}${shape.route}`, {
          method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body,
        });
        const text = await res.body.text();
        return { res, text, delay: await stallSince(gw, seen) };
      };
      const first = await send();
      const { res, text } = first;
      // A stall of the design's making shows in every try; one a loaded host adds by not scheduling
      // the process rarely does: the least of up to three tries is the gateway's own.
      let delay = first.delay;
      for (let i = 0; i < 2 && delay > MAX_DELAY_MS; i++) delay = Math.min(delay, (await send()).delay);
      runs++;
      tried.set(kind, (tried.get(kind) ?? 0) + 1);
      const what = `${kind} ${model} ${(body.length / 1048576).toFixed(1)} MB -> ${res.statusCode}`;
      if (delay > worst.delay) worst = { delay, what };
      if (res.statusCode >= 500) throw new Error(`${what}: a 5xx: ${text.slice(0, 300)}`);
      if (![200, 400, 404, 413, 422].includes(res.statusCode)) throw new Error(`${what}: not a contract answer: ${text.slice(0, 300)}`);
      if (res.statusCode !== 200) {
        const json = JSON.parse(text);
        const code = json.code ?? json.error?.code;
        if (typeof code !== 'string') throw new Error(`${what}: no code: ${text.slice(0, 300)}`);
      }
      if (delay > MAX_DELAY_MS) throw new Error(`${what}: the event loop was held ${delay.toFixed(1)} ms`);
    },
  ), { seed: SEED, numRuns: 20 });
  t.equal(runs, 20, 'every generated body was sent');
  t.comment(`worst event-loop delay: ${worst.delay.toFixed(1)} ms (${worst.what}); shapes tried: ${[...tried].map(([k, n]) => `${k} ${n}`).join(', ')}`);
});
