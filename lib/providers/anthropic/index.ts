// The `anthropic` provider: Anthropic's Messages API (POST {base_url}/v1/messages, where
// base_url is the host as Anthropic's SDKs take it, e.g. https://api.anthropic.com). Requests
// are rewritten into its format and its answers, events and errors back into ours
// (translate.ts), so clients see the same chat API as with any other upstream.

import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../../config/types.js';
import { GatewayError } from '../../errors.js';
import { SseParser } from '../../sse/parser.js';
import {
  createEndpoint, forwardedHeaders, readCapped, transportError, unavailable, type UpstreamEndpoint,
} from '../../upstream/http.js';
import { ENDED_EARLY, isEventStream, mapErrorBody } from '../shared.js';
import type { CompletionResult, Provider, ProviderCall, StreamPart, UpstreamStream } from '../types.js';
import { StreamTranslator, buildRequest, toCompletion } from './translate.js';

/** Statuses that mean "not now": rate-limited, unavailable, overloaded (Anthropic's 529). */
const UNAVAILABLE: ReadonlySet<number> = new Set([429, 503, 529]);

export class AnthropicProvider implements Provider {
  readonly name: string;
  readonly config: ProviderConfig;
  readonly #endpoint: UpstreamEndpoint;
  readonly #path: string;
  readonly #headers: Record<string, string>;

  constructor(name: string, config: ProviderConfig) {
    this.name = name;
    this.config = config;
    this.#endpoint = createEndpoint(config);
    this.#path = `${this.#endpoint.basePath}/v1/messages`;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'anthropic-version': config.anthropic_version,
      ...config.headers,
    };
    if (config.api_key !== '') headers['x-api-key'] = config.api_key;
    this.#headers = headers;
  }

  async #send(call: ProviderCall, stream: boolean): Promise<Dispatcher.ResponseData> {
    try {
      return await this.#endpoint.pool.request({
        method: 'POST',
        path: this.#path,
        headers: this.#headers,
        body: JSON.stringify(buildRequest(call, stream)),
        signal: call.signal,
      });
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
  }

  async #failure(res: Dispatcher.ResponseData, call: ProviderCall): Promise<GatewayError> {
    if (UNAVAILABLE.has(res.statusCode)) {
      void readCapped(res.body, 0);
      return unavailable(res.headers, this.name);
    }
    return mapErrorBody(res.statusCode, await readCapped(res.body), call, this.name);
  }

  async complete(call: ProviderCall): Promise<CompletionResult> {
    const res = await this.#send(call, false);
    if (res.statusCode < 200 || res.statusCode > 299) throw await this.#failure(res, call);
    let text: string;
    try {
      text = await res.body.text();
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
    const { choices, usage } = toCompletion(text, call, this.name);
    return { choices, usage, headers: forwardedHeaders(res.headers) };
  }

  async stream(call: ProviderCall): Promise<UpstreamStream> {
    const res = await this.#send(call, true);
    if (res.statusCode < 200 || res.statusCode > 299) throw await this.#failure(res, call);
    if (!isEventStream(res.headers)) throw mapErrorBody(502, await readCapped(res.body), call, this.name);
    const headers = forwardedHeaders(res.headers);
    return Object.assign(this.#parts(res.body, call), { headers });
  }

  async *#parts(body: Dispatcher.ResponseData['body'], call: ProviderCall): AsyncGenerator<StreamPart> {
    const parser = new SseParser();
    const translator = new StreamTranslator(call, this.name);
    try {
      for await (const buf of body as AsyncIterable<Buffer>) {
        for (const ev of parser.push(buf)) yield* translator.handle(ev);
      }
      for (const ev of parser.end()) yield* translator.handle(ev);
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    } finally {
      if (!body.destroyed) body.destroy();
    }
    if (!translator.ended) throw new GatewayError('provider_error', ENDED_EARLY);
  }

  async close(): Promise<void> {
    await this.#endpoint.pool.close();
  }
}
