// Boundary 3: upstream event streams, generated and delivered by a fake upstream on a real
// socket, split at every byte or at random points, with LF/CRLF/CR, comments, keep-alives,
// odd but valid chunks and invalid JSON, for both provider kinds. The client gets the
// upstream's text whole ending in [DONE], or a contract error (before the first byte: the
// real status and envelope; after it: one envelope event and no [DONE]); the wallet is
// charged the contract's cost of the usage (reported, or counted from what was delivered);
// nothing hangs.

import t from 'tap';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, startGateway, DEMO_KEY, type TestGateway } from '../helpers/gateway.js';
import { startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { counter } from '../../lib/tokens/count.js';
import { holds } from './arbitraries.js';
import { assertChatAnswer, contractCost, eventually, freshAccount, issuedKeys, usageTotals, wallet, assertNoCredentials } from './invariants.js';

const ADMIN = 'admin-token-upstream-sse-0123456789';
const PRICE = { input_per_mtok: 1000, output_per_mtok: 3000 };

let up: FakeUpstream;
let gw: TestGateway;
let current: { bytes: Buffer; cuts: number[] } = { bytes: Buffer.alloc(0), cuts: [] };

async function deliver(res: ServerResponse): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const { bytes, cuts } = current;
  let at = 0;
  let writes = 0;
  for (const c of [...cuts, bytes.length]) {
    if (res.destroyed) return;
    if (c > at) res.write(bytes.subarray(at, c));
    at = c;
    // A pause lets the piece leave before the next is written (every 32nd when byte by byte).
    if (cuts.length < 64 || ++writes % 32 === 0) await new Promise((r) => setImmediate(r));
  }
  res.end();
}

t.before(async () => {
  up = await startUpstream((_req, res) => deliver(res));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans = { free: { paid: false, max_concurrent: 4 }, pro: { paid: true, max_concurrent: 4 } };
  c.accounts[0].wallet_units = 1e12;
  // A generated failure must not open the circuit for the next case.
  const common = { api_key: 'sk-upstream-sse-secret', timeout_ms: 5000, circuit_failures: 1_000_000 };
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, ...common };
  c.providers.ant = { kind: 'anthropic', base_url: up.url, ...common };
  c.models.push({ id: 'llama', provider: 'oai', upstream_model: 'internal/llama', max_output_tokens: 512, price: PRICE });
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'internal/claude', max_output_tokens: 512, price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

// ---- generated streams ---------------------------------------------------------------------

const delta = fc.oneof(
  { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 8 }) },
  fc.string({ unit: 'binary', minLength: 1, maxLength: 4 }),
  fc.constantFrom('', ' ', '\n', 'data: x\n\n', '\r\n', '"}', '\u{1f99c}', '\u00e9'),
);

/** One upstream event and what the gateway makes of it (0..n steps). */
interface Event { data: unknown; name?: string; raw?: string; steps: Step[] }

type Step = { kind: 'chunk'; content: string; finish: string | null } | { kind: 'end' } | { kind: 'bad' } | { kind: 'error' };

interface Plan { provider: 'oai' | 'ant'; events: Event[]; text: string; usage: { p: number; c: number } | undefined }

const usageArb = fc.oneof(
  { weight: 3, arbitrary: fc.record({ p: fc.integer({ min: 0, max: 5000 }), c: fc.integer({ min: 0, max: 5000 }) }) },
  fc.constant(undefined),
  fc.constant('odd' as const),
);

const shape = fc.record({
  deltas: fc.array(delta, { maxLength: 8 }),
  finish: fc.constantFrom('stop', 'stop', 'length', null),
  usage: usageArb,
  done: fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, fc.constant(false)),
  bad: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, fc.record({ at: fc.nat(), kind: fc.constantFrom('bad', 'error') })),
  roleEvery: fc.boolean(),
  extras: fc.boolean(),
});
type Shape = typeof shape extends fc.Arbitrary<infer T> ? T : never;

/** OpenAI-style chunks. */
function openaiPlan(s: Shape): Plan {
  const base = { id: 'x', object: 'chat.completion.chunk', created: 1, model: 'internal/llama' };
  const extra = s.extras ? { system_fingerprint: 'fp', usage: null, service_tier: 'default' } : {};
  const chunk = (d: Record<string, unknown>, finish: string | null): Event => ({
    data: { ...base, ...extra, choices: [{ index: 0, delta: s.roleEvery ? { role: 'assistant', ...d } : d, finish_reason: finish, ...(s.extras ? { logprobs: null } : {}) }] },
    steps: [{ kind: 'chunk', content: typeof d.content === 'string' ? d.content : '', finish }],
  });
  const events: Event[] = [chunk({ role: 'assistant', content: '' }, null), ...s.deltas.map((d: string) => chunk({ content: d }, null))];
  if (s.finish !== null) events.push(chunk({}, s.finish));
  let usage: Plan['usage'];
  if (s.usage === 'odd') events.push({ data: { ...base, choices: [], usage: { prompt_tokens: -1, completion_tokens: '7' } }, steps: [] });
  else if (s.usage !== undefined) {
    usage = s.usage;
    events.push({ data: { ...base, choices: [], usage: { prompt_tokens: s.usage.p, completion_tokens: s.usage.c, total_tokens: s.usage.p + s.usage.c } }, steps: [] });
  }
  if (s.done) events.push({ data: null, raw: '[DONE]', steps: [{ kind: 'end' }] });
  insertBad(s, events, { error: { message: 'upstream broke', type: 'server_error' } });
  return { provider: 'oai', events, text: s.deltas.join(''), usage };
}

/** Anthropic Messages events; a missing message_stop leaves the answer incomplete. */
function anthropicPlan(s: Shape): Plan {
  const p = s.usage === undefined || s.usage === 'odd' ? undefined : s.usage;
  const ev = (name: string, data: Record<string, unknown>, steps: Step[] = []): Event => ({ name: s.extras && name === 'content_block_delta' ? undefined : name, data: { type: name, ...data }, steps });
  const events: Event[] = [
    ev('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'internal/claude', content: [], usage: { input_tokens: p?.p ?? (s.usage === 'odd' ? -3 : undefined), output_tokens: 1 } } }, [{ kind: 'chunk', content: '', finish: null }]),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ev('ping', {}),
    ...s.deltas.map((d: string) => ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: d } }, [{ kind: 'chunk', content: d, finish: null }])),
    ev('content_block_stop', { index: 0 }),
  ];
  if (s.finish !== null) {
    events.push(ev('message_delta', { delta: { stop_reason: s.finish === 'length' ? 'max_tokens' : 'end_turn', stop_sequence: null }, usage: { output_tokens: p?.c ?? 'x' } }, [{ kind: 'chunk', content: '', finish: s.finish }]));
  }
  if (s.done) events.push(ev('message_stop', {}, [...(s.finish === null ? [{ kind: 'chunk', content: '', finish: 'stop' } as Step] : []), { kind: 'end' }]));
  insertBad(s, events, { type: 'error', error: { type: 'api_error', message: 'upstream broke' } }, 'error');
  // Without message_delta, the output count is message_start's (1, as Anthropic sends it).
  return { provider: 'ant', events, text: s.deltas.join(''), usage: p !== undefined && s.done ? { p: p.p, c: s.finish !== null ? p.c : 1 } : undefined };
}

/** An invalid event, or an upstream error event, somewhere before the end marker. */
function insertBad(s: Shape, events: Event[], errorBody: unknown, errorName?: string): void {
  if (s.bad === undefined) return;
  const last = events.findIndex((e) => e.steps.some((x) => x.kind === 'end'));
  const at = s.bad.at % ((last === -1 ? events.length : last) + 1);
  events.splice(at, 0, s.bad.kind === 'bad'
    ? { raw: '{"choices":[{"delta":{"content":"x"}', data: null, steps: [{ kind: 'bad' }] }
    : { name: errorName, data: errorBody, steps: [{ kind: 'error' }] });
}

const eolArb = fc.constantFrom('\n', '\r\n', '\r', 'mixed');

/** The bytes of a plan: its events framed with line endings, comments and odd spacing. */
const wire = fc.record({
  eol: eolArb,
  mix: fc.array(fc.constantFrom('\n', '\r\n', '\r'), { minLength: 1, maxLength: 7 }),
  comments: fc.array(fc.boolean(), { minLength: 1, maxLength: 5 }),
  pretty: fc.boolean(),
  space: fc.boolean(),
});

function frame(plan: Plan, w: typeof wire extends fc.Arbitrary<infer T> ? T : never): Buffer {
  let out = '';
  let n = 0;
  let prev = '';
  const eol = () => {
    let e = w.eol === 'mixed' ? w.mix[n++ % w.mix.length]! : w.eol;
    if (prev === '\r' && e === '\n') e = '\r\n'; // CR then LF would be one CRLF line break
    prev = e;
    return e;
  };
  const line = (l: string) => { out += l + eol(); };
  plan.events.forEach((ev, i) => {
    if (w.comments[i % w.comments.length]) line(i % 2 === 0 ? ': keep-alive' : ':');
    if (ev.name !== undefined) line(`event: ${ev.name}`);
    const text = ev.raw ?? JSON.stringify(ev.data, null, w.pretty ? 1 : undefined);
    for (const l of text.split('\n')) line(`data:${w.space ? ' ' : ''}${l}`);
    line('');
  });
  return Buffer.from(out);
}

/** What the gateway must do with these steps (CONTRACT section 4, Upstreams). */
function expected(plan: Plan): { ok: boolean; committed: boolean; text: string; code?: string } {
  let committed = false;
  let text = '';
  let ended = false;
  for (const s of plan.events.flatMap((e) => e.steps)) {
    if (s.kind === 'bad' || s.kind === 'error') {
      // Invalid JSON, and an upstream error event of a server kind, are both provider_error.
      return { ok: false, committed, text, code: 'provider_error' };
    }
    if (s.kind === 'chunk') {
      text += s.content;
      if (s.content !== '' || (s.finish !== null && s.finish !== 'stop')) committed = true;
      if (s.finish !== null && plan.provider === 'oai') ended = true;
    }
    if (s.kind === 'end') ended = true;
  }
  if (!ended || !committed) return { ok: false, committed, text, code: 'provider_error' };
  return { ok: true, committed, text };
}

/** Where the upstream's writes are cut: at every byte, or at random fractions of its length. */
const splits = fc.oneof({ weight: 3, arbitrary: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 16 }) }, fc.constant('every' as const));

function cutsOf(split: number[] | 'every', length: number): number[] {
  if (split === 'every') return Array.from({ length: Math.max(0, length - 1) }, (_, i) => i + 1);
  return [...new Set(split.map((f) => Math.floor(f * length)))].sort((a, b) => a - b);
}

const scenario = fc.record({ provider: fc.constantFrom('oai', 'ant') as fc.Arbitrary<'oai' | 'ant'>, s: shape, w: wire, split: splits, includeUsage: fc.boolean() });

t.test('any split of any stream: the whole text then [DONE], or a contract error; charged the cost of the usage', async (t) => {
  const count = counter('o200k_base');
  await holds(t, 'upstream streams', fc.asyncProperty(scenario, async ({ provider, s, w, split, includeUsage }) => {
    const plan = provider === 'oai' ? openaiPlan(s) : anthropicPlan(s);
    const bytes = frame(plan, w);
    current = { bytes, cuts: cutsOf(split, bytes.length) };
    const { account, key } = await freshAccount(gw.url, ADMIN, 'free', 1e12);
    const before = await wallet(gw.url, ADMIN, account);
    const totals = await usageTotals(gw.url, ADMIN, account);
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: plan.provider === 'oai' ? 'llama' : 'claude', messages: [{ role: 'user', content: 'Tell me.' }], stream: true, stream_options: { include_usage: includeUsage } }),
      headersTimeout: 10_000, bodyTimeout: 10_000,
    });
    const answer = { status: res.statusCode, headers: res.headers, text: await res.body.text() };
    const want = expected(plan);
    const got = assertChatAnswer(answer);

    if (!want.ok && !want.committed) {
      assert.equal(got.kind, 'error', 'an error before the first byte has its real status');
      assert.equal(got.kind === 'error' && got.code, want.code);
    } else {
      assert.equal(got.kind, 'ok', `a 200 stream: ${answer.text.slice(0, 200)}`);
      assert.ok(got.kind === 'ok');
      assert.equal(got.content, want.text, 'the deltas concatenate to the upstream text, whatever the splits');
      if (want.ok) assert.ok(got.done && got.streamError === undefined, 'ends in [DONE]');
      else assert.ok(!got.done && got.streamError === want.code, `one error event (${want.code}), no [DONE]`);
      if (want.ok && includeUsage && plan.usage !== undefined) {
        assert.deepEqual(got.usage, { prompt_tokens: plan.usage.p, completion_tokens: plan.usage.c, total_tokens: plan.usage.p + plan.usage.c }, 'the upstream usage is passed on');
      }
    }

    // The charge: the contract's cost of the usage, once; recorded with the debited figures.
    const after = await eventually(async () => {
      const u = await usageTotals(gw.url, ADMIN, account);
      assert.equal(u.requests, totals.requests + 1, 'one usage record');
      const w = await wallet(gw.url, ADMIN, account);
      assert.equal(w.held_units, 0, 'the hold is released');
      assert.equal(await gw.gateway.slotsInUse(account), 0, 'the slot is free');
      return { u, w };
    });
    const units = after.u.units - totals.units;
    const p = after.u.prompt_tokens - totals.prompt_tokens;
    const c = after.u.completion_tokens - totals.completion_tokens;
    assert.equal(before.balance_units - after.w.balance_units, units, 'the wallet is debited what was recorded');
    assert.equal(BigInt(units), contractCost(p, c, PRICE), 'the contract cost of the usage');
    if (want.ok && plan.usage !== undefined) assert.deepEqual([p, c], [plan.usage.p, plan.usage.c], 'charged the usage the upstream reported');
    else if (want.ok || (want.committed && want.text !== '')) assert.equal(c, count(want.text), 'charged the delivered text, counted');
    else assert.equal(units, 0, 'nothing charged when nothing was delivered');
  }), 150);
});

t.test('the logs hold no credential', async (t) => {
  assertNoCredentials(t, gw.logs(), [...issuedKeys, DEMO_KEY, ADMIN, 'sk-upstream-sse-secret']);
});
