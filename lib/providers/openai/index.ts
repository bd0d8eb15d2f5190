// The `openai` provider: any OpenAI-compatible server (vLLM, llama.cpp server, Ollama's /v1,
// TGI's /v1, OpenAI itself). Requests keep the chat format; answers, chunks and errors are
// normalized into ours (translate.ts) so nothing upstream-specific reaches a client. A client
// speaking legacy completions goes natively to the upstream's /completions (completions.ts),
// except fill-in-the-middle on llama.cpp's server, which goes to its /infill (infill.ts).
// Whether the server is llama.cpp's is asked as the provider starts (server-kind.ts): such a
// server gets every call streamed (stream_upstream auto) and verbose with stop sequences. The
// usage of an answer of several choices covers them all (../choices-usage.ts).

import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../../config/types.js';
import type { Fleet } from '../../upstream/balance/index.js';
import { GatewayError } from '../../errors.js';
import type { SseEvent } from '../../sse/parser.js';
import { readCapped, transportError, type UpstreamEndpoint } from '../../upstream/http.js';
import { HttpProvider, type StreamTranslator } from '../http-provider.js';
import type { ChoicesAndUsage } from '../shared.js';
import type { ChatRequest } from '../../hub/chat.js';
import { withCallHeaders, type CompletionResult, type DiscoveredModel, type EmbedInput, type EmbedResult, type ProviderCall, type RerankInput, type RerankResult, type StreamPart, type TranscribeInput, type TranscribeResult, type UpstreamStream } from '../types.js';
import { embedOpenAI } from './embed.js';
import { completionsAnswer, completionsBody, CompletionsTranslator, HOLD_ALIASES, isCompletions } from './completions.js';
import { WholeCompletion } from './completions-whole.js';
import { InfillTranslator, infillAnswer, infillBody, infillRefusal, infillUnsupported, wantsInfill } from './infill.js';
import { rerankOpenAI } from './rerank.js';
import { transcribeOpenAI } from './audio.js';
import { isLlamaCppProps, normalizeChunk, verboseStoppingWord, normalizeCompletion, parseLlamaCppContext, parseModelList, parseTokenizeCount, type TextChunkMemo } from './translate.js';
import { hasStop } from '../shared.js';
import { assemble } from '../assemble.js';
import { CoveredStream, coverWhole, coversStream } from '../choices-usage.js';
import { ServerKind } from './server-kind.js';
import { isOpenAiHosted, tellLimit } from './output-limit.js';
import { countUpTo } from '../../tokens/count.js';
import { UpstreamTokens } from '../../tokens/upstream.js';

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

/** What only llama.cpp's server writes in a whole answer and in a stream's last chunk: its timings. */
const LLAMA_CPP_MARK = '"timings":{';

export class OpenAIProvider extends HttpProvider {
  /**
   * Whether the server is llama.cpp's (server-kind.ts): asked of its /props as the provider
   * starts, told by discovery (/props, /v1/models' owned_by) or, failing those, by its first
   * answer (llama.cpp adds `timings` to every whole answer and last chunk; no other server does).
   * llama.cpp cancels only streamed work when its client leaves, and names a matched stop string
   * only when asked to be verbose.
   */
  readonly #kind: ServerKind;
  /** Its replicas are OpenAI's own API (output-limit.ts: max_completion_tokens sent alone). */
  readonly #openAiHosted: boolean;
  /** Handed to a stream's translator while the server is not known yet. */
  readonly #learn = (llamaCpp: boolean): void => this.#kind.suggest(llamaCpp);
  /** The calls that go to llama.cpp's /infill: decided once per call (#infillCheck), before its body is built. */
  readonly #infillCalls = new WeakSet<ProviderCall>();
  /** Completions calls assembled from a stream for a client that asked for none: the answer being built. */
  readonly #wholes = new WeakMap<ProviderCall, WholeCompletion>();
  /** Whole answers of several choices whose usage is llama.cpp's: the first choice's alone (choices-usage.ts). */
  readonly #firstOnly = new WeakSet<ProviderCall>();
  /** `tokenizer: upstream` counts of this server, for usage that must cover several choices. */
  #tokens: UpstreamTokens | undefined;

  constructor(name: string, config: ProviderConfig, fleet?: Fleet) {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...config.headers };
    if (config.api_key !== '') headers.authorization = `Bearer ${config.api_key}`;
    super(name, config, { path: '/chat/completions', headers, unavailable: new Set([429, 503]) }, fleet);
    // A fleet found in DNS is known by its name (its replicas come and go).
    const d = config.discover;
    const server = d === undefined ? this.fleet.replicas.map((r) => r.url).join(' ') : `dns:${d.dns}:${d.port}`;
    this.#kind = new ServerKind(server, (signal) => this.#probe(signal), config.timeout_ms);
    this.#openAiHosted = isOpenAiHosted(this.fleet.replicas.map((r) => r.url));
  }

  /** Health checks and scraping, and the question of what the server is, asked now rather than by the first request. */
  override start(): void {
    super.start();
    // After a reload the kind is known already (what the last config learned): confirmed all the same.
    // (A fleet found in DNS asks once its first lookup has found a replica to ask.)
    if (this.fleet.replicas.length > 0) void this.#kind.ask();
    else void this.fleet.ready().then(() => this.#kind.ask()); // neither rejects
  }

  /**
   * Fill-in-the-middle on llama.cpp's server cannot be served as the request asks (n, echo,
   * several prompts): refused with the parameter named before anything is held, once the
   * server is known; as a fallback target it is skipped.
   */
  refuses(request: ChatRequest): GatewayError | undefined {
    return this.#kind.llamaCpp === true && wantsInfill(request) ? infillRefusal(request) : undefined;
  }

  // Once the server is known, chat calls go straight on (no extra promise on the hot path). Until
  // then a call waits for the start's question a bounded time (server-kind.ts); a FIM call is
  // checked first. A call asking several answers has its usage cover them all (choices-usage.ts).
  override complete(call: ProviderCall): Promise<CompletionResult> {
    if (this.#kind.llamaCpp === undefined || wantsInfill(call.request)) return this.#ready(call).then(() => super.complete(call));
    return super.complete(call);
  }

  override stream(call: ProviderCall): Promise<UpstreamStream> {
    if (this.#kind.llamaCpp === undefined || wantsInfill(call.request)) return this.#ready(call).then(() => this.#stream(call));
    return this.#stream(call);
  }

  /** A whole answer of several choices: its usage covers them all (one assembled from a stream was covered as a stream). */
  protected override answered(result: CompletionResult, call: ProviderCall): CompletionResult | Promise<CompletionResult> {
    return result.choices.length > 1 ? coverWhole(result, call, (text) => this.#count(text, call), this.#firstOnly.has(call)) : result;
  }

  #stream(call: ProviderCall): Promise<UpstreamStream> {
    if (!coversStream(call)) return super.stream(call);
    return super.stream(call).then((s) => new CoveredStream(s, (text) => this.#count(text, call)));
  }

  /** Tokens of generated text, with the model's tokenizer (this server's own for `tokenizer: upstream`). */
  #count(text: string, call: ProviderCall): Promise<number> {
    if (call.model.tokenizer === 'upstream' && call.model.provider === this.name) {
      this.#tokens ??= new UpstreamTokens(this);
      return this.#tokens.count(text, call.upstreamModel);
    }
    return countUpTo(call.model.tokenizer, [text], 0, Infinity);
  }

  /** The server known (or the bounded wait over); for a FIM call, whether it goes to /infill. */
  async #ready(call: ProviderCall): Promise<void> {
    const infill = wantsInfill(call.request);
    // FIM waits for the answer however long the question takes (within the provider's timeout):
    // sent to the wrong route, it would fail.
    await this.#kind.known(call.signal, infill ? Infinity : undefined);
    if (infill) this.#infillCheck(call);
  }

  /**
   * A completions request with a suffix, to a server known to be llama.cpp's: it goes to /infill,
   * or is refused (400, nothing charged) when /infill cannot serve it. A server that stays
   * unknown (it could not be reached) gets the call natively, which meets the same failure.
   */
  #infillCheck(call: ProviderCall): void {
    if (this.#infillCalls.has(call) || call.signal.aborted || this.#kind.llamaCpp !== true) return;
    const refusal = infillRefusal(call.request);
    if (refusal !== undefined) throw refusal;
    this.#infillCalls.add(call);
  }

  /**
   * Every call for a client that asked for no stream goes streamed upstream, assembled here, on
   * every route (chat, Messages, Responses, completions, /infill), with `always`, and with `auto`
   * once the server is known to be llama.cpp's (/infill is llama.cpp's own route).
   */
  protected override streamsUpstream(call: ProviderCall): boolean {
    const mode = this.config.stream_upstream;
    if (mode === 'never') return false;
    return mode === 'always' || this.#kind.llamaCpp === true || this.#infillCalls.has(call);
  }

  /** Completions are assembled into the upstream's own text_completion (completions-whole.ts). */
  protected override async assembled(call: ProviderCall): Promise<CompletionResult> {
    if (!isCompletions(call) || this.#infillCalls.has(call)) return super.assembled(call);
    const whole = new WholeCompletion();
    this.#wholes.set(call, whole);
    const result = await assemble(await this.stream(call), call);
    result.native = whole.json();
    return result;
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
      if (v !== undefined && !HOLD_ALIASES.includes(key)) out[key] = v;
    }
    // Output is never longer than what was held: every limit field the upstream may read says the
    // figure the hold was sized for, the model's own when the client gave none (CONTRACT section 10).
    tellLimit(out, src, call.request.maxOutputTokens ?? call.model.max_output_tokens, this.#openAiHosted);
    // llama.cpp says which stop string ended an answer only in its verbose debug member.
    if (this.#kind.llamaCpp === true && hasStop(call)) out.verbose = true;
    if (stream) {
      out.stream = true;
      if (this.config.stream_usage) out.stream_options = { include_usage: true };
    }
    return JSON.stringify(out);
  }

  protected completion(text: string, call: ProviderCall, status: number): ChoicesAndUsage {
    if (this.#infillCalls.has(call)) return infillAnswer(text, call, this.name, status);
    const answer = isCompletions(call) ? completionsAnswer(text, call, this.name, status) : normalizeCompletion(text, call, this.name, status);
    if (this.#kind.llamaCpp === undefined) this.#kind.suggest(text.includes(LLAMA_CPP_MARK));
    // llama.cpp joins its tasks' choices into the first task's answer, usage and all.
    if (answer.choices.length > 1 && text.includes(LLAMA_CPP_MARK)) this.#firstOnly.add(call);
    return answer;
  }

  protected translator(call: ProviderCall, status: number): StreamTranslator {
    if (this.#infillCalls.has(call)) return new InfillTranslator(call, this.name, status);
    if (isCompletions(call)) return new CompletionsTranslator(call, this.name, status, this.#wholes.get(call));
    return new ChunkTranslator(call, this.name, status, this.#kind.llamaCpp === undefined ? this.#learn : undefined);
  }

  protected override failure(status: number, text: string, call: ProviderCall): GatewayError {
    return (this.#infillCalls.has(call) ? infillUnsupported(status, text, call) : undefined) ?? super.failure(status, text, call);
  }

  embed(call: ProviderCall, input: EmbedInput): Promise<EmbedResult> {
    return embedOpenAI(this, call, input);
  }

  rerank(call: ProviderCall, input: RerankInput): Promise<RerankResult> {
    return rerankOpenAI(this, call, input);
  }

  transcribe(call: ProviderCall, input: TranscribeInput): Promise<TranscribeResult> {
    return transcribeOpenAI(this, withCallHeaders(this.headers, call), call, input);
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
    const { models, llamaCpp } = parseModelList(await readCapped(res.body, 8 * 1024 * 1024));
    if (llamaCpp) this.#kind.set(true);
    if (models.some((m) => m.contextWindow === undefined) || this.#kind.llamaCpp === undefined) {
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
   * answers 4xx (404). What it tells is learned; a 5xx (llama.cpp answers 503 while its model
   * loads) tells nothing. The text of a 200, else undefined. Throws when the server cannot be reached.
   */
  async #props(signal: AbortSignal): Promise<string | undefined> {
    const root = this.endpoint.basePath.replace(/\/v1$/, '');
    const res = await this.endpoint.pool.request({ method: 'GET', path: `${root}/props`, headers: this.headers, signal });
    const text = await readCapped(res.body, 1024 * 1024);
    if (res.statusCode === 200) this.#kind.set(isLlamaCppProps(text));
    else if (res.statusCode < 500) this.#kind.set(false);
    return res.statusCode === 200 ? text : undefined;
  }

  /** The start's question (server-kind.ts): what /props tells, undefined when it tells nothing. */
  async #probe(signal: AbortSignal): Promise<boolean | undefined> {
    await this.#props(signal);
    return this.#kind.llamaCpp;
  }

  override async close(): Promise<void> {
    this.#kind.close();
    await super.close();
  }
}
