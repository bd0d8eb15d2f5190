// One place that knows every provider kind.

import type { ProviderConfig } from '../config/types.js';
import { AnthropicProvider } from './anthropic/index.js';
import { EchoProvider } from './echo/index.js';
import { OpenAIProvider } from './openai/index.js';
import type { Provider } from './types.js';

export function createProvider(name: string, config: ProviderConfig): Provider {
  switch (config.kind) {
    case 'echo': return new EchoProvider(name, config);
    case 'openai': return new OpenAIProvider(name, config);
    case 'anthropic': return new AnthropicProvider(name, config);
  }
}

export type { Provider } from './types.js';
