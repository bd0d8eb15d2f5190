// llama.cpp's aliases on POST /v1/completions: its server reads `n_predict` before `max_tokens`
// and `n_cmpl` before `n`, so a body forwarded as sent could generate past what was held. Each
// alias is validated like its field, stands for it when alone, is refused (400 invalid_value,
// naming the alias) when it differs from it, and never reaches the upstream: a fake
// OpenAI-compatible server records the body it receives, and holds its answer while the test
// reads the hold. `min_tokens` above the output limit is refused too. On llama.cpp's /infill and
// the chat path, forward_params never carry the aliases either.

import t from 'tap';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const ADMIN = 'completions-aliases-admin';
const POOR = 'tg_poor_0000000000000000';
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 }; // 1 unit per prompt token, 2 per completion token
const PROPS = { default_generation_settings: { n_ctx: 4096, params: {} }, total_slots: 1, model_path: '/m/coder.gguf', build_info: 'b7000' };

let up: FakeUpstream;
let llama: FakeUpstream;
let gw: TestGateway;
/** While set, the upstream waits for it before answering (the test reads the hold meanwhile). */
let gate: Promise<void> | undefined;
/** What the upstream reports as completion tokens (the attack's server reports more than held). */
let reported = 3;

const textAnswer = (n: number) => ({
  id: 'cmpl-up', object: 'text_completion', created: 1700000000, model: 'internal/coder',
  choices: Array.from({ length: n }, (_, index) => ({ index, text: ' ok', logprobs: null, finish_reason: 'length' })),
  usage: { prompt_tokens: 5, completion_tokens: reported * n, total_tokens: 5 + reported * n },
});

t.before(async () => {
  up = await startUpstream(async (req, res, body) => {
    if (gate !== undefined) await gate;
    if (req.url === '/v1/chat/completions') {
      return json(res, 200, {
        id: 'chatcmpl-up', object: 'chat.completion', created: 1700000000, model: 'internal/coder',
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
      });
    }
    json(res, 200, textAnswer(typeof body.n === 'number' ? body.n : 1));
  });
  llama = await startUpstream(async (req, res, body) => {
    if (req.url === '/props') return json(res, 200, PROPS);
    if (req.url !== '/infill') return json(res, 404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
    json(res, 200, {
      index: 0, content: ' ok', stop: true, stop_type: 'eos', stopping_word: '', tokens_predicted: 1, tokens_evaluated: 7,
      generation_settings: { n_predict: body.n_predict }, timings: { cache_n: 0, prompt_n: 7, predicted_n: 1 },
    });
  }, { props: true });
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.accounts.push({ id: 'poor', plan: 'free', wallet_units: 12, keys: [POOR] });
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 5000, circuit_failures: 1000, forward_params: ['n_predict', 'n_cmpl', 'top_k'] };
  c.providers.llama = { kind: 'openai', base_url: llama.baseUrl, stream_upstream: 'never', timeout_ms: 5000, circuit_failures: 1000, forward_params: ['n_predict', 'n_cmpl', 'top_k'] };
  c.models.push({ id: 'coder', provider: 'oai', upstream_model: 'internal/coder', context_window: 4096, max_output_tokens: 256, price: PRICE });
  c.models.push({ id: 'fim', provider: 'llama', upstream_model: 'coder.gguf', context_window: 4096, max_output_tokens: 256, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); await llama.close(); });

const account = async (id = 'demo'): Promise<any> => (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const post = async (body: unknown, key = DEMO_KEY, path = '/v1/completions') => {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
};
const settled = async (id = 'demo'): Promise<any> => {
  for (let i = 0; i < 200; i++) {
    const a = await account(id);
    if (a.held_units === 0) return a;
    await new Promise((r) => setTimeout(r, 10));
  }
  return account(id);
};

/** The units held while the upstream has the request (it answers once they are read), the answer, and the body it got. */
async function heldDuring(body: Record<string, unknown>): Promise<{ held: number; status: number; upstream: any }> {
  let open!: () => void;
  gate = new Promise((r) => { open = r; });
  const seen = up.requests.length;
  const answer = post({ model: 'coder', prompt: 'def add(a, b):', ...body });
  let held = 0;
  for (let i = 0; i < 500 && (up.requests.length === seen || held === 0); i++) {
    held = (await account()).held_units;
    if (up.requests.length === seen || held === 0) await new Promise((r) => setTimeout(r, 5));
  }
  open();
  gate = undefined;
  const r = await answer;
  await settled();
  return { held, status: r.status, upstream: up.requests.at(-1)!.body };
}

t.test('n_predict alone is the output limit: held like max_tokens, sent as max_tokens, never itself', async (t) => {
  const viaMax = await heldDuring({ max_tokens: 7 });
  const viaAlias = await heldDuring({ n_predict: 7 });
  const more = await heldDuring({ max_tokens: 8 });
  t.equal(viaMax.status, 200);
  t.equal(viaAlias.status, 200);
  t.ok(viaAlias.held > 0, 'something was held');
  t.equal(viaAlias.held, viaMax.held, 'n_predict: 7 is held as max_tokens: 7');
  t.equal(more.held - viaMax.held, 2, 'one more output token is two more units: the hold follows the limit');
  t.same(viaAlias.upstream, { model: 'internal/coder', prompt: 'def add(a, b):', max_tokens: 7 }, 'the upstream got max_tokens, no n_predict');
  const both = await heldDuring({ max_tokens: 7, n_predict: 7 });
  t.equal(both.status, 200, 'both, equal: accepted');
  t.equal(both.held, viaMax.held);
  t.same(both.upstream, { model: 'internal/coder', prompt: 'def add(a, b):', max_tokens: 7 });
  const nulls = await heldDuring({ max_tokens: 7, n_predict: null, n_cmpl: null });
  t.same(nulls.upstream, { model: 'internal/coder', prompt: 'def add(a, b):', max_tokens: 7 }, 'null aliases are absent, and not sent');
});

t.test('n_cmpl alone is n: held for each answer, sent as n, never itself', async (t) => {
  const viaN = await heldDuring({ max_tokens: 5, n: 3 });
  const viaAlias = await heldDuring({ max_tokens: 5, n_cmpl: 3 });
  const one = await heldDuring({ max_tokens: 5 });
  t.equal(viaAlias.status, 200);
  t.equal(viaAlias.held, viaN.held, 'n_cmpl: 3 is held as n: 3');
  t.ok(viaAlias.held > one.held, 'three answers hold more than one');
  t.same(viaAlias.upstream, { model: 'internal/coder', prompt: 'def add(a, b):', max_tokens: 5, n: 3 }, 'the upstream got n, no n_cmpl');
  const both = await heldDuring({ max_tokens: 5, n: 2, n_cmpl: 2 });
  t.equal(both.status, 200);
  t.same(both.upstream, { model: 'internal/coder', prompt: 'def add(a, b):', max_tokens: 5, n: 2 });
});

t.test('bad aliases and min_tokens: exact status, code, param, message and envelope; upstream never called, nothing held or charged', async (t) => {
  const before = await account();
  const calls = up.requests.length;
  const cases: [Record<string, unknown>, number, string, string, string | RegExp][] = [
    [{ n_predict: 0 }, 400, 'invalid_value', 'n_predict', "Invalid value for 'n_predict': must be an integer of at least 1."],
    [{ n_predict: -1 }, 400, 'invalid_value', 'n_predict', "Invalid value for 'n_predict': must be an integer of at least 1."],
    [{ n_predict: 1.5 }, 400, 'invalid_value', 'n_predict', "Invalid value for 'n_predict': must be an integer of at least 1."],
    [{ n_predict: '5' }, 400, 'invalid_type', 'n_predict', "Invalid type for 'n_predict': expected an integer."],
    [{ max_tokens: 1, n_predict: 100000 }, 400, 'invalid_value', 'n_predict',
      "Invalid value for 'n_predict': must equal 'max_tokens' when both are given (100000 and 1): 'n_predict' is another name for 'max_tokens'."],
    [{ max_tokens: 0, n_predict: 5 }, 400, 'invalid_value', 'max_tokens', "Invalid value for 'max_tokens': must be an integer of at least 1."],
    [{ n_predict: 100000 }, 422, 'context_length_exceeded', 'prompt', /context/],
    [{ n_cmpl: 0 }, 400, 'invalid_value', 'n_cmpl', "Invalid value for 'n_cmpl': must be an integer from 1 to 128."],
    [{ n_cmpl: 129 }, 400, 'invalid_value', 'n_cmpl', "Invalid value for 'n_cmpl': must be an integer from 1 to 128."],
    [{ n_cmpl: true }, 400, 'invalid_type', 'n_cmpl', "Invalid type for 'n_cmpl': expected an integer."],
    [{ n: 1, n_cmpl: 64 }, 400, 'invalid_value', 'n_cmpl', "Invalid value for 'n_cmpl': must equal 'n' when both are given (64 and 1): 'n_cmpl' is another name for 'n'."],
    [{ prompt: Array(100).fill('x'), n_cmpl: 21 }, 400, 'invalid_value', 'n_cmpl', "Invalid value for 'n_cmpl': the prompts times n_cmpl must be at most 2048."],
    [{ max_tokens: 4, min_tokens: 5 }, 400, 'invalid_value', 'min_tokens', "Invalid value for 'min_tokens': must be at most the output limit (4)."],
    [{ n_predict: 4, min_tokens: 5 }, 400, 'invalid_value', 'min_tokens', "Invalid value for 'min_tokens': must be at most the output limit (4)."],
    [{ min_tokens: 17 }, 400, 'invalid_value', 'min_tokens', "Invalid value for 'min_tokens': must be at most the output limit (16)."],
    [{ min_tokens: -1 }, 400, 'invalid_value', 'min_tokens', "Invalid value for 'min_tokens': must be an integer of at least 0."],
  ];
  for (const [extra, status, code, param, message] of cases) {
    const r = await post({ model: 'coder', prompt: 'hi', ...extra });
    const e = JSON.parse(r.text);
    t.equal(r.status, status, `${JSON.stringify(extra).slice(0, 60)} -> ${status}`);
    t.same(schemas.error(e), []);
    t.match(e, { code, param, type: 'invalid_request_error', error: { code, param, type: 'invalid_request_error' } });
    if (typeof message === 'string') t.equal(e.error.message, message);
    else t.match(e.error.message, message);
    t.equal(r.headers.get('content-type'), 'application/json');
    t.ok(r.headers.get('x-request-id'));
    t.equal(e.request_id, r.headers.get('x-request-id'));
  }
  t.equal(up.requests.length, calls, 'the upstream was never called');
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'nothing held');
});

t.test('the attack: a 12-unit wallet asking n_predict 100000 beside max_tokens 1 is refused, the wallet untouched', async (t) => {
  const before = await account('poor');
  const calls = up.requests.length;
  const r = await post({ model: 'coder', max_tokens: 1, n_predict: 100000, prompt: 'hi' }, POOR);
  t.equal(r.status, 400);
  t.match(JSON.parse(r.text), { code: 'invalid_value', param: 'n_predict' });
  const alone = await post({ model: 'coder', n_predict: 200, prompt: 'hi' }, POOR);
  t.equal(alone.status, 402, 'n_predict alone is held in full: the wallet cannot pay for it');
  t.match(JSON.parse(alone.text), { code: 'insufficient_credits' });
  t.equal(up.requests.length, calls, 'the upstream was never called');
  const after = await account('poor');
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
  // One that fits: n_predict 2 is held for 2 tokens and sent as max_tokens 2; charged what the server reports.
  reported = 2;
  const ok = await post({ model: 'coder', n_predict: 2, prompt: 'hi' }, POOR);
  reported = 3;
  t.equal(ok.status, 200);
  t.same(up.requests.at(-1)!.body, { model: 'internal/coder', prompt: 'hi', max_tokens: 2 });
  t.equal(ok.headers.get('x-tollgate-units-charged'), String(5 + 2 * 2));
  t.equal((await settled('poor')).balance_units, before.balance_units - 9, 'charged exactly: 5 prompt + 2 x 2 completion units');
});

t.test('forward_params never carry the aliases: llama.cpp /infill gets the held n_predict, chat gets no n_predict', async (t) => {
  const r = await post({ model: 'fim', prompt: 'def add(a, b):', suffix: '\n', n_predict: 9, top_k: 5 });
  t.equal(r.status, 200, r.text);
  const infill = llama.requests.at(-1)!;
  t.equal(infill.url, '/infill');
  t.same(infill.body, { input_prefix: 'def add(a, b):', input_suffix: '\n', n_predict: 9, top_k: 5 }, 'n_predict is the held limit, top_k forwarded');
  const big = await post({ model: 'fim', prompt: 'def add(a, b):', suffix: '\n', max_tokens: 3, n_predict: 5000 });
  t.equal(big.status, 400);
  t.match(JSON.parse(big.text), { code: 'invalid_value', param: 'n_predict' });
  const n = await post({ model: 'fim', prompt: 'def add(a, b):', suffix: '\n', n_cmpl: 2 });
  t.equal(n.status, 400);
  t.match(JSON.parse(n.text), { code: 'unsupported_value', param: 'n_cmpl' }, '/infill serves one answer: the refusal names n_cmpl');

  const chat = await post({ model: 'coder', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, n_predict: 100000, n_cmpl: 8, top_k: 5 }, DEMO_KEY, '/v1/chat/completions');
  t.equal(chat.status, 200);
  const sent = up.requests.at(-1)!.body;
  t.equal(sent.max_tokens, 4);
  t.equal(sent.top_k, 5, 'other forward_params go');
  t.notOk('n_predict' in sent, 'no n_predict on the chat path');
  t.notOk('n_cmpl' in sent, 'no n_cmpl on the chat path');
  t.equal((await settled()).held_units, 0);
});
