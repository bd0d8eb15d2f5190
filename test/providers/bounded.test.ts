// Bounded work per upstream answer (CONTRACT section 10), through the real gateway against a
// fake upstream: an SSE line or event above 1 MiB and a non-streaming answer above
// providers.NAME.max_response_bytes are provider_error, the upstream call is aborted, and
// only what reached the client is charged.

import t from 'tap';
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { cost as exactCost } from '../../lib/billing/meter.js';
import { counter } from '../../lib/tokens/count.js';
import { MAX_SSE_LINE_BYTES } from '../../lib/sse/parser.js';
import { baseConfig, postChat, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { chunk, completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type SeenRequest } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

/** Units as the wallet and headers show them (the formula is exact in BigInt). */
const cost = (p: number, c: number, price: { input_per_mtok: number; output_per_mtok: number }) => Number(exactCost(p, c, price));

const ADMIN = 'bounded-admin-token-0123';
/** One unit per completion token, prompts free: a charge counts delivered tokens exactly. */
const PRICE = { input_per_mtok: 0, output_per_mtok: 1_000_000 };
const SMALL_LIMIT = 65536;

let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, completionBody('hi')));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  const provider = { base_url: up.baseUrl, timeout_ms: 10_000, circuit_failures: 1000 };
  c.providers.up = { kind: 'openai', ...provider };
  c.providers.small = { kind: 'openai', ...provider, max_response_bytes: SMALL_LIMIT };
  c.models.push(
    { id: 'm', provider: 'up', upstream_model: 'm-7b', context_window: 32768, max_output_tokens: 1000, price: PRICE },
    { id: 'small', provider: 'small', upstream_model: 'm-7b', context_window: 32768, max_output_tokens: 1000, price: PRICE },
  );
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const ask = (model: string, extra: Record<string, any> = {}) => ({ model, messages: [{ role: 'user', content: 'go' }], max_tokens: 100, ...extra });

async function wallet(): Promise<number> {
  const res = await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return ((await res.json()) as any).available_units;
}

function expectError(t: any, res: Awaited<ReturnType<typeof postChat>>, status: number, code: string) {
  t.equal(res.status, status, `status ${status}`);
  t.match(res.headers['content-type'], /^application\/json/);
  const body = res.json();
  t.same(schemas.error(body), [], 'envelope validates');
  t.equal(body.code, code);
  t.equal(body.error.code, code);
  t.equal(body.request_id, res.headers['x-request-id']);
  return body;
}

/** Writes `bytes` bytes of `fill` in 64 KiB pieces, honouring backpressure, until done or cut. */
async function pour(res: ServerResponse, bytes: number, fill = 'x'): Promise<void> {
  const piece = fill.repeat(64 * 1024);
  for (let sent = 0; sent < bytes && !res.destroyed; sent += piece.length) {
    if (!res.write(piece.slice(0, Math.min(piece.length, bytes - sent)))) {
      // Each wait takes its listeners off again: a long pour must not pile up 'close' listeners.
      await new Promise<void>((r) => {
        const done = () => { res.off('drain', done); res.off('close', done); r(); };
        res.once('drain', done);
        res.once('close', done);
      });
    }
  }
}

/**
 * Keeps an upstream answer open: the kernel may have taken every byte already, so only the
 * gateway aborting the call can end it (else the provider's timeout would, as a 504).
 */
function untilClosed(res: ServerResponse): Promise<void> {
  return new Promise((r) => { if (res.destroyed) r(); else res.once('close', () => r()); });
}

/** Waits (bounded) until the gateway has aborted the upstream request. */
async function aborted(seen: SeenRequest): Promise<boolean> {
  for (let i = 0; i < 200 && !seen.aborted; i++) await sleep(25);
  return seen.aborted;
}

async function nothingLost(t: any, before: number) {
  t.equal(await wallet(), before, 'wallet unchanged');
  t.equal(await gw.gateway.slotsInUse('demo'), 0, 'no slot left taken');
}

t.test('a 2 MiB SSE line before the first byte: 502 provider_error, upstream aborted, nothing charged', async (t) => {
  const before = await wallet();
  up.setScript(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: ');
    await pour(res, 2 * 1024 * 1024);
    await untilClosed(res);
  });
  const res = await postChat(gw.url, ask('m', { stream: true }));
  const body = expectError(t, res, 502, 'provider_error');
  t.equal(body.message, `The model provider 'up' sent an event stream line or event larger than ${MAX_SSE_LINE_BYTES} bytes.`);
  t.ok(await aborted(up.requests.at(-1)!), 'the upstream call was aborted');
  await nothingLost(t, before);
});

t.test('a 2 MiB SSE line after the first chunk: one in-stream provider_error, no [DONE], charged for what was sent', async (t) => {
  const before = await wallet();
  up.setScript(async (_req, res) => {
    await writeSse(res, streamFrames(['Hello']).slice(0, 2), { end: false });
    await sleep(50);
    res.write('data: ');
    await pour(res, 2 * 1024 * 1024);
    await untilClosed(res);
  });
  const res = await postChat(gw.url, ask('m', { stream: true }));
  t.equal(res.status, 200);
  const { events, done } = sseData(res.text);
  t.equal(events.map((e) => e.choices?.[0]?.delta?.content ?? '').join(''), 'Hello', 'the text before the long line reached the client');
  const last = events.at(-1);
  t.equal(last.code, 'provider_error');
  t.equal(last.error.code, 'provider_error');
  t.notOk(done, 'no [DONE]: the client knows the answer is incomplete');
  t.ok(await aborted(up.requests.at(-1)!), 'the upstream call was aborted');
  const delivered = counter('o200k_base')('Hello');
  t.equal(before - (await wallet()), cost(0, delivered, PRICE), 'charged exactly the delivered tokens');
  t.equal(await gw.gateway.slotsInUse('demo'), 0);
});

t.test('an SSE event whose data lines add up past 1 MiB is a provider_error too', async (t) => {
  const before = await wallet();
  up.setScript(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < 5 && !res.destroyed; i++) {
      res.write('data: ');
      await pour(res, 300 * 1024);
      res.write('\n');
    }
    await untilClosed(res);
  });
  const res = await postChat(gw.url, ask('m', { stream: true }));
  expectError(t, res, 502, 'provider_error');
  t.ok(await aborted(up.requests.at(-1)!), 'the upstream call was aborted');
  await nothingLost(t, before);
});

t.test('a large event under the limit streams through whole', async (t) => {
  const text = 'w'.repeat(900 * 1024);
  up.setScript((_req, res) => writeSse(res, [
    `data: ${JSON.stringify(chunk({ role: 'assistant', content: text }))}\n\n`,
    `data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`,
    'data: [DONE]\n\n',
  ], { split: 4096 }));
  const res = await postChat(gw.url, ask('m', { stream: true }));
  t.equal(res.status, 200);
  const { events, done } = sseData(res.text);
  t.equal(events.map((e) => e.choices?.[0]?.delta?.content ?? '').join(''), text);
  t.ok(done);
});

t.test('max_response_bytes: an announced Content-Length above it is refused up front, the call aborted', async (t) => {
  const before = await wallet();
  up.setScript(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(10 * 1024 * 1024) });
    await pour(res, 16 * 1024);
    // ... and the rest never comes: only the gateway can end this.
  });
  const res = await postChat(gw.url, ask('small'));
  const body = expectError(t, res, 502, 'provider_error');
  t.equal(body.message, `The model provider 'small' sent an answer larger than ${SMALL_LIMIT} bytes.`);
  t.ok(await aborted(up.requests.at(-1)!), 'the upstream call was aborted');
  await nothingLost(t, before);
});

t.test('max_response_bytes: a chunked answer is counted as it arrives and cut once past the limit', async (t) => {
  const before = await wallet();
  up.setScript(async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"choices":[{"index":0,"message":{"role":"assistant","content":"');
    await pour(res, 8 * 1024 * 1024, 'y');
    res.end('"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":5,"total_tokens":6}}');
  });
  const res = await postChat(gw.url, ask('small'));
  const body = expectError(t, res, 502, 'provider_error');
  t.equal(body.message, `The model provider 'small' sent an answer larger than ${SMALL_LIMIT} bytes.`);
  t.ok(await aborted(up.requests.at(-1)!), 'the upstream call was aborted');
  await nothingLost(t, before);
});

t.test('max_response_bytes: an answer within the limit is served and charged as usual', async (t) => {
  const before = await wallet();
  const answer = completionBody('z'.repeat(SMALL_LIMIT - 1000), { usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 } });
  t.ok(JSON.stringify(answer).length <= SMALL_LIMIT);
  up.setScript((_req, res) => json(res, 200, answer));
  const res = await postChat(gw.url, ask('small'));
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.content.length, SMALL_LIMIT - 1000);
  t.equal(res.headers['x-tollgate-units-charged'], String(cost(3, 5, PRICE)));
  t.equal(before - (await wallet()), cost(3, 5, PRICE));
});
