// The `anthropic` provider: Anthropic's Messages API (POST {base_url}/v1/messages, where
// base_url is the host as Anthropic's SDKs take it, e.g. https://api.anthropic.com). Requests
// are rewritten into its format and its answers, events and errors back into ours
// (translate.ts), so clients see the same chat API as with any other upstream.

import type { ProviderConfig } from '../../config/types.js';
import type { Fleet } from '../../upstream/balance/index.js';
import { HttpProvider, type StreamTranslator as Translator } from '../http-provider.js';
import type { ChoicesAndUsage } from '../shared.js';
import type { ChatRequest, NativeRequest } from '../../hub/chat.js';
import { readCapped } from '../../upstream/http.js';
import type { CompletionResult, ProviderCall } from '../types.js';
import { assemble } from '../assemble.js';
import { WholeMessage } from './whole.js';
import { isObj, parseJson } from '../shared.js';
import { NATIVE_DIALECT, NativeTranslator, isNative } from './native.js';
import { completeUsage } from './whole.js';
import { StreamTranslator, buildRequest, toCompletion } from './translate.js';
import { merged } from '../../objects.js';

/** Statuses that mean "not now": rate-limited, unavailable, overloaded (Anthropic's 529). */
const UNAVAILABLE: ReadonlySet<number> = new Set([429, 503, 529]);

export class AnthropicProvider extends HttpProvider {
  /** Native calls assembled from a stream for a client that asked for none: the message being built. */
  readonly #wholes = new WeakMap<ProviderCall, WholeMessage>();

  constructor(name: string, config: ProviderConfig, fleet?: Fleet) {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'anthropic-version': config.anthropic_version,
      ...config.headers,
    };
    if (config.api_key !== '') headers['x-api-key'] = config.api_key;
    super(name, config, { path: '/v1/messages', headers, unavailable: UNAVAILABLE }, fleet);
  }

  refuses(request: ChatRequest): string | undefined {
    return request.prompts === undefined ? undefined : 'Anthropic serves no plain-text completions (POST /v1/completions); use a chat route';
  }

  // A client speaking Messages itself goes natively (native.ts): its body with the model
  // rewritten, anthropic-beta passed on; the answer read for metering and passed back whole.

  protected body(call: ProviderCall, stream: boolean): string {
    if (isNative(call)) return JSON.stringify(merged<Record<string, unknown>>(call.request.native!.body, stream ? { model: call.upstreamModel, stream: true } : { model: call.upstreamModel }));
    return JSON.stringify(buildRequest(call, stream, this.config.forward_params));
  }

  protected override callHeaders(call: ProviderCall): Record<string, string> {
    if (!isNative(call)) return this.headers;
    return merged(call.request.native!.headers, this.headers);
  }

  protected completion(text: string, call: ProviderCall, status: number): ChoicesAndUsage & { native?: string } {
    const result: ChoicesAndUsage & { native?: string } = toCompletion(text, call, this.name, status);
    if (isNative(call)) {
      const body = parseJson(text);
      if (isObj(body)) result.native = JSON.stringify(merged<Record<string, unknown>>(body, { model: call.model.id, usage: completeUsage(body.usage) }));
    }
    return result;
  }

  protected translator(call: ProviderCall, status: number): Translator {
    const inner = new StreamTranslator(call, this.name, status);
    return isNative(call) ? new NativeTranslator(inner, call.model.id, this.#wholes.get(call)) : inner;
  }

  /** A native call streamed for a client that asked for none (stream_upstream: always): its message built from the events (whole.ts). */
  protected override async assembled(call: ProviderCall): Promise<CompletionResult> {
    if (!isNative(call)) return super.assembled(call);
    const whole = new WholeMessage();
    this.#wholes.set(call, whole);
    const result = await assemble(await this.stream(call), call);
    result.native = whole.json();
    return result;
  }

  /** POST /v1/messages/count_tokens: Anthropic's own count of a Messages request. */
  async countNative(native: NativeRequest, upstreamModel: string, signal: AbortSignal): Promise<number | undefined> {
    if (native.dialect !== NATIVE_DIALECT) return undefined;
    const body = merged<Record<string, unknown>>(native.body, { model: upstreamModel });
    delete body.max_tokens;
    delete body.stream;
    const res = await this.endpoint.pool.request({
      method: 'POST', path: `${this.endpoint.basePath}/v1/messages/count_tokens`, headers: merged(native.headers, this.headers), body: JSON.stringify(body), signal,
    });
    const text = await readCapped(res.body, 65536);
    if (res.statusCode !== 200) return undefined;
    const v = parseJson(text);
    return isObj(v) && typeof v.input_tokens === 'number' && Number.isSafeInteger(v.input_tokens) && v.input_tokens >= 0 ? v.input_tokens : undefined;
  }
}
