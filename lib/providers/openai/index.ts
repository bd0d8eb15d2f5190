// The `openai` provider: any OpenAI-compatible server (vLLM, llama.cpp server, Ollama's /v1,
// TGI's /v1, OpenAI itself). Requests keep the chat format; answers, chunks and errors are
// normalized into ours (translate.ts) so nothing upstream-specific reaches a client. A client
// speaking legacy completions goes natively to the upstream's /completions (completions.ts),
// except fill-in-the-middle on llama.cpp's server, which goes to its /infill (infill.ts).

import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../../config/types.js';
import type { Fleet } from '../../upstream/balance/index.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { readCapped, transportError, type UpstreamEndpoint } from '../../upstream/http.js';
import { HttpProvider, type StreamTranslator } from '../http-provider.js';
import type { ChoicesAndUsage } from '../shared.js';
import type { ChatRequest } from '../../schema/chat.js';
import { withCallHeaders, type CompletionResult, type DiscoveredModel, type EmbedInput, type EmbedResult, type ProviderCall, type RerankInput, type RerankResult, type StreamPart, type TranscribeInput, type TranscribeResult, type UpstreamStream } from '../types.js';
import { embedOpenAI } from './embed.js';
import { completionsAnswer, completionsBody, CompletionsTranslator, isCompletions } from './completions.js';
import { InfillTranslator, infillAnswer, infillBody, infillRefusal, infillUnsupported, wantsInfill } from './infill.js';
import { rerankOpenAI } from './rerank.js';
import { transcribeOpenAI } from './audio.js';
import { isLlamaCppProps, normalizeChunk, verboseStoppingWord, normalizeCompletion, parseLlamaCppContext, parseModelList, parseTokenizeCount, type TextChunkMemo } from './translate.js';
import { hasStop } from '../shared.js';

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
  /** With stop sequences asked: the stop string llama.cpp named in a chunk before its finish. */
  readonly #watchStop: boolean;
  #stoppingWord: string | undefined;
  /** Told whether the server is llama.cpp's, while its provider does not know yet. */
  #learn: ((llamaCpp: boolean) => void) | undefined;

  constructor(call: ProviderCall, provider: string, status: number, learn?: (llamaCpp: boolean) => void) {
    this.#call = call;
    this.#provider = provider;
    this.#status = status;
    this.#watchStop = hasStop(call);
    this.#learn = learn;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (this.#learn !== undefined) {
      if (ev.data.includes(LLAMA_CPP_MARK)) this.#tell(true);
      else if (ev.data === '[DONE]') this.#tell(false);
    }
    if (ev.data === '[DONE]') {
      this.ended = true;
      return [];
    }
    const parts = normalizeChunk(ev, this.#call, this.#provider, this.#status, this.#memo);
    // llama.cpp puts its verbose member (asked for when the client sent stop sequences) on the
    // first chunk of its last batch, which may be a piece of text before the finish.
    if (this.#watchStop && ev.data.includes('"stopping_word"')) this.#stoppingWord = verboseStoppingWord(ev.data, this.#call);
    for (const p of parts) {
      if (p.kind !== 'choices') continue;
      for (const c of p.choices) {
        if (c.finish_reason === null) continue;
        this.ended = true;
        if (c.finish_reason === 'stop' && c.stop_sequence === undefined && this.#stoppingWord !== undefined) c.stop_sequence = this.#stoppingWord;
      }
    }
    return parts;
  }

  #tell(llamaCpp: boolean): void {
    this.#learn?.(llamaCpp);
    this.#learn = undefined;
  }
}

/** Resolves when `p` settles or `signal` aborts, whichever comes first. */
function untilSettledOrAborted(p: Promise<void>, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => { signal.removeEventListener('abort', done); resolve(); };
    signal.addEventListener('abort', done, { once: true });
    void p.then(done);
  });
}

/** What only llama.cpp's server writes in a whole answer and in a stream's last chunk: its timings. */
const LLAMA_CPP_MARK = '"timings":{';

export class OpenAIProvider extends HttpProvider {
  /**
   * Whether the server is llama.cpp's; undefined until known. Learned from its first answer
   * (llama.cpp adds `timings` to every whole answer and last chunk; no other server does), or by
   * discovery from its /props. llama.cpp cancels only streamed work when its client leaves, and
   * names a matched stop string only when asked to be verbose.
   */
  #llamaCpp: boolean | undefined;
  /** Handed to a stream's translator while the server is not known yet. */
  readonly #learn = (llamaCpp: boolean): void => { this.#llamaCpp ??= llamaCpp; };
  /** The calls that go to llama.cpp's /infill: decided once per call (#infillCheck), before its body is built. */
  readonly #infillCalls = new WeakSet<ProviderCall>();
  /** The GET /props in flight for FIM calls while the server is not known. */
  #probe: Promise<void> | undefined;

  constructor(name: string, config: ProviderConfig, fleet?: Fleet) {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...config.headers };
    if (config.api_key !== '') headers.authorization = `Bearer ${config.api_key}`;
    super(name, config, { path: '/chat/completions', headers, unavailable: new Set([429, 503]) }, fleet);
  }

  /**
   * Fill-in-the-middle on llama.cpp's server cannot be served as the request asks (n, echo,
   * several prompts): refused with the parameter named before anything is held, once the
   * server is known; as a fallback target it is skipped.
   */
  refuses(request: ChatRequest): GatewayError | undefined {
    return this.#llamaCpp === true && wantsInfill(request) ? infillRefusal(request) : undefined;
  }

  // Chat calls go straight on (no extra promise on the hot path); a FIM call is checked first.
  override complete(call: ProviderCall): Promise<CompletionResult> {
    return wantsInfill(call.request) ? this.#infillCheck(call).then(() => super.complete(call)) : super.complete(call);
  }

  override stream(call: ProviderCall): Promise<UpstreamStream> {
    return wantsInfill(call.request) ? this.#infillCheck(call).then(() => super.stream(call)) : super.stream(call);
  }

  /**
   * A completions request with a suffix: whether the server is llama.cpp's (its /props asked
   * once, when neither an answer nor discovery told yet); if so the call goes to /infill, or is
   * refused (400, nothing charged) when /infill cannot serve it. A server that cannot be
   * reached stays unknown: the call goes natively and meets the same failure.
   */
  async #infillCheck(call: ProviderCall): Promise<void> {
    if (this.#infillCalls.has(call)) return;
    if (this.#llamaCpp === undefined) {
      // Concurrent first requests share one GET /props, bounded by the provider's timeout
      // rather than by one client's signal (a client that leaves must not fail the others').
      this.#probe ??= this.#props(AbortSignal.timeout(this.config.timeout_ms)).then(() => undefined, () => undefined).finally(() => { this.#probe = undefined; });
      await untilSettledOrAborted(this.#probe, call.signal);
      if (call.signal.aborted) return; // the call itself fails on its signal, as any call does
    }
    if (this.#llamaCpp !== true) return;
    const refusal = infillRefusal(call.request);
    if (refusal !== undefined) throw refusal;
    this.#infillCalls.add(call);
  }

  protected override streamsUpstream(call: ProviderCall): boolean {
    // /infill's answer is translated, never passed on: streamed upstream as any call to llama.cpp.
    if (this.#infillCalls.has(call)) return this.config.stream_upstream !== 'never';
    if (call.request.native !== undefined || this.config.stream_upstream === 'never') return false;
    return this.config.stream_upstream === 'always' || this.#llamaCpp === true;
  }

  protected override pathOf(call: ProviderCall, ep: UpstreamEndpoint & { callPath: string }): string {
    if (this.#infillCalls.has(call)) return `${ep.basePath.replace(/\/v1$/, '')}/infill`;
    return isCompletions(call) ? `${ep.basePath}/completions` : ep.callPath;
  }

  protected body(call: ProviderCall, stream: boolean): string {
    if (this.#infillCalls.has(call)) return infillBody(call, stream, this.config.forward_params);
    if (isCompletions(call)) return completionsBody(call, stream, this.config.stream_usage);
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
    // llama.cpp says which stop string ended an answer only in its verbose debug member.
    if (this.#llamaCpp === true && hasStop(call)) out.verbose = true;
    if (stream) {
      out.stream = true;
      if (this.config.stream_usage) out.stream_options = { include_usage: true };
    }
    return JSON.stringify(out);
  }

  protected completion(text: string, call: ProviderCall, status: number): ChoicesAndUsage {
    if (this.#infillCalls.has(call)) return infillAnswer(text, call, this.name, status);
    if (isCompletions(call)) return completionsAnswer(text, call, this.name, status);
    const answer = normalizeCompletion(text, call, this.name, status);
    if (this.#llamaCpp === undefined) this.#llamaCpp = text.includes(LLAMA_CPP_MARK);
    return answer;
  }

  protected translator(call: ProviderCall, status: number): StreamTranslator {
    if (this.#infillCalls.has(call)) return new InfillTranslator(call, this.name, status);
    if (isCompletions(call)) return new CompletionsTranslator(call, this.name, status);
    return new ChunkTranslator(call, this.name, status, this.#llamaCpp === undefined ? this.#learn : undefined);
  }

  protected override failure(status: number, text: string, call: ProviderCall): GatewayError {
    return (this.#infillCalls.has(call) ? infillUnsupported(status, text, call) : undefined) ?? super.failure(status, text, call);
  }

  embed(call: ProviderCall, input: EmbedInput): Promise<EmbedResult> {
    return embedOpenAI(this.endpointOf(call), withCallHeaders(this.headers, call), this.name, call, input);
  }

  rerank(call: ProviderCall, input: RerankInput): Promise<RerankResult> {
    return rerankOpenAI(this.endpointOf(call), withCallHeaders(this.headers, call), this.name, call, input);
  }

  transcribe(call: ProviderCall, input: TranscribeInput): Promise<TranscribeResult> {
    return transcribeOpenAI(this.endpointOf(call), withCallHeaders(this.headers, call), this.name, call, input);
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
    if (models.some((m) => m.contextWindow === undefined) || this.#llamaCpp === undefined) {
      const props = await this.#props(signal).catch(() => undefined);
      const nCtx = props === undefined ? undefined : parseLlamaCppContext(props);
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
   * GET /props beside /v1: llama.cpp's server answers with its settings (among them the context
   * it was started with, `--ctx-size`, per slot; its /v1/models tells only the training context,
   * which can be far larger than what the server accepts), which tells it apart; any other server
   * answers 404. The text of a 200, else undefined. Throws when the server cannot be reached.
   */
  async #props(signal: AbortSignal): Promise<string | undefined> {
    const root = this.endpoint.basePath.replace(/\/v1$/, '');
    const res = await this.endpoint.pool.request({ method: 'GET', path: `${root}/props`, headers: this.headers, signal });
    const text = await readCapped(res.body, 1024 * 1024);
    this.#llamaCpp = res.statusCode === 200 && isLlamaCppProps(text);
    return res.statusCode === 200 ? text : undefined;
  }
}
