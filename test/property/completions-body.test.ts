// Boundary: bodies of POST /v1/completions, generated (valid fields, odd values, odd types,
// token-id prompts, large n x prompt arrays, llama.cpp's n_predict and n_cmpl aliases), through the real socket to the echo provider.
// Every answer is a 200 (a schema-valid text_completion, or chunks of it ending in [DONE],
// debited exactly the contract's cost of its usage) or a contract error (table code and status,
// the envelope, never a 500); a rejection leaves the wallet (balance and holds) as it was. A
// body valid by construction is answered 200 (or 422/402 where its size says so).

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { schemas } from '../helpers/schemas.js';
import { holds, oddString, oddValue, serialize } from './arbitraries.js';
import { assertEnvelope, contractCost, eventually, freshAccount, header, wallet, type Answer } from './invariants.js';

const ADMIN = 'admin-token-completions-body-0123';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.models.push({ id: 'code-echo', provider: 'echo', context_window: 2048, max_output_tokens: 256, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const prompt = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 60 }) },
  { weight: 2, arbitrary: fc.array(fc.string({ maxLength: 20 }), { minLength: 1, maxLength: 4 }) },
  { weight: 1, arbitrary: oddString },
  { weight: 1, arbitrary: oddValue },
  { weight: 1, arbitrary: fc.array(fc.nat({ max: 50_000 }), { maxLength: 5 }) },
  { weight: 1, arbitrary: fc.array(fc.array(fc.nat({ max: 50_000 }), { maxLength: 3 }), { maxLength: 3 }) },
  { weight: 1, arbitrary: fc.array(fc.constant('x'), { minLength: 100, maxLength: 300 }) },
);

/** Valid values, and odd ones, for each field completions take. */
const fields = fc.record({
  suffix: fc.oneof(fc.string({ maxLength: 30 }), oddValue),
  max_tokens: fc.oneof(fc.integer({ min: 1, max: 64 }), oddValue),
  n: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: -2, max: 200 }), oddValue),
  echo: fc.oneof(fc.boolean(), oddValue),
  logprobs: fc.oneof(fc.integer({ min: 0, max: 5 }), oddValue),
  temperature: fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), oddValue),
  top_p: fc.oneof(fc.double({ min: 0, max: 1, noNaN: true }), oddValue),
  stop: fc.oneof(fc.string({ maxLength: 4 }), fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }), oddValue),
  seed: fc.oneof(fc.integer(), oddValue),
  stream: fc.oneof(fc.boolean(), oddValue),
  stream_options: fc.oneof(fc.record({ include_usage: fc.boolean() }), fc.record({ include_usage: oddValue }), oddValue),
  user: fc.oneof(fc.string({ maxLength: 8 }), oddValue),
  best_of: fc.oneof(fc.integer({ min: 1, max: 4 }), oddValue),
  // llama.cpp's aliases of max_tokens and n (read before them by its server), and vLLM's min_tokens.
  n_predict: fc.oneof(fc.integer({ min: 1, max: 64 }), fc.integer({ min: -2, max: 100_000 }), oddValue),
  n_cmpl: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: -2, max: 200 }), oddValue),
  min_tokens: fc.oneof(fc.integer({ min: 0, max: 64 }), oddValue),
  unknown_field: oddValue,
}, { requiredKeys: [] });

const validBody = fc.record({
  model: fc.constant('code-echo'),
  prompt: fc.oneof(fc.string({ minLength: 1, maxLength: 60 }), fc.array(fc.string({ maxLength: 20 }), { minLength: 1, maxLength: 3 })),
  suffix: fc.string({ maxLength: 30 }),
  max_tokens: fc.integer({ min: 1, max: 32 }),
  n: fc.integer({ min: 1, max: 3 }),
  echo: fc.boolean(),
  stream: fc.boolean(),
  stream_options: fc.record({ include_usage: fc.boolean() }),
  // The aliases valid: beside their field (equal to it) or alone (standing for it).
  aliases: fc.record({ n_predict: fc.boolean(), n_cmpl: fc.boolean(), keep: fc.boolean() }),
}, { requiredKeys: ['model', 'prompt'] }).map(({ aliases, ...b }) => {
  const out: Record<string, unknown> = { ...b };
  if (aliases !== undefined) {
    if (aliases.n_predict) out.n_predict = b.max_tokens ?? 16;
    if (aliases.n_cmpl) out.n_cmpl = b.n ?? 1;
    if (!aliases.keep) { delete out.max_tokens; delete out.n; }
  }
  return out;
});

const anyBody = fc.tuple(fc.oneof(fc.constant('code-echo'), fc.constant('echo-small'), oddValue), prompt, fields)
  .map(([model, p, f]) => ({ model, prompt: p, ...f }));

async function post(body: string, key: string): Promise<Answer> {
  const res = await request(`${gw.url}/v1/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body, headersTimeout: 10_000, bodyTimeout: 10_000,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

interface Ok { usage: { prompt_tokens: number; completion_tokens: number } | undefined; choices: number }

/** A 200: one text_completion, or its chunks ending in [DONE] (or one error event). */
function assertOk(a: Answer): Ok {
  const ct = header(a.headers, 'content-type') ?? '';
  if (!ct.startsWith('text/event-stream')) {
    const body = JSON.parse(a.text);
    assert.deepEqual(schemas.textCompletion(body), [], `text_completion schema: ${a.text.slice(0, 300)}`);
    assert.equal(body.model, 'code-echo');
    return { usage: body.usage, choices: body.choices.length };
  }
  const blocks = a.text.split('\n\n');
  assert.equal(blocks.at(-1), '');
  let done = false;
  let usage: Ok['usage'];
  const indexes = new Set<number>();
  let id: string | undefined;
  for (const block of blocks.slice(0, -1)) {
    if (block.startsWith(':')) continue;
    assert.ok(block.startsWith('data: '));
    assert.equal(done, false, 'nothing after [DONE]');
    const data = block.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    const ev = JSON.parse(data);
    assert.deepEqual(schemas.textCompletion(ev), [], `chunk schema: ${data.slice(0, 300)}`);
    id ??= ev.id;
    assert.equal(ev.id, id, 'one id across the stream');
    if (ev.usage) usage = ev.usage;
    for (const c of ev.choices) indexes.add(c.index);
  }
  assert.ok(done, 'the stream ends in [DONE]');
  return { usage, choices: indexes.size };
}

async function exchange(body: Record<string, unknown>, valid: boolean): Promise<void> {
  const who = await freshAccount(gw.url, ADMIN, 'free', 1e12);
  const before = await wallet(gw.url, ADMIN, who.account);
  const answer = await post(serialize(body), who.key);
  const ok = answer.status === 200 ? assertOk(answer) : undefined;
  if (ok === undefined) {
    const e = assertEnvelope(answer);
    if (valid) assert.ok(e.code === 'context_length_exceeded', `a valid body is answered: ${e.code} ${e.message}`);
  } else {
    const prompts = Array.isArray(body.prompt) ? body.prompt.length : 1;
    const n = typeof body.n === 'number' ? body.n : typeof body.n_cmpl === 'number' ? body.n_cmpl : 1;
    assert.equal(ok.choices, prompts * n, 'prompts x n (or n_cmpl) answers');
    const limit = typeof body.max_tokens === 'number' ? body.max_tokens : typeof body.n_predict === 'number' ? body.n_predict : 16;
    if (ok.usage !== undefined) assert.ok(ok.usage.completion_tokens <= prompts * n * limit, 'no answer beyond the output limit (max_tokens or n_predict)');
  }
  const after = await eventually(async () => {
    const w = await wallet(gw.url, ADMIN, who.account);
    assert.equal(w.held_units, 0, 'no hold is left open');
    return w;
  });
  if (ok === undefined) {
    assert.equal(after.balance_units, before.balance_units, 'a rejection charges nothing');
  } else if (ok.usage !== undefined) {
    assert.equal(BigInt(before.balance_units - after.balance_units), contractCost(ok.usage.prompt_tokens, ok.usage.completion_tokens, PRICE), 'debited the cost of the usage');
  } else {
    assert.ok(before.balance_units - after.balance_units > 0, 'a stream without the usage chunk is charged too');
  }
}

t.test('generated completions bodies: a contract status and code, never a 500, the wallet exact', async (t) => {
  await holds(t, 'any body', fc.asyncProperty(anyBody, (b) => exchange(b, false)), 60);
  await holds(t, 'valid bodies', fc.asyncProperty(validBody, (b) => exchange(b, true)), 30);
});
