// The queue in front of a full fleet (CONTRACT section 13), through a real gateway and fake
// replicas at max_outstanding 1 and 2: who goes next (priority, then fair shares across
// accounts), 503 model_overloaded when max_wait_ms passes or max_queued are waiting (exact
// envelope and Retry-After, nothing charged, hold and slot released), a client that leaves
// while queued, x-tollgate-queue-ms, the /metrics series and GET /admin/upstreams' `queued`.

import t from 'tap';
import { request } from 'undici';
import { PRO_KEY, authHeaders, postChat, sseData } from '../helpers/gateway.js';
import { ADMIN, ask, holding, startFleet, until, type Fleet } from '../helpers/fleet.js';
import { schemas } from '../helpers/schemas.js';

const FLOOD = 'tg_flood_000000000000000000';
const TRICKLE = 'tg_trickle_0000000000000000';
const VIP = 'tg_vip_00000000000000000000';
const LOW = 'tg_low_00000000000000000000';

/** One replica (or `n`) held by its script, behind a queue; three more accounts on their plans. */
async function queued(t: any, provider: Record<string, any> = {}, n = 1): Promise<Fleet & { hold: ReturnType<typeof holding>[] }> {
  // A held request must outlast the test's steps on a loaded machine: timeout_ms is not what
  // these tests are about (the one that is sets its own).
  const f = await startFleet(t, n, { balance: 'least_outstanding', max_outstanding: 1, timeout_ms: 60_000, ...provider }, {
    config: (c) => {
      c.plans.batch = { priority: 'normal', fair_weight: 1 };
      c.plans.vip = { priority: 'high' };
      c.plans.cheap = { priority: 'low' };
      c.accounts.push(
        { id: 'cheap', plan: 'cheap', wallet_units: 1000000, keys: [LOW] },
        { id: 'flood', plan: 'batch', wallet_units: 1000000, keys: [FLOOD] },
        { id: 'trickle', plan: 'batch', wallet_units: 1000000, keys: [TRICKLE] },
        { id: 'vip', plan: 'vip', wallet_units: 1000000, keys: [VIP] },
      );
    },
  });
  const hold = f.replicas.map((_r, i) => holding(`r${i}`));
  f.replicas.forEach((r, i) => r.setScript(hold[i]!.script));
  return { ...f, hold };
}

/** An admin call with a body (Fleet.admin only GETs). */
async function adminSend(f: Fleet, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${f.gw.url}/admin${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

/** The usage records of these request ids (written once each answer is closed), by id. */
async function recordsOf(f: Fleet, ids: string[]): Promise<Map<string, any>> {
  const found = new Map<string, any>();
  for (let i = 0; i < 150 && found.size < ids.length; i++) {
    const page = await f.admin('/usage/records?since=2000-01-01&limit=1000');
    for (const r of page.records) if (ids.includes(r.request_id)) found.set(r.request_id, r);
    if (found.size < ids.length) await new Promise((r) => setTimeout(r, 20));
  }
  return found;
}

const queuedNow = async (f: Fleet) => (await f.admin('/upstreams')).providers.fleet.queued as number;
const heldBy = (f: Fleet) => f.replicas.flatMap((r) => r.requests.filter((s) => s.method === 'POST').map((s) => s.body.messages[0].content));

t.test('order: a higher priority first, then fair shares across accounts; x-tollgate-queue-ms', async (t) => {
  const f = await queued(t);
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const answers: Array<Promise<{ status: number; headers: any }>> = [];
  const send = async (key: string, content: string) => {
    const before = await queuedNow(f);
    answers.push(postChat(f.gw.url, ask(content), authHeaders(key)));
    t.ok(await until(async () => (await queuedNow(f)) === before + 1), `${content} is queued`);
  };
  for (let i = 0; i < 4; i++) await send(FLOOD, `flood${i}`);
  await send(TRICKLE, 'trickle0');
  await send(VIP, 'vip0');
  const view = await f.admin('/upstreams');
  t.equal(view.providers.fleet.queued, 6, 'GET /admin/upstreams shows the queue');
  t.equal(view.providers.echo.queued, 0, 'a provider without a queue shows 0');
  const metrics = await f.metrics();
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="normal"\} 5/);
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="high"\} 1/);
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="low"\} 0/);
  t.equal(f.chats()[0], 1, 'only the first reached the replica');

  for (let i = 0; i < 6; i++) {
    f.hold[0]!.release();
    t.ok(await until(() => f.chats()[0] === i + 2 && f.hold[0]!.waiting() === 1), `the next one took the free slot (${i + 2})`);
  }
  t.strictSame(heldBy(f), ['busy', 'vip0', 'flood0', 'trickle0', 'flood1', 'flood2', 'flood3'],
    'high priority first; the trickle goes right after the flood\'s first, not behind all four');
  f.hold[0]!.release();
  const one = await first;
  t.equal(one.status, 200);
  t.equal(one.headers['x-tollgate-queue-ms'], '0', 'not queued: 0');
  const waits = new Map<string, number>([[String(one.headers['x-request-id']), 0]]);
  for (const a of answers) {
    const res = await a;
    t.equal(res.status, 200);
    t.ok(Number(res.headers['x-tollgate-queue-ms']) > 0, `queued answer carries its wait (${res.headers['x-tollgate-queue-ms']} ms)`);
    waits.set(String(res.headers['x-request-id']), Number(res.headers['x-tollgate-queue-ms']));
  }
  const records = await recordsOf(f, [...waits.keys()]);
  t.equal(records.size, 7, 'a usage record for each');
  for (const [id, ms] of waits) t.equal(records.get(id)?.queue_ms, ms, `${id}: the record's queue_ms is the wait its answer showed (${ms})`);
  t.equal(await queuedNow(f), 0);
  t.match(await f.metrics(), /tollgate_queue_wait_seconds_count\{provider="fleet",outcome="dispatched"\} 6/);
  for (const account of ['demo', 'flood', 'trickle', 'vip']) t.equal(await f.gw.gateway.slotsInUse(account), 0, `${account}: every slot free`);
});

t.test('max_wait_ms: 503 model_overloaded, exact envelope and Retry-After; nothing charged, hold and slot released', async (t) => {
  const f = await queued(t, { queue: { max_wait_ms: 300, max_queued: 1 } });
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const before = await f.admin('/accounts/flood');
  const started = Date.now();
  const waiting = postChat(f.gw.url, ask('will time out'), authHeaders(FLOOD));
  t.ok(await until(async () => (await queuedNow(f)) === 1));

  // max_queued 1: the next is refused at once.
  const full = await postChat(f.gw.url, ask('no room'), authHeaders(TRICKLE));
  t.equal(full.status, 503);
  t.strictSame(full.json(), {
    message: "The model 'm' is overloaded: its queue is full; retry later.", type: 'server_error', param: null, code: 'model_overloaded',
    request_id: full.headers['x-request-id'],
    error: { message: "The model 'm' is overloaded: its queue is full; retry later.", type: 'server_error', param: null, code: 'model_overloaded' },
  });
  t.same(schemas.error(full.json()), []);
  t.equal(full.headers['retry-after'], '1', 'nothing has left the queue yet: max_wait_ms, at least 1 s');
  t.equal(full.headers['retry-after-ms'], '300');
  t.equal(full.headers['x-tollgate-queue-ms'], '0');

  const late = await waiting;
  const took = Date.now() - started;
  t.equal(late.status, 503);
  const body = late.json();
  t.match(body, { code: 'model_overloaded', type: 'server_error', param: null, error: { code: 'model_overloaded', type: 'server_error' } });
  t.equal(body.message, "The model 'm' is overloaded: no replica had room within 300 ms; retry later.");
  t.same(schemas.error(body), []);
  t.ok(took >= 280 && took < 2000, `refused after max_wait_ms (${took} ms)`);
  t.match(late.headers['retry-after'], /^[1-9]\d*$/);
  t.ok(Number(late.headers['x-tollgate-queue-ms']) >= 280, `x-tollgate-queue-ms ${late.headers['x-tollgate-queue-ms']}`);
  t.equal(await queuedNow(f), 0);

  const after = await f.admin('/accounts/flood');
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0, 'the hold is released');
  t.equal(after.available_units, before.available_units);
  t.equal(await f.gw.gateway.slotsInUse('flood'), 0, 'the concurrency slot is released');
  t.equal(await f.gw.gateway.slotsInUse('trickle'), 0);
  t.equal(f.chats()[0], 1, 'the refused requests reached no replica');
  const [fullId, lateId] = [String(full.headers['x-request-id']), String(late.headers['x-request-id'])];
  const refusedRecords = await recordsOf(f, [fullId, lateId]);
  t.match(refusedRecords.get(fullId), { status: 503, units: 0, queue_ms: 0, usage_source: 'none' }, 'refused on arrival (max_queued): waited 0');
  t.match(refusedRecords.get(lateId), { status: 503, units: 0, usage_source: 'none', queue_ms: Number(late.headers['x-tollgate-queue-ms']) },
    'refused after max_wait_ms: its record keeps the wait');
  t.match(await f.metrics(), /tollgate_queue_wait_seconds_count\{provider="fleet",outcome="refused"\} 2/);
  t.match(await f.metrics(), /tollgate_requests_total\{route="chat",status="503",code="model_overloaded"\} 2/);
  f.hold[0]!.release();
  t.equal((await first).status, 200);
});

t.test('a client that disconnects while queued leaves at once, charged nothing', async (t) => {
  const f = await queued(t);
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const ac = new AbortController();
  const gone = request(`${f.gw.url}/v1/chat/completions`, {
    method: 'POST', headers: authHeaders(FLOOD), body: JSON.stringify(ask('leaves')), signal: ac.signal,
  }).catch((err: Error) => err);
  t.ok(await until(async () => (await queuedNow(f)) === 1));
  const stays = postChat(f.gw.url, ask('stays'), authHeaders(TRICKLE));
  t.ok(await until(async () => (await queuedNow(f)) === 2));
  ac.abort();
  t.ok(await gone instanceof Error);
  t.ok(await until(async () => (await queuedNow(f)) === 1, 1000), 'it left the queue at once');
  t.ok(await until(async () => (await f.gw.gateway.slotsInUse('flood')) === 0, 1000), 'its slot is free');
  const flood = await f.admin('/accounts/flood');
  t.match(flood, { balance_units: 1000000, held_units: 0 }, 'nothing charged, nothing held');
  f.hold[0]!.release();
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  f.hold[0]!.release();
  t.equal((await first).status, 200);
  t.equal((await stays).status, 200);
  t.strictSame(heldBy(f), ['busy', 'stays'], 'the request that left never reached the replica');
  t.match(await f.metrics(), /tollgate_queue_wait_seconds_count\{provider="fleet",outcome="gone"\} 1/);
});

t.test('streams wait too: a refusal is a real 503 even past sse_keepalive_ms; a dispatched stream carries its wait', async (t) => {
  const f = await queued(t, { max_outstanding: 2, queue: { max_wait_ms: 400 } }, 1);
  const busy = [postChat(f.gw.url, ask('busy0')), postChat(f.gw.url, ask('busy1', {}), authHeaders(PRO_KEY))];
  t.ok(await until(() => f.hold[0]!.waiting() === 2), 'max_outstanding 2: two in flight');
  const refused = await postChat(f.gw.url, ask('stream late', { stream: true }), authHeaders(FLOOD));
  t.equal(refused.status, 503, 'no keep-alive committed the stream while it was queued');
  t.match(refused.headers['content-type'], /application\/json/);
  t.equal(refused.json().code, 'model_overloaded');

  const streamed = postChat(f.gw.url, ask('stream ok', { stream: true }), authHeaders(TRICKLE));
  t.ok(await until(async () => (await queuedNow(f)) === 1));
  f.hold[0]!.release();
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  f.hold[0]!.release();
  const res = await streamed;
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /text\/event-stream/);
  t.ok(Number(res.headers['x-tollgate-queue-ms']) > 0);
  const sse = sseData(res.text);
  t.ok(sse.done);
  t.equal(sse.events.map((e) => e.choices[0]?.delta?.content ?? '').join(''), 'r0');
  for (const p of busy) t.equal((await p).status, 200);
}, );

t.test('with no queue (queue: null) a full fleet is skipped as before', async (t) => {
  const f = await queued(t, { queue: null });
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const res = await postChat(f.gw.url, ask('x'));
  t.equal(res.status, 503);
  t.equal(res.json().code, 'model_unavailable');
  t.equal(res.headers['x-tollgate-queue-ms'], undefined);
  f.hold[0]!.release();
  const ok = await first;
  t.equal(ok.status, 200);
  const records = await recordsOf(f, [String(res.headers['x-request-id']), String(ok.headers['x-request-id'])]);
  t.strictSame([...records.values()].map((r) => r.queue_ms), [0, 0], 'no queue: queue_ms 0 in the records');
});

t.test('a wait does not eat the provider\'s timeout_ms: the target\'s time starts once it has a replica', async (t) => {
  // timeout_ms 2000: 1.2 s queued, then 1.2 s upstream, is still answered.
  const f = await queued(t, { timeout_ms: 2000, queue: { max_wait_ms: 1500 } });
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const waiting = postChat(f.gw.url, ask('patient'), authHeaders(FLOOD));
  t.ok(await until(async () => (await queuedNow(f)) === 1));
  await new Promise((r) => setTimeout(r, 1200));
  f.hold[0]!.release();
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  await new Promise((r) => setTimeout(r, 1200));
  f.hold[0]!.release();
  t.equal((await first).status, 200);
  const res = await waiting;
  t.equal(res.status, 200, `answered after ${res.headers['x-tollgate-queue-ms']} ms queued`);
  t.ok(Number(res.headers['x-tollgate-queue-ms']) >= 1100);
});

t.test("a key's own priority goes before its plan's: a high key of a low plan ahead of normal; cleared, it waits in its plan's band again", async (t) => {
  const f = await queued(t);
  const issued = await adminSend(f, 'POST', '/accounts/cheap/keys', { name: 'support bot', priority: 'high' });
  t.equal(issued.status, 201, JSON.stringify(issued.body));
  const BOT = issued.body.key as string;
  const first = postChat(f.gw.url, ask('busy'));
  t.ok(await until(() => f.hold[0]!.waiting() === 1));
  const answers: Array<Promise<{ status: number }>> = [];
  const send = async (key: string, content: string) => {
    const before = await queuedNow(f);
    answers.push(postChat(f.gw.url, ask(content), authHeaders(key)));
    t.ok(await until(async () => (await queuedNow(f)) === before + 1), `${content} is queued`);
  };
  await send(LOW, 'plan-low');
  await send(FLOOD, 'normal0');
  await send(BOT, 'key-high');
  const metrics = await f.metrics();
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="high"\} 1/, 'the key\'s request waits in the high band');
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="low"\} 1/, 'the plan\'s other key in the low one');
  t.match(metrics, /tollgate_queue_depth\{provider="fleet",priority="normal"\} 1/);

  const cleared = await adminSend(f, 'PATCH', `/keys/${issued.body.id}`, { priority: null });
  t.equal(cleared.status, 200);
  t.equal(cleared.body.priority, null);
  // Already queued: the request keeps the band it entered with. The next one takes the plan's.
  await send(BOT, 'key-cleared');
  await send(FLOOD, 'normal1');
  t.match(await f.metrics(), /tollgate_queue_depth\{provider="fleet",priority="low"\} 2/, 'cleared: the plan\'s band');

  for (let i = 0; i < 5; i++) {
    f.hold[0]!.release();
    t.ok(await until(() => f.chats()[0] === i + 2 && f.hold[0]!.waiting() === 1), `the next one took the free slot (${i + 2})`);
  }
  t.strictSame(heldBy(f), ['busy', 'key-high', 'normal0', 'normal1', 'plan-low', 'key-cleared'],
    'the high key first, though its plan is low; the normal band next; the low band (the plan, and the key once cleared) last, in arrival order');
  f.hold[0]!.release();
  t.equal((await first).status, 200);
  for (const a of answers) t.equal((await a).status, 200);
  t.equal(await queuedNow(f), 0);
});
