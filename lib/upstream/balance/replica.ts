// One replica of a provider's server and what this gateway instance knows of it: requests in
// flight, outcomes, passive ejection with backoff, active health checks, and what its /metrics
// said. Kept per provider and URL across config reloads, so a reload neither forgets that a
// replica is down nor loses count of the requests still running on it.

import type { Outcome } from '../health.js';

export interface OutlierOptions { consecutive_failures: number; eject_ms: number }

/** Ejections double while a replica keeps failing, up to this (or eject_ms when that is longer). */
export const MAX_EJECT_MS = 300_000;

/** One replica in GET /admin/upstreams (CONTRACT section 7). */
export interface ReplicaView {
  url: string;
  weight: number;
  healthy: boolean;
  /** ISO-8601 time from which the replica takes requests again; null while it does. */
  ejected_until: string | null;
  outstanding: number;
  requests: number;
  failures: number;
  queue_depth: number | null;
  kv_cache_usage: number | null;
}

/** 32-bit FNV-1a of a string: the replica's seed in prefix hashing, stable for its URL. */
function seedOf(url: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < url.length; i++) h = Math.imul(h ^ url.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

export class Replica {
  readonly url: string;
  readonly seed: number;
  /** Set from the config in force (a reload may change them). */
  weight = 1;
  maxOutstanding: number | null = null;
  metricsUrl: string | undefined;
  /** Requests this gateway has in flight on the replica. */
  outstanding = 0;
  /** Requests sent, and those that failed through the upstream's fault, since start. */
  requests = 0;
  failures = 0;
  /** From the replica's /metrics: KV-cache use (0..1). */
  kvCacheUsage: number | null = null;
  /** From the replica's /metrics: requests waiting in its own queue, and running (null: not said). */
  #queueDepth: number | null = null;
  #running: number | null = null;
  /** This gateway's requests on the replica when it was scraped, and those that ended since. */
  #ownAtScrape = 0;
  /** The most this gateway had on the replica since the scrape under way began (see scraped()). */
  #ownPeak = 0;
  #endedSince = 0;
  #consecutive = 0;
  #ejections = 0;
  #ejectedUntil = 0;
  /** After an ejection: one request at a time until one succeeds. */
  #probation = false;
  #probing = false;
  /** Bumped at each ejection: outcomes of requests begun before it do not count again. */
  #generation = 0;
  #checkDown = false;
  #nextCheckAt = 0;

  constructor(url: string) {
    this.url = url;
    this.seed = seedOf(url);
  }

  /** From the replica's /metrics: requests waiting in its own queue, as last scraped (null: none). */
  get queueDepth(): number | null {
    return this.#queueDepth;
  }

  /** A queue depth alone (no running count), as a scrape that says only that would. */
  set queueDepth(depth: number | null) {
    this.scraped(depth, null);
  }

  /** A scrape of the replica's /metrics is sent: what the server says will be of a moment from now until scraped(). */
  scraping(): void {
    this.#ownPeak = this.outstanding;
  }

  /**
   * What a scrape of the replica's /metrics said (null: not said, or no scrape). The server
   * counted its requests at some moment since scraping(); this gateway had at most the most it
   * had on it since then, which is what its own requests are taken to be: requests of this
   * gateway that ended while the answer was on its way (and were not replaced, the queue being
   * empty) must not make the server look as if it carried others'.
   */
  scraped(queueDepth: number | null, running: number | null): void {
    this.#queueDepth = queueDepth;
    this.#running = running;
    this.#ownAtScrape = Math.max(this.#ownPeak, this.outstanding);
    this.#ownPeak = 0;
    this.#endedSince = 0;
  }

  /**
   * The server's own queue as this gateway knows it now: the scraped depth less the requests of
   * this gateway that ended on it since, each of which let one of those waiting run. A figure
   * scraped a moment before requests ended must not keep the replica idle until the next scrape.
   */
  get waiting(): number {
    return Math.max(0, (this.#queueDepth ?? 0) - this.#endedSince);
  }

  /** Neither ejected nor failing its health checks. */
  healthy(now: number): boolean {
    return !this.#checkDown && now >= this.#ejectedUntil;
  }

  /** May a request go to the replica now: healthy, not full, not mid-probe. */
  usable(now: number): boolean {
    if (this.#checkDown || now < this.#ejectedUntil) return false;
    if (this.full) return false;
    return !(this.#probation && this.#probing);
  }

  /**
   * At max_outstanding; or, with max_outstanding set and a request of this gateway on it, the
   * server's own queue is not empty (as scraped, less the requests of this gateway that ended
   * since: each let one of those waiting run) while the server also carries requests that are not
   * this gateway's (it ran and queued more than this gateway had on it): more sent now would wait
   * there behind those, where no one can reorder them. A queue of this gateway's own requests
   * alone (waiting for their prefill on a server that said as much) does not stop it; a server
   * that does not say what it runs is taken to carry others'. A figure never stops a replica
   * this gateway has nothing on.
   */
  get full(): boolean {
    const max = this.maxOutstanding;
    if (max === null) return false;
    if (this.outstanding >= max) return true;
    if (this.outstanding === 0 || this.waiting === 0) return false;
    return this.#running === null || this.#running + (this.#queueDepth ?? 0) > this.#ownAtScrape;
  }

  /** When the replica may take requests again (<= now: it may): the end of its ejection or its next health check. */
  availableAt(): number {
    return Math.max(this.#ejectedUntil, this.#checkDown ? this.#nextCheckAt : 0);
  }

  /** What least_outstanding weighs: requests in flight, plus the server's own queue when scraped. */
  get load(): number {
    return this.outstanding + this.waiting;
  }

  /** A request is sent; returns the token that `end` takes back. */
  begin(): number {
    if (++this.outstanding > this.#ownPeak) this.#ownPeak = this.outstanding;
    this.requests++;
    if (this.#probation) this.#probing = true;
    return this.#generation;
  }

  /**
   * A request ended. A failure through the upstream's fault counts toward ejection; a refused
   * connection ejects at once, as does any failure of the probe after an ejection. With no
   * `options`, outcomes are counted but never eject.
   */
  end(generation: number, outcome: Outcome, connectFailure: boolean, options: OutlierOptions | null, now = Date.now()): void {
    this.outstanding--;
    this.#endedSince++;
    const current = generation === this.#generation;
    if (current) this.#probing = false;
    if (outcome === 'success') {
      this.#consecutive = 0;
      if (current) {
        this.#ejections = 0;
        this.#probation = false;
      }
      return;
    }
    if (outcome !== 'failure') return;
    this.failures++;
    // Begun before the last ejection, or ending while ejected: already accounted for.
    if (options === null || !current || now < this.#ejectedUntil) return;
    this.#consecutive++;
    if (connectFailure || this.#probation || this.#consecutive >= options.consecutive_failures) this.#eject(now, options.eject_ms);
  }

  #eject(now: number, ejectMs: number): void {
    const ms = Math.min(ejectMs * 2 ** Math.min(this.#ejections, 20), Math.max(ejectMs, MAX_EJECT_MS));
    this.#ejections++;
    this.#generation++;
    this.#consecutive = 0;
    this.#probation = true;
    this.#probing = false;
    this.#ejectedUntil = now + ms;
  }

  /** The last active health check failed. */
  get checkFailing(): boolean {
    return this.#checkDown;
  }

  /** An active health check's result; a failing replica is out until a check passes. */
  checked(ok: boolean, nextCheckAt: number): void {
    this.#checkDown = !ok;
    this.#nextCheckAt = nextCheckAt;
  }

  view(now: number): ReplicaView {
    const healthy = this.healthy(now);
    return {
      url: this.url,
      weight: this.weight,
      healthy,
      // A health check that is due but not answered yet: out until it is, so "now".
      ejected_until: healthy ? null : new Date(Math.max(this.availableAt(), now)).toISOString(),
      outstanding: this.outstanding,
      requests: this.requests,
      failures: this.failures,
      queue_depth: this.queueDepth,
      kv_cache_usage: this.kvCacheUsage,
    };
  }
}
