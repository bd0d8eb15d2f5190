// Everything derived from one config: built once per load, swapped whole on reload. A request
// keeps the state it started with, so a reload never changes a request in flight.

import { KeyDirectory } from './auth/keys.js';
import { Catalog } from './catalog/catalog.js';
import { ContentPolicy } from './chat/checks.js';
import type { Config } from './config/types.js';
import { createProvider, type Provider } from './providers/index.js';
import { loadTokenizers } from './tokens/count.js';

export interface GatewayState {
  readonly config: Config;
  readonly catalog: Catalog;
  readonly keys: KeyDirectory;
  readonly providers: ReadonlyMap<string, Provider>;
  readonly policy: ContentPolicy;
}

export async function buildState(config: Config): Promise<GatewayState> {
  await loadTokenizers(config.models.map((m) => m.tokenizer));
  const providers = new Map<string, Provider>();
  for (const [name, p] of Object.entries(config.providers)) providers.set(name, createProvider(name, p));
  return {
    config,
    catalog: new Catalog(config, Math.floor(Date.now() / 1000)),
    keys: new KeyDirectory(config),
    providers,
    policy: new ContentPolicy(config.content_policy.block),
  };
}

export async function closeState(state: GatewayState): Promise<void> {
  await Promise.allSettled([...state.providers.values()].map((p) => p.close()));
}
