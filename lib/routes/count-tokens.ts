// POST /v1/messages/count_tokens (CONTRACT section 6): the prompt's tokens as the model counts
// them, by the upstream itself when its provider can (an Anthropic upstream's own count_tokens),
// else with the model's tokenizer. Authenticated and counted toward requests_per_minute, never
// held nor charged: nothing is generated. A prompt past the model's context window is refused
// (422): counting stops there, whatever the body's size (CONTRACT section 16).

import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { sendJson } from '../http/respond.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import { messagesDialect } from '../dialects/messages/index.js';
import { authenticateMetered } from '../pipeline/admit.js';
import type { NativeRequest } from '../hub/chat.js';
import { MESSAGES_DIALECT } from '../hub/anthropic.js';
import type { ModelConfig } from '../config/types.js';
import { parseMessages } from '../dialects/messages/parse.js';

function betaHeader(req: IncomingMessage): Record<string, string> {
  const beta = req.headers['anthropic-beta'];
  return typeof beta === 'string' ? { 'anthropic-beta': beta } : {};
}

/** The model's first target's own count, when its upstream speaks Messages; else undefined. */
async function upstreamCount(state: GatewayState, model: ModelConfig, native: NativeRequest): Promise<number | undefined> {
  const target = state.targets(model)[0];
  if (target?.provider.countNative === undefined) return undefined;
  try {
    return await target.provider.countNative(native, target.upstreamModel, AbortSignal.timeout(target.provider.config.timeout_ms));
  } catch {
    return undefined; // the tokenizer's count is the answer then
  }
}

export async function serveCountTokens({ state, ctx, req, res }: Exchange): Promise<void> {
  ctx.principal = await authenticateMetered(state, messagesDialect.credential(req), req);
  const body = await readJsonBody(req, state.config.server);
  const request = parseMessages(body, true);
  const native = { dialect: MESSAGES_DIALECT, body: body as Record<string, unknown>, headers: betaHeader(req) };
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0, undefined, ctx.principal.key);
  ctx.model = model.id;
  const grant = await state.limits.admit(ctx.principal, 0);
  ctx.rateHeaders = grant.headers;
  let n: number;
  try {
    // Counted locally no further than the context window: a prompt past it could never be sent.
    n = await upstreamCount(state, model, native) ?? await state.promptTokens(request, model, model.context_window);
  } finally {
    grant.correct(0);
    grant.release();
  }
  if (n > model.context_window) {
    throw new GatewayError('context_length_exceeded',
      `This model's maximum context length is ${model.context_window} tokens; the prompt has at least ${n}.`, { param: 'messages' });
  }
  sendJson(res, 200, `{"input_tokens":${n}}`, answerHeaders(ctx));
}
