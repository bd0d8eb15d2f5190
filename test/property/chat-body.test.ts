// Boundary 1: bodies of POST /v1/chat/completions, generated, through the real socket.
// Every answer is 200 (schema-valid, charged exactly the contract's cost of its usage) or an
// outcome CONTRACT section 4 allows for that body; never a 500; and a rejection leaves the
// wallet (balance and holds) and the concurrency slots as they were.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chatBody, contentType, edgeNumber, holds, isJsonMediaType, numberLikeString, serialize, userTurn } from './arbitraries.js';
import { acceptable, outcomes, type Catalog } from './chat-oracle.js';
import { assertChatAnswer, assertNoCredentials, contractCost, echoesMoreThan, eventually, freshAccount, issuedKeys, wallet, type Answer } from './invariants.js';

const ADMIN = 'admin-token-chat-body-0123456789';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };
/** Who calls: a free or a paid plan, or a wallet too small for most requests. */
const CALLERS = [
  { plan: 'free', units: 1e12, paid: false, low: false },
  { plan: 'pro', units: 1e12, paid: true, low: false },
  { plan: 'free', units: 3, paid: false, low: true },
];
const CATALOG: Catalog = {
  models: [
    { id: 'echo-small', paid_only: false, vision: false, max_images: 0, context_window: 8192, max_output_tokens: 1024 },
    { id: 'echo-vision', paid_only: true, vision: true, max_images: 2, context_window: 8192, max_output_tokens: 2048 },
  ],
  auto: ['echo-vision', 'echo-small'],
};

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  // max_concurrent set so that slots are counted; requests here run one at a time.
  c.plans = { free: { paid: false, max_concurrent: 4 }, pro: { paid: true, max_concurrent: 4 } };
  for (const m of c.models) m.price = PRICE;
  // Prices no wallet can pay (CONTRACT section 9); only the money test below asks for them.
  c.models.push({ id: 'echo-dear', provider: 'echo', price: { input_per_mtok: 2 ** 53 - 1, output_per_mtok: 2 ** 53 - 1 } });
  c.models.push({ id: 'echo-dear-in', provider: 'echo', price: { input_per_mtok: 2 ** 44, output_per_mtok: 0 } });
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

async function post(body: Buffer | string, headers: Record<string, string>): Promise<Answer> {
  const res = await request(`${gw.url}/v1/chat/completions`, { method: 'POST', headers, body, headersTimeout: 10_000, bodyTimeout: 10_000 });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

/**
 * Sends one body and checks the answer against the oracle, then the wallet and the slots:
 * unchanged after a rejection, debited exactly the contract's cost after a 200.
 */
async function exchange(body: Buffer | string, caller: (typeof CALLERS)[number], ct: string | undefined, expected: ReturnType<typeof outcomes> | 'unsupported_media_type'): Promise<void> {
  const who = await freshAccount(gw.url, ADMIN, caller.plan, caller.units);
  const before = await wallet(gw.url, ADMIN, who.account);
  const headers: Record<string, string> = { authorization: `Bearer ${who.key}` };
  if (ct !== undefined) headers['content-type'] = ct;
  const answer = await post(body, headers);
  const got = assertChatAnswer(answer);
  const tag = got.kind === 'ok' ? 'ok' : `${got.code}:${got.param}`;
  if (expected === 'unsupported_media_type') assert.equal(tag, 'unsupported_media_type:null', `a non-JSON content type is 415: ${ct}`);
  else {
    assert.ok(acceptable(expected, tag), `outcome ${tag} is one the contract allows: ${JSON.stringify({ definite: [...expected.definite], optional: [...expected.optional], semantic: [...expected.semantic] })}`);
  }
  const after = await eventually(async () => {
    const w = await wallet(gw.url, ADMIN, who.account);
    assert.equal(w.held_units, 0, 'no hold is left open');
    assert.equal(await gw.gateway.slotsInUse(who.account), 0, 'no concurrency slot is left taken');
    return w;
  });
  if (got.kind === 'error') {
    assert.equal(after.balance_units, before.balance_units, 'a rejection charges nothing');
    return;
  }
  assert.ok(got.done, 'the stream ended in [DONE]');
  const debited = before.balance_units - after.balance_units;
  if (got.usage !== undefined) {
    assert.equal(BigInt(debited), contractCost(got.usage.prompt_tokens, got.usage.completion_tokens, PRICE), 'debited the cost of the usage');
  } else {
    assert.ok(debited >= 0, 'a stream without usage shown is still charged, never credited');
  }
  if (got.charged !== undefined) assert.equal(got.charged, debited, 'x-tollgate-units-charged is what was debited');
}

const who = fc.constantFrom(...CALLERS);

t.test('valid-shaped bodies with odd values get 200 or the contract code for them', async (t) => {
  await holds(t, 'chat bodies', fc.asyncProperty(chatBody, who, async (body, k) => {
    const text = serialize(body);
    await exchange(text, k, 'application/json', outcomes(text, k.paid, CATALOG, k.low));
  }), 250);
});

const NUMERIC = ['max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'presence_penalty', 'frequency_penalty', 'n', 'seed', 'top_logprobs'];

t.test('numbers at the edges where a number is wanted: 400 invalid_value or invalid_type, or served', async (t) => {
  const body = fc.record({
    field: fc.constantFrom(...NUMERIC),
    value: fc.oneof({ weight: 4, arbitrary: edgeNumber }, numberLikeString, fc.constantFrom(true, null, [], {})),
    stream: fc.boolean(),
    model: fc.constantFrom('echo-small', 'auto'),
  }).map(({ field, value, stream, model }) => ({ model, messages: [{ role: 'user', content: 'Count to three.' }], stream, [field]: value }));
  await holds(t, 'edge numbers', fc.asyncProperty(body, who.filter((k) => !k.low), async (b, k) => {
    const text = serialize(b);
    await exchange(text, k, 'application/json', outcomes(text, k.paid, CATALOG, k.low));
  }), 100);
});

t.test('huge strings: served when they fit the context window, else 422 context_length_exceeded', async (t) => {
  const huge = fc.record({
    unit: fc.constantFrom('a', 'ab ', ' ', '\u{1f99c}', '\u00e9\u0301', 'x\n', '\ud800'),
    size: fc.integer({ min: 50_000, max: 600_000 }),
    where: fc.constantFrom('content', 'part', 'name', 'tool'),
  });
  await holds(t, 'huge strings', fc.asyncProperty(huge, who.filter((k) => !k.low), async ({ unit, size, where }, k) => {
    const s = unit.repeat(Math.ceil(size / unit.length));
    const m: Record<string, unknown> = where === 'part' ? { role: 'user', content: [{ type: 'text', text: s }] }
      : where === 'name' ? { role: 'user', content: 'hi', name: s }
        : where === 'tool' ? { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: s } }] }
          : { role: 'user', content: s };
    const text = serialize({ model: 'echo-small', messages: where === 'tool' ? [m, { role: 'user', content: 'hi' }] : [m] });
    await exchange(text, k, 'application/json', outcomes(text, k.paid, CATALOG, k.low));
  }), 8);
});

/** Bytes: random, a valid body cut short, a byte flipped, a BOM, invalid UTF-8 in a string. */
const bytes: fc.Arbitrary<Buffer> = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
  fc.tuple(chatBody, fc.nat()).map(([b, n]) => { const s = Buffer.from(serialize(b)); return s.subarray(0, n % (s.length + 1)); }),
  fc.tuple(chatBody, fc.nat(), fc.integer({ min: 0, max: 255 })).map(([b, n, v]) => { const s = Buffer.from(serialize(b)); if (s.length > 0) s[n % s.length] = v; return s; }),
  userTurn.map((m) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(serialize({ model: 'echo-small', messages: [m] }))])),
  fc.uint8Array({ minLength: 1, maxLength: 8 }).map((a) => Buffer.concat([Buffer.from('{"model":"echo-small","messages":[{"role":"user","content":"'), Buffer.from(a.map((b) => b | 0x80)), Buffer.from('"}]}')])),
  fc.constantFrom('', ' ', 'null', '[]', '"x"', '1', '{', '}', '{}', '{"model":}', '\u0000').map((s) => Buffer.from(s)),
);

t.test('garbage bytes and truncated JSON get 400, never a 500', async (t) => {
  await holds(t, 'garbage bodies', fc.asyncProperty(bytes, who, async (buf, k) => {
    await exchange(buf, k, 'application/json', outcomes(buf.toString('utf8'), k.paid, CATALOG, k.low));
  }), 100);
});

t.test('odd Content-Type and charset: JSON media types are read, anything else is 415', async (t) => {
  await holds(t, 'content types', fc.asyncProperty(contentType, chatBody, who, async (ct, body, k) => {
    const text = serialize(body);
    await exchange(text, k, ct, isJsonMediaType(ct) ? outcomes(text, k.paid, CATALOG, k.low) : 'unsupported_media_type');
  }), 60);
});

t.test('the logs hold no credential', async (t) => {
  assertNoCredentials(t, gw.logs(), [...issuedKeys, ADMIN]);
});

// Awaits the bounded-work fix (CONTRACT section 10: "an error message never echoes more than
// 256 characters of client input"): today the 404 for an unknown model, and the 400s for a
// role, a content part type, an image detail or a tool call type, repeat the value whole.
t.test('an error message never echoes more than 256 characters of client input', async (t) => {
  const long = fc.tuple(fc.constantFrom('a', 'é', '🦜', 'x y', 'model-'), fc.integer({ min: 50, max: 3000 })).map(([s, n]) => s.repeat(n)).filter((s) => s.length > 256);
  const place = fc.constantFrom('model', 'role', 'part', 'detail', 'tool');
  await holds(t, 'bounded echo', fc.asyncProperty(long, place, async (s, where) => {
    const user: Record<string, unknown> = { role: 'user', content: 'hi' };
    const body: Record<string, unknown> = { model: where === 'model' ? s : 'echo-small', messages: [user] };
    if (where === 'role') user.role = s;
    if (where === 'part') user.content = [{ type: s }];
    if (where === 'detail') user.content = [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: s } }];
    if (where === 'tool') body.messages = [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', type: s, function: { name: 'f', arguments: '{}' } }] }, user];
    const who = await freshAccount(gw.url, ADMIN, 'free', 1000);
    const got = assertChatAnswer(await post(JSON.stringify(body), { authorization: `Bearer ${who.key}`, 'content-type': 'application/json' }));
    assert.equal(got.kind, 'error');
    assert.equal(got.kind === 'error' && got.code, where === 'model' ? 'model_not_found' : 'unsupported_value');
    assert.ok(got.kind === 'error' && !echoesMoreThan(got.message, s), `the message repeats at most 256 characters of the ${s.length}-character ${where}`);
  }), 20);
});

// Awaits the money fix (cost in exact integer arithmetic, lib/billing/meter.ts): a hold
// whose cost's intermediate product passes 2^53 answers 500 today; CONTRACT section 9 says
// "a hold larger than any balance is a plain 402, never a 500".
t.test('prices no wallet can pay: a plain 402 with the available balance, nothing held', async (t) => {
  const scenario = fc.record({ model: fc.constantFrom('echo-dear', 'echo-dear-in'), units: fc.integer({ min: 0, max: 1e6 }), maxTokens: fc.option(fc.integer({ min: 1, max: 1024 }), { nil: undefined }), stream: fc.boolean() });
  await holds(t, 'unpayable prices', fc.asyncProperty(scenario, async ({ model, units, maxTokens, stream }) => {
    const who = await freshAccount(gw.url, ADMIN, 'free', units);
    const body = { model, messages: [{ role: 'user', content: 'Count to three.' }], max_tokens: maxTokens, stream };
    const got = assertChatAnswer(await post(JSON.stringify(body), { authorization: `Bearer ${who.key}`, 'content-type': 'application/json' }));
    assert.equal(got.kind === 'error' && got.code, 'insufficient_credits', `402 insufficient_credits, got ${JSON.stringify(got)}`);
    const w = await eventually(async () => {
      const v = await wallet(gw.url, ADMIN, who.account);
      assert.equal(v.held_units, 0);
      return v;
    });
    assert.equal(w.balance_units, units, 'nothing charged');
  }), 20);
});
