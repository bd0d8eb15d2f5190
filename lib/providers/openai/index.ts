// The `openai` provider: any OpenAI-compatible server (vLLM, llama.cpp server, Ollama's /v1,
// TGI's /v1, OpenAI itself). Requests keep the chat format; answers, chunks and errors are
// normalized into ours (translate.ts) so nothing upstream-specific reaches a client.

import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../../config/types.js';
import { GatewayError } from '../../errors.js';
import { SseParser, type SseEvent } from '../../sse/parser.js';
import {
  createEndpoint, forwardedHeaders, readCapped, transportError, unavailable, type UpstreamEndpoint,
} from '../../upstream/http.js';
import type { CompletionResult, DiscoveredModel, Provider, ProviderCall, StreamPart, UpstreamStream } from '../types.js';
import { ENDED_EARLY, isEventStream, mapErrorBody } from '../shared.js';
import { normalizeChunk, normalizeCompletion, parseModelList } from './translate.js';

/** Chat parameters that OpenAI-compatible servers understand (CONTRACT section 4). */
const FORWARDED_FIELDS = [
  'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'stop', 'seed', 'n',
  'presence_penalty', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'tools',
  'tool_choice', 'parallel_tool_calls', 'response_format', 'user',
] as const;

export class OpenAIProvider implements Provider {
  readonly name: string;
  readonly config: ProviderConfig;
  readonly #endpoint: UpstreamEndpoint;
  readonly #path: string;
  readonly #headers: Record<string, string>;

  constructor(name: string, config: ProviderConfig) {
    this.name = name;
    this.config = config;
    this.#endpoint = createEndpoint(config);
    this.#path = `${this.#endpoint.basePath}/chat/completions`;
    const headers: Record<string, string> = { 'content-type': 'application/json', ...config.headers };
    if (config.api_key !== '') headers.authorization = `Bearer ${config.api_key}`;
    this.#headers = headers;
  }

  #body(call: ProviderCall, stream: boolean): string {
    const src = call.request.body;
    const out: Record<string, unknown> = { model: call.upstreamModel, messages: call.request.messages };
    for (const key of FORWARDED_FIELDS) {
      const v = src[key];
      if (v !== undefined && v !== null) out[key] = v;
    }
    if (stream) {
      out.stream = true;
      if (this.config.stream_usage) out.stream_options = { include_usage: true };
    }
    return JSON.stringify(out);
  }

  async #send(call: ProviderCall, stream: boolean): Promise<Dispatcher.ResponseData> {
    try {
      return await this.#endpoint.pool.request({
        method: 'POST',
        path: this.#path,
        headers: this.#headers,
        body: this.#body(call, stream),
        signal: call.signal,
      });
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
  }

  async #failure(res: Dispatcher.ResponseData, call: ProviderCall): Promise<GatewayError> {
    if (res.statusCode === 429 || res.statusCode === 503) {
      void readCapped(res.body, 0);
      return unavailable(res.headers, this.name);
    }
    const text = await readCapped(res.body);
    return mapErrorBody(res.statusCode, text, call, this.name);
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
    const { choices, usage } = normalizeCompletion(text, call, this.name);
    return { choices, usage, headers: forwardedHeaders(res.headers) };
  }

  async stream(call: ProviderCall): Promise<UpstreamStream> {
    const res = await this.#send(call, true);
    if (res.statusCode < 200 || res.statusCode > 299) throw await this.#failure(res, call);
    if (!isEventStream(res.headers)) {
      // Some servers answer a failing stream request with a JSON error and a 2xx.
      throw mapErrorBody(502, await readCapped(res.body), call, this.name);
    }
    const headers = forwardedHeaders(res.headers);
    return Object.assign(this.#parts(res.body, call), { headers });
  }

  async *#parts(body: Dispatcher.ResponseData['body'], call: ProviderCall): AsyncGenerator<StreamPart> {
    const parser = new SseParser();
    let sawDone = false;
    let sawFinish = false;
    const handle = (ev: SseEvent): StreamPart[] => {
      if (ev.data === '[DONE]') {
        sawDone = true;
        return [];
      }
      const parts = normalizeChunk(ev, call, this.name);
      for (const p of parts) {
        if (p.kind === 'choices' && p.choices.some((c) => c.finish_reason !== null)) sawFinish = true;
      }
      return parts;
    };
    try {
      for await (const buf of body as AsyncIterable<Buffer>) {
        for (const ev of parser.push(buf)) yield* handle(ev);
      }
      for (const ev of parser.end()) yield* handle(ev);
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    } finally {
      if (!body.destroyed) body.destroy();
    }
    if (!sawDone && !sawFinish) {
      throw new GatewayError('provider_error', ENDED_EARLY);
    }
  }

  async discover(signal: AbortSignal): Promise<DiscoveredModel[]> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.#endpoint.pool.request({
        method: 'GET', path: `${this.#endpoint.basePath}/models`, headers: this.#headers, signal,
      });
    } catch (err) {
      throw transportError(err, signal, this.name);
    }
    if (res.statusCode !== 200) {
      void readCapped(res.body, 0);
      throw new GatewayError('provider_error', `GET /models answered ${res.statusCode}.`);
    }
    return parseModelList(await readCapped(res.body, 8 * 1024 * 1024));
  }

  async close(): Promise<void> {
    await this.#endpoint.pool.close();
  }
}
