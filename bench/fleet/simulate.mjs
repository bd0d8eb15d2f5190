// Workload (c) of `npm run bench:fleet` in simulated time (issue #46): the same fleet, tenants and
// servers as bench/fleet/overload.mjs and server.mjs, as a discrete-event simulation around the
// gateway's own balancing code (the built Fleet, Replica and ProviderQueue of dist/), with no
// sockets and no wall clock. What it measures is what the queue decides (when a freed slot is
// handed over, when a replica counts as full), apart from the CPU the processes get: on a
// machine shared with other work, the live runs measure mostly the load generator's lag.
//
// The model: each replica runs at most `maxSeqs` sequences; one prefill at a time at
// `prefillUs` per prompt token, then `decodeMs` per output token (the first token at the
// prefill's end), each request's decode time drawn within +-`jitter` of that (a real server's
// sequences do not all run at one speed, and identical ones would end in lockstep waves);
// requests beyond maxSeqs wait in the server's FIFO. Its /metrics is read every
// `scrapeMs` (as the gateway's metrics_interval_ms): `vllm:num_requests_waiting` counts the FIFO
// and the requests whose prefill has not begun, as server.mjs does. Every hop (client to
// gateway, gateway to server and back) takes `hopMs`. The gateway: least_outstanding over the
// replicas; with the queue, max_outstanding = maxSeqs and fairness by account, the waiting
// requests dispatched by the built ProviderQueue (its 100 ms poll included). The batch tenant's
// clients each send their next request as soon as the last one's answer arrived; the
// interactive tenant sends a Poisson stream. Reported per run as overload.mjs reports: the
// interactive TTFT (p50, p90), requests finished a second, slot use (sequence-time over
// capacity) and the requests waiting in the gateway, in the measured window.

const sleepless = () => undefined;

/** xorshift32, as overload.mjs. */
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

/** A binary heap of events by time, then by order of scheduling. */
class Events {
  #heap = [];
  #seq = 0;
  push(at, fn) {
    const e = { at, seq: this.#seq++, fn };
    const h = this.#heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p].at < e.at || (h[p].at === e.at && h[p].seq < e.seq)) break;
      h[i] = h[p]; i = p;
    }
    h[i] = e;
  }
  pop() {
    const h = this.#heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= h.length) break;
        if (c + 1 < h.length && (h[c + 1].at < h[c].at || (h[c + 1].at === h[c].at && h[c + 1].seq < h[c].seq))) c++;
        if (last.at < h[c].at || (last.at === h[c].at && last.seq < h[c].seq)) break;
        h[i] = h[c]; i = c;
      }
      h[i] = last;
    }
    return top;
  }
  get size() { return this.#heap.length; }
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];

/**
 * One run in simulated time with the build under `root`. `variant`: { batch, queue, priority }
 * as run.mjs's OVERLOAD_RUNS, and `metrics: false` for replicas without a metrics_url (the
 * queue then goes by its own requests in flight alone). Returns the figures run.mjs prints for a
 * live run.
 */
export async function simulateOverload(root, variant, o) {
  // The balancer breaks ties with Math.random: seeded for the run, so that a run repeats exactly.
  const random = Math.random;
  Math.random = rng(o.seed ^ 0x7a11);
  try {
    return await simulate(root, variant, o);
  } finally {
    Math.random = random;
  }
}

async function simulate(root, variant, o) {
  const { validateConfig } = await import(`${root}/dist/lib/config/load.js`);
  const { Fleet, Replicas, AffinityKey } = await import(`${root}/dist/lib/upstream/balance/index.js`);
  const config = validateConfig({
    providers: {
      sim: {
        kind: 'openai', balance: 'least_outstanding', metrics_interval_ms: o.scrapeMs,
        ...(variant.queue ? { max_outstanding: o.maxSeqs, queue: { max_wait_ms: 600_000, max_queued: 100_000, fairness: 'account' } } : {}),
        targets: Array.from({ length: o.replicas }, (_v, i) => ({ url: `http://sim${i}.invalid/v1`, metrics_url: `http://sim${i}.invalid/metrics` })),
      },
    },
  });
  const fleet = new Fleet('sim', config.providers.sim, new Replicas());
  const queue = fleet.queue;
  // A build that takes a scrape's running count too also lets the queue hear of a scrape at
  // once (an earlier one reads the queue depth alone, and its queue's poll finds out).
  const scrapesRunning = typeof fleet.replicas[0].scraped === 'function';
  const key = new AffinityKey({ model: 'sim', messages: [], stream: true, includeUsage: false, maxOutputTokens: undefined, imageCount: 0, body: {} }, undefined);

  let now = 0;
  const events = new Events();
  const jitter = rng(o.seed ^ 0x1173);
  const at = (t, fn) => events.push(t, fn);
  const from = o.warmupSeconds * 1000;
  const end = from + o.seconds * 1000;

  // The servers.
  const servers = fleet.replicas.map((replica) => ({ replica, running: 0, fifo: [], prefillFreeAt: 0, prefillStarts: [], busyMs: 0, busyAt: 0 }));
  const account = (s) => {
    const a = Math.max(s.busyAt, from);
    const b = Math.min(now, end);
    if (b > a) s.busyMs += s.running * (b - a);
    s.busyAt = now;
  };
  const start = (s, job) => {
    account(s);
    s.running++;
    const begin = Math.max(now, s.prefillFreeAt);
    if (begin > now) s.prefillStarts.push(begin);
    job.started?.(now, begin);
    s.prefillFreeAt = begin + (job.promptTokens * o.prefillUs) / 1000;
    const first = s.prefillFreeAt;
    at(first + o.hopMs * 2, () => job.firstToken(now));
    at(first + (job.outputTokens - 1) * o.decodeMs * (1 - o.jitter + 2 * o.jitter * jitter()), () => {
      account(s);
      s.running--;
      while (s.running < o.maxSeqs && s.fifo.length > 0) start(s, s.fifo.shift());
      at(now + o.hopMs, () => job.answered());
    });
  };
  const arrive = (s, job) => {
    if (s.running < o.maxSeqs) start(s, job);
    else s.fifo.push(job);
  };
  const scrape = () => {
    if (variant.metrics === false) return;
    for (const s of servers) {
      s.prefillStarts = s.prefillStarts.filter((t) => t > now);
      // As server.mjs's /metrics: waiting = the FIFO and the prefills not begun; running = the rest.
      const waiting = s.fifo.length + s.prefillStarts.length;
      if (scrapesRunning) s.replica.scraped(waiting, s.running - s.prefillStarts.length);
      else s.replica.queueDepth = waiting;
    }
    if (scrapesRunning) queue?.drain();
    if (busyStill()) at(now + o.scrapeMs, scrape);
  };
  let inFlight = 0;
  /** Timers go on while the window lasts or requests are still under way. */
  const busyStill = () => now < end || inFlight > 0;
  at(0, scrape);
  if (queue !== undefined) {
    const poll = () => { queue.drain(); if (busyStill()) at(now + 100, poll); };
    at(100, poll);
  }
  const waitingSamples = [];
  const sample = () => { if (now >= from && now <= end) waitingSamples.push(queue?.size ?? 0); if (now < end) at(now + 250, sample); };
  at(0, sample);

  // The gateway: each request gets a replica (at once, or through the queue), goes to it, and
  // ends there; Fleet.end then hands its slot over.
  const out = { batchDone: 0, interactiveDone: 0, ttftMs: [], gatewayMs: [], serverMs: [] };
  const gateway = (tenant, job) => {
    inFlight++;
    const send = (slot) => {
      const s = servers[fleet.replicas.indexOf(slot.replica)];
      job.sent?.(now);
      const answered = job.answered;
      job.answered = () => {
        fleet.end(slot.replica, slot.token, 'success', false);
        inFlight--;
        at(now + o.hopMs, answered);
      };
      at(now + o.hopMs, () => arrive(s, job));
    };
    const slot = queue === undefined || queue.size === 0 ? fleet.take(key, []) : undefined;
    if (slot !== undefined) { send(slot); return; }
    void queue.wait({
      flow: tenant, priority: variant.priority && tenant === 'interactive' ? 'high' : 'normal', cost: job.promptTokens + job.outputTokens, weight: 1,
      home: undefined, pick: () => fleet.pick(key, []), waitMs: 600_000,
    }).result.then((r) => {
      if (!('slot' in r)) throw new Error(`the simulated queue refused a request: ${JSON.stringify(r)}`);
      send(r.slot);
    });
  };

  // The tenants.
  const batchClient = (c) => {
    const one = () => {
      if (now >= end) return;
      const job = {
        promptTokens: o.batchPromptTokens, outputTokens: o.batchOutputTokens, firstToken: sleepless,
        answered: () => { if (now >= from && now <= end) out.batchDone++; one(); },
      };
      at(now + o.hopMs, () => gateway('batch', job));
    };
    at((c * 1000) / Math.max(1, o.batchClients), one);
  };
  if (variant.batch) for (let c = 0; c < o.batchClients; c++) batchClient(c);
  const next = rng(o.seed ^ 0x5eed);
  for (let t = -Math.log(1 - next()) * 1000 / o.interactiveRps; t < end; t += (-Math.log(1 - next()) * 1000) / o.interactiveRps) {
    const sent = t;
    let gatewayAt = 0;
    let serverAt = 0;
    let prefillAt = 0;
    at(t, () => {
      const job = {
        promptTokens: o.interactivePromptTokens, outputTokens: o.interactiveOutputTokens,
        sent: (when) => { gatewayAt = when; },
        started: (when, begin) => { serverAt = when; prefillAt = begin; },
        firstToken: (when) => {
          if (sent < from || sent >= end) return;
          out.ttftMs.push(when - sent);
          out.gatewayMs.push(gatewayAt - sent);
          out.serverMs.push(prefillAt - serverAt);
        },
        answered: () => { if (now >= from && now <= end) out.interactiveDone++; },
      };
      at(now + o.hopMs, () => gateway('interactive', job));
    });
  }

  while (events.size > 0) {
    const e = events.pop();
    now = e.at;
    e.fn();
    // Let promise callbacks (a dispatch out of the queue) run before the next event.
    await null;
    await null;
  }
  if (inFlight !== 0 || (queue?.size ?? 0) !== 0) throw new Error(`the simulation ended with ${inFlight} requests under way`);
  for (const s of servers) account(s);
  const ttft = out.ttftMs.sort((a, b) => a - b);
  const busy = servers.reduce((a, s) => a + s.busyMs, 0);
  return {
    run: variant.run, interactive_requests: ttft.length, interactive_ttft_p50_ms: pct(ttft, 50), interactive_ttft_p90_ms: pct(ttft, 90),
    batch_rps: out.batchDone / o.seconds, fleet_rps: (out.batchDone + out.interactiveDone) / o.seconds,
    utilisation: busy / (o.seconds * 1000 * o.replicas * o.maxSeqs),
    // Where the interactive tenant's time to first token goes: waiting in the gateway (p90), and
    // at the server for its prefill to begin (behind others' prefills, or for a sequence; p90).
    interactive_gateway_p90_ms: pct(out.gatewayMs.sort((a, b) => a - b), 90),
    interactive_server_wait_p90_ms: pct(out.serverMs.sort((a, b) => a - b), 90),
    gateway_waiting: waitingSamples.length === 0 ? 0 : waitingSamples.reduce((a, b) => a + b, 0) / waitingSamples.length,
  };
}
