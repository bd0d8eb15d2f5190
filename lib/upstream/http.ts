// Upstream HTTP transport shared by HTTP providers: one undici Pool per replica origin with
// keep-alive and connect/total timeouts, and the mapping of transport failures to our codes.

import { Pool, errors as undiciErrors } from './undici.js';
import type { Dispatcher } from 'undici';
import type { ProviderConfig } from '../config/types.js';
import { GatewayError, retryAfterHeaders } from '../errors.js';
import { TIMEOUT } from './abort.js';

export interface UpstreamEndpoint {
  pool: Pool;
  /** The base URL's path without a trailing slash, e.g. "/v1". */
  basePath: string;
}

/** The pool of one replica (`url`; by default the provider's base_url). */
export function createEndpoint(config: ProviderConfig, replicaUrl = config.base_url!): UpstreamEndpoint {
  const url = new URL(replicaUrl);
  const pool = new Pool(url.origin, {
    connections: config.max_connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
    headersTimeout: config.timeout_ms,
    bodyTimeout: config.timeout_ms,
    connect: { timeout: config.connect_timeout_ms },
  });
  return { pool, basePath: url.pathname.replace(/\/+$/, '') };
}

/** Maps what undici threw into our envelope codes. */
export function transportError(err: unknown, signal: AbortSignal, providerName: string): GatewayError {
  if (err instanceof GatewayError) return err;
  if (signal.aborted && signal.reason === TIMEOUT) {
    return new GatewayError('provider_timeout', 'The model provider did not answer in time.', { cause: err });
  }
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError) {
    return new GatewayError('provider_timeout', 'The model provider did not answer in time.', { cause: err });
  }
  if (err instanceof undiciErrors.ConnectTimeoutError) {
    return new GatewayError('provider_error', `Could not connect to the model provider '${providerName}' in time.`, { cause: err });
  }
  return new GatewayError('provider_error', 'The model provider failed to answer.', { cause: err });
}

/** Errors that mean the replica could not be reached at all (refused, unreachable, connect timeout). */
const CONNECT_FAILURES: ReadonlySet<string> = new Set([
  'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT',
]);

/** Did this failure come from not reaching the upstream at all (so its replica is ejected at once)? */
export function isConnectFailure(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && CONNECT_FAILURES.has(code)) return true;
  }
  return false;
}

/** The upstream's Retry-After (seconds or an HTTP date) in ms, or undefined. */
export function upstreamRetryAfterMs(headers: Dispatcher.ResponseData['headers']): number | undefined {
  const ms = headers['retry-after-ms'];
  if (typeof ms === 'string' && Number.isFinite(Number(ms))) return Number(ms);
  const ra = headers['retry-after'];
  if (typeof ra !== 'string') return undefined;
  const seconds = Number(ra);
  if (Number.isFinite(seconds)) return seconds * 1000;
  const date = Date.parse(ra);
  return Number.isFinite(date) ? date - Date.now() : undefined;
}

/**
 * 503 model_unavailable for an upstream 429/503, passing on its Retry-After. A 429 is the
 * upstream saying "not now", not failing: it does not count toward the circuit; a 503 does.
 */
export function unavailable(headers: Dispatcher.ResponseData['headers'], providerName: string, status: number): GatewayError {
  return new GatewayError('model_unavailable', `The model provider '${providerName}' is overloaded or rate-limited; retry later.`, {
    headers: retryAfterHeaders(upstreamRetryAfterMs(headers) ?? 1000), fault: status !== 429,
  });
}

/** Reads at most `max` bytes of an (error) body as text, discarding the rest. */
export async function readCapped(body: AsyncIterable<Buffer> & { readonly destroyed: boolean; destroy(): unknown }, max = 65536): Promise<string> {
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      if (size < max) parts.push(chunk);
      size += chunk.length;
      if (size >= max) break;
    }
  } catch {
    // A body that breaks while we read an error is still an error; what we have is enough.
  } finally {
    if (!body.destroyed) body.destroy();
  }
  return Buffer.concat(parts).subarray(0, max).toString('utf8');
}

/** Upstream response headers a client may see, renamed where ours would clash. */
const FORWARDED: ReadonlyArray<readonly [string, string]> = [
  ['openai-processing-ms', 'openai-processing-ms'],
  ['x-request-id', 'x-upstream-request-id'],
  ['request-id', 'x-upstream-request-id'],
];

export function forwardedHeaders(headers: Dispatcher.ResponseData['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [from, to] of FORWARDED) {
    const v = headers[from];
    if (typeof v === 'string' && /^[\x21-\x7e][\x20-\x7e]{0,255}$/.test(v)) out[to] = v;
  }
  return out;
}
