// The shapes of the chat API as Tollgate speaks it (spec section 2, CONTRACT section 4).

export type Role = 'system' | 'developer' | 'user' | 'assistant' | 'tool';

export interface TextPart { type: 'text'; text: string }
export interface ImagePart { type: 'image_url'; image_url: { url: string; detail?: string } }
export type ContentPart = TextPart | ImagePart;

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: Role;
  content?: string | ContentPart[] | null;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

/** A validated request. `body` is the client's object, kept for forwarding known fields. */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  stream: boolean;
  includeUsage: boolean;
  /** max_completion_tokens, else max_tokens, when the client set one. */
  maxOutputTokens: number | undefined;
  imageCount: number;
  body: Record<string, unknown>;
  /**
   * The client's own body in its dialect, for a provider whose upstream speaks that dialect
   * natively (no lossy round trip); others use the fields above.
   */
  native?: NativeRequest;
  /**
   * A plain-text request (legacy completions) rather than a conversation: each prompt is
   * answered on its own (`messages` then holds them, and the suffix, as user turns for the
   * content policy and prefix affinity, but they are counted as plain text, without the chat
   * format's framing). Absent for conversations.
   */
  prompts?: PlainPrompts;
  /**
   * How many answers the request asks for (completions: max(n, best_of) per prompt); the hold and the token
   * limits take the output this many times. Absent: 1.
   */
  answers?: number;
  /** The body's `user` as sent, for routes whose `body` is not the client's (embeddings, rerank); the end user (CONTRACT section 20). */
  user?: unknown;
}

/** Plain-text prompts, as legacy completions send them. */
export interface PlainPrompts {
  texts: string[];
  /** Fill-in-the-middle: the text that follows the insertion ('' when none). */
  suffix: string;
  /** Answers per prompt (n). */
  n: number;
  /** The prompt is part of each answer's text (echo: true). */
  echo: boolean;
}

export interface NativeRequest {
  dialect: string;
  body: Record<string, unknown>;
  /** Client headers that such an upstream gets too (anthropic-beta). */
  headers: Record<string, string>;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/**
 * Token usage as the gateway meters it (CONTRACT section 8). `prompt_tokens` counts every
 * prompt token, the cached and cache-written ones included (as OpenAI counts them, unlike
 * Anthropic's input_tokens); `completion_tokens` includes the reasoning tokens. The optional
 * counts are set only when the upstream reported them.
 */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Prompt tokens read from the upstream's prompt cache (charged cached_input_per_mtok). */
  cached_tokens?: number;
  /** Prompt tokens written to the upstream's prompt cache (charged cache_write_per_mtok). */
  cache_write_tokens?: number;
  /** Completion tokens the model spent reasoning (charged as output, like the rest). */
  reasoning_tokens?: number;
}

export interface Logprobs { content: unknown[] | null; refusal: unknown[] | null }

export interface CompletionChoice {
  index: number;
  /** reasoning_content: a reasoning model's thinking (vLLM, llama.cpp, DeepSeek style), passed on. */
  message: { role: 'assistant'; content: string | null; refusal: string | null; reasoning_content?: string; tool_calls?: ToolCall[] };
  logprobs: Logprobs | null;
  finish_reason: FinishReason;
  /**
   * Internal, not part of the chat format (the chat dialect leaves it out): which of the
   * client's stop sequences ended the answer, when the upstream said so.
   */
  stop_sequence?: string;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: CompletionChoice[];
  usage: Usage;
}

export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface ChunkDelta {
  role?: 'assistant';
  content?: string | null;
  refusal?: string | null;
  reasoning_content?: string;
  tool_calls?: ToolCallDelta[];
}

export interface ChunkChoice {
  index: number;
  delta: ChunkDelta;
  logprobs?: Logprobs | null;
  finish_reason: FinishReason | null;
  /** Internal, as CompletionChoice's: the client's stop sequence that ended the answer. */
  stop_sequence?: string;
}
