// Reads a request body under a byte cap and a deadline. The cap counts bytes actually
// received, chunked bodies included, and the answer goes out as soon as the cap is passed: an
// oversize body is never buffered whole. A body not complete within `timeoutMs` of the
// request's start is answered 408 and its connection closed: a deadline, not an idle timer, so
// a client trickling a byte now and then cannot hold a connection open forever either.

import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';

/** What bounds a request's body (the server section of the config the request arrived under). */
export interface BodyBounds {
  readonly max_body_bytes: number;
  readonly body_timeout_ms: number;
}

/** The bounds of a request nobody marked (the config's defaults). */
export const DEFAULT_BOUNDS: BodyBounds = Object.freeze({ max_body_bytes: 41_943_040, body_timeout_ms: 30_000 });

const STARTED = Symbol('tollgate.requestStarted');
const BOUNDS = Symbol('tollgate.bodyBounds');
type Marked = IncomingMessage & { [STARTED]?: number; [BOUNDS]?: BodyBounds };

/**
 * Notes when the gateway took a request and the bounds its body is held to: body deadlines
 * count from here, and an early answer drains the body within these bounds (linger.ts). Two
 * property writes, no allocation.
 */
export function takeRequest(req: IncomingMessage, bounds: BodyBounds | undefined): void {
  (req as Marked)[STARTED] = performance.now();
  (req as Marked)[BOUNDS] = bounds ?? DEFAULT_BOUNDS;
}

/** The bounds takeRequest noted (the defaults when none were). */
export function boundsOf(req: IncomingMessage): BodyBounds {
  return (req as Marked)[BOUNDS] ?? DEFAULT_BOUNDS;
}

/** A body with a declared length is copied into one buffer once this much of it came. */
const COPY_FROM = 1 << 20;

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

function late(timeoutMs: number): GatewayError {
  return new GatewayError('request_timeout', `The request body was not complete within ${timeoutMs} ms of the request's start.`, {
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

/**
 * The whole body, complete within `timeoutMs` of the request's start (takeRequest; without a
 * mark, of this call).
 */
export function readBody(req: IncomingMessage, limit: number, timeoutMs: number): Promise<Buffer> {
  const early = preRead(req);
  if (early !== undefined) {
    return early.length > limit ? Promise.reject(tooLarge(limit)) : Promise.resolve(early);
  }
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.reject(tooLarge(limit));

  const left = ((req as Marked)[STARTED] ?? performance.now()) + timeoutMs - performance.now();
  if (left <= 0 && !req.complete) return Promise.reject(late(timeoutMs));

  // A large body with a declared length is copied into one buffer of that length as it arrives
  // (once COPY_FROM bytes came): no concatenation of tens of megabytes at its end, a copy that
  // held the event loop 20-40 ms (fresh pages) just when the body was complete. The buffer owns
  // its memory, so the JSON worker takes it without a copy.
  const length = declared === undefined ? Number.NaN : Number(declared);
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] | undefined = [];
    let whole: Buffer | undefined;
    let size = 0;
    let done = false;
    // Never refreshed: however the bytes come, the body ends by the deadline. A body already
    // received whole (only not yet consumed) needs none.
    const timer = req.complete ? undefined : setTimeout(() => {
      req.pause();
      finish(late(timeoutMs));
    }, left);
    const finish = (err: GatewayError | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
      if (err !== null) reject(err);
      else if (whole !== undefined) resolve(size === whole.length ? whole : whole.subarray(0, size));
      else resolve(chunks!.length === 1 ? chunks![0]! : Buffer.concat(chunks!, size));
    };
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > limit) {
        size += chunk.length;
        req.pause();
        finish(tooLarge(limit));
        return;
      }
      if (whole !== undefined) {
        // node:http never passes more than Content-Length; were it to, the body is not the one declared.
        if (size + chunk.length > whole.length) { finish(new GatewayError('invalid_json', 'The request body is longer than its Content-Length.')); return; }
        chunk.copy(whole, size);
        size += chunk.length;
        return;
      }
      size += chunk.length;
      chunks!.push(chunk);
      if (whole === undefined && size >= COPY_FROM && length >= size) {
        whole = Buffer.allocUnsafeSlow(length);
        let at = 0;
        for (const c of chunks!) at += c.copy(whole, at);
        chunks = undefined;
      }
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
