// Writes an event stream to a client with backpressure: a write that the socket cannot take
// waits for 'drain' (or for the client to go). Every frame a client gets is built here
// (dataFrame, eventFrame and the constants): no dialect or provider frames SSE by hand.

import type { ServerResponse } from 'node:http';
import { onAbort, type AbortSource } from '../upstream/abort.js';

export const SSE_HEADERS = Object.freeze({
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
});

export const DONE_FRAME = 'data: [DONE]\n\n';
export const KEEPALIVE_FRAME = ': keep-alive\n\n';

export function dataFrame(json: string): string {
  return `data: ${json}\n\n`;
}

/**
 * A named event: `event: name` (none when `name` is undefined), then the data. A data string
 * holding newlines (an upstream's multi-line data field, as the parser joined it) gets one
 * `data:` line per line, so a client's parser reads back the same string.
 */
export function eventFrame(name: string | undefined, data: string): string {
  const d = data.includes('\n') ? data.replace(/\n/g, '\ndata: ') : data;
  return name === undefined ? `data: ${d}\n\n` : `event: ${name}\ndata: ${d}\n\n`;
}

const uncork = (res: ServerResponse) => res.uncork();

/**
 * Frames written in the same tick (the events of one upstream packet) leave in one syscall:
 * the response is corked until the tick ends.
 */
export function batch(res: ServerResponse): void {
  if (res.writableCorked === 0) {
    res.cork();
    process.nextTick(uncork, res);
  }
}

/**
 * Writes one frame; resolves when the socket can take more. False when the client is gone or
 * `signal` aborted while waiting (a client that stopped reading cannot hold a stream forever).
 */
export function writeFrame(res: ServerResponse, frame: string, signal: AbortSignal | AbortSource): Promise<boolean> | boolean {
  if (res.destroyed) return false;
  batch(res);
  if (res.write(frame)) return true;
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      unlisten();
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
    const unlisten = onAbort(signal, onClose);
  });
}
