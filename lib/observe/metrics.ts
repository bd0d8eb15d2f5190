// Prometheus metrics (prom-client), on a registry of the gateway's own so that several
// gateways embedded in one process do not collide.

import type * as Prom from 'prom-client';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from './prom-client.js';

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** A counter series' count not yet handed to prom-client. */
interface Pending { labels: Record<string, string> | undefined; n: number }

/** What the per-replica gauges read of a replica (upstream/balance Replica), when scraped. */
export interface ReplicaFigures {
  readonly url: string;
  readonly outstanding: number;
  healthy(now: number): boolean;
}

/** What the queue gauge reads of a provider's queue (upstream/balance ProviderQueue). */
export interface QueueFigures {
  depth(priority: 'high' | 'normal' | 'low'): number;
}

export class Metrics {
  readonly registry = new Registry();
  /**
   * Counts of the request path, added up here and handed to prom-client when it is read
   * (collect): prom-client checks and hashes the labels on every increment.
   */
  readonly #pending = new Map<Counter<string>, Map<string, Pending>>();
  readonly #flush = (counter: Counter<string>): void => {
    const pending = this.#pending.get(counter);
    if (pending === undefined) return;
    for (const p of pending.values()) {
      if (p.n === 0) continue;
      const n = p.n;
      p.n = 0;
      counter.inc(p.labels!, n);
    }
  };

  readonly requests: Counter<'route' | 'status' | 'code'> = new Counter({
    name: 'tollgate_requests_total', help: 'Requests answered, by route, status and error code.',
    labelNames: ['route', 'status', 'code'] as const, registers: [this.registry],
    collect: () => this.#flush(this.requests),
  });
  readonly upstreamDuration = new Histogram({
    name: 'tollgate_upstream_duration_seconds', help: 'Upstream call duration, from send to the last byte.',
    labelNames: ['provider'] as const, buckets: LATENCY_BUCKETS, registers: [this.registry],
  });
  readonly timeToFirstChunk = new Histogram({
    name: 'tollgate_time_to_first_chunk_seconds', help: 'From sending upstream to the first chunk written to the client.',
    labelNames: ['provider'] as const, buckets: LATENCY_BUCKETS, registers: [this.registry],
  });
  readonly openStreams = new Gauge({
    name: 'tollgate_open_streams', help: 'Event streams currently open to clients.', registers: [this.registry],
  });
  readonly tokens: Counter<'kind'> = new Counter({
    name: 'tollgate_tokens_total', help: 'Tokens metered, by kind.',
    labelNames: ['kind'] as const, registers: [this.registry],
    collect: () => this.#flush(this.tokens),
  });
  readonly upstreamHealthy = new Gauge({
    name: 'tollgate_upstream_healthy', help: 'Per upstream target: 1 while its circuit is closed, 0 while open.',
    labelNames: ['provider', 'upstream_model'] as const, registers: [this.registry],
  });
  readonly unitsCharged: Counter = new Counter({
    name: 'tollgate_units_charged_total', help: 'Wallet units debited.', registers: [this.registry],
    collect: () => this.#flush(this.unitsCharged),
  });
  readonly mcpCalls: Counter<'server' | 'tool' | 'outcome'> = new Counter({
    name: 'tollgate_mcp_calls_total', help: 'MCP tools/call requests sent to a server, by server, tool and outcome (ok, tool_error, unavailable, rpc_error, store_error).',
    labelNames: ['server', 'tool', 'outcome'] as const, registers: [this.registry],
    collect: () => this.#flush(this.mcpCalls),
  });
  /** The providers whose replicas and queues the gauges below show, read when /metrics is scraped. */
  upstreams: () => Iterable<{ readonly name: string; fleet: { readonly replicas: readonly ReplicaFigures[]; readonly queue?: QueueFigures | undefined } }> = () => [];
  readonly upstreamOutstanding: Gauge<'target'> = upstreamGauge(this, 'tollgate_upstream_outstanding',
    'Per replica (its URL): requests this instance has in flight on it.', (r) => r.outstanding, (a, b) => a + b);
  readonly upstreamEjected: Gauge<'target'> = upstreamGauge(this, 'tollgate_upstream_ejected',
    'Per replica (its URL): 1 while ejected or failing its health checks, else 0.', (r, now) => (r.healthy(now) ? 0 : 1), Math.max);

  readonly queueDepth: Gauge<'provider' | 'priority'> = new Gauge({
    name: 'tollgate_queue_depth', help: 'Per provider and priority: requests waiting for a replica with room (CONTRACT section 13).',
    labelNames: ['provider', 'priority'] as const, registers: [this.registry],
    collect: () => {
      this.queueDepth.reset();
      const seen = new Set<string>();
      for (const { name, fleet } of this.upstreams()) {
        const q = fleet.queue;
        if (q === undefined || seen.has(name)) continue;
        seen.add(name);
        for (const priority of ['high', 'normal', 'low'] as const) this.queueDepth.set({ provider: name, priority }, q.depth(priority));
      }
    },
  });
  /** This instance's batch lines (batch/runner.ts), read when /metrics is scraped. */
  batchLines: () => { waiting: number; running: number } = () => ({ waiting: 0, running: 0 });
  readonly batchLinesNow: Gauge<'state'> = new Gauge({
    name: 'tollgate_batch_lines', help: 'Batch lines on this instance: waiting to start, running (CONTRACT section 18).',
    labelNames: ['state'] as const, registers: [this.registry],
    collect: () => {
      const n = this.batchLines();
      this.batchLinesNow.set({ state: 'waiting' }, n.waiting);
      this.batchLinesNow.set({ state: 'running' }, n.running);
    },
  });
  readonly batchLinesDone: Counter<'outcome'> = new Counter({
    name: 'tollgate_batch_lines_done_total', help: 'Batch lines this instance finished, by outcome: completed, failed.',
    labelNames: ['outcome'] as const, registers: [this.registry],
  });
  /** Usage records the store has read back so far (Store.usageRecordsRead), read when /metrics is scraped. */
  usageRecordsRead: () => number = () => 0;
  readonly usageReads: Counter = new Counter({
    name: 'tollgate_usage_records_read_total',
    help: 'Usage records the store read back: record pages, exports, the part of a report\'s first hour, totals summed anew from records. Reads of totals (GET /v1/usage, GET /admin/usage by whole hours, the console\'s Overview) read none.',
    registers: [this.registry],
    collect: () => {
      this.usageReads.reset();
      this.usageReads.inc(this.usageRecordsRead());
    },
  });
  readonly queueWait = new Histogram({
    name: 'tollgate_queue_wait_seconds', help: 'Time requests waited in a provider\'s queue, by how the wait ended: dispatched, refused (model_overloaded), gone (the client left).',
    labelNames: ['provider', 'outcome'] as const, buckets: LATENCY_BUCKETS, registers: [this.registry],
  });
  readonly #queueWaitChildren = new Map<string, Prom.Histogram.Internal<'provider' | 'outcome'>>();

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'tollgate_process_' });
    this.tokens.inc({ kind: 'prompt' }, 0);
    this.tokens.inc({ kind: 'completion' }, 0);
    this.unitsCharged.inc(0);
  }

  /** A counter's series known by `key`, its count added to prom-client at the next read; `labels` is set by the caller when new. */
  #series(counter: Counter<string>, key: string): Pending {
    let pending = this.#pending.get(counter);
    if (pending === undefined) this.#pending.set(counter, (pending = new Map()));
    let p = pending.get(key);
    if (p === undefined) pending.set(key, (p = { labels: undefined, n: 0 }));
    return p;
  }

  countRequest(route: string, status: number, code: string): void {
    const p = this.#series(this.requests, `${route}|${status}|${code}`);
    p.labels ??= { route, status: String(status), code };
    p.n += 1;
  }

  /** An MCP tools/call that was sent (CONTRACT section 17): its tool is a configured server's, never a caller's guess. */
  countMcpCall(server: string, tool: string, outcome: string): void {
    const p = this.#series(this.mcpCalls, `${server}\u0000${tool}\u0000${outcome}`);
    p.labels ??= { server, tool, outcome };
    p.n += 1;
  }

  /** Tokens of a charged request. */
  countTokens(prompt: number, completion: number): void {
    const p = this.#series(this.tokens, 'prompt');
    p.labels ??= { kind: 'prompt' };
    p.n += prompt;
    const c = this.#series(this.tokens, 'completion');
    c.labels ??= { kind: 'completion' };
    c.n += completion;
  }

  readonly #histogramChildren = new Map<Histogram<'provider'>, Map<string, Prom.Histogram.Internal<'provider'>>>();

  /** Observes `seconds` in a per-provider histogram, through its cached labelled child. */
  observe(histogram: Histogram<'provider'>, provider: string, seconds: number): void {
    let children = this.#histogramChildren.get(histogram);
    if (children === undefined) this.#histogramChildren.set(histogram, (children = new Map()));
    let child = children.get(provider);
    if (child === undefined) children.set(provider, (child = histogram.labels(provider)));
    child.observe(seconds);
  }

  /** A wait in `provider`'s queue that ended `outcome` after `seconds`. */
  observeQueueWait(provider: string, outcome: 'dispatched' | 'refused' | 'gone', seconds: number): void {
    const key = `${provider}|${outcome}`;
    let child = this.#queueWaitChildren.get(key);
    if (child === undefined) this.#queueWaitChildren.set(key, (child = this.queueWait.labels(provider, outcome)));
    child.observe(seconds);
  }

  /** Units debited. */
  countUnits(units: number): void {
    const p = this.#series(this.unitsCharged, '');
    p.labels ??= {};
    p.n += units;
  }
}

/**
 * A per-replica gauge filled when /metrics is scraped, from the routing state itself: nothing
 * on the request path. A URL that two providers share adds up (outstanding) or shows the worst
 * (ejected).
 */
function upstreamGauge(
  metrics: Metrics, name: string, help: string, value: (r: ReplicaFigures, now: number) => number,
  combine: (a: number, b: number) => number,
): Gauge<'target'> {
  return new Gauge({
    name, help, labelNames: ['target'] as const, registers: [metrics.registry],
    collect(this: Gauge<'target'>) {
      this.reset();
      const now = Date.now();
      const values = new Map<string, number>();
      for (const { fleet } of metrics.upstreams()) {
        for (const r of fleet.replicas) {
          const v = value(r, now);
          const seen = values.get(r.url);
          values.set(r.url, seen === undefined ? v : combine(seen, v));
        }
      }
      for (const [target, v] of values) this.set({ target }, v);
    },
  });
}
