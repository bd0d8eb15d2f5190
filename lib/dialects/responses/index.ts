// The OpenAI Responses dialect (POST /v1/responses; GET and DELETE /v1/responses/{id}). A
// request becomes the internal chat request (parse.ts) and the answer a response object or
// stream (render.ts). With `store` (default true) the response is kept in the configured store
// under the caller's account for `responses.retention_hours`, so that `previous_response_id`
// continues it and GET/DELETE reach it; another account's id, an expired or a deleted one is 404
// response_not_found, exactly as an id that never existed. A conversation is stored once: each
// response keeps only what its request added and its answer, and refers to the response it
// continues (store/response-chains.ts). One that cannot be kept (above `responses.max_bytes`,
// past its account's `max_account_bytes` or its conversation's `max_chain_length`) is answered
// all the same, with `store: false`.

import type { IncomingMessage } from 'node:http';
import type { ChatMessage, ChatRequest } from '../../hub/chat.js';
import { envelope, GatewayError } from '../../errors.js';
import type { Store } from '../../store/types.js';
import type { Dialect, DialectEnv, Renderer } from '../types.js';
import { parseResponses, type ResponsesInput } from './parse.js';
import { assistantTurn, newId, ResponsesRenderer, type OutputItem } from './render.js';
import { merged } from '../../objects.js';
import { OFF_THREAD_BYTES, parseJsonBodyOffThread } from '../../http/json.js';

/**
 * What is kept per stored response, of its own: the object GET answers, and the messages its
 * request added (its answer's turn is read back from the object's output).
 */
interface Kept { response: Record<string, unknown> & { output: OutputItem[] }; input: ChatMessage[] }

/** Per request: the Responses-only fields, and the store once the account is known. */
interface Pending extends ResponsesInput {
  env: DialectEnv | undefined;
  /** Responses in the conversation this request continues (0: it continues none). */
  depth: number;
  /** The account's stored bytes as the request began; undefined when the store did not tell. */
  accountBytes: number | undefined;
}

const pending = new WeakMap<ChatRequest, Pending>();

export function notFound(id: string): GatewayError {
  return new GatewayError('response_not_found', `No response with id '${id.slice(0, 200)}' was found.`, { param: 'response_id' });
}

export function unavailable(err: unknown): never {
  throw new GatewayError('service_unavailable', 'The response store is unavailable; retry shortly.', { cause: err });
}

/**
 * A stored value read back. One may be megabytes (up to responses.max_bytes) and a chain holds
 * many: a large one is parsed off the event loop like a large request body (CONTRACT section 16).
 */
async function parseKept(text: string): Promise<Kept> {
  return (text.length < OFF_THREAD_BYTES ? JSON.parse(text) : await parseJsonBodyOffThread(Buffer.from(text))) as Kept;
}

export async function load(store: Store, account: string, id: string): Promise<Kept | undefined> {
  const text = await store.getResponse(account, id);
  return text === undefined ? undefined : parseKept(text);
}

/** A stored conversation as chat messages: each response's input, then its answer. */
async function conversation(values: readonly string[]): Promise<ChatMessage[]> {
  const out: ChatMessage[] = [];
  for (const value of values) {
    const kept = await parseKept(value);
    for (const m of kept.input) out.push(m);
    out.push(assistantTurn(kept.response.output));
  }
  return out;
}

function countImages(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'image_url') n++;
  return n;
}

/** The characters of the messages' strings: at most their JSON's UTF-8 bytes. */
function charsOf(messages: readonly ChatMessage[]): number {
  let n = 0;
  for (const m of messages) {
    if (typeof m.content === 'string') n += m.content.length;
    else if (Array.isArray(m.content)) for (const p of m.content) n += p.type === 'text' ? p.text.length : p.image_url.url.length;
    for (const c of m.tool_calls ?? []) n += c.function.name.length + c.function.arguments.length;
  }
  return n;
}

class KeepingRenderer extends ResponsesRenderer {
  readonly #p: Pending;
  /** The response's own part as keep() stores it, once serialize() found it may be kept. */
  #value: string | undefined;

  constructor(p: Pending, model: string) {
    super({ id: newId('resp'), model, previousResponseId: p.previousResponseId, store: p.store, metadata: p.metadata, echo: p.echo });
    this.#p = p;
  }

  /** Decides whether the response is kept, before the answer tells (`store`). */
  protected override serialize(final: Record<string, unknown>): string {
    const body = JSON.stringify(final);
    if (!this.#p.store) return body;
    this.#value = this.#storable(body);
    if (this.#value !== undefined) return body;
    this.head.store = false;
    final.store = false;
    return JSON.stringify(final);
  }

  /** The value to keep, or undefined when it must not be kept. */
  #storable(body: string): string | undefined {
    const p = this.#p;
    const limits = p.env?.config.responses;
    if (limits === undefined || p.accountBytes === undefined || p.depth >= limits.max_chain_length) return undefined;
    const room = Math.min(limits.max_bytes, limits.max_account_bytes - p.accountBytes);
    // A part whose characters alone exceed the room is not even serialized.
    if (body.length + charsOf(p.input) > room) return undefined;
    const value = `{"response":${body},"input":${JSON.stringify(p.input)}}`;
    return Buffer.byteLength(value) <= room ? value : undefined;
  }

  async keep(): Promise<void> {
    const env = this.#p.env;
    if (this.#value === undefined || env === undefined) return;
    await env.store.putResponse(env.account, this.head.id, this.#value, this.#p.previousResponseId, env.config.responses.retention_hours * 3_600_000);
  }
}

export const responsesDialect: Dialect = {
  name: 'responses',
  credential: (req: IncomingMessage) => req.headers.authorization,
  parse(body: unknown): ChatRequest {
    const { request, extra } = parseResponses(body);
    pending.set(request, merged<Pending>(extra, { env: undefined, depth: 0, accountBytes: undefined }));
    return request;
  },
  async prepare(request: ChatRequest, env: DialectEnv): Promise<void> {
    const p = pending.get(request)!;
    p.env = env;
    if (p.previousResponseId === null) {
      // What the account stores decides whether this one may be kept too; a store that cannot
      // tell costs the request nothing but that (it is answered with store: false).
      if (p.store) p.accountBytes = await env.store.responseBytes(env.account).catch(() => undefined);
      return;
    }
    const chain = await env.store.responseChain(env.account, p.previousResponseId, env.config.responses.max_chain_length).catch(unavailable);
    if (chain === undefined) throw notFound(p.previousResponseId);
    p.depth = chain.values.length;
    p.accountBytes = chain.accountBytes;
    const before = await conversation(chain.values);
    // Instructions are not carried over from the earlier response (as OpenAI's): this
    // request's own, if any, lead.
    const system: ChatMessage[] = p.instructions === null ? [] : [{ role: 'system', content: p.instructions }];
    request.messages = [...system, ...before, ...p.input];
    request.imageCount = countImages(request.messages);
    request.body = merged<Record<string, unknown>>(request.body, { messages: request.messages });
  },
  renderer: (request: ChatRequest, model: string): Renderer => new KeepingRenderer(pending.get(request)!, model),
  errorBody: (err, requestId) => JSON.stringify(envelope(err, requestId)),
};
