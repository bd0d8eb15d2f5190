// Replica discovery (CONTRACT section 19): a fleet's replicas are the A/AAAA records of a name
// (a Kubernetes headless Service), looked up every refresh_ms on a timer, never on a request's
// path. Each lookup that finds addresses hands the fleet the whole set; one that fails, or
// finds none, keeps the last good set (a DNS hiccup must not empty a serving fleet), with one
// warning per streak of failures and the state shown in GET /admin/upstreams.

import { Resolver } from 'node:dns/promises';
import type { DiscoverConfig, ProviderKind, ReplicaConfig } from '../../config/types.js';
import type { Logger } from '../../observe/log.js';

/** Per query: c-ares' timeout of one try, and tries (it doubles the timeout each retry). */
const QUERY_TIMEOUT_MS = 1000;
const QUERY_TRIES = 2;
/** Most replicas taken from one lookup (addresses sorted; the rest ignored, with a warning). */
export const MAX_DISCOVERED = 256;

/** "No such record of this family": not a failure, that family is empty. */
const EMPTY_CODES: ReadonlySet<string> = new Set(['ENODATA', 'ENOTFOUND']);

/** The discovery of one provider as GET /admin/upstreams shows it. */
export interface DiscoveryView {
  dns: string;
  port: number;
  resolver: string | null;
  refresh_ms: number;
  /** The addresses in the fleet now (the last good lookup's), sorted. */
  addresses: string[];
  /** When a lookup last found addresses (ISO-8601), or null. */
  last_refresh: string | null;
  /** The latest failed or empty lookup's reason and time; null when none yet. */
  last_error: string | null;
  last_error_at: string | null;
  /** Lookups failed (or empty) in a row: 0 while the last one found addresses. */
  consecutive_failures: number;
}

/** A replica's base URL for an address: IPv6 in brackets. */
export function replicaUrl(address: string, config: DiscoverConfig, kind: ProviderKind, path?: string): string {
  const host = address.includes(':') ? `[${address}]` : address;
  return `http://${host}:${config.port}${path ?? config.path ?? (kind === 'openai' ? '/v1' : '')}`;
}

/** The replicas of a set of addresses, as `targets` would list them. */
export function replicasOf(addresses: readonly string[], config: DiscoverConfig, kind: ProviderKind): ReplicaConfig[] {
  return addresses.map((a) => {
    const rc: ReplicaConfig = { url: replicaUrl(a, config, kind), weight: 1 };
    if (config.metrics_path !== undefined) rc.metrics_url = replicaUrl(a, config, kind, config.metrics_path);
    return rc;
  });
}

/** One lookup's addresses (sorted, distinct), or throws when a family's query failed. Empty: no records. */
export async function lookup(resolver: Resolver, name: string): Promise<string[]> {
  const [v4, v6] = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
  const found: string[] = [];
  for (const r of [v4, v6]) {
    if (r.status === 'fulfilled') found.push(...r.value);
    else if (!EMPTY_CODES.has((r.reason as NodeJS.ErrnoException).code ?? '')) throw r.reason;
  }
  return [...new Set(found)].sort();
}

export class DnsDiscovery {
  readonly #provider: string;
  readonly #config: DiscoverConfig;
  readonly #resolver: Resolver;
  readonly #logger: Logger | undefined;
  readonly #found: (addresses: string[]) => void;
  #addresses: string[];
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #lastRefresh: number | null = null;
  #lastError: string | null = null;
  #lastErrorAt: number | null = null;
  #failures = 0;
  #warnedCap = false;

  /** `initial`: the last good set (a reload's); `found` gets the set of each good lookup (the same array while it does not change). */
  constructor(provider: string, config: DiscoverConfig, initial: readonly string[], found: (addresses: string[]) => void, logger?: Logger) {
    this.#provider = provider;
    this.#config = config;
    this.#addresses = [...initial];
    this.#found = found;
    this.#logger = logger;
    this.#resolver = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: QUERY_TRIES });
    if (config.resolver !== null) this.#resolver.setServers([config.resolver]);
  }

  get addresses(): readonly string[] {
    return this.#addresses;
  }

  /** Looks up now, then every refresh_ms after each lookup ends, until stop(); resolves after the first. */
  start(): Promise<void> {
    return this.#run();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#resolver.cancel();
  }

  async #run(): Promise<void> {
    await this.refresh();
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.#run(), this.#config.refresh_ms); // #run never rejects: refresh() catches
    this.#timer.unref();
  }

  /** One lookup: a non-empty answer becomes the fleet's set; a failure or an empty one keeps the last. */
  async refresh(): Promise<void> {
    let found: string[];
    try {
      found = await lookup(this.#resolver, this.#config.dns);
      if (found.length === 0) throw new Error(`no A or AAAA records for ${this.#config.dns}`);
    } catch (err) {
      if (this.#stopped) return;
      this.#failed(err);
      return;
    }
    if (this.#stopped) return;
    if (found.length > MAX_DISCOVERED) {
      if (!this.#warnedCap) {
        this.#warnedCap = true;
        this.#logger?.warn({ provider: this.#provider, dns: this.#config.dns, found: found.length, kept: MAX_DISCOVERED }, 'replica discovery: too many addresses, the first kept');
      }
      found = found.slice(0, MAX_DISCOVERED);
    }
    if (this.#failures > 0) {
      this.#logger?.warn({ provider: this.#provider, dns: this.#config.dns, failures: this.#failures, replicas: found.length }, 'replica discovery: lookups succeed again');
    }
    this.#failures = 0;
    this.#lastRefresh = Date.now();
    // Told of every good lookup, changed or not: the fleet also lets go of replicas whose last requests ended since.
    if (found.length !== this.#addresses.length || found.some((a, i) => a !== this.#addresses[i])) this.#addresses = found;
    this.#found(this.#addresses);
  }

  #failed(err: unknown): void {
    const e = err as NodeJS.ErrnoException;
    this.#lastError = e.code === undefined ? e.message : `${e.code}: ${e.message}`;
    this.#lastErrorAt = Date.now();
    // Once per streak: a resolver down for an hour is one warning, not 720.
    if (this.#failures++ === 0) {
      this.#logger?.warn({ provider: this.#provider, dns: this.#config.dns, err: this.#lastError, kept: this.#addresses.length }, 'replica discovery: lookup failed; the last good set is kept');
    }
  }

  view(): DiscoveryView {
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    return {
      dns: this.#config.dns, port: this.#config.port, resolver: this.#config.resolver, refresh_ms: this.#config.refresh_ms,
      addresses: [...this.#addresses], last_refresh: iso(this.#lastRefresh), last_error: this.#lastError,
      last_error_at: iso(this.#lastErrorAt), consecutive_failures: this.#failures,
    };
  }
}
