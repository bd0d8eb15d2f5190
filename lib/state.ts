// Everything derived from one config: built once per load, swapped whole on reload. A request
// keeps the state it started with, so a reload never changes a request in flight. Only the
// catalog changes within a state, when discovery finds models.
//
// The config's accounts are seeded into the store when the state starts; a store that is down
// then (at boot, or during a reload) defers the seed, retried in the background until it lands,
// so neither a start nor a reload ever fails for want of the store. Every reconnect seeds again
// (create-if-absent: it changes nothing that is there).

import { AdminApi } from './admin/api.js';
import { Console, consoleEnabled } from './console/index.js';
import { Authenticator } from './auth/authenticator.js';
import { Catalog } from './catalog/catalog.js';
import { Discovery } from './catalog/discovery.js';
import { ContentPolicy } from './hub/content-policy.js';
import { loadConfigTokenizers } from './config/local.js';
import type { Config, ModelConfig } from './config/types.js';
import type { Logger } from './observe/log.js';
import { createProvider, type Provider } from './providers/index.js';
import { Passthrough } from './passthrough.js';
import { OpenMode } from './billing/meter.js';
import { Limits } from './limits/limits.js';
import type { Slots } from './limits/slots.js';
import type { StoreHandle } from './store/index.js';
import type { Store } from './store/types.js';
import { countEach, countUpTo, promptParts } from './tokens/count.js';
import { UpstreamTokens } from './tokens/upstream.js';
import type { ChatRequest, PlainPrompts } from './hub/chat.js';
import type { Circuit, Health } from './upstream/health.js';
import { Fleet, type FleetView, type Replicas } from './upstream/balance/index.js';
import type { Alerts } from './alerts/alerts.js';
import { McpUpstreams, type McpReachability } from './providers/mcp/client.js';
import type { BatchStore } from './store/batches.js';

/** One place a model can be served from: its provider, or one of its fallbacks. */
export interface Target {
  provider: Provider;
  upstreamModel: string;
  circuit: Circuit;
}

export class GatewayState {
  readonly config: Config;
  readonly store: Store;
  readonly auth: Authenticator;
  /** Null when neither admin.token nor the console is configured: /admin answers 404. */
  readonly admin: AdminApi | null;
  /** The operator console (lib/console/); null when off: /console answers 404. */
  readonly console: Console | null;
  readonly providers: ReadonlyMap<string, Provider>;
  readonly policy: ContentPolicy;
  /** The MCP servers the config names (CONTRACT section 17): the gateway's client side of each. */
  readonly mcp: McpUpstreams;
  /** Alert detection (../alerts/), the gateway's: set by it before the state serves. */
  alerts: Alerts | null = null;
  /** Files and batches (CONTRACT section 18), the gateway's: set by it before the state serves. */
  batches: BatchStore | null = null;
  /** Made by start() when the config names a passthrough target (the gateway serves a state only once started). */
  passthrough: Passthrough | null = null;
  readonly limits: Limits;
  /** Non-null with store.on_error: open. */
  readonly openMode: OpenMode | null;
  readonly logger: Logger;
  catalog: Catalog;
  readonly #health: Health;
  readonly #targets = new WeakMap<ModelConfig, Target[]>();
  readonly #discovery: Discovery;
  readonly #createdAt = Math.floor(Date.now() / 1000);
  /** Per provider that serves POST /tokenize: its counts, for models with `tokenizer: upstream`. */
  readonly #upstreamTokens = new Map<string, UpstreamTokens>();
  readonly #logger: Logger;
  #seeded = false;
  #seeding: Promise<void> | undefined;
  #seedTimer: NodeJS.Timeout | undefined;
  #seedFailures = 0;
  readonly #offReady: () => void;
  #closed = false;

  constructor(config: Config, handle: StoreHandle, slots: Slots, health: Health, logger: Logger, replicas?: Replicas, reloader?: () => Promise<string[]>) {
    const store = handle.store;
    this.config = config;
    this.store = store;
    this.logger = logger;
    this.#health = health;
    this.#logger = logger;
    this.mcp = new McpUpstreams(config.mcp.servers, logger);
    const providers = new Map<string, Provider>();
    for (const [name, p] of Object.entries(config.providers)) providers.set(name, createProvider(name, p, new Fleet(name, p, replicas, logger)));
    this.providers = providers;
    for (const p of providers.values()) {
      if (p.tokenize !== undefined) this.#upstreamTokens.set(p.name, new UpstreamTokens(p as ConstructorParameters<typeof UpstreamTokens>[0]));
    }
    this.auth = new Authenticator(store, config, () => this.#seeded, logger);
    // Each (re)connect seeds at once: no backoff wait after an outage, and a Redis that came
    // back empty (no persistence) gets the config's accounts again, as a restart would.
    this.#offReady = handle.onReady(() => void this.#seed());
    this.openMode = config.store.on_error === 'open'
      ? new OpenMode((msg, err) => logger.error({ err: (err as Error | undefined)?.message }, msg))
      : null;
    this.limits = new Limits(config, handle.redis, slots, logger);
    const consoleOn = consoleEnabled(config);
    this.admin = config.admin.token === null && !consoleOn ? null : new AdminApi(store, config, () => this.upstreams());
    this.console = consoleOn ? new Console({ config, store, admin: this.admin!, logger, reload: reloader }) : null;
    this.policy = new ContentPolicy(config.content_policy.block);
    this.catalog = new Catalog(config, this.#createdAt, []);
    this.#discovery = new Discovery(providers.values(), (found) => {
      this.catalog = new Catalog(config, this.#createdAt, found);
    }, logger);
  }

  /**
   * Makes the JWT verifier (auth.jwt), loads tokenizers, starts discovery and seeds the config's
   * accounts into the store; when the store cannot answer, the seed is retried in the background
   * and start() resolves anyway.
   */
  async start(): Promise<void> {
    await this.auth.start();
    const target = this.config.server.passthrough;
    const [, passthrough] = await Promise.all([
      loadConfigTokenizers(this.config),
      target === null ? null : Passthrough.open(target, this.config.server.passthrough_auth, this.#logger),
    ]);
    this.passthrough = passthrough;
    for (const p of this.providers.values()) p.start?.();
    // A fleet found in DNS that has no replica yet (not a reload's: it starts from the last set)
    // waits for its first lookup, so that model discovery has a replica to ask.
    await Promise.all([...this.providers.values()].map((p) => p.fleet.ready()));
    this.#discovery.start();
    this.mcp.probe();
    await this.#seed();
  }

  /** The config's accounts are in the store (until then, /readyz answers 503). */
  get seeded(): boolean {
    return this.#seeded;
  }

  /** Seeds now (unless a seed is running); when the store cannot answer, again after a backoff. */
  #seed(): Promise<void> {
    clearTimeout(this.#seedTimer);
    this.#seedTimer = undefined;
    this.#seeding ??= this.#trySeed().finally(() => { this.#seeding = undefined; });
    return this.#seeding;
  }

  async #trySeed(): Promise<void> {
    if (this.#closed) return;
    try {
      await this.store.seed(this.config.accounts);
    } catch (err) {
      if (this.#closed) return;
      // Logged once per outage, not per attempt; a store that never comes back keeps /readyz 503.
      if (this.#seedFailures++ === 0) this.#logger.error({ err: (err as Error).message }, 'store unreachable: seeding the config\'s accounts is deferred until it answers');
      this.#seedTimer = setTimeout(() => void this.#seed(), Math.min(50 * 2 ** this.#seedFailures, 1000));
      this.#seedTimer.unref();
      return;
    }
    if (this.#seedFailures > 0) this.#logger.warn({ attempts: this.#seedFailures + 1 }, 'store reachable: the config\'s accounts are seeded');
    this.#seedFailures = 0;
    this.#seeded = true;
    // Which of the config's keys the store revoked or rotated out (never throws).
    await this.auth.checkConfigKeys();
  }

  /**
   * Every provider's replicas as GET /admin/upstreams shows them, with its circuits (one per
   * upstream model asked for so far): an open circuit shows there too (CONTRACT section 10).
   */
  upstreams(): { providers: Record<string, FleetView & { circuits: ReturnType<Health['circuits']> }>; mcp_servers: Record<string, McpReachability> } {
    const now = Date.now();
    const providers: Record<string, FleetView & { circuits: ReturnType<Health['circuits']> }> = {};
    for (const p of this.providers.values()) providers[p.name] = { ...p.fleet.view(now), circuits: this.#health.circuits(p.name) };
    return { providers, mcp_servers: this.mcp.reachability() };
  }

  /** Prompt tokens with the model's tokenizer: the server's own count for `tokenizer: upstream`. */
  async promptTokens(request: ChatRequest, model: ModelConfig, limit = Infinity): Promise<number> {
    const remote = model.tokenizer === 'upstream' ? this.#upstreamTokens.get(model.provider) : undefined;
    if (remote === undefined) {
      const { fixed, texts } = promptParts(request.messages, model.image_tokens);
      return countUpTo(model.tokenizer, texts, fixed, limit);
    }
    return remote.prompt(request.messages, model.upstream_model ?? model.id, model.image_tokens, limit);
  }

  /**
   * Plain-text prompts' tokens (legacy completions), with the model's tokenizer and no chat
   * framing: each prompt with the suffix, counted no further than `limit`. The total (held, and
   * charged when the upstream reports no usage) and the longest (the context check: each prompt
   * is answered on its own).
   */
  async plainTokens(prompts: PlainPrompts, model: ModelConfig, limit = Infinity): Promise<{ total: number; longest: number }> {
    const suffix = prompts.suffix === '' ? 0 : await this.textTokens(prompts.suffix, model, limit);
    let total = 0;
    let longest = 0;
    for (const text of prompts.texts) {
      const n = suffix + await this.textTokens(text, model, limit - suffix);
      total += n;
      if (n > longest) longest = n;
    }
    return { total, longest };
  }

  /**
   * Tokens of a text, counted the same way: generated text (what a client received before it
   * left), or a client's input counted no further than `limit`.
   */
  async textTokens(text: string, model: ModelConfig, limit = Infinity): Promise<number> {
    const remote = model.tokenizer === 'upstream' ? this.#upstreamTokens.get(model.provider) : undefined;
    if (remote === undefined) return countUpTo(model.tokenizer, [text], 0, limit);
    return remote.count(text, model.upstream_model ?? model.id, undefined, limit);
  }

  /**
   * Tokens of each of many texts (rerank's, score's, embeddings' inputs), each counted no
   * further than `limit`: as one job that gives the event loop back every few milliseconds
   * (CONTRACT section 21), or the server's own counts for `tokenizer: upstream`.
   */
  async textsTokens(texts: readonly string[], model: ModelConfig, limit = Infinity): Promise<number[]> {
    const remote = model.tokenizer === 'upstream' ? this.#upstreamTokens.get(model.provider) : undefined;
    if (remote === undefined) return countEach(model.tokenizer, texts, limit);
    const counts: number[] = [];
    for (const text of texts) counts.push(await remote.count(text, model.upstream_model ?? model.id, undefined, limit));
    return counts;
  }

  /** The model's provider, then its fallbacks, in order. */
  targets(model: ModelConfig): Target[] {
    let list = this.#targets.get(model);
    if (list === undefined) {
      const upstream = model.upstream_model ?? model.id;
      list = [{ provider: model.provider, upstream_model: upstream }, ...model.fallbacks].map((f) => {
        const provider = this.providers.get(f.provider)!;
        const upstreamModel = f.upstream_model ?? upstream;
        const circuit = this.#health.circuit(provider.name, upstreamModel, {
          failures: provider.config.circuit_failures, cooldownMs: provider.config.circuit_cooldown_ms,
        });
        return { provider, upstreamModel, circuit };
      });
      this.#targets.set(model, list);
    }
    return list;
  }

  /** Worth routing to: some target's circuit is not open and some replica of it is not ejected. */
  healthy(model: ModelConfig): boolean {
    const now = Date.now();
    return this.targets(model).some((t) => t.circuit.healthy && t.provider.fleet.available(now));
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#offReady();
    clearTimeout(this.#seedTimer);
    this.#discovery.stop();
    this.auth.close();
    this.passthrough?.close();
    await Promise.allSettled([...[...this.providers.values()].map((p) => p.close()), this.mcp.close()]);
  }
}
