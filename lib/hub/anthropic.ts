// The Anthropic Messages wire format, once: the shapes of its requests, answers, content blocks,
// usage, stream events and errors, and its fixed names and stop-reason maps. The gateway speaks it
// on both sides (dialects/messages to clients, providers/anthropic to upstreams), and both take
// it from here, below them both, so the two cannot drift apart. Types and constants only.

import type { FinishReason } from './chat.js';

/** The dialect's name (Dialect.name, NativeRequest.dialect): what an Anthropic upstream takes natively. */
export const MESSAGES_DIALECT = 'messages';

// ---- usage -------------------------------------------------------------------------------

/**
 * The usage of a Messages answer, the four counts every answer the gateway sends carries
 * (CONTRACT sections 6 and 11). input_tokens excludes the tokens read from and written to the
 * prompt cache, which are counted apart.
 */
export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

/** The four counts, in the order they are written. */
export const USAGE_COUNTS = ['input_tokens', 'output_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'] as const satisfies readonly (keyof AnthropicUsage)[];

// ---- stop reasons ------------------------------------------------------------------------

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'pause_turn' | 'refusal' | 'model_context_window_exceeded';

/**
 * An upstream's stop_reason -> ours. A reason not listed (one Anthropic adds later) is a stop.
 * end_turn, stop_sequence and pause_turn are stops too (stop_sequence tells which sequence apart).
 */
export const FINISH_REASON_OF: Readonly<Record<StopReason, FinishReason>> = Object.freeze({
  end_turn: 'stop',
  max_tokens: 'length',
  stop_sequence: 'stop',
  tool_use: 'tool_calls',
  pause_turn: 'stop',
  refusal: 'content_filter',
  model_context_window_exceeded: 'length',
});

/**
 * Our finish reason -> the stop_reason a client gets; a stop that one of the client's
 * stop_sequences caused is stop_sequence instead (when the upstream said which).
 */
export const STOP_REASON_OF: Readonly<Record<FinishReason, StopReason>> = Object.freeze({
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  content_filter: 'end_turn',
});

// ---- content blocks ----------------------------------------------------------------------

export interface TextBlock { type: 'text'; text: string }
export interface ThinkingBlock { type: 'thinking'; thinking: string; signature: string }
export interface RedactedThinkingBlock { type: 'redacted_thinking'; data: string }
export interface ToolUseBlock { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
export type ImageSource = { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };
export interface ImageBlock { type: 'image'; source: ImageSource }
export interface ToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content?: string | (TextBlock | ImageBlock)[];
  is_error?: boolean;
}

/** A block of an answer (Message.content, content_block_start). */
export type ContentBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock;
/** A block of a request's message. */
export type RequestBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock;

/** The block types a user turn may hold, and an assistant turn (as the gateway takes them). */
export const USER_BLOCK_TYPES = ['text', 'image', 'tool_result'] as const satisfies readonly RequestBlock['type'][];
export const ASSISTANT_BLOCK_TYPES = ['text', 'tool_use', 'thinking', 'redacted_thinking'] as const satisfies readonly RequestBlock['type'][];

// ---- requests ----------------------------------------------------------------------------

export interface MessageParam { role: 'user' | 'assistant'; content: string | RequestBlock[] }

export interface Tool { name: string; description?: string; input_schema: Record<string, unknown> }

export type ToolChoice =
  | { type: 'auto' | 'any' | 'none'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean };

export const TOOL_CHOICE_TYPES = ['auto', 'any', 'tool', 'none'] as const satisfies readonly ToolChoice['type'][];

/** The body of POST /v1/messages (the fields the gateway reads or writes; others pass). */
export interface MessagesRequest {
  model: string;
  max_tokens: number;
  system?: string | TextBlock[];
  messages: MessageParam[];
  stop_sequences?: string[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  metadata?: { user_id?: string };
  tools?: Tool[];
  tool_choice?: ToolChoice;
  stream?: boolean;
}

// ---- answers and stream events -----------------------------------------------------------

/** A whole answer, and message_start's message (content empty, stop_reason null). */
export interface Message {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: ContentBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
}

export type BlockDelta =
  | { type: 'text_delta'; text: string }
  | { type: 'thinking_delta'; thinking: string }
  | { type: 'signature_delta'; signature: string }
  | { type: 'input_json_delta'; partial_json: string };

export interface MessageStartEvent { type: 'message_start'; message: Message }
export interface ContentBlockStartEvent { type: 'content_block_start'; index: number; content_block: ContentBlock }
export interface ContentBlockDeltaEvent { type: 'content_block_delta'; index: number; delta: BlockDelta }
export interface ContentBlockStopEvent { type: 'content_block_stop'; index: number }
export interface MessageDeltaEvent {
  type: 'message_delta';
  delta: { stop_reason: StopReason | null; stop_sequence: string | null };
  usage: AnthropicUsage;
}
export interface MessageStopEvent { type: 'message_stop' }
export interface PingEvent { type: 'ping' }
export interface ErrorEvent { type: 'error'; error: { type: ErrorType; message: string } }

export type StreamEvent =
  | MessageStartEvent | ContentBlockStartEvent | ContentBlockDeltaEvent | ContentBlockStopEvent
  | MessageDeltaEvent | MessageStopEvent | PingEvent | ErrorEvent;

/** A stream event's name: its SSE `event:` field, and its body's `type`. */
export type StreamEventType = StreamEvent['type'];

// ---- errors ------------------------------------------------------------------------------

/** error.type of an error answer or event (what Anthropic's SDKs read). */
export type ErrorType =
  | 'invalid_request_error' | 'authentication_error' | 'billing_error' | 'permission_error' | 'not_found_error'
  | 'request_too_large' | 'rate_limit_error' | 'api_error' | 'overloaded_error' | 'timeout_error';
