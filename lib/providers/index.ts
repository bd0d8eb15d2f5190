// One place that knows every provider kind.

import type { ProviderConfig } from '../config/types.js';
import { Fleet } from '../upstream/balance/index.js';
import { AnthropicProvider } from './anthropic/index.js';
import { EchoProvider } from './echo/index.js';
import { OpenAIProvider } from './openai/index.js';
import type { Provider } from './types.js';

/** `fleet`: the provider's replicas (by default a fleet of its own, outside any gateway's registry). */
export function createProvider(name: string, config: ProviderConfig, fleet = new Fleet(name, config)): Provider {
  switch (config.kind) {
    case 'echo': return new EchoProvider(name, config, fleet);
    case 'openai': return new OpenAIProvider(name, config, fleet);
    case 'anthropic': return new AnthropicProvider(name, config, fleet);
  }
}

export type { Provider } from './types.js';
