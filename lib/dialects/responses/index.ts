// The OpenAI Responses dialect (POST /v1/responses; GET and DELETE /v1/responses/{id}). A
// request becomes the internal chat request (parse.ts) and the answer a response object or
// stream (render.ts). With `store` (default true) the response and its conversation are kept
// in the configured store under the caller's account for `responses.retention_hours`, so that
// `previous_response_id` continues it and GET/DELETE reach it; another account's id, an expired
// or a deleted one is 404 response_not_found, exactly as an id that never existed.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ChatMessage, ChatRequest } from '../../chat/types.js';
import { envelope, GatewayError } from '../../errors.js';
import { answerHeaders, sendJson, type RequestContext } from '../../http/respond.js';
import type { GatewayState } from '../../state.js';
import type { Store } from '../../store/types.js';
import type { Dialect, DialectEnv, Renderer } from '../types.js';
import { parseResponses, type ResponsesInput } from './parse.js';
import { newId, ResponsesRenderer } from './render.js';
import { merged } from '../../objects.js';

/** What is kept per stored response: the object GET answers, and the conversation so far. */
interface Kept { response: Record<string, unknown>; conversation: ChatMessage[] }

/** Per request: the Responses-only fields, and the store once the account is known. */
interface Pending extends ResponsesInput {
  /** The stored conversation this request continues (without instructions). */
  before: ChatMessage[];
  env: DialectEnv | undefined;
}

const pending = new WeakMap<ChatRequest, Pending>();

function notFound(id: string): GatewayError {
  return new GatewayError('response_not_found', `No response with id '${id.slice(0, 200)}' was found.`, { param: 'response_id' });
}

async function load(store: Store, account: string, id: string): Promise<Kept | undefined> {
  const text = await store.getResponse(account, id);
  return text === undefined ? undefined : JSON.parse(text) as Kept;
}

function countImages(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'image_url') n++;
  return n;
}

class KeepingRenderer extends ResponsesRenderer {
  readonly #p: Pending;

  constructor(p: Pending, model: string) {
    super({ id: newId('resp'), model, previousResponseId: p.previousResponseId, store: p.store, metadata: p.metadata, echo: p.echo });
    this.#p = p;
  }

  async keep(): Promise<void> {
    const env = this.#p.env;
    if (!this.#p.store || env === undefined || this.final === undefined || this.turn === undefined) return;
    const kept: Kept = { response: this.final, conversation: [...this.#p.before, ...this.#p.input, this.turn] };
    await env.store.putResponse(env.account, this.head.id, JSON.stringify(kept), env.config.responses.retention_hours * 3_600_000);
  }
}

export const responsesDialect: Dialect = {
  name: 'responses',
  credential: (req: IncomingMessage) => req.headers.authorization,
  parse(body: unknown): ChatRequest {
    const { request, extra } = parseResponses(body);
    pending.set(request, merged<Pending>(extra, { before: [], env: undefined }));
    return request;
  },
  async prepare(request: ChatRequest, env: DialectEnv): Promise<void> {
    const p = pending.get(request)!;
    p.env = env;
    if (p.previousResponseId === null) return;
    const kept = await load(env.store, env.account, p.previousResponseId).catch((err: unknown) => {
      throw new GatewayError('service_unavailable', 'The response store is unavailable; retry shortly.', { cause: err });
    });
    if (kept === undefined) throw notFound(p.previousResponseId);
    p.before = kept.conversation;
    // Instructions are not carried over from the earlier response (as OpenAI's): this
    // request's own, if any, lead.
    const system: ChatMessage[] = p.instructions === null ? [] : [{ role: 'system', content: p.instructions }];
    request.messages = [...system, ...kept.conversation, ...p.input];
    request.imageCount = countImages(request.messages);
    request.body = merged<Record<string, unknown>>(request.body, { messages: request.messages });
  },
  renderer: (request: ChatRequest, model: string): Renderer => new KeepingRenderer(pending.get(request)!, model),
  errorBody: (err, requestId) => JSON.stringify(envelope(err, requestId)),
};

/** GET or DELETE /v1/responses/{id}, for the caller's own account only. */
export async function handleStoredResponse(
  state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, rawId: string,
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
  const unavailable = (err: unknown) => {
    throw new GatewayError('service_unavailable', 'The response store is unavailable; retry shortly.', { cause: err });
  };
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
