// The `anthropic` provider: Anthropic's Messages API (POST {base_url}/v1/messages, where
// base_url is the host as Anthropic's SDKs take it, e.g. https://api.anthropic.com). Requests
// are rewritten into its format and its answers, events and errors back into ours
// (translate.ts), so clients see the same chat API as with any other upstream.

import type { ProviderConfig } from '../../config/types.js';
import type { Fleet } from '../../upstream/balance/index.js';
import { HttpProvider, type StreamTranslator as Translator } from '../http-provider.js';
import type { ChoicesAndUsage } from '../shared.js';
import type { ProviderCall } from '../types.js';
import { StreamTranslator, buildRequest, toCompletion } from './translate.js';

/** Statuses that mean "not now": rate-limited, unavailable, overloaded (Anthropic's 529). */
const UNAVAILABLE: ReadonlySet<number> = new Set([429, 503, 529]);

export class AnthropicProvider extends HttpProvider {
  constructor(name: string, config: ProviderConfig, fleet?: Fleet) {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'anthropic-version': config.anthropic_version,
      ...config.headers,
    };
    if (config.api_key !== '') headers['x-api-key'] = config.api_key;
    super(name, config, { path: '/v1/messages', headers, unavailable: UNAVAILABLE }, fleet);
  }

  protected body(call: ProviderCall, stream: boolean): string {
    return JSON.stringify(buildRequest(call, stream, this.config.forward_params));
  }

  protected completion(text: string, call: ProviderCall): ChoicesAndUsage {
    return toCompletion(text, call, this.name);
  }

  protected translator(call: ProviderCall): Translator {
    return new StreamTranslator(call, this.name);
  }
}
