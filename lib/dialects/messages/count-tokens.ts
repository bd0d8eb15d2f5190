// POST /v1/messages/count_tokens (CONTRACT section 6): the prompt's tokens as the model counts
// them, by the upstream itself when its provider can (an Anthropic upstream's own count_tokens),
// else with the model's tokenizer. Authenticated and counted toward requests_per_minute, never
// held nor charged: nothing is generated.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError } from '../../errors.js';
import { isJsonContentType, readBody } from '../../http/body.js';
import { parseJsonBody } from '../../http/json.js';
import { answerHeaders, sendJson, type RequestContext } from '../../http/respond.js';
import type { GatewayState } from '../../state.js';
import { messagesDialect } from './index.js';
import type { NativeRequest } from '../../chat/types.js';
import type { ModelConfig } from '../../config/types.js';
import { parseMessages } from './parse.js';

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

export async function countTokens(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  ctx.principal = await state.auth.authenticate(messagesDialect.credential(req), req);
  if (!isJsonContentType(req.headers['content-type'])) {
    throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
  }
  const body = parseJsonBody(await readBody(req, state.config.server.max_body_bytes, state.config.server.body_timeout_ms));
  const request = parseMessages(body, true);
  const native = { dialect: 'messages', body: body as Record<string, unknown>, headers: betaHeader(req) };
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0, undefined, ctx.principal.key);
  ctx.model = model.id;
  const grant = await state.limits.admit(ctx.principal, 0);
  ctx.rateHeaders = grant.headers;
  let n: number;
  try {
    n = await upstreamCount(state, model, native) ?? await state.promptTokens(request, model);
  } finally {
    grant.correct(0);
    grant.release();
  }
  sendJson(res, 200, `{"input_tokens":${n}}`, answerHeaders(ctx));
}
