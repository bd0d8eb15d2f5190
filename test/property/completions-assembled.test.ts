// Boundary: a llama.cpp server's streamed text_completion chunks (CONTRACT sections 11 and 14,
// issue #40), generated: n answers per prompt over one or more prompts, each choice's pieces
// (text of any characters, `logprobs` arrays or null, other members the server adds), each
// task's last event with its own usage and timings, the events in any interleaving, split across
// TCP writes anywhere. A non-streaming client of /v1/completions (the gateway calls llama.cpp
// streaming and assembles the answer) gets a schema-valid text_completion: one Tollgate id,
// each choice's text and logprobs joined in order, its finish; usage covering every choice
// (every task's completion tokens, each prompt's tokens once); the wallet debited exactly the
// contract's cost of that usage; the same usage on a streamed request's usage chunk.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { PROPS, TIMINGS } from '../helpers/llama-fake.js';
import { schemas } from '../helpers/schemas.js';
import { holds } from './arbitraries.js';
import { contractCost, eventually, freshAccount, wallet } from './invariants.js';

const ADMIN = 'admin-token-completions-assembled-01';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };

interface Piece { text: string; logprob: number | null; extra: Record<string, unknown> }
interface Choice { pieces: Piece[]; finish: 'stop' | 'length'; completion: number }
interface Case { prompts: number[]; n: number; choices: Choice[]; order: number[]; split: number }

/** The events of the case, in the server's order: each choice's pieces, then its last event. */
function frames(c: Case): string[] {
  const head = { created: 1, model: 'tiny.gguf', system_fingerprint: 'b1', object: 'text_completion', id: 'chatcmpl-up' };
  const queues = c.choices.map((ch, index) => [
    ...ch.pieces.map((p) => ({ choices: [{ text: p.text, index, logprobs: p.logprob === null ? null : { content: [{ token: p.text, logprob: p.logprob }] }, finish_reason: null }], ...head, ...p.extra })),
    {
      choices: [{ text: '', index, logprobs: null, finish_reason: ch.finish }], ...head,
      usage: { completion_tokens: ch.completion, prompt_tokens: c.prompts[Math.floor(index / c.n)]!, total_tokens: ch.completion + c.prompts[Math.floor(index / c.n)]!, prompt_tokens_details: { cached_tokens: 0 } },
      timings: TIMINGS,
    },
  ]);
  const out: string[] = [];
  // Interleave as the slots decode side by side: `order` picks which choice sends next.
  let k = 0;
  while (queues.some((q) => q.length > 0)) {
    const live = queues.map((q, i) => (q.length > 0 ? i : -1)).filter((i) => i >= 0);
    const i = live[c.order[k++ % c.order.length]! % live.length]!;
    out.push(`data: ${JSON.stringify(queues[i]!.shift())}\n\n`);
  }
  out.push('data: [DONE]\n\n');
  return out;
}

const piece = fc.record({
  text: fc.oneof(fc.string({ maxLength: 6 }), fc.string({ unit: 'binary', maxLength: 4 }), fc.constantFrom('\n', '"', '\\', '\u2028', '😀')),
  logprob: fc.oneof(fc.constant(null), fc.double({ min: -20, max: 0, noNaN: true }).map((v) => (Object.is(v, -0) ? 0 : v))),
  extra: fc.oneof(fc.constant({}), fc.record({ __verbose: fc.record({ content: fc.string({ maxLength: 5 }) }) }), fc.record({ prompt_progress: fc.record({ total: fc.nat(50) }) })),
});
const scenario = fc.record({ prompts: fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 3 }), n: fc.integer({ min: 1, max: 3 }) }).chain(({ prompts, n }) => fc.record({
  prompts: fc.constant(prompts),
  n: fc.constant(n),
  choices: fc.array(fc.record({
    pieces: fc.array(piece, { minLength: 1, maxLength: 5 }),
    finish: fc.constantFrom('stop' as const, 'length' as const),
    completion: fc.integer({ min: 0, max: 5000 }),
  }), { minLength: prompts.length * n, maxLength: prompts.length * n }),
  order: fc.array(fc.nat(7), { minLength: 1, maxLength: 8 }),
  split: fc.integer({ min: 1, max: 64 }),
}));

let current: Case | undefined;
let up: FakeUpstream;
let gw: TestGateway;
t.before(async () => {
  up = await startUpstream(async (req, res) => {
    if (req.url === '/props') return json(res, 200, PROPS);
    await writeSse(res, frames(current!), { split: current!.split });
  }, { props: true });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.llama = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 10_000, circuit_failures: 1_000_000 };
  c.models.push({ id: 'tiny', provider: 'llama', context_window: 4096, max_output_tokens: 64, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

t.test('llama.cpp streams of several answers, assembled: schema-valid, every choice joined and charged', async (t) => {
  await holds(t, 'assembled completions', fc.asyncProperty(scenario, async (c) => {
    current = c;
    const { account, key } = await freshAccount(gw.url, ADMIN, 'free', 1e12);
    const before = await wallet(gw.url, ADMIN, account);
    const prompt = c.prompts.map((_, i) => `p${i}`);
    const res = await request(`${gw.url}/v1/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt, n: c.n, max_tokens: 8 }), headersTimeout: 10_000, bodyTimeout: 10_000,
    });
    const text = await res.body.text();
    const seen = up.requests.at(-1)!;
    assert.equal(seen.body.stream, true, 'called streaming');
    const allEmpty = c.choices.every((ch) => ch.pieces.every((p) => p.text === '') && ch.finish === 'stop');
    if (allEmpty) {
      assert.equal(res.statusCode, 502, `an answer of nothing is a provider_error: ${text.slice(0, 200)}`);
      return;
    }
    assert.equal(res.statusCode, 200, text.slice(0, 300));
    const body = JSON.parse(text);
    assert.deepEqual(schemas.textCompletion(body), [], text.slice(0, 300));
    assert.match(body.id, /^cmpl-[0-9a-f]{32}$/);
    assert.equal(body.model, 'tiny');
    assert.deepEqual(body.choices.map((ch: any) => ch.index), c.choices.map((_, i) => i), 'every choice, in order');
    c.choices.forEach((ch, i) => {
      const got = body.choices[i];
      assert.equal(got.text, ch.pieces.map((p) => p.text).join(''), `choice ${i}: its pieces joined`);
      assert.equal(got.finish_reason, ch.finish);
      const lps = ch.pieces.filter((p) => p.logprob !== null).map((p) => ({ token: p.text, logprob: p.logprob }));
      assert.deepEqual(got.logprobs, lps.length === 0 ? null : { content: lps }, `choice ${i}: its logprobs joined`);
    });
    const promptTokens = c.prompts.reduce((a, b) => a + b, 0);
    const held = c.choices.reduce((a, ch) => a + ch.completion, 0);
    assert.equal(body.usage.prompt_tokens, promptTokens, 'each prompt once');
    assert.equal(body.usage.completion_tokens, held, 'every task\'s count, added up: the server\'s own figures');
    assert.equal(body.usage.total_tokens, body.usage.prompt_tokens + body.usage.completion_tokens);
    const after = await eventually(async () => {
      const w = await wallet(gw.url, ADMIN, account);
      assert.equal(w.held_units, 0, 'the hold is released');
      return w;
    });
    assert.equal(BigInt(before.balance_units - after.balance_units), contractCost(body.usage.prompt_tokens, body.usage.completion_tokens, PRICE), 'debited the usage shown');

    // Streamed: the same usage on the usage chunk, one id on every chunk.
    const streamed = await request(`${gw.url}/v1/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', prompt, n: c.n, max_tokens: 8, stream: true, stream_options: { include_usage: true } }), headersTimeout: 10_000, bodyTimeout: 10_000,
    });
    const events = (await streamed.body.text()).split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
    assert.equal(events.at(-1), '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    assert.deepEqual(chunks.at(-1).usage, body.usage, 'the usage chunk');
    assert.equal(new Set(chunks.map((ch) => ch.id)).size, 1, 'one id');
    assert.match(chunks[0].id, /^cmpl-[0-9a-f]{32}$/);
  }), 40);
});
