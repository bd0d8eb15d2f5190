// GET and DELETE /v1/responses/{id}: a stored response (dialects/responses), for the caller's
// own account only; another account's id, an expired or a deleted one is 404
// response_not_found, exactly as an id that never existed. Not metered: it generates nothing.

import { sendJson } from '../http/respond.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import { load, notFound, unavailable } from '../dialects/responses/index.js';

/** GET or DELETE /v1/responses/{id}, for the caller's own account only. */
export async function serveStoredResponse(
  { state, ctx, req, res }: Exchange, rawId: string,
): Promise<void> {
  const principal = await state.auth.authenticate(req.headers.authorization, req);
  ctx.principal = principal;
  ctx.rateHeaders = await state.limits.peek(principal);
  let id: string;
  try {
    id = decodeURIComponent(rawId);
  } catch {
    throw notFound(rawId);
  }
  const headers = answerHeaders(ctx);
  if (req.method === 'DELETE') {
    const deleted = await state.store.deleteResponse(principal.accountId, id).catch(unavailable);
    if (!deleted) throw notFound(id);
    sendJson(res, 200, JSON.stringify({ id, object: 'response', deleted: true }), headers);
    return;
  }
  const kept = await load(state.store, principal.accountId, id).catch(unavailable);
  if (kept === undefined) throw notFound(id);
  sendJson(res, 200, JSON.stringify(kept.response), headers);
}
