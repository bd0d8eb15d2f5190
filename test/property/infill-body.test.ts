// Boundary: fill-in-the-middle on llama.cpp (POST /v1/completions with a suffix, sent to its
// /infill). Two outside inputs, generated: the client's body (the fields /infill cannot serve
// among valid and odd ones) and llama.cpp's answer (its native completion object, whole or as
// data-only events in split writes, with odd contents, counts and stop types). Every answer is
// a schema-valid 200 debited exactly its usage, or a contract error (never a 500); a body /infill
// cannot serve is 400 unsupported_value naming the parameter and never reaches the server; no
// hold is left open and a rejection charges nothing.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { holds, oddValue, serialize } from './arbitraries.js';
import { assertEnvelope, contractCost, eventually, freshAccount, wallet, type Answer } from './invariants.js';

const ADMIN = 'admin-token-infill-body-0123';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };
const PROPS = { default_generation_settings: { n_ctx: 4096, params: {} }, total_slots: 1 };

/** What the fake llama.cpp answers next: its object's members (odd ones included), and how. */
interface Reply { content: unknown; stopType: unknown; evaluated: unknown; predicted: unknown; pieces: string[]; split: number }
let reply: Reply = { content: ' x', stopType: 'eos', evaluated: 5, predicted: 1, pieces: [' x'], split: 1000 };

let up: FakeUpstream;
let gw: TestGateway;
t.before(async () => {
  up = await startUpstream(async (req, res, body) => {
    if (req.url === '/props') return json(res, 200, PROPS);
    const r = reply;
    const last = { index: 0, content: body.stream === true ? '' : r.content, stop: true, stop_type: r.stopType, stopping_word: '', tokens_evaluated: r.evaluated, tokens_predicted: r.predicted, timings: { cache_n: 0 } };
    if (body.stream !== true) return json(res, 200, last);
    const frames = r.pieces.map((p) => `data: ${JSON.stringify({ index: 0, content: p, stop: false, tokens_predicted: 1, tokens_evaluated: r.evaluated })}\n\n`);
    await writeSse(res, [...frames, `data: ${JSON.stringify(last)}\n\n`], { split: r.split });
  }, { props: true });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.providers.llama = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000, circuit_failures: 1_000_000 };
  c.providers.whole = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000, circuit_failures: 1_000_000, stream_upstream: 'never' };
  c.models.push({ id: 'coder', provider: 'llama', context_window: 2048, max_output_tokens: 64, price: PRICE });
  c.models.push({ id: 'coder-whole', provider: 'whole', context_window: 2048, max_output_tokens: 64, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

async function post(body: string, key: string): Promise<Answer> {
  const res = await request(`${gw.url}/v1/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body, headersTimeout: 10_000, bodyTimeout: 10_000,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/** A 200's usage: one text_completion, or chunks ending in [DONE] (one answer, index 0). */
function okUsage(a: Answer): { prompt_tokens: number; completion_tokens: number } | undefined {
  if (!String(a.headers['content-type']).startsWith('text/event-stream')) {
    const body = JSON.parse(a.text);
    assert.deepEqual(schemas.textCompletion(body), [], a.text.slice(0, 300));
    assert.equal(body.choices.length, 1);
    return body.usage;
  }
  const blocks = a.text.split('\n\n').filter((b) => b !== '' && !b.startsWith(':'));
  assert.equal(blocks.at(-1), 'data: [DONE]', 'the stream ends in [DONE]');
  let usage;
  for (const b of blocks.slice(0, -1)) {
    const ev = JSON.parse(b.slice(6));
    assert.deepEqual(schemas.textCompletion(ev), [], b.slice(0, 300));
    assert.ok(ev.choices.every((c: any) => c.index === 0));
    if (ev.usage) usage = ev.usage;
  }
  return usage;
}

/** The parameter /infill refuses in `body`, in the order the gateway checks them, if any. */
function refused(b: Record<string, unknown>): string | undefined {
  if (Array.isArray(b.prompt) && b.prompt.length > 1) return 'prompt';
  if (typeof b.n === 'number' && b.n > 1) return 'n';
  if (typeof b.best_of === 'number' && b.best_of > 1) return 'best_of';
  if (b.echo === true) return 'echo';
  if (typeof b.logprobs === 'number' && b.logprobs > 0) return 'logprobs';
  return undefined;
}

async function exchange(body: Record<string, unknown>, valid: boolean): Promise<void> {
  const who = await freshAccount(gw.url, ADMIN, 'free', 1e12);
  const before = await wallet(gw.url, ADMIN, who.account);
  const calls = up.requests.filter((r) => r.url === '/infill').length;
  const answer = await post(serialize(body), who.key);
  let usage;
  if (answer.status === 200) {
    usage = okUsage(answer);
  } else {
    const e = assertEnvelope(answer);
    if (valid) {
      const why = refused(body);
      if (why !== undefined) {
        assert.equal(e.code, 'unsupported_value');
        assert.equal(e.param, why);
        assert.equal(up.requests.filter((r) => r.url === '/infill').length, calls, 'refused before llama.cpp');
      } else {
        assert.ok(e.code === 'provider_error', `answered, or the server's odd answer refused: ${e.code} ${e.message}`);
      }
    }
  }
  const after = await eventually(async () => {
    const w = await wallet(gw.url, ADMIN, who.account);
    assert.equal(w.held_units, 0, 'no hold is left open');
    return w;
  });
  if (answer.status !== 200) assert.equal(after.balance_units, before.balance_units, 'a rejection charges nothing');
  else if (usage !== undefined) assert.equal(BigInt(before.balance_units - after.balance_units), contractCost(usage.prompt_tokens, usage.completion_tokens, PRICE));
}

const infillBody = fc.record({
  model: fc.constant('coder'),
  prompt: fc.oneof(fc.string({ minLength: 1, maxLength: 40 }), fc.array(fc.string({ maxLength: 10 }), { minLength: 1, maxLength: 3 })),
  suffix: fc.string({ maxLength: 30 }),
  max_tokens: fc.integer({ min: 1, max: 32 }),
  n: fc.integer({ min: 1, max: 3 }),
  best_of: fc.integer({ min: 1, max: 3 }),
  echo: fc.boolean(),
  logprobs: fc.integer({ min: 0, max: 3 }),
  temperature: fc.double({ min: 0, max: 2, noNaN: true }),
  stop: fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }),
  stream: fc.boolean(),
  stream_options: fc.record({ include_usage: fc.boolean() }),
}, { requiredKeys: ['model', 'prompt', 'suffix'] });

const oddBody = fc.tuple(infillBody, fc.record({ suffix: oddValue, n: oddValue, echo: oddValue, prompt: oddValue }, { requiredKeys: [] }))
  .map(([b, odd]) => ({ ...b, ...odd }));

const count = fc.oneof({ weight: 4, arbitrary: fc.nat({ max: 500 }) }, { weight: 1, arbitrary: oddValue });
const replies: fc.Arbitrary<Reply> = fc.record({
  content: fc.oneof({ weight: 4, arbitrary: fc.string({ maxLength: 20 }) }, { weight: 1, arbitrary: oddValue }),
  stopType: fc.oneof(fc.constantFrom('eos', 'word', 'limit', 'none'), oddValue),
  evaluated: count,
  predicted: count,
  pieces: fc.array(fc.string({ maxLength: 8 }), { maxLength: 5 }),
  split: fc.integer({ min: 1, max: 64 }),
});

t.test('generated FIM bodies and llama.cpp answers: a contract status and code, never a 500, the wallet exact', async (t) => {
  await holds(t, 'valid and refused bodies', fc.asyncProperty(infillBody, (b) => exchange(b, true)), 40);
  await holds(t, 'odd bodies', fc.asyncProperty(oddBody, (b) => exchange(b, false)), 30);
  // coder streams upstream (stream_upstream auto on llama.cpp), coder-whole asks for the whole object.
  await holds(t, 'odd answers', fc.asyncProperty(replies, fc.boolean(), fc.constantFrom('coder', 'coder-whole'), async (r, stream, model) => {
    reply = r;
    await exchange({ model, prompt: 'def f():', suffix: '\n', stream, max_tokens: 8 }, true);
  }), 40);
});
