// Model discovery: providers with `discover_models: true` are asked for their model list at
// start and every `discover_interval_ms`; each id becomes a catalog model (slug = upstream
// name) with the provider's `model_defaults`. The YAML's own entries win on a clash.

import type { ModelConfig, ProviderConfig } from '../config/types.js';
import type { Logger } from '../observe/log.js';
import type { DiscoveredModel, Provider } from '../providers/types.js';

const SLUG = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$/;
/** Until a provider has answered once, it is asked again this often at most. */
const FIRST_RETRY_MS = 2000;

export function discoveredModel(name: string, config: ProviderConfig, m: DiscoveredModel): ModelConfig {
  const d = config.model_defaults;
  const contextWindow = d.context_window ?? m.contextWindow ?? 8192;
  return {
    id: m.id,
    type: 'chat',
    provider: name,
    upstream_model: m.id,
    fallbacks: [],
    context_window: contextWindow,
    max_output_tokens: Math.min(d.max_output_tokens ?? 2048, contextWindow),
    supports_vision: d.supports_vision ?? false,
    max_images: d.supports_vision === true ? d.max_images ?? 0 : 0,
    paid_only: d.paid_only ?? false,
    tokenizer: d.tokenizer ?? 'o200k_base',
    image_tokens: d.image_tokens ?? 85,
    price: {
      input_per_mtok: d.price?.input_per_mtok ?? 0, output_per_mtok: d.price?.output_per_mtok ?? 0,
      ...(d.price?.cached_input_per_mtok === undefined ? {} : { cached_input_per_mtok: d.price.cached_input_per_mtok }),
      ...(d.price?.cache_write_per_mtok === undefined ? {} : { cache_write_per_mtok: d.price.cache_write_per_mtok }),
    },
    ...(d.created === undefined ? {} : { created: d.created }),
  };
}

export class Discovery {
  readonly #sources: Provider[];
  readonly #found = new Map<string, ModelConfig[]>();
  readonly #timers = new Set<NodeJS.Timeout>();
  readonly #controller = new AbortController();
  readonly #onChange: (models: ModelConfig[]) => void;
  readonly #logger: Logger;

  constructor(providers: Iterable<Provider>, onChange: (models: ModelConfig[]) => void, logger: Logger) {
    this.#sources = [...providers].filter((p) => p.config.discover_models && p.discover !== undefined);
    this.#onChange = onChange;
    this.#logger = logger;
  }

  get active(): boolean {
    return this.#sources.length > 0;
  }

  start(): void {
    for (const p of this.#sources) void this.#run(p);
  }

  stop(): void {
    this.#controller.abort();
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
  }

  async #run(p: Provider): Promise<void> {
    const signal = AbortSignal.any([this.#controller.signal, AbortSignal.timeout(p.config.timeout_ms)]);
    try {
      const listed = await p.discover!(signal);
      const models = listed.filter((m) => SLUG.test(m.id) && m.id !== 'auto').map((m) => discoveredModel(p.name, p.config, m));
      const before = JSON.stringify(this.#found.get(p.name));
      this.#found.set(p.name, models);
      if (JSON.stringify(models) !== before) {
        this.#logger.info({ provider: p.name, models: models.length }, 'models discovered');
        this.#onChange([...this.#found.values()].flat());
      }
    } catch (err) {
      if (this.#controller.signal.aborted) return;
      this.#logger.warn({ provider: p.name, err: (err as Error).message }, 'model discovery failed; keeping the last list');
    }
    if (this.#controller.signal.aborted) return;
    const wait = this.#found.has(p.name) ? p.config.discover_interval_ms : Math.min(FIRST_RETRY_MS, p.config.discover_interval_ms);
    const timer = setTimeout(() => { this.#timers.delete(timer); void this.#run(p); }, wait);
    timer.unref();
    this.#timers.add(timer);
  }
}
