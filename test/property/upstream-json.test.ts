// Boundary 4: upstream JSON answers (non-streaming) of odd shapes, for both provider kinds
// (the openai and anthropic translators), served by a fake upstream on a real socket. The
// client gets 200 with a schema-valid answer, charged exactly the contract's cost of the
// usage it reports, or 502 provider_error with nothing charged; never a 500.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, DEMO_KEY, type TestGateway } from '../helpers/gateway.js';
import { startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { counter } from '../../lib/tokens/count.js';
import { holds, oddString, oddValue } from './arbitraries.js';
import { assertChatAnswer, contractCost, eventually, freshAccount, issuedKeys, wallet, assertNoCredentials } from './invariants.js';

const ADMIN = 'admin-token-upstream-json-0123456789';
const UPSTREAM_KEY = 'sk-upstream-json-secret';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };

let up: FakeUpstream;
let gw: TestGateway;
let answer = '';

t.before(async () => {
  up = await startUpstream((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(answer);
  });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans = { free: { paid: false, max_concurrent: 4 }, pro: { paid: true, max_concurrent: 4 } };
  c.accounts[0].wallet_units = 1e12;
  const common = { api_key: UPSTREAM_KEY, timeout_ms: 5000, circuit_failures: 1_000_000 };
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, ...common };
  c.providers.ant = { kind: 'anthropic', base_url: up.url, ...common };
  c.models.push({ id: 'llama', provider: 'oai', upstream_model: 'internal/llama', max_output_tokens: 512, price: PRICE });
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'internal/claude', max_output_tokens: 512, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

/** Token counts: plausible, zero, negative, fractional, strings, and large but exactly payable. */
const tokens = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 5000 }) },
  fc.constantFrom(0, -1, -0, 1.5, 2 ** 31, 2 ** 40, '7', null, true, [], {}, 1e999, 9007199254740993, 1e308, 2 ** 53, -(2 ** 40)),
);

/** Where a value goes: the right type mostly, anything at all sometimes. */
const maybe = <T>(good: fc.Arbitrary<T>) => fc.oneof({ weight: 5, arbitrary: good }, oddValue);
const absentOr = <T>(v: fc.Arbitrary<T>) => fc.oneof({ weight: 4, arbitrary: v }, fc.constant(undefined));

const openaiUsage = fc.record({ prompt_tokens: tokens, completion_tokens: tokens, total_tokens: tokens, prompt_tokens_details: fc.constantFrom(undefined, { cached_tokens: 3 }, null) }, { requiredKeys: [] });
const openaiChoice = fc.record({
  index: fc.oneof({ weight: 5, arbitrary: fc.nat(3) }, fc.constantFrom(-1, 1.5, '0', null)),
  message: maybe(fc.record({
    role: fc.constantFrom('assistant', 'user', undefined, 7),
    content: fc.oneof({ weight: 6, arbitrary: oddString }, fc.constantFrom(null, '', 7, [{ type: 'text', text: 'hi' }], { text: 'x' })),
    refusal: fc.constantFrom(undefined, null, 'I cannot.', 3),
    tool_calls: fc.oneof(fc.constant(undefined), fc.array(fc.record({ id: maybe(fc.string({ maxLength: 6 })), type: fc.constantFrom('function', 'x', undefined), function: maybe(fc.record({ name: maybe(fc.string({ maxLength: 6 })), arguments: fc.oneof(fc.string({ maxLength: 8 }), fc.object({ maxDepth: 1 }), fc.constant(null)) })) }, { requiredKeys: [] }), { maxLength: 2 }), oddValue),
    reasoning_content: fc.constantFrom(undefined, 'thinking', null),
  }, { requiredKeys: [] })),
  finish_reason: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('stop', 'length', 'tool_calls', 'content_filter', 'function_call') }, fc.constantFrom(null, 'eos', 5, undefined)),
  logprobs: fc.constantFrom(undefined, null, { content: [] }, { content: 'x' }, 5),
}, { requiredKeys: [] });

const openaiBody = fc.record({
  id: maybe(fc.string({ maxLength: 8 })),
  object: fc.constantFrom('chat.completion', 'x', undefined),
  model: fc.constantFrom('internal/llama', undefined, 5),
  choices: fc.oneof({ weight: 6, arbitrary: fc.array(maybe(openaiChoice), { minLength: 1, maxLength: 3 }) }, fc.constantFrom(undefined, [], null, {}, 'x')),
  usage: fc.oneof({ weight: 4, arbitrary: openaiUsage }, fc.constantFrom(undefined, null, [], 'x')),
  extra: absentOr(fc.dictionary(fc.constantFrom('system_fingerprint', 'error', 'created', 'x_extra', 'service_tier'), oddValue, { maxKeys: 2 })),
}, { requiredKeys: [] }).map(({ extra, ...b }) => ({ ...b, ...(extra as object | undefined) }));

const anthropicBlock = fc.oneof(
  { weight: 5, arbitrary: fc.record({ type: fc.constant('text'), text: fc.oneof({ weight: 5, arbitrary: oddString }, oddValue) }, { requiredKeys: ['type'] }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('tool_use'), id: maybe(fc.string({ maxLength: 6 })), name: maybe(fc.string({ maxLength: 6 })), input: fc.oneof(fc.object({ maxDepth: 2 }), oddValue) }, { requiredKeys: ['type'] }) },
  fc.record({ type: fc.constantFrom('thinking', 'image', 'server_tool_use', 'x'), text: fc.string({ maxLength: 4 }) }),
  oddValue,
);

const anthropicBody = fc.record({
  id: maybe(fc.string({ maxLength: 8 })),
  type: fc.constantFrom('message', undefined, 'x'),
  role: fc.constantFrom('assistant', undefined),
  content: fc.oneof({ weight: 6, arbitrary: fc.array(anthropicBlock, { maxLength: 3 }) }, fc.constantFrom(undefined, null, {}, 'text')),
  stop_reason: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'refusal', 'pause_turn') }, fc.constantFrom(null, 7, undefined)),
  usage: fc.oneof({ weight: 4, arbitrary: fc.record({ input_tokens: tokens, output_tokens: tokens, cache_read_input_tokens: fc.oneof(fc.constant(undefined), tokens), cache_creation_input_tokens: fc.oneof(fc.constant(undefined), tokens) }, { requiredKeys: [] }) }, fc.constantFrom(undefined, null, 'x')),
}, { requiredKeys: [] });

/** The whole body: an object of odd shape, or not an object, or not JSON at all. */
const body = (shape: fc.Arbitrary<unknown>) => fc.oneof(
  { weight: 12, arbitrary: shape.map((b) => JSON.stringify(b)) },
  fc.constantFrom('', 'null', '[]', '"x"', '7', '{', 'not json', '[{"choices":[]}]', '{"choices":[{"message":{"content":"hi"}}]'),
);

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** The usage the upstream reports, when it reports one the contract can charge exactly. */
function reported(provider: 'oai' | 'ant', text: string): { prompt: number; completion: number } | undefined {
  let b: any;
  try { b = JSON.parse(text); } catch { return undefined; }
  const u = b?.usage;
  if (u === null || typeof u !== 'object' || Array.isArray(u)) return undefined;
  if (provider === 'oai') {
    if (!isCount(u.prompt_tokens) || !isCount(u.completion_tokens)) return undefined;
    // Cached tokens above the prompt cannot be true: no usage, the answer is counted.
    const cached = u.prompt_tokens_details?.cached_tokens;
    if (cached !== undefined && !(isCount(cached) && cached <= u.prompt_tokens)) return undefined;
    return { prompt: u.prompt_tokens, completion: u.completion_tokens };
  }
  if (!isCount(u.input_tokens) || !isCount(u.output_tokens)) return undefined;
  // A cache count that is there but is not a count makes the usage implausible (CONTRACT
  // section 8 billing needs each part exactly): the answer is counted instead.
  const part = (v: unknown) => (v === undefined || v === null ? 0 : isCount(v) ? v : undefined);
  const reads = part(u.cache_read_input_tokens);
  const writes = part(u.cache_creation_input_tokens);
  if (reads === undefined || writes === undefined) return undefined;
  const prompt = u.input_tokens + reads + writes;
  return Number.isSafeInteger(prompt + u.output_tokens) ? { prompt, completion: u.output_tokens } : undefined;
}

const scenario = fc.oneof(
  fc.record({ provider: fc.constant('oai' as const), text: body(openaiBody) }),
  fc.record({ provider: fc.constant('ant' as const), text: body(anthropicBody) }),
);

t.test('odd upstream answers: 200 schema-valid and charged the cost of its usage, or 502 and nothing', async (t) => {
  const count = counter('o200k_base');
  await holds(t, 'upstream answers', fc.asyncProperty(scenario, async ({ provider, text }) => {
    answer = text;
    const { account, key } = await freshAccount(gw.url, ADMIN, 'free', 1e12);
    const before = await wallet(gw.url, ADMIN, account);
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: provider === 'oai' ? 'llama' : 'claude', messages: [{ role: 'user', content: 'Tell me.' }] }),
      headersTimeout: 10_000, bodyTimeout: 10_000,
    });
    const answerText = await res.body.text();
    const got = assertChatAnswer({ status: res.statusCode, headers: res.headers, text: answerText });
    const after = await eventually(async () => {
      const w = await wallet(gw.url, ADMIN, account);
      assert.equal(w.held_units, 0, 'the hold is released');
      assert.equal(await gw.gateway.slotsInUse(account), 0, 'the slot is free');
      return w;
    });
    if (got.kind === 'error') {
      assert.equal(got.code, 'provider_error', 'an answer that cannot be used is 502 provider_error');
      assert.equal(after.balance_units, before.balance_units, 'nothing charged');
      return;
    }
    const usage = got.usage!;
    const debited = before.balance_units - after.balance_units;
    assert.equal(got.charged, debited, 'x-tollgate-units-charged is what was debited');
    assert.equal(BigInt(debited), contractCost(usage.prompt_tokens, usage.completion_tokens, PRICE), 'the contract cost of the usage shown');
    assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
    const r = reported(provider, text);
    // An answer of several choices is charged at least what they hold (CONTRACT section 21).
    const choices: any[] = JSON.parse(answerText).choices;
    const held = choices.length < 2 ? 0 : choices.reduce((n, c) => n + count((c.message.reasoning_content ?? '') + (c.message.content ?? '') +
      (c.message.tool_calls ?? []).map((tc: any) => tc.function.arguments).join('')), 0);
    if (r !== undefined) assert.deepEqual([usage.prompt_tokens, usage.completion_tokens], [r.prompt, Math.max(r.completion, held)], 'the usage the upstream reported');
    else assert.equal(usage.completion_tokens, count(got.content), 'no usable usage: the answer is counted');
  }), 200);
});

t.test('the logs hold no credential', async (t) => {
  assertNoCredentials(t, gw.logs(), [...issuedKeys, DEMO_KEY, ADMIN, UPSTREAM_KEY]);
});

// Awaits the money fix (cost in exact integer arithmetic, lib/billing/meter.ts): a usage
// whose counts are safe integers but whose cost's intermediate product is not (tokens x
// price past 2^53) answers 500 today and leaves the request's hold open (Charge.settle
// marks itself done before cost() throws, so the hold is never released).
t.test('usage counts at any safe magnitude are charged exactly', async (t) => {
  const big = fc.integer({ min: 2 ** 44, max: 2 ** 52 });
  const scenario = fc.record({ provider: fc.constantFrom('oai' as const, 'ant' as const), prompt: big, completion: fc.oneof(fc.integer({ min: 0, max: 1000 }), big) });
  await holds(t, 'large usage', fc.asyncProperty(scenario, async ({ provider, prompt, completion }) => {
    answer = JSON.stringify(provider === 'oai'
      ? { choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: prompt, completion_tokens: completion } }
      : { type: 'message', role: 'assistant', content: [{ type: 'text', text: 'hi' }], stop_reason: 'end_turn', usage: { input_tokens: prompt, output_tokens: completion } });
    const { account, key } = await freshAccount(gw.url, ADMIN, 'free', 1e14);
    const before = await wallet(gw.url, ADMIN, account);
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: provider === 'oai' ? 'llama' : 'claude', messages: [{ role: 'user', content: 'Tell me.' }] }),
    });
    const answerText = await res.body.text();
    const got = assertChatAnswer({ status: res.statusCode, headers: res.headers, text: answerText });
    assert.equal(got.kind, 'ok', 'served');
    assert.ok(got.kind === 'ok');
    assert.deepEqual([got.usage!.prompt_tokens, got.usage!.completion_tokens], [prompt, completion], 'the usage reported');
    const after = await eventually(async () => {
      const w = await wallet(gw.url, ADMIN, account);
      assert.equal(w.held_units, 0, 'the hold is released');
      return w;
    });
    assert.equal(BigInt(before.balance_units - after.balance_units), contractCost(prompt, completion, PRICE), 'charged the exact cost');
  }), 20);
});
