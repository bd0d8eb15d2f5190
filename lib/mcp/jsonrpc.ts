// A client's JSON-RPC message, read strictly (CONTRACT section 17): a body with a duplicate
// member anywhere, or a member whose name differs only in case from one the gateway reads
// (`Name` beside or instead of `name`), is refused -32600 before anything is forwarded. A
// parser that keeps the last duplicate, or a reader that folds case, would let the checked
// value and the forwarded one differ (Envoy AI Gateway's GHSA-4gph-2hhr-5mwg). Batches (a JSON
// array) are not part of MCP since 2025-06-18: refused -32600 too.

/** JSON-RPC error codes the gateway answers with. */
export const RPC = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internalError: -32603,
  /** The gateway's own refusals (money, an unavailable server): `data.code` says which. */
  server: -32000,
  /** An unknown or foreign session. */
  sessionNotFound: -32001,
} as const;

/** A refusal as a JSON-RPC error; `status` is the HTTP status it is answered with. */
export class RpcError extends Error {
  readonly code: number;
  readonly data: unknown;
  readonly status: number;
  readonly headers: Record<string, string> | undefined;
  constructor(code: number, message: string, opts: { data?: unknown; status?: number; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = 'RpcError';
    this.code = code;
    this.data = opts.data;
    this.status = opts.status ?? 200;
    this.headers = opts.headers;
  }
}

export type RpcId = string | number;

/** One message a client sent: a request (with an id), a notification, or a response to the server. */
export type ClientMessage =
  | { kind: 'request'; id: RpcId; method: string; params: Record<string, unknown> }
  | { kind: 'notification'; method: string }
  | { kind: 'response' };

/** Member names the gateway reads, per object, by their lower-cased form: a case variant of one is refused. */
const canon = (names: readonly string[]): ReadonlyMap<string, string> => new Map(names.map((n) => [n.toLowerCase(), n]));
const READ_TOP = canon(['jsonrpc', 'id', 'method', 'params', 'result', 'error']);
const READ_PARAMS = canon(['name', 'arguments', 'cursor', '_meta', 'uri', 'protocolVersion', 'capabilities', 'clientInfo', 'ref', 'argument', 'context']);
const MAX_ID = 256;
const MAX_METHOD = 128;

const invalid = (message: string, status = 400) => new RpcError(RPC.invalidRequest, message, { status });

/**
 * Index past the JSON string literal that starts at `start` (a `"`) in valid JSON text.
 */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (text.charCodeAt(i) !== 0x22) i += text.charCodeAt(i) === 0x5c ? 2 : 1;
  return i + 1;
}

/**
 * Throws -32600 when an object of the (valid) JSON `text` has a member name twice, as
 * JSON.parse would have read it (escapes decoded: `"n\u0061me"` is `name`). One scan.
 */
export function refuseDuplicates(text: string): void {
  const stack: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = stringEnd(text, i);
      const top = stack[stack.length - 1];
      if (expectKey && top != null) {
        const raw = text.slice(i + 1, end - 1);
        const key = raw.includes('\\') ? (JSON.parse(text.slice(i, end)) as string) : raw;
        if (top.has(key)) throw invalid(`Invalid Request: the member ${JSON.stringify(key.slice(0, 64))} appears twice in one object`);
        top.add(key);
        expectKey = false;
      }
      i = end - 1;
    } else if (c === 0x7b) { // {
      stack.push(new Set());
      expectKey = true;
    } else if (c === 0x5b) { // [
      stack.push(null);
    } else if (c === 0x7d || c === 0x5d) {
      stack.pop();
    } else if (c === 0x2c) { // ,
      expectKey = stack[stack.length - 1] != null;
    }
  }
}

/** Throws -32600 when `obj` has a member that is a case variant of one in `read` (and not it). */
function refuseCaseVariants(obj: Record<string, unknown>, read: ReadonlyMap<string, string>, where: string): void {
  for (const k of Object.keys(obj)) {
    const exact = read.get(k.toLowerCase());
    if (exact !== undefined && exact !== k) {
      throw invalid(`Invalid Request: the member ${JSON.stringify(k.slice(0, 64))} of ${where} differs only in case from ${JSON.stringify(exact)}`);
    }
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A body's bytes as one checked client message; throws RpcError (HTTP 400) otherwise. */
export function parseMessage(body: Buffer): ClientMessage {
  const text = body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new RpcError(RPC.parseError, 'Parse error: the body is not valid JSON', { status: 400 });
  }
  if (Array.isArray(value)) throw invalid('Invalid Request: batches are not supported (MCP 2025-06-18 and later); send one message per request');
  if (!isObject(value)) throw invalid('Invalid Request: a JSON-RPC message is a JSON object');
  refuseDuplicates(text);
  refuseCaseVariants(value, READ_TOP, 'the message');
  if (value.jsonrpc !== '2.0') throw invalid('Invalid Request: "jsonrpc" must be "2.0"');
  const { id, method, params } = value;
  if (method === undefined) {
    if (id === undefined || (!('result' in value) && !('error' in value))) throw invalid('Invalid Request: a message needs a "method", or an "id" with a "result" or "error"');
    return { kind: 'response' };
  }
  if (typeof method !== 'string' || method === '' || method.length > MAX_METHOD) throw invalid(`Invalid Request: "method" must be a string of 1 to ${MAX_METHOD} characters`);
  if (params !== undefined && !isObject(params)) throw invalid('Invalid Request: "params" must be an object');
  if (params !== undefined) refuseCaseVariants(params, READ_PARAMS, '"params"');
  if (id === undefined) return { kind: 'notification', method };
  if (!((typeof id === 'string' && id.length <= MAX_ID) || (typeof id === 'number' && Number.isSafeInteger(id)))) {
    throw invalid(`Invalid Request: "id" must be a string of at most ${MAX_ID} characters or an integer`);
  }
  return { kind: 'request', id, method, params: params ?? {} };
}

/** A result message's text. */
export function resultText(id: RpcId, result: unknown): string {
  return `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${JSON.stringify(result)}}`;
}

/** An error message's text; `id` null when the request's could not be read. */
export function errorText(id: RpcId | null, err: RpcError): string {
  const error: Record<string, unknown> = { code: err.code, message: err.message };
  if (err.data !== undefined) error.data = err.data;
  return JSON.stringify({ jsonrpc: '2.0', id, error });
}
