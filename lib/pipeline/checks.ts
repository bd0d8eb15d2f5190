// Checks that need the chosen model or the operator's policy: images, content policy and
// the context window, and whether the model's provider can serve the request at all. They run
// before anything is held or sent upstream.

import type { ModelConfig, ModelType } from '../config/types.js';
import { GatewayError } from '../errors.js';
import { countUpTo, imageCost, promptParts } from '../tokens/count.js';
import type { TokenizerSpec } from '../config/types.js';
import type { ChatMessage, ChatRequest } from '../hub/chat.js';
import type { Target } from '../state.js';

export function checkImages(req: ChatRequest, model: ModelConfig): void {
  if (req.imageCount === 0) return;
  if (!model.supports_vision) {
    throw new GatewayError('model_does_not_support_images', `The model '${model.id}' does not accept images.`, { param: 'messages' });
  }
  if (req.imageCount > model.max_images) {
    throw new GatewayError('too_many_images', `The model '${model.id}' accepts at most ${model.max_images} images per request; this one has ${req.imageCount}.`, { param: 'messages' });
  }
}

/** At least the prompt's tokens, images aside: its texts' UTF-8 bytes and the framing. */
function textBytesUpperBound(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length * 3;
    else if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'text') n += p.text.length * 3;
    if (m.name !== undefined) n += m.name.length * 3 + 1;
    if (m.tool_calls !== undefined) for (const c of m.tool_calls) n += (c.function.name.length + c.function.arguments.length) * 3 + 3;
    n += 3;
  }
  return n + 3;
}

/** The most prompt tokens the model can take beside the output the request asks for. */
export function promptRoom(req: ChatRequest, model: ModelConfig): number {
  return model.context_window - (req.maxOutputTokens ?? model.max_output_tokens);
}

/** What the request's images cost on `model` (each by its size, at least the model's image_tokens). */
function imagesCost(req: ChatRequest, model: ModelConfig): number {
  if (req.imageCount === 0) return 0;
  let n = 0;
  for (const m of req.messages) {
    if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'image_url') n += imageCost(p.image_url.url, model.image_tokens);
  }
  return n;
}

const localSpec = (m: ModelConfig): TokenizerSpec => (m.tokenizer === 'upstream' ? 'o200k_base' : m.tokenizer);

/**
 * For `auto`: which candidates the prompt fits. A prompt whose UTF-8 size already fits skips
 * the tokenizer (a byte-level BPE token is at least one byte); else it is counted once per
 * tokenizer the candidates use (`upstream` by its local estimate), no further than the
 * roomiest of them could take.
 */
export async function contextFit(req: ChatRequest, candidates: readonly ModelConfig[]): Promise<(m: ModelConfig) => boolean> {
  // Per tokenizer, the least and the most room the candidates leave the texts and framing.
  const rooms = new Map<TokenizerSpec, { least: number; most: number }>();
  for (const m of candidates) {
    const room = promptRoom(req, m) - imagesCost(req, m);
    const r = rooms.get(localSpec(m));
    if (r === undefined) rooms.set(localSpec(m), { least: room, most: room });
    else { r.least = Math.min(r.least, room); r.most = Math.max(r.most, room); }
  }
  const bytes = textBytesUpperBound(req.messages);
  const counts = new Map<TokenizerSpec, number>();
  let parts: { fixed: number; texts: string[] } | undefined;
  for (const [spec, r] of rooms) {
    if (bytes <= r.least) continue;
    parts ??= promptParts(req.messages, 0);
    counts.set(spec, await countUpTo(spec, parts.texts, parts.fixed, r.most));
  }
  return (m) => (counts.get(localSpec(m)) ?? bytes) <= promptRoom(req, m) - imagesCost(req, m);
}

/** Prompt estimate + requested output above the context window -> 422. */
export function checkContext(req: ChatRequest, model: ModelConfig, prompt: number): void {
  const output = req.maxOutputTokens ?? model.max_output_tokens;
  if (prompt + output > model.context_window) {
    throw new GatewayError(
      'context_length_exceeded',
      `This model's maximum context length is ${model.context_window} tokens; the request has at least ${prompt} prompt tokens and asks for ${output} output tokens.`,
      { param: req.prompts === undefined ? 'messages' : 'prompt' },
    );
  }
}

/**
 * The model's own provider must be able to answer the request at all (an Anthropic upstream
 * has no plain-text completions): else 400 before anything is held, param `model`, or the
 * provider's own refusal naming the parameter at fault (llama.cpp's /infill and `n`). Fallback
 * targets that cannot are skipped (Attempts).
 */
export function checkProvider(targets: readonly Target[], req: ChatRequest, model: ModelConfig): void {
  const why = targets[0]?.provider.refuses?.(req);
  if (why instanceof GatewayError) throw why;
  if (why !== undefined) throw new GatewayError('unsupported_value', `The model '${model.id}' cannot serve this request: ${why}.`, { param: 'model' });
}

/** A route serves one model type: chat models generate, embedding models embed. */
/** The routes that serve each model type, as a wrong-route refusal names them. */
const ROUTES_OF: Record<ModelType, string> = {
  chat: 'a chat route (chat completions, Messages, Responses)',
  embedding: 'POST /v1/embeddings',
  rerank: 'POST /v1/rerank or POST /v1/score',
  transcription: 'POST /v1/audio/transcriptions or POST /v1/audio/translations',
};

/** A route serves models of one type: any other -> 400 unsupported_value, param model. */
export function checkModelType(model: ModelConfig, type: ModelType): void {
  if (model.type === type) return;
  const a = /^[aeiou]/.test(model.type) ? 'an' : 'a';
  throw new GatewayError('unsupported_value',
    `The model '${model.id}' is ${a} ${model.type} model; use ${ROUTES_OF[model.type]} for it.`,
    { param: 'model' });
}
