// A full queue is shared (CONTRACT sections 13 and 21), served from a YAML file by `tollgate
// serve` in front of two fake replicas at max_outstanding 1, through the openai SDK and raw HTTP.
// One account's flood fills max_queued; another account's requests still queue, each taking
// the place of the flood's newest, up to its share, and are served. With fairness none, a high
// priority request takes the place of the newest low one, which is answered 503
// model_overloaded with Retry-After at once: nothing charged, its hold and its concurrency slot
// released (the account's next request is not refused too_many_concurrent), a usage record
// like any refusal's.

import t from 'tap';
import OpenAI from 'openai';
import { ADMIN, PRICE, metric, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { holding, until } from '../helpers/fleet.js';
import { startUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const FLOOD = 'tg_flood_000000000000000000';
const OTHER = 'tg_other_000000000000000000';
const CHEAP = 'tg_cheap_000000000000000000';
const VIP = 'tg_vip_00000000000000000000';

const hold = holding('replica');
const replicas = [await startUpstream(hold.script), await startUpstream(hold.script)];
t.teardown(async () => { for (const r of replicas) await r.close(); });

type Answer = { status: number; code?: string; retryAfter?: string | null; queueMs?: string | null; requestId?: string | null; content?: string };

/** A chat request through the SDK, its outcome as a value (an APIError's status and code, or the answer). */
function chat(client: OpenAI, content: string): Promise<Answer> {
  return client.chat.completions.create({ model: 'm-fleet', messages: [{ role: 'user', content }], max_tokens: 8 }).withResponse().then(
    ({ data, response }) => ({ status: response.status, content: data.choices[0]!.message.content ?? '', queueMs: response.headers.get('x-tollgate-queue-ms'), requestId: response.headers.get('x-request-id') }),
    (err: unknown) => {
      if (!(err instanceof OpenAI.APIError)) throw err;
      return {
        status: err.status ?? 0, code: String(err.code), retryAfter: err.headers?.get('retry-after'), queueMs: err.headers?.get('x-tollgate-queue-ms'),
        requestId: err.headers?.get('x-request-id'),
      };
    },
  );
}

/** `answer` if it comes within 10 s (a refusal comes at once), else a marker that fails the match. */
function soon(answer: Promise<Answer>): Promise<Answer> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<Answer>((r) => { timer = setTimeout(() => r({ status: -1, code: 'still waiting after 10 s' }), 10_000); });
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}

function config(queue: Record<string, unknown>) {
  return operatorConfig({
    plans: {
      free: { paid: false, requests_per_minute: 1000 },
      batch: { paid: true },
      cheap: { paid: true, priority: 'low', max_concurrent: 4 },
      vip: { paid: true, priority: 'high' },
    },
    accounts: [
      { id: 'flood', plan: 'batch', wallet_units: 1_000_000, keys: [FLOOD] },
      { id: 'other', plan: 'batch', wallet_units: 1_000_000, keys: [OTHER] },
      { id: 'cheap', plan: 'cheap', wallet_units: 1_000_000, keys: [CHEAP] },
      { id: 'vip', plan: 'vip', wallet_units: 1_000_000, keys: [VIP] },
    ],
    providers: {
      vllm: { kind: 'openai', targets: replicas.map((r) => ({ url: r.baseUrl })), max_outstanding: 1, queue: { max_wait_ms: 30_000, ...queue } },
    },
    models: [{ id: 'm-fleet', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  });
}

async function admin(url: string, path: string): Promise<any> {
  return (await fetch(`${url}/admin${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

t.test("a flood fills max_queued: another account's requests still queue, each in place of the flood's newest, and are served", async (t) => {
  const served = await serveFile(t, config({ max_queued: 4, fairness: 'account' }));
  const flood = new OpenAI({ apiKey: FLOOD, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const other = new OpenAI({ apiKey: OTHER, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const queued = async () => (await admin(served.url, '/upstreams')).providers.vllm.queued as number;

  const floods: Array<Promise<Answer>> = [];
  for (let i = 0; i < 2; i++) floods.push(chat(flood, `busy${i}`));
  t.ok(await until(() => hold.waiting() === 2, 10_000), 'the flood holds both replicas');
  for (let i = 0; i < 4; i++) {
    floods.push(chat(flood, `flood${i}`));
    t.ok(await until(async () => (await queued()) === i + 1), `flood${i} is queued`);
  }
  const more = await chat(flood, 'flood4');
  t.match(more, { status: 503, code: 'model_overloaded' }, 'the flood alone holds its whole share: its next is refused');

  // The other account: max_queued 4 between two equal accounts is 2 each.
  const others = [chat(other, 'other0'), chat(other, 'other1')];
  const [newest, next] = [await soon(floods[5]!), await soon(floods[4]!)];
  for (const [answer, name] of [[newest, 'flood3'], [next, 'flood2']] as const) {
    t.match(answer, { status: 503, code: 'model_overloaded' }, `${name} gave its place up`);
    t.match(answer.retryAfter, /^[1-9]\d*$/, `${name}: Retry-After`);
  }
  t.equal(await queued(), 4, 'still max_queued waiting: two of each');
  const third = await chat(other, 'other2');
  t.match(third, { status: 503, code: 'model_overloaded' }, 'the other account at its share is refused too');

  // The replicas free up: everyone queued is served, the two accounts interleaved.
  const seen = () => replicas.flatMap((r) => r.requests.filter((s) => s.method === 'POST').map((s) => s.body.messages[0].content as string));
  for (let i = 0; i < 3; i++) {
    hold.release();
    t.ok(await until(() => hold.waiting() === Math.min(2, 4 - 2 * i) && seen().length === Math.min(6, 4 + 2 * i)), `round ${i + 1}`);
  }
  for (const answer of [...await Promise.all(others)]) t.match(answer, { status: 200, content: 'replica' }, 'the other account is served');
  for (const i of [0, 1, 2, 3]) t.match(await floods[i]!, { status: 200 }, 'the flood\'s oldest are served');
  t.strictSame(seen().sort(), ['busy0', 'busy1', 'flood0', 'flood1', 'other0', 'other1'], 'the refused never reached a replica');
  t.equal(await metric(served.url, 'tollgate_queue_wait_seconds_count', { provider: 'vllm', outcome: 'refused' }), 4, 'two refused on arrival, two displaced');
  t.equal((await wallet(served.url, 'flood')).held_units, 0);
});

t.test('fairness none: a high priority takes the place of the newest low request: 503 model_overloaded at once, nothing charged, its slot free', async (t) => {
  const served = await serveFile(t, config({ max_queued: 2, fairness: 'none' }));
  const cheap = new OpenAI({ apiKey: CHEAP, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const vip = new OpenAI({ apiKey: VIP, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const queued = async () => (await admin(served.url, '/upstreams')).providers.vllm.queued as number;

  // cheap: max_concurrent 4: two running, two queued, all its slots in use.
  const running = [chat(cheap, 'busy0'), chat(cheap, 'busy1')];
  t.ok(await until(() => hold.waiting() === 2, 10_000));
  const low0 = chat(cheap, 'low0');
  t.ok(await until(async () => (await queued()) === 1));
  const before = await wallet(served.url, 'cheap');
  const low1 = chat(cheap, 'low1');
  t.ok(await until(async () => (await queued()) === 2));
  const overCap = await chat(cheap, 'over the cap');
  t.match(overCap, { status: 429, code: 'too_many_concurrent' }, 'cheap is at its max_concurrent');

  const high = chat(vip, 'high');
  const displaced = await soon(low1);
  t.match(displaced, { status: 503, code: 'model_overloaded' }, 'the newest low request gave its place up');
  t.match(displaced.retryAfter, /^[1-9]\d*$/);
  t.ok(Number(displaced.queueMs) >= 0, `x-tollgate-queue-ms ${displaced.queueMs}`);
  t.equal(await queued(), 2, 'low0 and high wait');
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'high' }), 1);
  t.equal(await metric(served.url, 'tollgate_queue_depth', { provider: 'vllm', priority: 'low' }), 1);
  const after = await wallet(served.url, 'cheap');
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, before.held_units, 'its hold released: the others\' holds only');

  // Its concurrency slot is free: the next request of the account passes its limits and meets
  // the full queue (no lower priority than low to take the place of).
  const raw = await fetch(`${served.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${CHEAP}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm-fleet', messages: [{ role: 'user', content: 'later' }], max_tokens: 8 }),
  });
  t.equal(raw.status, 503, 'not 429 too_many_concurrent');
  const body: any = await raw.json();
  t.match(body, { code: 'model_overloaded', type: 'server_error', param: null, error: { code: 'model_overloaded' } });
  t.same(schemas.error(body), []);
  t.ok(Number(raw.headers.get('retry-after')) >= 1);

  // The replicas free: high goes first, then low0; everyone left is answered.
  hold.release();
  t.ok(await until(() => hold.waiting() === 2), 'high and low0 took the replicas');
  hold.release();
  t.match(await high, { status: 200, content: 'replica' });
  t.match(await low0, { status: 200 });
  for (const r of running) t.match(await r, { status: 200 });
  const last = chat(cheap, 'and again');
  t.ok(await until(() => hold.waiting() === 1));
  hold.release();
  t.match(await last, { status: 200 }, 'the account is served again');
  t.equal((await wallet(served.url, 'cheap')).held_units, 0);

  // The displaced request's usage record: a refusal's, with the wait it had.
  let record: any;
  for (let i = 0; i < 150 && record === undefined; i++) {
    record = (await admin(served.url, '/usage/records?since=2000-01-01&limit=1000')).records.find((r: any) => r.request_id === displaced.requestId);
    if (record === undefined) await new Promise((r) => setTimeout(r, 20));
  }
  t.match(record, { status: 503, units: 0, usage_source: 'none', queue_ms: Number(displaced.queueMs) });
});
