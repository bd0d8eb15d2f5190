// Cached and reasoning tokens (CONTRACT section 8) through every dialect, on both upstream
// kinds, answered whole and streamed: the answer passes the upstream's breakdown on in the
// dialect's own spelling, and the wallet (memory store) drops by exactly
// ceil((uncached x input + reads x cached + writes x write + output x output) / 1e6), once.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { usageCost } from '../../lib/billing/meter.js';
import { usageOf as anthropicUsage } from '../../lib/providers/anthropic/translate.js';
import { usageOf as openaiUsage } from '../../lib/providers/openai/translate.js';
import { DEMO_KEY, baseConfig, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { startRedis } from '../helpers/redis.js';
import { holds } from '../property/arbitraries.js';

const ADMIN = 'cached-admin-token-0123';
// 3 units per uncached input token, 0.3 per cache read, 3.75 per cache write, 15 per output token.
const PRICE = { input_per_mtok: 3_000_000, output_per_mtok: 15_000_000, cached_input_per_mtok: 300_000, cache_write_per_mtok: 3_750_000 };
// Uncached 397, reads 2001, writes 102 (prompt 2500); output 41 of which 25 reasoning.
const READS = 2001;
const WRITES = 102;
const UNCACHED = 397;
const PROMPT = UNCACHED + READS + WRITES;
const OUTPUT = 41;
const REASONING = 25;

/** The formula, written out again in BigInt: each part at its price, one rounding up. */
function expected(uncached: number, reads: number, writes: number, output: number, p: typeof PRICE): bigint {
  const n = BigInt(uncached) * BigInt(p.input_per_mtok) + BigInt(reads) * BigInt(p.cached_input_per_mtok) +
    BigInt(writes) * BigInt(p.cache_write_per_mtok) + BigInt(output) * BigInt(p.output_per_mtok);
  return n / 1_000_000n + (n % 1_000_000n === 0n ? 0n : 1n);
}
const UNITS = Number(expected(UNCACHED, READS, WRITES, OUTPUT, PRICE));

const oaiUsage = {
  prompt_tokens: PROMPT, completion_tokens: OUTPUT, total_tokens: PROMPT + OUTPUT,
  prompt_tokens_details: { cached_tokens: READS, cache_write_tokens: WRITES }, completion_tokens_details: { reasoning_tokens: REASONING },
};
const antUsage = { input_tokens: UNCACHED, cache_read_input_tokens: READS, cache_creation_input_tokens: WRITES, output_tokens: OUTPUT };

function antMessage(): any {
  return {
    id: 'msg_up', type: 'message', role: 'assistant', model: 'claude-up', content: [{ type: 'text', text: 'Hello there' }],
    stop_reason: 'end_turn', stop_sequence: null, usage: antUsage,
  };
}

function antFrames(): string[] {
  const ev = (name: string, data: any) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
  return [
    ev('message_start', { type: 'message_start', message: { ...antMessage(), content: [], stop_reason: null, usage: { ...antUsage, output_tokens: 1 } } }),
    ev('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
    ev('ping', { type: 'ping' }),
    ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } }),
    ev('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'lo' } }),
    ev('content_block_stop', { type: 'content_block_stop', index: 0 }),
    ev('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: OUTPUT } }),
    ev('message_stop', { type: 'message_stop' }),
  ];
}

let oai: FakeUpstream;
let ant: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  oai = await startUpstream((_req, res, body) => (body.stream === true
    ? writeSse(res, streamFrames(['Hel', 'lo'], oaiUsage as any), { split: 5 })
    : json(res, 200, completionBody('Hello there', { usage: oaiUsage }))));
  ant = await startUpstream((_req, res, body) => (body.stream === true
    ? writeSse(res, antFrames(), { split: 5 })
    : json(res, 200, antMessage())));
  gw = await startGateway(config());
});
t.teardown(async () => { await gw.close(); await oai.close(); await ant.close(); });

async function account(url = gw.url): Promise<any> {
  return (await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

/** The account once `requests` requests were debited and nothing is held. */
async function settled(requests: number, url = gw.url): Promise<any> {
  let a = await account(url);
  for (let i = 0; i < 200 && (a.usage.day.requests < requests || a.held_units > 0); i++) { await sleep(10); a = await account(url); }
  return a;
}

function config(store?: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  if (store !== undefined) c.store = store;
  c.providers.oai = { kind: 'openai', base_url: oai.baseUrl, timeout_ms: 3000, circuit_failures: 1000 };
  c.providers.ant = { kind: 'anthropic', base_url: ant.url, api_key: 'sk-ant-test-key', timeout_ms: 3000, circuit_failures: 1000 };
  c.models.push({ id: 'gpt', provider: 'oai', upstream_model: 'gpt-up', context_window: 32768, max_output_tokens: 100, price: PRICE });
  c.models.push({ id: 'claude', provider: 'ant', upstream_model: 'claude-up', context_window: 32768, max_output_tokens: 100, price: PRICE });
  return c;
}

type Dialect = 'chat' | 'messages' | 'responses';
const PATHS: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };

function body(dialect: Dialect, model: string, stream: boolean): any {
  if (dialect === 'responses') return { model, input: 'Hi', max_output_tokens: 100, stream };
  return { model, max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }], stream, ...(dialect === 'chat' && stream ? { stream_options: { include_usage: true } } : {}) };
}

/** Named SSE events (Messages, Responses) as their data objects. */
function named(text: string): any[] {
  return text.split('\n\n').filter((b) => b !== '' && !b.startsWith(':')).map((b) => JSON.parse(/^event: \S+\ndata: (.*)$/s.exec(b)![1]!));
}

/** The usage the answer reports, in the dialect's own shape. */
function reportedUsage(dialect: Dialect, stream: boolean, text: string): any {
  if (!stream) {
    const b = JSON.parse(text);
    return b.usage;
  }
  if (dialect === 'chat') {
    const { events, done } = sseData(text);
    if (!done) throw new Error('no [DONE]');
    for (const e of events) if (schemas.chunk(e).length > 0) throw new Error(`chunk invalid: ${schemas.chunk(e).join('; ')}`);
    return events.at(-1).usage;
  }
  const evs = named(text);
  if (dialect === 'messages') {
    const start = evs.find((e) => e.type === 'message_start').message.usage;
    const delta = evs.find((e) => e.type === 'message_delta').usage;
    return { ...start, ...delta };
  }
  const done = evs.at(-1);
  if (done.type !== 'response.completed') throw new Error(`last event ${done.type}`);
  return done.response.usage;
}

for (const [kind, model] of [['openai', 'gpt'], ['anthropic', 'claude']] as const) {
  for (const dialect of ['chat', 'messages', 'responses'] as const) {
    for (const stream of [false, true]) {
      t.test(`${dialect} ${stream ? 'streamed' : 'JSON'} on an ${kind} upstream reporting cache reads/writes: passed on, charged ${UNITS} once`, async (t) => {
        const before = await settled(0);
        const res = await fetch(`${gw.url}${PATHS[dialect]}`, {
          method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify(body(dialect, model, stream)),
        });
        const text = await res.text();
        t.equal(res.status, 200, text.slice(0, 300));
        if (!stream) t.equal(res.headers.get('x-tollgate-units-charged'), String(UNITS), 'the header is the formula');
        const usage = reportedUsage(dialect, stream, text);
        // Reasoning tokens: only an OpenAI-style upstream reports them apart.
        const reasoning = kind === 'openai' ? REASONING : undefined;
        if (dialect === 'chat') {
          const want: any = { prompt_tokens: PROMPT, completion_tokens: OUTPUT, total_tokens: PROMPT + OUTPUT, prompt_tokens_details: { cached_tokens: READS, cache_write_tokens: WRITES } };
          if (reasoning !== undefined) want.completion_tokens_details = { reasoning_tokens: reasoning };
          t.same(usage, want, 'chat usage: prompt includes the cache; details passed on');
          if (!stream) t.same(schemas.completion(JSON.parse(text)), [], 'validates against CreateChatCompletionResponse');
        } else if (dialect === 'messages') {
          t.match(usage, { input_tokens: UNCACHED, cache_read_input_tokens: READS, cache_creation_input_tokens: WRITES, output_tokens: OUTPUT },
            'messages usage: input_tokens excludes the cache reads and writes');
        } else {
          t.same(usage, {
            input_tokens: PROMPT, input_tokens_details: { cached_tokens: READS }, output_tokens: OUTPUT,
            output_tokens_details: { reasoning_tokens: reasoning ?? 0 }, total_tokens: PROMPT + OUTPUT,
          }, 'responses usage: cached and reasoning details');
          if (!stream) t.same(schemas.response(JSON.parse(text)), [], 'validates against Response.json');
        }
        const after = await settled(before.usage.day.requests + 1);
        t.equal(before.balance_units - after.balance_units, UNITS, 'the wallet drops by exactly the formula');
        t.equal(after.held_units, 0, 'no hold left');
        await sleep(50);
        t.equal((await account()).balance_units, after.balance_units, 'charged once');
      });
    }
  }
}

t.test('on Redis too: every dialect on both upstream kinds is charged the formula once', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const g = await startGateway(config({ kind: 'redis', url: redis.url, prefix: `cached-${process.pid}:` }));
  t.teardown(() => g.close());
  let requests = 0;
  for (const model of ['gpt', 'claude']) {
    for (const dialect of ['chat', 'messages', 'responses'] as const) {
      for (const stream of [false, true]) {
        const before = await settled(requests, g.url);
        const res = await fetch(`${g.url}${PATHS[dialect]}`, {
          method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify(body(dialect, model, stream)),
        });
        await res.text();
        t.equal(res.status, 200);
        if (!stream) t.equal(res.headers.get('x-tollgate-units-charged'), String(UNITS));
        requests++;
        const after = await settled(requests, g.url);
        t.equal(before.balance_units - after.balance_units, UNITS, `${dialect} ${stream ? 'stream' : 'JSON'} on ${model}: the formula, once`);
      }
    }
  }
});

t.test('a price without cache prices charges cached tokens as input; a hold covers a dearer cache write', async (t) => {
  const plain = { input_per_mtok: 3_000_000, output_per_mtok: 15_000_000 };
  t.equal(usageCost({ prompt_tokens: PROMPT, completion_tokens: OUTPUT, total_tokens: PROMPT + OUTPUT, cached_tokens: READS, cache_write_tokens: WRITES }, plain),
    expected(UNCACHED, READS, WRITES, OUTPUT, { ...plain, cached_input_per_mtok: 3_000_000, cache_write_per_mtok: 3_000_000 }));
  // Hold: prompt estimate x the dearest prompt price. A wallet that affords the input-priced worst
  // case but not the write-priced one is refused with 402.
  const up = await startUpstream((_req, res) => json(res, 200, completionBody('x')));
  const c = baseConfig();
  c.accounts[0].wallet_units = 1000;
  c.providers.up = { kind: 'openai', base_url: up.baseUrl };
  c.models.push({ id: 'w', provider: 'up', context_window: 100000, max_output_tokens: 10, price: { input_per_mtok: 1_000_000, output_per_mtok: 0, cache_write_per_mtok: 1_000_000_000 } });
  const g = await startGateway(c);
  t.teardown(async () => { await g.close(); await up.close(); });
  const res = await fetch(`${g.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'w', messages: [{ role: 'user', content: 'a few words of prompt' }] }),
  });
  t.equal(res.status, 402);
  t.equal((await res.json() as any).code, 'insufficient_credits');
  t.equal(up.requests.length, 0, 'the upstream was never called');
});

t.test('implausible breakdowns are no usage at all (the gateway counts); absent ones are none', async (t) => {
  const u = (details: Record<string, unknown>) => openaiUsage({ prompt_tokens: 10, completion_tokens: 5, ...details });
  t.same(u({}), { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
  t.same(u({ prompt_tokens_details: null, completion_tokens_details: null }), { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
  t.same(u({ prompt_tokens_details: { cached_tokens: 10 } }), { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, cached_tokens: 10 });
  t.equal(u({ prompt_tokens_details: { cached_tokens: 11 } }), undefined, 'cached above prompt');
  t.equal(u({ prompt_tokens_details: { cached_tokens: 6, cache_write_tokens: 5 } }), undefined, 'reads + writes above prompt');
  t.equal(u({ prompt_tokens_details: { cached_tokens: 1.5 } }), undefined, 'not a count');
  t.equal(u({ prompt_tokens_details: { cached_tokens: -1 } }), undefined, 'negative');
  t.equal(u({ prompt_tokens_details: { cached_tokens: '3' } }), undefined, 'a string');
  t.equal(u({ completion_tokens_details: { reasoning_tokens: 6 } }), undefined, 'reasoning above completion');
  t.same(openaiUsage({ input_tokens: 10, output_tokens: 5, input_tokens_details: { cached_tokens: 4 }, output_tokens_details: { reasoning_tokens: 2 } }),
    { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, cached_tokens: 4, reasoning_tokens: 2 }, 'Responses-style spelling');
  t.same(anthropicUsage({ input_tokens: 3, output_tokens: 2, cache_read_input_tokens: 4, cache_creation_input_tokens: 5 }),
    { prompt_tokens: 12, completion_tokens: 2, total_tokens: 14, cached_tokens: 4, cache_write_tokens: 5 });
  t.strictSame(anthropicUsage({ input_tokens: 3, output_tokens: 2, cache_read_input_tokens: null }), { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }, 'null: none');
  t.equal(anthropicUsage({ input_tokens: 3, output_tokens: 2, cache_read_input_tokens: 1.5 }), undefined, 'a read count that is not a count');
  t.equal(anthropicUsage({ input_tokens: Number.MAX_SAFE_INTEGER, output_tokens: 2, cache_read_input_tokens: 1 }), undefined, 'a prompt past 2^53');

  // Through the gateway: an implausible breakdown is counted by the gateway, not billed as sent.
  const up = await startUpstream((_req, res) => json(res, 200, completionBody('Hello there', {
    usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8, prompt_tokens_details: { cached_tokens: 900 } },
  })));
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: up.baseUrl };
  c.models.push({ id: 'm', provider: 'up', price: PRICE });
  const g = await startGateway(c);
  t.teardown(async () => { await g.close(); await up.close(); });
  const res = await fetch(`${g.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }] }),
  });
  const b: any = await res.json();
  t.equal(res.status, 200);
  t.equal(b.usage.prompt_tokens_details, undefined, 'no breakdown passed on');
  t.not(b.usage.prompt_tokens, 5, 'the gateway counted the prompt itself');
  t.equal(res.headers.get('x-tollgate-units-charged'), String(usageCost(b.usage, PRICE)));
});

t.test('property: usage read from either upstream kind costs exactly the formula in BigInt', async (t) => {
  const count = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
  const small = fc.integer({ min: 0, max: 2 ** 40 });
  const priceUnits = fc.oneof(fc.integer({ min: 0, max: 2 ** 31 }), fc.constantFrom(0, 1, 999_999, 1_000_001, 1e300, Number.MAX_SAFE_INTEGER));
  const price = fc.record({ input_per_mtok: priceUnits, output_per_mtok: priceUnits, cached_input_per_mtok: priceUnits, cache_write_per_mtok: priceUnits });
  await holds(t, 'anthropic usage: input + reads + writes, each at its price', fc.property(small, small, small, count, price, (input, reads, writes, output, p) => {
    const usage = anthropicUsage({ input_tokens: input, cache_read_input_tokens: reads, cache_creation_input_tokens: writes, output_tokens: output });
    const safe = Number.isSafeInteger(input + reads + writes + output);
    if (!safe) { if (usage !== undefined) throw new Error('a total past 2^53 was accepted'); return; }
    if (usage === undefined) throw new Error('plausible usage refused');
    const got = usageCost(usage, p);
    const want = expected(input, reads, writes, output, p);
    if (got !== want) throw new Error(`${got} != ${want}`);
  }), 300);
  await holds(t, 'openai usage: the cached part out of the input-priced part; implausible = none', fc.property(small, small, small, small, small, price, (prompt, cached, writes, output, reasoning, p) => {
    const usage = openaiUsage({
      prompt_tokens: prompt, completion_tokens: output, total_tokens: prompt + output,
      prompt_tokens_details: { cached_tokens: cached, cache_write_tokens: writes }, completion_tokens_details: { reasoning_tokens: reasoning },
    });
    const plausible = cached + writes <= prompt && reasoning <= output;
    if (!plausible) { if (usage !== undefined) throw new Error('implausible usage accepted'); return; }
    if (usage === undefined) throw new Error('plausible usage refused');
    if (usage.reasoning_tokens !== reasoning) throw new Error('reasoning lost');
    const got = usageCost(usage, p);
    const want = expected(prompt - cached - writes, cached, writes, output, p);
    if (got !== want) throw new Error(`${got} != ${want}`);
  }), 300);
});
