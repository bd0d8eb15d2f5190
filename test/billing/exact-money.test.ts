// Exact money at any magnitude the config accepts (CONTRACT sections 4, 9 and 10), tried over
// generated prices, token counts and balances through the real gateway: every hold and debit
// equals the contract's formula computed here with BigInt, a hold no wallet can pay is a plain
// 402, and the ledger, usage records, metrics and access log agree to the unit, client aborts
// included.

import t from 'tap';
import fc from 'fast-check';
import { setTimeout as sleep } from 'node:timers/promises';
import { counter, estimatePromptTokens } from '../../lib/tokens/count.js';
import { validateChatRequest } from '../../lib/hub/validate.js';
import { DEMO_KEY, baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { chunk, completionBody, json, startUpstream, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { isOpenAiHosted, tellLimit } from '../../lib/providers/openai/output-limit.js';

const ADMIN = 'money-admin-token-0123';
const MAX = Number.MAX_SAFE_INTEGER;
const SEED = Number(process.env.TOLLGATE_FC_SEED ?? 20261123);

/** Prices an operator may write: zero, small, at and past 2^53, and absurd (check only warns). */
const PRICES: number[] = [0, 1, 3000, 999_999, 1_000_000, 2 ** 31, MAX, 2 ** 53, 2 ** 60, 1e21, 1e300, Number.MAX_VALUE];
const MODELS = PRICES.flatMap((input, i) => [
  { id: `in${i}`, input_per_mtok: input, output_per_mtok: PRICES[(i * 5 + 3) % PRICES.length]! },
]);

/** The contract's formula, written out again here: ceil((p·in + c·out) / 1e6), in BigInt. */
function expectedCost(p: number, c: number, price: { input_per_mtok: number; output_per_mtok: number }): bigint {
  const n = BigInt(p) * BigInt(price.input_per_mtok) + BigInt(c) * BigInt(price.output_per_mtok);
  return n / 1_000_000n + (n % 1_000_000n === 0n ? 0n : 1n);
}

async function setup(t: any, store?: Record<string, unknown>) {
  // The upstream reports the usage the test asks for, written in the prompt as "usage P C".
  const up = await startUpstream((_req, res, body) => {
    const [, p, c] = String(body.messages[0].content).split(' ');
    json(res, 200, completionBody('ok', { usage: { prompt_tokens: Number(p), completion_tokens: Number(c), total_tokens: Number(p) + Number(c) } }));
  });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  if (store) c.store = store;
  c.plans.free = { paid: false, requests_per_minute: null, tokens_per_minute: null };
  c.providers.up = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000 };
  for (const m of MODELS) {
    c.models.push({
      id: m.id, provider: 'up', context_window: 2_000_000, max_output_tokens: 1000,
      price: { input_per_mtok: m.input_per_mtok, output_per_mtok: m.output_per_mtok },
    });
  }
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  return { up, gw };
}

async function admin(gw: TestGateway, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${gw.url}/admin${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return res.json();
}

let credit = 0;
async function setBalance(gw: TestGateway, target: number): Promise<void> {
  const now = (await admin(gw, '/accounts/demo')).balance_units as number;
  if (now === target) return;
  const r = await admin(gw, '/accounts/demo/credits', { units: target - now, idempotency_key: `set-${process.pid}-${credit++}` });
  if (r.balance_units !== target) throw new Error(`could not set the balance to ${target}: ${JSON.stringify(r)}`);
}

const tokens = fc.oneof(
  fc.constantFrom(0, 1, 999_999, 1_000_000, 1_000_001),
  fc.integer({ min: 0, max: 5000 }),
  fc.integer({ min: 0, max: Math.floor(MAX / 2) }),
);
const balances = fc.oneof(fc.constantFrom(0, 1, MAX, MAX - 1), fc.integer({ min: 0, max: 100_000 }), fc.integer({ min: 0, max: MAX }));

async function moneyProperty(t: any, gw: TestGateway, numRuns: number): Promise<void> {
  const models = gw.gateway.config!.models;
  let cases = 0;
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 0, max: MODELS.length - 1 }), fc.integer({ min: 1, max: 1_000_000 }), tokens, tokens, balances,
    async (mi, maxTokens, p, c, balance) => {
      const spec = MODELS[mi]!;
      cases++;
      await setBalance(gw, balance);
      const body = { model: spec.id, messages: [{ role: 'user', content: `usage ${p} ${c}` }], max_tokens: maxTokens };
      const model = models.find((m) => m.id === spec.id)!;
      const hold = expectedCost(estimatePromptTokens(validateChatRequest(body).messages, counter(model.tokenizer), model.image_tokens), maxTokens, spec);
      const res = await postChat(gw.url, body, { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' });
      const after = await admin(gw, '/accounts/demo');
      if (hold > BigInt(balance)) {
        if (res.status !== 402) throw new Error(`hold ${hold} > balance ${balance}: expected 402, got ${res.status} ${res.text}`);
        const e = res.json();
        if (e.code !== 'insufficient_credits' || e.wallet_balance_units !== balance || e.error.wallet_balance_units !== balance) {
          throw new Error(`402 envelope: ${res.text}`);
        }
        if (after.balance_units !== balance || after.held_units !== 0) throw new Error(`a refusal changed the wallet: ${JSON.stringify(after)}`);
        return;
      }
      if (res.status !== 200) throw new Error(`hold ${hold} <= balance ${balance}: expected 200, got ${res.status} ${res.text}`);
      const full = expectedCost(p, c, spec);
      // The debit is the actual cost, or all the balance has when it is less (never below 0).
      const charged = full < BigInt(balance) ? Number(full) : balance;
      if (res.headers['x-tollgate-units-charged'] !== String(charged)) {
        throw new Error(`charged header ${String(res.headers['x-tollgate-units-charged'])}, expected ${charged} (cost ${full})`);
      }
      if (res.headers['x-tollgate-wallet-balance-units'] !== String(balance - charged)) throw new Error('balance header');
      if (after.balance_units !== balance - charged || after.held_units !== 0) {
        throw new Error(`ledger ${JSON.stringify(after)}, expected balance ${balance - charged}`);
      }
    },
  ), { numRuns, seed: SEED, endOnFailure: true });
  t.equal(cases, numRuns, `${numRuns} generated price/token/balance cases match the BigInt formula`);
}

t.test('memory store: holds and debits equal the BigInt formula at any magnitude', async (t) => {
  const { gw } = await setup(t);
  await moneyProperty(t, gw, 60);
});

t.test('redis store: holds and debits equal the BigInt formula at any magnitude', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const { gw } = await setup(t, { kind: 'redis', url: redis.url, prefix: `money-${process.pid}:` });
  await moneyProperty(t, gw, 25);
});

t.test('a hold larger than any balance is a plain 402 with the available balance', async (t) => {
  const { gw } = await setup(t);
  for (const balance of [0, 5, MAX]) {
    await setBalance(gw, balance);
    const res = await postChat(gw.url, { model: 'in11', messages: [{ role: 'user', content: 'usage 1 1' }], max_tokens: 1000 });
    t.equal(res.status, 402, `balance ${balance}`);
    t.match(res.json(), { code: 'insufficient_credits', type: 'insufficient_credits', wallet_balance_units: balance, error: { code: 'insufficient_credits' } });
    t.match(await admin(gw, '/accounts/demo'), { balance_units: balance, held_units: 0, available_units: balance });
  }
});

t.test('the upstream is told the output limit that was held', async (t) => {
  const { up, gw } = await setup(t);
  await setBalance(gw, MAX);
  const res = await postChat(gw.url, { model: 'in0', messages: [{ role: 'user', content: 'usage 1 1' }] });
  t.equal(res.status, 200);
  t.equal(up.requests.at(-1)!.body.max_tokens, 1000, 'no client limit: the model max_output_tokens the hold covered');
  await postChat(gw.url, { model: 'in0', messages: [{ role: 'user', content: 'usage 1 1' }], max_tokens: 7 });
  t.equal(up.requests.at(-1)!.body.max_tokens, 7, "the client's own limit is sent as it is");
  t.notOk('max_completion_tokens' in up.requests.at(-1)!.body);
  // Our own attack (#40): a server that reads only max_tokens (llama.cpp before 2026-02,
  // llama-cpp-python, TGI) ran to 4000 tokens on a hold sized for max_completion_tokens: 10.
  await postChat(gw.url, { model: 'in0', messages: [{ role: 'user', content: 'usage 1 1' }], max_completion_tokens: 9 });
  t.equal(up.requests.at(-1)!.body.max_completion_tokens, 9);
  t.equal(up.requests.at(-1)!.body.max_tokens, 9, 'max_completion_tokens is sent as max_tokens too (not OpenAI\'s own API)');
  await postChat(gw.url, { model: 'in0', messages: [{ role: 'user', content: 'usage 1 1' }], max_completion_tokens: 10, max_tokens: 900 });
  t.same([up.requests.at(-1)!.body.max_completion_tokens, up.requests.at(-1)!.body.max_tokens], [10, 10], 'both fields say the limit held (max_completion_tokens wins)');
  const responses = await fetch(`${gw.url}/v1/responses`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'in0', input: 'usage 1 1', max_output_tokens: 11 }),
  });
  t.equal(responses.status, 200);
  t.same([up.requests.at(-1)!.body.max_completion_tokens, up.requests.at(-1)!.body.max_tokens], [11, 11], "/v1/responses' max_output_tokens in both fields");
});

t.test("OpenAI's own API gets max_completion_tokens alone (its reasoning models refuse max_tokens)", async (t) => {
  t.equal(isOpenAiHosted(['https://api.openai.com/v1']), true);
  t.equal(isOpenAiHosted(['https://my-res.openai.azure.com/openai/deployments/x']), true);
  t.equal(isOpenAiHosted(['http://127.0.0.1:8000/v1']), false);
  t.equal(isOpenAiHosted(['https://api.openai.com/v1', 'http://vllm:8000/v1']), false, 'a mixed fleet gets both');
  const told = (src: Record<string, unknown>, hosted: boolean) => {
    const out: Record<string, unknown> = { ...src };
    tellLimit(out, src, 10, hosted);
    return [out.max_completion_tokens, out.max_tokens];
  };
  t.same(told({ max_completion_tokens: 10 }, true), [10, undefined]);
  t.same(told({ max_completion_tokens: 10 }, false), [10, 10]);
  t.same(told({ max_completion_tokens: 10, max_tokens: 99 }, true), [10, 10], 'the client sent both: both, equal');
  t.same(told({ max_tokens: 10 }, true), [undefined, 10]);
  t.same(told({}, true), [undefined, 10], 'no client limit: the model\'s, as max_tokens');
});

t.test('usage the upstream reports that is not a token count is not billed as one', async (t) => {
  const { up, gw } = await setup(t);
  await setBalance(gw, 1_000_000);
  for (const usage of [
    { prompt_tokens: 1e300, completion_tokens: 1 },
    { prompt_tokens: 1.5, completion_tokens: 1 },
    { prompt_tokens: -1, completion_tokens: 1 },
    { prompt_tokens: MAX, completion_tokens: MAX },
  ]) {
    up.setScript((_req, res) => json(res, 200, completionBody('four words of text', { usage })));
    const res = await postChat(gw.url, { model: 'in2', messages: [{ role: 'user', content: 'usage x x' }], max_tokens: 10 });
    t.equal(res.status, 200, JSON.stringify(usage));
    const answer = res.json();
    t.ok(Number.isSafeInteger(answer.usage.total_tokens) && answer.usage.prompt_tokens < 1000, 'counted by the gateway instead');
    t.equal(res.headers['x-tollgate-units-charged'], String(expectedCost(answer.usage.prompt_tokens, answer.usage.completion_tokens, MODELS[2]!)));
  }
});

/** Sums the `units` of the access log's request lines. */
function loggedUnits(gw: TestGateway): number {
  let sum = 0;
  for (const line of gw.logs().split('\n')) {
    if (line === '') continue;
    const rec = JSON.parse(line);
    if (rec.msg === 'request' && typeof rec.units === 'number') sum += rec.units;
  }
  return sum;
}

t.test('ledger, usage records, metrics and access log agree to the unit when clients abort mid-stream', async (t) => {
  const { up, gw } = await setup(t);
  const start = 10_000_000;
  await setBalance(gw, start);
  up.setScript(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < 400 && !res.destroyed; i++) {
      res.write(`data: ${JSON.stringify(chunk({ content: ` word${i}` }))}\n\n`);
      await sleep(5);
    }
    res.end();
  });
  const streams = 8;
  await Promise.all(Array.from({ length: streams }, async (_, i) => {
    const ac = new AbortController();
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST', signal: ac.signal, headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'in2', messages: [{ role: 'user', content: 'usage 1 1' }], max_tokens: 1000, stream: true }),
    });
    const reader = r.body!.getReader();
    let got = '';
    while ((got.match(/word/g) ?? []).length < 3 + i * 4) got += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
  }));
  // One more that finishes, so the figures also cover a whole answer.
  up.setScript((_req, res) => writeSse(res, [`data: ${JSON.stringify(chunk({ content: 'done' }, 'stop'))}\n\n`, 'data: [DONE]\n\n'], { split: 3 }));
  const whole = await postChat(gw.url, { model: 'in2', messages: [{ role: 'user', content: 'usage 1 1' }], max_tokens: 10, stream: true });
  t.ok(sseData(whole.text).done);

  let acct = await admin(gw, '/accounts/demo');
  for (let i = 0; i < 100 && (acct.usage.day.requests < streams + 1 || acct.held_units !== 0); i++) { await sleep(20); acct = await admin(gw, '/accounts/demo'); }
  const ledger = start - acct.balance_units;
  t.ok(ledger > 0, `the aborted streams were charged (${ledger} units)`);
  t.equal(acct.usage.day.requests, streams + 1, 'one debit per request');
  t.equal(acct.held_units, 0);
  // The record of a request is written after its debit: wait for the access log to have them all.
  for (let i = 0; i < 100 && gw.logs().split('"msg":"request"').length - 1 < streams + 1; i++) await sleep(20);
  const report = await admin(gw, '/usage?account=demo');
  t.equal(report.units, ledger, 'usage records = ledger');
  t.equal(report.requests, streams + 1);
  const metrics = await fetch(`${gw.url}/metrics`).then((r) => r.text());
  t.match(metrics, new RegExp(`^tollgate_units_charged_total ${ledger}$`, 'm'), 'metrics = ledger');
  t.equal(loggedUnits(gw), ledger, 'access log = ledger');
  const upstream: FakeUpstream = up;
  t.equal(upstream.requests.filter((r) => r.aborted).length, streams, 'every aborted stream aborted its upstream');
});
