// What every provider offers the chat pipeline. A provider turns our request into its
// upstream's, and its upstream's answers, events and errors back into ours; the pipeline
// adds ids, model slugs and framing, so no provider ever writes to a client.

import type { ChatRequest, ChunkChoice, CompletionChoice, NativeRequest, Usage } from '../hub/chat.js';
import type { ModelConfig, ProviderConfig } from '../config/types.js';
import type { Fleet, Replica } from '../upstream/balance/index.js';
import { merged } from '../objects.js';
import type { CallAbort } from '../upstream/abort.js';
import type { AudioFormat, EmbedInput, EmbedResult, NativeEvent, RerankInput, RerankResult, TranscribeInput, TranscribeResult } from '../hub/forms.js';

export type { AudioFormat, EmbedInput, EmbedResult, NativeEvent, RerankInput, RerankResult, TranscribeInput, TranscribeResult };
import type { GatewayError } from '../errors.js';

export interface ProviderCall {
  request: ChatRequest;
  model: ModelConfig;
  upstreamModel: string;
  /** Aborted when the client goes or the provider's timeout passes (reason: TIMEOUT). */
  readonly signal: AbortSignal;
  /** The same abort without an AbortSignal (the pipeline's calls): what the hot path listens to. */
  abort?: CallAbort;
  /** The replica the balancer picked for this attempt (default: the provider's first). */
  replica?: Replica;
  /** Headers this call adds to the provider's own (traceparent when tracing); never overrides them. */
  headers?: Record<string, string>;
}

/**
 * One attempt's call, as the pipeline makes it. `signal` is a getter of the class, one for every
 * call: an object literal with a getter of its own (a new closure per call) gets a map of its
 * own in V8, made in the old generation, and that map kept the closure, and through it the
 * whole request, alive through young-generation collections (1 MB promoted per scavenge at one
 * connection, 4-7 ms scavenges; test/observe/young-garbage.test.ts).
 */
export class AttemptCall implements ProviderCall {
  constructor(
    public request: ChatRequest,
    public model: ModelConfig,
    public upstreamModel: string,
    readonly abort: CallAbort,
    public replica: Replica,
    public headers: Record<string, string> | undefined,
  ) {}

  get signal(): AbortSignal {
    return this.abort.signal;
  }
}

/** A call's headers: the provider's own, plus the call's extra ones where the provider sets none. */
export function withCallHeaders(own: Record<string, string>, call: ProviderCall): Record<string, string> {
  return call.headers === undefined ? own : merged(call.headers, own);
}

export interface CompletionResult {
  choices: CompletionChoice[];
  usage: Usage | undefined;
  headers: Record<string, string>;
  /** The upstream's answer in the client's dialect, when the call went natively. */
  native?: string;
  /** The choices as the chat format writes them (exactly JSON.stringify of them), when the provider read them so. */
  chatJson?: string;
}

export interface ChoicesPart {
  kind: 'choices';
  choices: ChunkChoice[];
  /** The upstream's own event in the client's dialect, when the call went natively. */
  native?: NativeEvent;
  /**
   * `choices` as JSON.stringify writes them, when the provider had them without building them
   * (a chunk of text read by pattern): the chat dialect sends it as is. Whoever changes
   * `choices` drops it.
   */
  chatJson?: string;
}

export type StreamPart =
  | ChoicesPart
  /** `perChoice`: the server's own figures for every choice, added up (choices-usage.ts). */
  | { kind: 'usage'; usage: Usage; perChoice?: true };

export interface UpstreamStream extends AsyncIterable<StreamPart> {
  headers: Record<string, string>;
  /**
   * The next part when it is already at hand (it came in the same upstream read as the one
   * before it), without a promise; undefined when next() would have to wait for the upstream.
   * The frames of one read then leave in one write. Absent: each part is written as it comes.
   */
  take?(): StreamPart | undefined;
}

/** A model an upstream lists (GET {base_url}/models). */
export interface DiscoveredModel {
  id: string;
  /** The context length the upstream reports (vLLM's max_model_len), if any. */
  contextWindow: number | undefined;
}

export interface Provider {
  readonly name: string;
  readonly config: ProviderConfig;
  /** The provider's replicas and the policy that picks one per attempt. */
  readonly fleet: Fleet;
  /** Starts background work: health checks and metrics scraping of the replicas. */
  start?(): void;
  /**
   * Optional: why this provider cannot answer `request` at all (Anthropic: a plain-text
   * completion), or undefined when it can. Absent: it answers every generation. A GatewayError
   * is the refusal itself, naming the parameter at fault (llama.cpp's /infill: n, echo).
   */
  refuses?(request: ChatRequest): string | GatewayError | undefined;
  /** One answer; throws GatewayError on any failure. */
  complete(call: ProviderCall): Promise<CompletionResult>;
  /**
   * Opens a stream once the upstream accepted the call; iterating it throws GatewayError when
   * the upstream fails, including an error as its first event.
   */
  stream(call: ProviderCall): Promise<UpstreamStream>;
  /**
   * Optional: embeddings of `input` (POST /v1/embeddings). A provider without it serves no
   * `type: embedding` model (the config check refuses one). Throws GatewayError on any failure.
   */
  embed?(call: ProviderCall, input: EmbedInput): Promise<EmbedResult>;
  /**
   * Optional: scores of text pairs (POST /v1/rerank, /v1/score). A provider without it serves
   * no `type: rerank` model. Throws GatewayError on any failure.
   */
  rerank?(call: ProviderCall, input: RerankInput): Promise<RerankResult>;
  /**
   * Optional: a transcription or translation of audio (POST /v1/audio/...). A provider without
   * it serves no `type: transcription` model. Throws GatewayError on any failure.
   */
  transcribe?(call: ProviderCall, input: TranscribeInput): Promise<TranscribeResult>;
  /** The upstream's own model list, for `discover_models`. */
  discover?(signal: AbortSignal): Promise<DiscoveredModel[]>;
  /** The upstream's own token count of `text` (vLLM's and llama.cpp's POST /tokenize). */
  tokenize?(text: string, upstreamModel: string, signal: AbortSignal): Promise<number>;
  /**
   * The upstream's own count of a request's prompt tokens, for a client speaking the upstream's
   * dialect natively (`native.dialect`); undefined when this upstream cannot count it.
   */
  countNative?(native: NativeRequest, upstreamModel: string, signal: AbortSignal): Promise<number | undefined>;
  close(): Promise<void>;
}
