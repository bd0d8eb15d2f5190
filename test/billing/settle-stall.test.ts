// Redis stalls while debits are in flight (CONTRACT section 16: "a settle whose outcome is
// unknown is resolved before the answer: the request is answered and recorded with what the
// store applied; a 503 is never debited"). A real redis-server is stopped (SIGSTOP) for 3 s
// under a load of concurrent requests, streamed and not; its debits time out at
// store.timeout_ms, then land when it resumes. Once all is quiet: the usage records add up to
// what the wallet lost, to the unit; no request answered 503 (or cut by an in-stream error) was
// debited; every complete answer was debited exactly once, with what it reported.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY, baseConfig, sseData, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream } from '../helpers/upstream.js';

const ADMIN = 'settle-stall-admin';
/** A unit per prompt token, two per completion token. */
const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 2_000_000 };
const WORDS = [' a', ' b', ' c', ' d'];
const STREAM_UNITS = 12 + 2 * WORDS.length;
const JSON_UNITS = 12 + 2 * 7;
const WALLET = 1_000_000;

function stallConfig(redisUrl: string, upstream: string, prefix: string, store: Record<string, unknown> = {}): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.store = { kind: 'redis', url: redisUrl, prefix, timeout_ms: 300, ...store };
  c.plans.free = { paid: false, max_concurrent: 1000, requests_per_minute: 1_000_000, tokens_per_minute: 1_000_000_000 };
  c.providers.up = { kind: 'openai', base_url: upstream };
  c.models.push({ id: 'm', provider: 'up', price: PRICE });
  return c;
}

/**
 * Answers at once (the settle follows right away), a stream in a few paced frames; while its
 * gate is closed, answers wait for it to open (so that debits are under way when Redis stops).
 */
const gate = { closed: undefined as Promise<void> | undefined, open: () => {} };
function closeGate(): void {
  gate.closed = new Promise((r) => { gate.open = () => { gate.closed = undefined; r(); }; });
}

function stallUpstream(): Promise<FakeUpstream> {
  return startUpstream(async (_req, res, body) => {
    await gate.closed;
    if (body.stream) {
      await writeSse(res, streamFrames(WORDS), { pauseMs: 5 });
      return;
    }
    json(res, 200, completionBody('ok'));
  });
}

type Kind = 'ok' | 'refused' | 'cut' | string;
interface Sent { id: string; stream: boolean; kind: Kind; charged?: number; reached: boolean; ms: number }

/** One request with its own x-request-id, and how it ended. */
async function send(url: string, id: string, stream: boolean, up: FakeUpstream): Promise<Sent> {
  const sent: Sent = { id, stream, kind: 'pending', reached: false, ms: 0 };
  const started = Date.now();
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', signal: AbortSignal.timeout(30_000),
      headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'x-request-id': id },
      body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: id }], max_tokens: 50, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
    });
    const text = await res.text();
    if (res.status === 503) {
      const body = JSON.parse(text);
      sent.kind = body.code === 'service_unavailable' && res.headers.get('retry-after') === '1' ? 'refused' : `bad 503 ${text}`;
    } else if (res.status !== 200) {
      sent.kind = `bad ${res.status} ${text}`;
    } else if (!stream) {
      const body = JSON.parse(text);
      sent.kind = body.choices?.[0]?.message?.content === 'ok' ? 'ok' : `bad body ${text}`;
      sent.charged = Number(res.headers.get('x-tollgate-units-charged'));
    } else {
      const sse = sseData(text);
      const last = sse.events.at(-1);
      if (sse.done) {
        sent.kind = last?.usage?.total_tokens === 12 + WORDS.length ? 'ok' : `bad usage chunk ${JSON.stringify(last)}`;
        sent.charged = STREAM_UNITS;
      } else {
        sent.kind = last?.code === 'service_unavailable' ? 'cut' : `bad stream end ${JSON.stringify(last)}`;
      }
    }
  } catch (err) {
    sent.kind = `failed: ${(err as Error).message}`;
  }
  sent.reached = up.requests.some((r) => r.body?.messages?.[0]?.content === id);
  sent.ms = Date.now() - started;
  return sent;
}

/**
 * `workers` clients sending requests back to back, plus one new request every 100 ms (so that
 * holds meet the stall too, whatever the workers wait for), until `stop` says so.
 */
async function load(url: string, up: FakeUpstream, tag: string, workers: number, stop: () => boolean): Promise<Sent[]> {
  const all: Sent[] = [];
  const extra: Array<Promise<void>> = [];
  await Promise.all([
    ...Array.from({ length: workers }, async (_, w) => {
      for (let n = 0; !stop(); n++) all.push(await send(url, `${tag}-${w}-${n}`, (w + n) % 2 === 0, up));
    }),
    (async () => {
      for (let n = 0; !stop(); n++) {
        extra.push(send(url, `${tag}-x-${n}`, n % 2 === 0, up).then((s) => { all.push(s); }));
        await sleep(100);
      }
    })(),
  ]);
  await Promise.all(extra);
  return all;
}

async function admin(url: string, path: string): Promise<any> {
  const res = await fetch(`${url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  return res.status === 200 ? res.json() : undefined;
}

/** Every usage record of the demo account, by request id. */
async function records(url: string): Promise<Map<string, any>> {
  const byId = new Map<string, any>();
  let cursor: string | null = null;
  do {
    const page: any = await admin(url, `/usage/records?account=demo&limit=1000${cursor === null ? '' : `&cursor=${cursor}`}`);
    if (page === undefined) throw new Error('records not readable');
    for (const r of page.records) {
      if (byId.has(r.request_id)) throw new Error(`two records for ${r.request_id}`);
      byId.set(r.request_id, r);
    }
    cursor = page.next_cursor;
  } while (cursor !== null);
  return byId;
}

/**
 * Waits until the store is back and quiet (no hold open, the records stop changing), then
 * checks the ledger against the answers and the records. Returns the tally of outcomes.
 */
async function checkLedger(t: any, url: string, sent: Sent[]): Promise<Record<string, number>> {
  let acct: any;
  let recs = new Map<string, any>();
  let stable = 0;
  for (let i = 0; i < 400 && stable < 5; i++) {
    await sleep(50);
    acct = await admin(url, '/accounts/demo').catch(() => undefined);
    if (acct === undefined || acct.held_units !== 0) { stable = 0; continue; }
    const now = await records(url).catch(() => undefined);
    if (now === undefined) { stable = 0; continue; }
    const sum = [...now.values()].reduce((s, r) => s + r.units, 0);
    const prev = [...recs.values()].reduce((s, r) => s + r.units, 0);
    stable = now.size === recs.size && sum === prev && acct.balance_units + sum === WALLET ? stable + 1 : 0;
    recs = now;
  }
  const tally: Record<string, number> = {};
  for (const s of sent) tally[s.kind] = (tally[s.kind] ?? 0) + 1;
  t.comment(`outcomes: ${JSON.stringify(tally)}`);
  t.strictSame(sent.filter((s) => !['ok', 'refused', 'cut'].includes(s.kind)).map((s) => `${s.id}: ${s.kind}`), [], 'only answers the contract allows');
  t.equal(acct?.held_units, 0, 'no hold left open');

  const unitsRecorded = [...recs.values()].reduce((s, r) => s + r.units, 0);
  const debited = WALLET - acct.balance_units;
  t.equal(unitsRecorded, debited, `usage records add up to the wallet's debits (records ${unitsRecorded}, ledger ${debited})`);
  t.equal(acct.usage.day.units, debited, 'and to the day\'s usage window');

  const ok = sent.filter((s) => s.kind === 'ok');
  const failed = sent.filter((s) => s.kind === 'refused' || s.kind === 'cut');
  const okWrong = ok.filter((s) => recs.get(s.id)?.units !== s.charged || recs.get(s.id)?.status !== 200);
  t.strictSame(okWrong.map((s) => `${s.id}: answered ${s.charged}, recorded ${JSON.stringify(recs.get(s.id))}`), [],
    'every complete answer is recorded with the units it reported');
  t.ok(ok.every((s) => s.charged === (s.stream ? STREAM_UNITS : JSON_UNITS)), 'each charged its cost');
  const failedCharged = failed.filter((s) => (recs.get(s.id)?.units ?? 0) !== 0);
  t.strictSame(failedCharged.map((s) => s.id), [], 'no 503 or cut stream is recorded as charged');
  const expected = ok.reduce((s, o) => s + o.charged!, 0);
  t.equal(debited, expected, `the wallet lost exactly what the complete answers were charged (${debited} vs ${expected}: the difference is debits of 503s)`);
  t.equal(acct.usage.day.requests, ok.length, 'one settled request per complete answer, none for a 503');
  return tally;
}

async function setup(t: any, store: Record<string, unknown> = {}): Promise<{ redis: TestRedis; up: FakeUpstream; gw: TestGateway }> {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const up = await stallUpstream();
  t.teardown(() => up.close());
  const gw = await startGateway(stallConfig(redis.url, up.baseUrl, `stall-${process.pid}-${Math.random().toString(36).slice(2)}:`, store));
  t.teardown(() => gw.close());
  for (let i = 0; i < 200 && (await admin(gw.url, '/accounts/demo').catch(() => undefined)) === undefined; i++) await sleep(25);
  return { redis, up, gw };
}

/** Redis stopped for 3 s, with the answers that were held at the upstream arriving just after it stopped. */
async function stall(redis: TestRedis): Promise<void> {
  await sleep(300);
  closeGate();
  await sleep(300);
  redis.freeze();
  gate.open();
  await sleep(3000);
  redis.thaw();
}

const rejections: unknown[] = [];
const tripWire = (err: unknown) => { rejections.push(err); };
process.on('unhandledRejection', tripWire);
t.teardown(() => { process.off('unhandledRejection', tripWire); });

t.test('a 3 s stall under load: records follow the ledger, no 503 is debited, each 200 once', async (t) => {
  const { redis, up, gw } = await setup(t);
  let stop = false;
  const running = load(gw.url, up, 'a', 8, () => stop);
  await stall(redis);
  await sleep(600);
  stop = true;
  const sent = await running;
  const tally = await checkLedger(t, gw.url, sent);
  t.ok((tally.ok ?? 0) > 0 && (tally.refused ?? 0) > 0, 'both served and refused requests');
  // The debits in flight when Redis stopped waited for it (store.settle_wait_ms, 10 s by
  // default, outlasts the stall): each such request was answered, none refused.
  const lost = sent.filter((s) => s.reached && s.kind !== 'ok');
  t.strictSame(lost.map((s) => `${s.id}: ${s.kind}`), [], 'every request that reached the upstream got its complete answer');
  t.ok(sent.some((s) => s.kind === 'ok' && s.ms > 2000), 'some debits were in flight during the stall, and waited for it');
  t.strictSame(rejections, [], 'no unhandled rejection');
});

t.test('a stall longer than store.settle_wait_ms: those requests are answered 503 and their debits undone', async (t) => {
  const { redis, up, gw } = await setup(t, { settle_wait_ms: 400 });
  let stop = false;
  const running = load(gw.url, up, 'b', 8, () => stop);
  await stall(redis);
  await sleep(600);
  stop = true;
  const sent = await running;
  const tally = await checkLedger(t, gw.url, sent);
  t.ok((tally.ok ?? 0) > 0, 'requests were served');
  // Their debits landed when Redis resumed, after the answer: each was given back.
  const late = sent.filter((s) => s.reached && s.kind !== 'ok');
  t.ok(late.length > 0, `some requests that reached the upstream were refused or cut (${late.length})`);
  t.ok(late.every((s) => s.ms < 2500), 'each within settle_wait_ms and a store timeout, not after the stall');
  t.strictSame(rejections, [], 'no unhandled rejection');
});
