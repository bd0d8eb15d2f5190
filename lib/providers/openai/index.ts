// The `openai` provider: any OpenAI-compatible server (vLLM, llama.cpp server, Ollama's /v1,
// TGI's /v1, OpenAI itself). Requests keep the chat format; answers, chunks and errors are
// normalized into ours (translate.ts) so nothing upstream-specific reaches a client.

import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../../config/types.js';
import type { Fleet } from '../../upstream/balance/index.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { readCapped, transportError } from '../../upstream/http.js';
import { HttpProvider, type StreamTranslator } from '../http-provider.js';
import type { ChoicesAndUsage } from '../shared.js';
import { withCallHeaders, type DiscoveredModel, type EmbedInput, type EmbedResult, type ProviderCall, type StreamPart } from '../types.js';
import { embedOpenAI } from './embed.js';
import { normalizeChunk, normalizeCompletion, parseLlamaCppContext, parseModelList, parseTokenizeCount, type TextChunkMemo } from './translate.js';

/** Chat parameters that OpenAI-compatible servers understand (CONTRACT section 4). */
const FORWARDED_FIELDS = [
  'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'stop', 'seed', 'n',
  'presence_penalty', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'tools',
  'tool_choice', 'parallel_tool_calls', 'response_format', 'user',
] as const;

/** A stream is whole once it said [DONE] or gave a finish reason (some servers omit [DONE]). */
class ChunkTranslator implements StreamTranslator {
  ended = false;
  readonly #call: ProviderCall;
  readonly #provider: string;
  readonly #status: number;
  readonly #memo: TextChunkMemo = { before: undefined, after: undefined };

  constructor(call: ProviderCall, provider: string, status: number) {
    this.#call = call;
    this.#provider = provider;
    this.#status = status;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (ev.data === '[DONE]') {
      this.ended = true;
      return [];
    }
    const parts = normalizeChunk(ev, this.#call, this.#provider, this.#status, this.#memo);
    for (const p of parts) {
      if (p.kind === 'choices' && p.choices.some((c) => c.finish_reason !== null)) this.ended = true;
    }
    return parts;
  }
}

export class OpenAIProvider extends HttpProvider {
  constructor(name: string, config: ProviderConfig, fleet?: Fleet) {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...config.headers };
    if (config.api_key !== '') headers.authorization = `Bearer ${config.api_key}`;
    super(name, config, { path: '/chat/completions', headers, unavailable: new Set([429, 503]) }, fleet);
  }

  protected body(call: ProviderCall, stream: boolean): string {
    const src = call.request.body;
    const out: Record<string, unknown> = { model: call.upstreamModel, messages: call.request.messages };
    for (const key of FORWARDED_FIELDS) {
      const v = src[key];
      if (v !== undefined && v !== null) out[key] = v;
    }
    for (const key of this.config.forward_params) {
      const v = src[key];
      if (v !== undefined) out[key] = v;
    }
    // Output is never longer than what was held: with no limit from the client, the upstream
    // gets the one the hold was sized for (CONTRACT section 10).
    if (call.request.maxOutputTokens === undefined) out.max_tokens = call.model.max_output_tokens;
    if (stream) {
      out.stream = true;
      if (this.config.stream_usage) out.stream_options = { include_usage: true };
    }
    return JSON.stringify(out);
  }

  protected completion(text: string, call: ProviderCall, status: number): ChoicesAndUsage {
    return normalizeCompletion(text, call, this.name, status);
  }

  protected translator(call: ProviderCall, status: number): StreamTranslator {
    return new ChunkTranslator(call, this.name, status);
  }

  embed(call: ProviderCall, input: EmbedInput): Promise<EmbedResult> {
    return embedOpenAI(this.endpointOf(call), withCallHeaders(this.headers, call), this.name, call, input);
  }

  async discover(signal: AbortSignal): Promise<DiscoveredModel[]> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.endpoint.pool.request({
        method: 'GET', path: `${this.endpoint.basePath}/models`, headers: this.headers, signal,
      });
    } catch (err) {
      throw transportError(err, signal, this.name);
    }
    if (res.statusCode !== 200) {
      void readCapped(res.body, 0);
      throw new GatewayError('provider_error', `GET /models answered ${res.statusCode}.`);
    }
    const models = parseModelList(await readCapped(res.body, 8 * 1024 * 1024));
    if (models.some((m) => m.contextWindow === undefined)) {
      const nCtx = await this.#llamaCppContext(signal);
      if (nCtx !== undefined) for (const m of models) m.contextWindow ??= nCtx;
    }
    return models;
  }

  /**
   * POST /tokenize beside /v1, as vLLM (`prompt` -> `count`) and llama.cpp (`content` ->
   * `tokens`) serve it; the body carries both spellings, each server reads its own.
   */
  async tokenize(text: string, upstreamModel: string, signal: AbortSignal): Promise<number> {
    const root = this.endpoint.basePath.replace(/\/v1$/, '');
    let res: Dispatcher.ResponseData;
    try {
      res = await this.endpoint.pool.request({
        method: 'POST', path: `${root}/tokenize`, headers: this.headers, signal,
        body: JSON.stringify({ model: upstreamModel, prompt: text, content: text, add_special_tokens: false, add_special: false }),
      });
    } catch (err) {
      throw transportError(err, signal, this.name);
    }
    const body = await readCapped(res.body, 16 * 1024 * 1024);
    if (res.statusCode !== 200) throw new GatewayError('provider_error', `POST /tokenize answered ${res.statusCode}.`);
    const n = parseTokenizeCount(body);
    if (n === undefined) throw new GatewayError('provider_error', 'POST /tokenize did not answer a token count.');
    return n;
  }

  /**
   * llama.cpp's server reports the context it was started with (`--ctx-size`, per slot) in
   * GET /props, beside /v1; its /v1/models tells only the training context, which can be far
   * larger than what the server accepts. Any other server: undefined.
   */
  async #llamaCppContext(signal: AbortSignal): Promise<number | undefined> {
    const root = this.endpoint.basePath.replace(/\/v1$/, '');
    try {
      const res = await this.endpoint.pool.request({ method: 'GET', path: `${root}/props`, headers: this.headers, signal });
      const text = await readCapped(res.body, 1024 * 1024);
      if (res.statusCode !== 200) return undefined;
      return parseLlamaCppContext(text);
    } catch {
      return undefined;
    }
  }
}
