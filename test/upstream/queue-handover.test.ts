// A freed slot goes to a waiting request at once (CONTRACT section 13: no replica idles while
// requests wait; issue #46). Counted, not timed: on a Fleet with its queue, every release of a
// request hands its replica to the next in line before Fleet.end returns (the same tick, before
// any timer or promise), dispatches matching releases one for one; a queue depth scraped from
// the server a moment before requests ended there no longer keeps the replica from waiting
// requests until the next scrape (each request that ends lets one of the server's own waiting
// run). Then the same through a real gateway and a fake replica whose /metrics shows a short queue, as
// vLLM's does while prefills line up.

import t from 'tap';
import { validateConfig } from '../../lib/config/load.js';
import type { ChatRequest } from '../../lib/hub/chat.js';
import { AffinityKey, Fleet, type Replica, type Slot, type WaitResult } from '../../lib/upstream/balance/index.js';
import { ask, startFleet, until } from '../helpers/fleet.js';
import { postChat } from '../helpers/gateway.js';
import { json, type Script } from '../helpers/upstream.js';

const request: ChatRequest = { model: 'm', messages: [{ role: 'user', content: 'x' }], stream: false, includeUsage: false, maxOutputTokens: undefined, imageCount: 0, body: {} };

/** A fleet of `n` replicas at max_outstanding `max`, all of them full, with `waiting` requests queued behind. */
function fullFleet(t: { equal(...args: any[]): unknown }, n: number, max: number, waiting: number) {
  const config = validateConfig({
    providers: {
      p: {
        kind: 'openai', balance: 'least_outstanding', max_outstanding: max, queue: { max_wait_ms: 600_000, max_queued: 1000 },
        targets: Array.from({ length: n }, (_v, i) => ({ url: `http://10.9.1.${i + 1}:8000/v1` })),
      },
    },
  });
  const fleet = new Fleet('p', config.providers.p!);
  const key = new AffinityKey(request, undefined);
  const running: Slot[] = [];
  for (let i = 0; i < n * max; i++) running.push(fleet.take(key, [])!);
  t.equal(fleet.take(key, []), undefined, 'every replica is full');
  const queue = fleet.queue!;
  const results: WaitResult[] = [];
  for (let i = 0; i < waiting; i++) {
    void queue.wait({ flow: `a${i % 3}`, priority: 'normal', cost: 100, weight: 1, home: undefined, pick: () => fleet.pick(key, []), waitMs: 600_000 })
      .result.then((r) => { results.push(r); if ('slot' in r) running.push(r.slot); });
  }
  /** Ends one running request on `replica` (the first found), as Attempts.run does. */
  const release = (replica?: Replica) => {
    const i = replica === undefined ? 0 : running.findIndex((s) => s.replica === replica);
    const [slot] = running.splice(i, 1);
    fleet.end(slot!.replica, slot!.token, 'success', false);
  };
  /** Ends every request, those still waiting included, once each is sent. */
  const finish = async () => {
    while (queue.size > 0 || running.length > 0) {
      if (running.length > 0) release();
      await Promise.resolve();
    }
  };
  return { fleet, queue, running, results, release, finish };
}

t.test('each release hands its replica to the next in line before Fleet.end returns: dispatches match releases', async (t) => {
  const f = fullFleet(t, 3, 4, 40);
  t.equal(f.queue.size, 40);
  for (let i = 1; i <= 40; i++) {
    const before = f.queue.dispatched;
    f.release();
    // No await since the release: nothing else has run.
    t.equal(f.queue.dispatched - before, 1, `release ${i}: one dispatch in the same tick`);
    t.equal(f.fleet.replicas.reduce((s, r) => s + r.outstanding, 0), 12, 'the fleet is full again at once');
    if (i % 10 === 0) await Promise.resolve();
  }
  t.equal(f.queue.size, 0);
  await Promise.resolve();
  t.equal(f.results.filter((r) => 'slot' in r).length, 40, 'every waiter got its slot');
  await f.finish();
  t.equal(f.queue.dispatched, 40);
});

t.test('a queue depth scraped before requests ended there does not keep the replica from those waiting', async (t) => {
  const f = fullFleet(t, 1, 4, 10);
  const [replica] = f.fleet.replicas as [Replica];
  // The last scrape: one request waiting on the server (its prefill not begun, say).
  replica.queueDepth = 1;
  t.equal(replica.waiting, 1);
  let before = f.queue.dispatched;
  f.release();
  t.equal(replica.waiting, 0, 'the request that ended let the server\'s waiting one run');
  t.equal(f.queue.dispatched - before, 1, 'and its place went to the next in line, in the same tick');
  t.equal(replica.outstanding, 4);
  t.equal(replica.queueDepth, 1, 'the scraped figure itself is shown as scraped');

  // Three waiting on the server (another gateway's, say: the server is saturated): the first
  // ends let them run; once they have, this gateway fills the replica from its queue at once.
  replica.queueDepth = 3;
  before = f.queue.dispatched;
  f.release();
  f.release();
  t.equal(f.queue.dispatched - before, 0, 'the server\'s own queue goes first');
  t.equal(replica.waiting, 1);
  f.release();
  t.equal(replica.waiting, 0);
  t.equal(f.queue.dispatched - before, 3, 'then the replica is filled from the queue, in the same tick');
  t.equal(replica.outstanding, 4);
  replica.queueDepth = null;
  await f.finish();
  t.equal(f.queue.dispatched, 10);
});

t.test("a server that says what it runs: a queue of the gateway's own requests does not stop it, one with others' does", async (t) => {
  const f = fullFleet(t, 1, 4, 10);
  const [replica] = f.fleet.replicas as [Replica];
  // 2 running, 2 waiting for their prefill: the 4 this gateway has on it, nothing else.
  replica.scraped(2, 2);
  let before = f.queue.dispatched;
  f.release();
  t.equal(replica.waiting, 1);
  t.equal(f.queue.dispatched - before, 1, 'its own requests lining up for prefill: the freed slot is handed over at once');
  // 4 running and 3 waiting, 7 in all against the 4 of this gateway: others' requests wait there.
  replica.scraped(3, 4);
  before = f.queue.dispatched;
  f.release();
  f.release();
  t.equal(f.queue.dispatched - before, 0, 'the server\'s queue of others\' requests goes first');
  f.release();
  t.equal(replica.waiting, 0);
  t.equal(f.queue.dispatched - before, 3, 'once it has run, the replica is filled from the queue in the same tick');
  replica.scraped(null, null);
  await f.finish();
  t.equal(f.queue.dispatched, 10);
});

t.test("requests of this gateway that ended while a scrape was on its way do not make the server look as if it carried others'", async (t) => {
  const f = fullFleet(t, 1, 4, 0);
  const [replica] = f.fleet.replicas as [Replica];
  const key = new AffinityKey(request, undefined);
  // The scrape is sent while the gateway has 4 on the replica; the server counts them (3
  // running, 1 waiting for its prefill); 3 of them end (nothing waits here to take their
  // place) before the answer is read.
  replica.scraping();
  f.release();
  f.release();
  f.release();
  replica.scraped(1, 3);
  t.equal(replica.outstanding, 1);
  t.notOk(replica.full, 'the 4 the server counted were all this gateway\'s: the replica is not full');
  const slot = f.fleet.take(key, []);
  t.equal(slot?.replica, replica, 'and a new request goes to it at once');
  f.running.push(slot!);
  // The same figures from a server that ran 3 and queued 3 while this gateway had 4: others' are there.
  replica.scraping();
  replica.scraped(3, 3);
  t.ok(replica.full, 'a queue beyond what this gateway had on it still stops the replica');
  replica.scraped(null, null);
  await f.finish();
});

/**
 * A replica that holds each chat request until `releaseOne()`; /metrics shows what `metrics`
 * gives it: requests waiting on the server and, when not null, those running.
 */
function oneByOne(metrics: (held: number) => { waiting: number; running: number | null }): { script: Script; releaseOne: () => void; held: () => number } {
  const held: Array<() => void> = [];
  return {
    script: async (req, res) => {
      if (req.url === '/metrics') {
        const m = metrics(held.length);
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
        res.end(`# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="x"} ${m.waiting}\n${
          m.running === null ? '' : `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="x"} ${m.running}\n`}`);
        return;
      }
      if (req.method === 'GET') { json(res, 200, {}); return; }
      await new Promise<void>((r) => held.push(r));
      json(res, 200, { id: 'c', object: 'chat.completion', created: 0, model: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'r0' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
    },
    releaseOne: () => held.shift()?.(),
    held: () => held.length,
  };
}

t.test('through the gateway: a replica whose last scrape showed a short queue takes the waiting requests as its requests end', async (t) => {
  let waiting = 1;
  const r0 = oneByOne(() => ({ waiting, running: null }));
  // One scrape at the start, the next a minute later: only ends tell the gateway about the server.
  const f = await startFleet(t, 1, { balance: 'least_outstanding', max_outstanding: 2, timeout_ms: 60_000, metrics_interval_ms: 60_000, queue: { max_wait_ms: 60_000 } }, {
    targets: (urls) => urls.map((url) => ({ url, metrics_url: `${url.replace(/\/v1$/, '')}/metrics` })),
  });
  f.replicas[0]!.setScript(r0.script);
  const queued = async () => (await f.admin('/upstreams')).providers.fleet.queued as number;
  t.ok(await until(async () => (await f.admin('/upstreams')).providers.fleet.replicas[0].queue_depth === 1), 'scraped: one waiting on the server');
  waiting = 0;
  const answers = [postChat(f.gw.url, ask('a'))];
  t.ok(await until(() => r0.held() === 1), 'a reached the replica');
  answers.push(postChat(f.gw.url, ask('b')), postChat(f.gw.url, ask('c')));
  t.ok(await until(async () => (await queued()) === 2), 'b and c wait: the replica has a request on it and a queue of its own');
  r0.releaseOne();
  t.ok(await until(() => r0.held() === 2), 'a ended: b and c both went to the replica (its queue ran when a ended)');
  t.equal(await queued(), 0);
  r0.releaseOne();
  r0.releaseOne();
  for (const a of answers) t.equal((await a).status, 200);
  t.strictSame(f.chats(), [3]);
});

t.test("through the gateway: a server whose /metrics shows only this gateway's requests, one of them waiting for its prefill, is filled at once", async (t) => {
  // What the gateway has on the replica, the last of it not begun yet: vLLM's view while a prefill runs.
  const r0 = oneByOne((held) => ({ waiting: Math.min(1, held), running: Math.max(0, held - 1) }));
  const f = await startFleet(t, 1, { balance: 'least_outstanding', max_outstanding: 3, timeout_ms: 60_000, metrics_interval_ms: 50, queue: { max_wait_ms: 60_000 } }, {
    targets: (urls) => urls.map((url) => ({ url, metrics_url: `${url.replace(/\/v1$/, '')}/metrics` })),
  });
  f.replicas[0]!.setScript(r0.script);
  const queued = async () => (await f.admin('/upstreams')).providers.fleet.queued as number;
  const answers = [postChat(f.gw.url, ask('a'))];
  t.ok(await until(() => r0.held() === 1));
  t.ok(await until(async () => (await f.admin('/upstreams')).providers.fleet.replicas[0].queue_depth === 1), 'scraped: one waiting on the server, a itself');
  answers.push(postChat(f.gw.url, ask('b')));
  t.ok(await until(() => r0.held() === 2), 'b went to the replica at once, not into the queue');
  answers.push(postChat(f.gw.url, ask('c')));
  t.ok(await until(() => r0.held() === 3), 'and c');
  answers.push(postChat(f.gw.url, ask('d')));
  t.ok(await until(async () => (await queued()) === 1), 'd waits: max_outstanding');
  r0.releaseOne();
  t.ok(await until(() => r0.held() === 3 && f.chats()[0] === 4), 'a ended: d took its place');
  for (let i = 0; i < 3; i++) r0.releaseOne();
  for (const a of answers) t.equal((await a).status, 200);
});
