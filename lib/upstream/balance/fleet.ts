// A provider's replicas and the policy that spreads its requests over them: the one balancer
// every provider kind and route uses. It picks a replica per attempt from state held in this
// instance, tracks outcomes for passive ejection, and keeps each replica's view fresh with
// active health checks and metrics scraping where the config asks for them. A fleet found in
// DNS (./dns.ts) changes its replicas as lookups find them: a new one joins, a vanished one takes
// no new request, and its pool (the provider's) closes once its requests in flight have ended.

import type { BalancePolicy, ProviderConfig, ReplicaConfig } from '../../config/types.js';
import type { Logger } from '../../observe/log.js';
import type { Outcome } from '../health.js';
import { readCapped } from '../http.js';
import type { AffinityKey } from './affinity-key.js';
import { DnsDiscovery, replicasOf, type DiscoveryView } from './dns.js';
import { LeastOutstanding } from './least-outstanding.js';
import type { Policy } from './policy.js';
import { PrefixAffinity, owner } from './prefix-affinity.js';
import { ProviderQueue, type Slot } from './queue.js';
import { Replica, type ReplicaView } from './replica.js';
import { RoundRobin } from './round-robin.js';

/**
 * What a metrics scrape needs: undici's request() on its global agent (undici's whole index)
 * and the Prometheus text parser. Imported by the first scrape, which watch() starts at once
 * for a replica with a metrics URL; a gateway that scrapes nothing never loads them.
 */
let scrapeModules: Promise<{ request: typeof import('undici').request; parseServerLoad: typeof import('./scrape.js').parseServerLoad }> | undefined;
function scraping(): NonNullable<typeof scrapeModules> {
  scrapeModules ??= Promise.all([import('undici'), import('./scrape.js')])
    .then(([undici, scrape]) => ({ request: undici.request, parseServerLoad: scrape.parseServerLoad }));
  return scrapeModules;
}

/** A metrics page larger than this is cut (and its tail ignored). */
const MAX_METRICS_BYTES = 4 * 1024 * 1024;
/** Every replica at max_outstanding (or mid-probe): the client may come back this soon. */
const BUSY_RETRY_MS = 1000;

export function createPolicy(name: BalancePolicy): Policy {
  switch (name) {
    case 'round_robin': return new RoundRobin();
    case 'least_outstanding': return new LeastOutstanding();
    case 'prefix_affinity': return new PrefixAffinity();
  }
}

/** A provider's replicas as configured: `targets`, or `base_url` as the one-replica form (none for `discover`: found later). */
export function replicaConfigs(name: string, config: ProviderConfig): ReplicaConfig[] {
  if (config.targets !== undefined) return config.targets;
  if (config.discover !== undefined) return [];
  return [{ url: config.base_url ?? `${config.kind}:${name}`, weight: 1 }];
}

/** Every replica this gateway has routed to, by provider and URL, and each provider's queue; outlives config reloads. */
export class Replicas {
  readonly #all = new Map<string, Replica>();
  readonly #queues = new Map<string, ProviderQueue>();
  /** Each discovering provider's last good set of addresses: a reload starts from it. */
  readonly #found = new Map<string, readonly string[]>();
  /** Told of each ejection (alerts: upstream.ejected): by outlier detection, or a failed health check. */
  onEject: ((provider: string, url: string, reason: 'outlier' | 'health_check', until: number) => void) | undefined;

  queue(provider: string): ProviderQueue {
    let q = this.#queues.get(provider);
    if (q === undefined) {
      q = new ProviderQueue(provider);
      this.#queues.set(provider, q);
    }
    return q;
  }

  /** The last good addresses discovery found under `key` (provider, name and port), or none. */
  found(key: string): readonly string[] {
    return this.#found.get(key) ?? [];
  }

  setFound(key: string, addresses: readonly string[]): void {
    this.#found.set(key, addresses);
  }

  /** A discovered replica that left and has nothing in flight: not kept for good (pods come and go, each with a new address). */
  forget(provider: string, replica: Replica): void {
    const key = `${provider}\u0000${replica.url}`;
    if (this.#all.get(key) === replica) this.#all.delete(key);
  }

  get(provider: string, url: string): Replica {
    const key = `${provider}\u0000${url}`;
    let r = this.#all.get(key);
    if (r === undefined) {
      r = new Replica(url);
      this.#all.set(key, r);
    }
    return r;
  }
}

/** One health check of one replica: true when it answered 2xx in time. */
export type HealthProbe = (replica: Replica, path: string, signal: AbortSignal) => Promise<boolean>;

export interface FleetView {
  balance: BalancePolicy;
  replicas: ReplicaView[];
  /** Requests waiting in the provider's queue (0 without one). */
  queued: number;
  /** With `discover`: the lookups' state, and replicas that left it with requests still in flight. */
  discovery?: DiscoveryView & { draining: ReplicaView[] };
}

/** Told when a replica joins the fleet (its pool is made) and when one that left has no request in flight (its pool may close). */
export interface FleetMembers {
  joined(replica: Replica): void;
  left(replica: Replica): void;
}

export class Fleet {
  readonly provider: string;
  readonly policy: Policy;
  readonly #config: ProviderConfig;
  /**
   * Passive ejection applies to `targets`; the one-replica short form (base_url) keeps its
   * per-model circuits alone, as before fleets existed (ejecting its only replica would just
   * repeat them for every model at once).
   */
  readonly #outlier: ProviderConfig['outlier'] | null;
  readonly #logger: Logger | undefined;
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #controller = new AbortController();
  readonly #registry: Replicas;
  /** Replaced whole when discovery changes it, so a pick that iterates it is never disturbed. */
  #replicas: readonly Replica[];
  /** Replicas discovery dropped that still have requests in flight: their pools close when those end. */
  readonly #retiring = new Set<Replica>();
  readonly #discovery: DnsDiscovery | undefined;
  /** Each watched replica's health-check and scrape loops, stopped when it leaves. */
  readonly #watching = new Map<Replica, AbortController>();
  #probe: HealthProbe | undefined;
  #watched = false;
  /** Discovery's first lookup, while the fleet had no replica when it started. */
  #ready: Promise<void> | undefined;
  /** The provider's pools follow the fleet's members (set by the provider that owns the fleet). */
  members: FleetMembers | undefined;

  /** Whether replicas are network addresses (false for the built-in echo: its one replica is a name). */
  readonly addressed: boolean;
  /** Where requests wait while every replica is full: set when max_outstanding and queue are. */
  readonly queue: ProviderQueue | undefined;

  constructor(provider: string, config: ProviderConfig, registry = new Replicas(), logger?: Logger) {
    this.provider = provider;
    this.#registry = registry;
    this.#config = config;
    this.#outlier = config.targets === undefined && config.discover === undefined ? null : config.outlier;
    this.#logger = logger;
    this.policy = createPolicy(config.balance ?? 'least_outstanding');
    this.addressed = config.targets !== undefined || config.base_url !== undefined || config.discover !== undefined;
    let configs = replicaConfigs(provider, config);
    const d = config.discover;
    if (d !== undefined) {
      const key = `${provider}\u0000${d.dns}\u0000${d.port}`;
      const initial = registry.found(key);
      configs = replicasOf(initial, d, config.kind);
      let last = initial;
      this.#discovery = new DnsDiscovery(provider, d, initial, (found) => {
        if (found === last) { this.#sweep(); return; }
        last = found;
        registry.setFound(key, found);
        this.#update(replicasOf(found, d, config.kind));
      }, logger);
    }
    this.#replicas = configs.map((rc) => this.#member(rc));
    if (config.max_outstanding !== null && config.max_outstanding !== undefined && config.queue !== null && config.queue !== undefined) {
      this.queue = registry.queue(provider);
      this.queue.config = config.queue;
    }
  }

  /** The replicas that take new requests. */
  get replicas(): readonly Replica[] {
    return this.#replicas;
  }

  /** The replica of `rc`, set to the config in force. */
  #member(rc: ReplicaConfig): Replica {
    const r = this.#registry.get(this.provider, rc.url);
    r.weight = rc.weight;
    r.maxOutstanding = this.#config.max_outstanding ?? null;
    r.metricsUrl = rc.metrics_url;
    if (r.metricsUrl === undefined) { r.scraped(null, null); r.kvCacheUsage = null; }
    return r;
  }

  /**
   * Discovery found a new set: new replicas join (their pools made first), replicas that
   * vanished take no new request and are told `left` once their requests in flight end.
   */
  #update(configs: readonly ReplicaConfig[]): void {
    const before = new Set(this.#replicas);
    const next = configs.map((rc) => this.#member(rc));
    const kept = new Set(next);
    let changed = next.length !== before.size;
    for (const r of next) {
      if (before.has(r)) continue;
      changed = true;
      // Back before its last requests ended: its pool is still open.
      if (!this.#retiring.delete(r)) this.members?.joined(r);
      this.#watch(r);
    }
    this.#replicas = next;
    for (const r of before) {
      if (kept.has(r)) continue;
      this.#unwatch(r);
      this.#retiring.add(r);
    }
    this.#sweep();
    if (!changed) return;
    this.#logger?.info({ provider: this.provider, replicas: next.map((r) => r.url) }, 'replica discovery: the fleet changed');
    // New room: requests waiting go to it now.
    this.queue?.drain();
  }

  /** Replicas that left and have nothing in flight any more: their pools may close. */
  #sweep(): void {
    for (const r of this.#retiring) {
      if (r.outstanding > 0) continue;
      this.#left(r);
    }
  }

  #left(r: Replica): void {
    this.#retiring.delete(r);
    this.#registry.forget(this.provider, r);
    this.members?.left(r);
  }

  /** Starts discovery's lookups (with watch()) and resolves after the first when the fleet has no replica yet. */
  ready(): Promise<void> {
    return this.#ready ?? Promise.resolve();
  }

  /** The replica for the next attempt of a request, or undefined when none may take it. */
  pick(key: AffinityKey, exclude: readonly Replica[], now = Date.now()): Replica | undefined {
    const affinity = this.policy.name === 'prefix_affinity' ? key.hash(this.#config.affinity_prefix_tokens) : 0;
    return this.policy.pick({ affinity, exclude, now }, this.replicas);
  }

  /** The next attempt's replica, begun (its token goes back to `end`), or undefined when none may take it. */
  take(key: AffinityKey, exclude: readonly Replica[], now = Date.now()): Slot | undefined {
    const replica = this.pick(key, exclude, now);
    return replica === undefined ? undefined : { replica, token: replica.begin() };
  }

  /** The replica prefix_affinity would send the request to were it free; undefined for other policies. */
  home(key: AffinityKey): Replica | undefined {
    return this.policy.name === 'prefix_affinity' ? owner(key.hash(this.#config.affinity_prefix_tokens), this.replicas) : undefined;
  }

  /** A replica that is neither ejected nor failing its health checks, or undefined. */
  firstHealthy(now = Date.now()): Replica | undefined {
    return this.replicas.find((r) => r.healthy(now));
  }

  /**
   * Room for work that should only fill idle capacity (a batch's lines beyond batch.concurrency):
   * the free slots (max_outstanding less the requests in flight) of the replicas that may take a
   * request now; 0 while requests wait in the queue, and without a queue (no max_outstanding:
   * nothing says what a replica holds).
   */
  idleSlots(now = Date.now()): number {
    if (this.queue === undefined || this.queue.size > 0) return 0;
    let free = 0;
    for (const r of this.replicas) if (r.usable(now)) free += (r.maxOutstanding ?? 0) - r.outstanding;
    return free;
  }

  /** Requests the replicas may hold at once: the sum of max_outstanding (0 without it). */
  get capacity(): number {
    let total = 0;
    for (const r of this.replicas) total += r.maxOutstanding ?? 0;
    return total;
  }

  /** Some replica is neither ejected nor failing its health checks. */
  available(now = Date.now()): boolean {
    return this.firstHealthy(now) !== undefined;
  }

  /** How long until some replica may take a request: the first re-admission, or a short wait when all are busy. */
  retryAfterMs(now = Date.now()): number {
    // None found yet: the next lookup may find some.
    if (this.#replicas.length === 0) return this.#config.discover?.refresh_ms ?? BUSY_RETRY_MS;
    let soonest = Infinity;
    for (const r of this.replicas) {
      const at = r.availableAt();
      if (at <= now) return BUSY_RETRY_MS;
      soonest = Math.min(soonest, at - now);
    }
    return soonest;
  }

  /** A request on `replica` ended with `outcome`; `connectFailure`: it could not even connect. */
  end(replica: Replica, token: number, outcome: Outcome, connectFailure: boolean): void {
    const wasHealthy = replica.healthy(Date.now());
    replica.end(token, outcome, connectFailure, this.#outlier);
    if (wasHealthy && !replica.healthy(Date.now())) {
      this.#logger?.warn({ provider: this.provider, replica: replica.url, until: new Date(replica.availableAt()).toISOString() }, 'replica ejected');
      this.#registry.onEject?.(this.provider, replica.url, 'outlier', replica.availableAt());
      // Back at the end of its ejection: the queue hears of it then, not at its next poll.
      if (this.queue !== undefined) this.#after(replica.availableAt() - Date.now(), () => this.queue?.drain());
    }
    if (this.#retiring.size > 0 && replica.outstanding === 0 && this.#retiring.has(replica)) this.#left(replica);
    // The room it left goes to the next in line at once.
    this.queue?.drain();
  }

  view(now = Date.now()): FleetView {
    const view: FleetView = { balance: this.policy.name, replicas: this.#replicas.map((r) => r.view(now)), queued: this.queue?.size ?? 0 };
    if (this.#discovery !== undefined) view.discovery = { ...this.#discovery.view(), draining: [...this.#retiring].map((r) => r.view(now)) };
    return view;
  }

  /** Starts health checks (with `probe`, when health_check is set), metrics scraping and discovery's lookups. */
  watch(probe: HealthProbe | undefined): void {
    this.#probe = probe;
    this.#watched = true;
    for (const r of this.#replicas) this.#watch(r);
    if (this.#discovery !== undefined) {
      const first = this.#discovery.start();
      if (this.#replicas.length === 0) this.#ready = first;
    }
  }

  #watch(r: Replica): void {
    if (!this.#watched || this.#watching.has(r)) return;
    const hc = this.#config.health_check;
    const probe = this.#probe;
    const ac = new AbortController();
    this.#watching.set(r, ac);
    if (hc !== null && hc !== undefined && probe !== undefined) this.#loop(hc.interval_ms, ac.signal, () => this.#check(r, probe, hc.path, hc.interval_ms, ac.signal));
    if (r.metricsUrl !== undefined) this.#loop(this.#config.metrics_interval_ms, ac.signal, () => this.#scrape(r, this.#config.metrics_interval_ms, ac.signal));
  }

  #unwatch(r: Replica): void {
    this.#watching.get(r)?.abort();
    this.#watching.delete(r);
  }

  stop(): void {
    this.#discovery?.stop();
    for (const ac of this.#watching.values()) ac.abort();
    this.#watching.clear();
    this.#controller.abort();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }

  /** Runs `fn` once after `ms` (unless stop() comes first). */
  #after(ms: number, fn: () => void): void {
    const timer = setTimeout(() => { this.#timers.delete(timer); fn(); }, Math.max(0, ms));
    timer.unref();
    this.#timers.add(timer);
  }

  /** Runs `task` now and then every `intervalMs` after it finished, until stop() or `signal`. */
  #loop(intervalMs: number, signal: AbortSignal, task: () => Promise<void>): void {
    const run = async () => {
      await task();
      if (this.#controller.signal.aborted || signal.aborted) return;
      const timer = setTimeout(() => { this.#timers.delete(timer); void run(); }, intervalMs);
      timer.unref();
      this.#timers.add(timer);
    };
    void run();
  }

  async #check(r: Replica, probe: HealthProbe, path: string, intervalMs: number, stop: AbortSignal): Promise<void> {
    const signal = AbortSignal.any([this.#controller.signal, stop, AbortSignal.timeout(Math.min(intervalMs, this.#config.timeout_ms))]);
    let ok = false;
    try {
      ok = await probe(r, path, signal);
    } catch {
      ok = false;
    }
    if (this.#controller.signal.aborted || stop.aborted) return;
    const failing = r.checkFailing;
    r.checked(ok, Date.now() + intervalMs);
    if (failing === ok) {
      this.#logger?.warn({ provider: this.provider, replica: r.url, healthy: ok }, ok ? 'replica passed its health check' : 'replica failed its health check');
      if (!ok) this.#registry.onEject?.(this.provider, r.url, 'health_check', r.availableAt());
      // Back: requests waiting go to it now.
      else this.queue?.drain();
    }
  }

  async #scrape(r: Replica, intervalMs: number, stop: AbortSignal): Promise<void> {
    const url = r.metricsUrl;
    if (url === undefined) return;
    const signal = AbortSignal.any([this.#controller.signal, stop, AbortSignal.timeout(intervalMs)]);
    try {
      const { request, parseServerLoad } = await scraping();
      r.scraping();
      const res = await request(url, { method: 'GET', signal, headers: { accept: 'text/plain' } });
      const text = await readCapped(res.body, MAX_METRICS_BYTES);
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
      const load = parseServerLoad(text);
      r.scraped(load.queueDepth, load.running);
      r.kvCacheUsage = load.kvCacheUsage;
    } catch {
      // Stopped (the replica left the fleet, or the fleet stopped): nothing was learnt.
      if (stop.aborted) return;
      // Stale figures would mislead the balancer more than none.
      r.scraped(null, null);
      r.kvCacheUsage = null;
    }
    // A shorter queue on the server may let the replica take requests waiting here: at once.
    this.queue?.drain();
  }
}
