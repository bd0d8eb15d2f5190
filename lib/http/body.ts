// Reads a request body under a byte cap and an idle timer. The cap counts bytes actually
// received, chunked bodies included, and the answer goes out as soon as the cap is passed: an
// oversize body is never buffered whole. A body that stalls (no byte for `idleMs`) is answered
// 408 and its connection closed, so a slow client cannot hold a connection open forever.

import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';

/** What bounds a request's body (the server section of the config the request arrived under). */
export interface BodyBounds {
  readonly max_body_bytes: number;
  readonly body_timeout_ms: number;
}

/** The bounds of a request nobody marked (the config's defaults). */
export const DEFAULT_BOUNDS: BodyBounds = Object.freeze({ max_body_bytes: 41_943_040, body_timeout_ms: 30_000 });

const BOUNDS = Symbol('tollgate.bodyBounds');
type Marked = IncomingMessage & { [BOUNDS]?: BodyBounds };

/**
 * Notes the bounds the gateway holds a request's body to, when it takes the request: an early
 * answer drains the body within these bounds (linger.ts). A property write, no allocation.
 */
export function takeRequest(req: IncomingMessage, bounds: BodyBounds | undefined): void {
  (req as Marked)[BOUNDS] = bounds ?? DEFAULT_BOUNDS;
}

/** The bounds takeRequest noted (the defaults when none were). */
export function boundsOf(req: IncomingMessage): BodyBounds {
  return (req as Marked)[BOUNDS] ?? DEFAULT_BOUNDS;
}

/** The media type is JSON: application/json or any application/*+json, parameters ignored. */
export function isJsonContentType(header: string | undefined): boolean {
  if (header === undefined) return false;
  const semi = header.indexOf(';');
  const type = (semi === -1 ? header : header.slice(0, semi)).trim().toLowerCase();
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

function tooLarge(limit: number): GatewayError {
  return new GatewayError('request_too_large', `The request body exceeds the limit of ${limit} bytes.`, {
    headers: { connection: 'close' },
  });
}

function stalled(idleMs: number): GatewayError {
  return new GatewayError('request_timeout', `The request body sent no data for ${idleMs} ms.`, {
    headers: { connection: 'close' },
  });
}

/** An Express-style host app may have read the body already (express.json / express.raw). */
function preRead(req: IncomingMessage): Buffer | undefined {
  const body = (req as IncomingMessage & { body?: unknown }).body;
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return Buffer.from(body);
  if (body !== undefined && body !== null && typeof body === 'object' && req.readableEnded) {
    return Buffer.from(JSON.stringify(body));
  }
  return undefined;
}

/** The whole body; `idleMs` bounds the wait for each next byte, not the whole upload. */
export function readBody(req: IncomingMessage, limit: number, idleMs: number): Promise<Buffer> {
  const early = preRead(req);
  if (early !== undefined) {
    return early.length > limit ? Promise.reject(tooLarge(limit)) : Promise.resolve(early);
  }
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.reject(tooLarge(limit));

  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    // Refreshed by every chunk: a slow body that keeps making progress is fine.
    const timer = setTimeout(() => {
      req.pause();
      finish(stalled(idleMs));
    }, idleMs);
    const finish = (err: GatewayError | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
      if (err !== null) reject(err);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      timer.refresh();
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish(null);
    const onError = () => finish(new GatewayError('invalid_json', 'The request body could not be read.'));
    const onClose = () => finish(new GatewayError('invalid_json', 'The request body ended early.'));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}
