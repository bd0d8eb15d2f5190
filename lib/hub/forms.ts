// The hub's forms of the requests that are not a chat generation, and of an upstream's own stream
// event: what a client's dialect (dialects/) reads a request into and renders an answer from,
// and what a provider (providers/) sends upstream and reads back. The two meet only here.

/**
 * One of the upstream's own stream events, in the client's dialect, as the SSE parser read it:
 * its name (Anthropic's are never unnamed: one is named by its body's type; undefined for the
 * data-only events of OpenAI's formats) and its data (lines joined by newlines). Not framed: the
 * client's dialect frames it (sse/writer).
 */
export interface NativeEvent {
  event?: string;
  data: string;
}

/** What to embed: strings or token arrays, with the requested vector length if any. */
export interface EmbedInput {
  input: (string | number[])[];
  dimensions: number | undefined;
  user: string | undefined;
}

export interface EmbedResult {
  /** One vector per input, in order. */
  vectors: number[][];
  /** The upstream's count; undefined: the gateway counts. */
  promptTokens: number | undefined;
  headers: Record<string, string>;
}

/**
 * A rerank (POST /v1/rerank: one query against documents) or a score (POST /v1/score: text
 * pairs) request of a `type: rerank` model.
 */
export interface RerankInput {
  route: 'rerank' | 'score';
  /** The client's body: an upstream that serves the route natively gets its fields as sent. */
  body: Readonly<Record<string, unknown>>;
  /** The pairs scored, in order: rerank's (query, documents[i]), score's (text_1[i], text_2[i]). */
  pairs: ReadonlyArray<readonly [string, string]>;
  /** Rerank only: the most results the client wants back (all when undefined). */
  topN: number | undefined;
}

export interface RerankResult {
  /** Scores by pair index: every pair's for score, rerank's best top_n at least. */
  scores: ReadonlyArray<{ index: number; score: number }>;
  /** The upstream's count (usage.total_tokens, else prompt_tokens); undefined: the gateway counts. */
  totalTokens: number | undefined;
  headers: Record<string, string>;
}

/** The audio answer formats of OpenAI's transcriptions and translations. */
export type AudioFormat = 'json' | 'text' | 'verbose_json' | 'srt' | 'vtt';

/** A transcription or translation (multipart POST /v1/audio/...) of a `type: transcription` model. */
export interface TranscribeInput {
  task: 'transcriptions' | 'translations';
  /** The form's text fields in order, as sent (`model` among them: a provider rewrites it). */
  fields: ReadonlyArray<readonly [string, string]>;
  file: { field: string; filename: string; contentType: string; data: Buffer };
  responseFormat: AudioFormat;
  /** The audio's length as the gateway measured it (what the request is charged for). */
  seconds: number;
}

export interface TranscribeResult {
  /** The answer as the client gets it, in `responseFormat`. */
  body: Buffer;
  contentType: string;
  headers: Record<string, string>;
}
