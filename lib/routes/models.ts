// GET /v1/models and /v1/models/{id}: the catalog as the caller's plan and key see it.
// Authenticated, not metered.

import { GatewayError, clip, retryAfterHeaders } from '../errors.js';
import { sendJson } from '../http/respond.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';

export async function serveModels({ state, ctx, req, res }: Exchange, path: string): Promise<void> {
  const principal = await state.auth.authenticate(req.headers.authorization, req);
  ctx.principal = principal;
  ctx.rateHeaders = await state.limits.peek(principal);
  if (ctx.route === 'models') {
    if (state.catalog.size === 0) {
      throw new GatewayError('service_unavailable', 'The model catalog is not populated yet.', { headers: retryAfterHeaders(5000) });
    }
    sendJson(res, 200, state.catalog.listJson(principal.plan, principal.key), answerHeaders(ctx));
    return;
  }
  let id: string;
  try {
    id = decodeURIComponent(path.slice('/v1/models/'.length));
  } catch {
    id = path.slice('/v1/models/'.length);
  }
  ctx.model = id;
  const json = state.catalog.publicJson(id);
  if (json === undefined) {
    state.catalog.resolve(id, principal.plan, false, undefined, principal.key); // throws model_not_found with suggestions
    throw new GatewayError('model_not_found', `The model '${clip(id)}' does not exist.`, { param: 'model' });
  }
  sendJson(res, 200, json, answerHeaders(ctx));
}
