// One upstream call on a pool through undici's dispatch API, without the Readable stream and
// the async-hooks resource that `pool.request` builds per call: the answer's chunks go straight
// to whoever reads them, as a whole (`collect`) or one upstream read at a time (iteration, with
// backpressure: the socket is paused while a chunk waits to be read). Aborting `signal` aborts
// the call with the signal's reason, as `pool.request` does; a body that is no longer wanted is
// destroyed, which aborts the call too.

import type { Dispatcher } from 'undici';
import { onAbort, type AbortSource } from './abort.js';
import type { Pool } from './undici.js';
import { errors as undiciErrors, parseHeaders } from './undici.js';

export type UpstreamHeaders = Record<string, string | string[]>;

export interface CallOptions {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal | AbortSource;
}

/** What a pool answered: status, headers (names lower-cased, repeats as arrays) and the body. */
export interface UpstreamAnswer {
  statusCode: number;
  headers: UpstreamHeaders;
  body: UpstreamBody;
}

const NONE: Buffer[] = [];
/** Bytes a chunked read lets wait before the socket is paused. */
const HIGH_WATER = 64 * 1024;

/**
 * The body of an answer. Read it once: whole with `collect`, or chunk by chunk by iterating.
 * `destroy()` (safe at any time) aborts the call if it is still running.
 */
export class UpstreamBody implements AsyncIterable<Buffer> {
  #chunks: Buffer[] = [];
  #size = 0;
  #ended = false;
  #error: unknown = undefined;
  #failed = false;
  #destroyed = false;
  #paused = false;
  #abort: ((err?: Error) => void) | null = null;
  #resume: (() => void) | null = null;
  /** The reader waiting for the next chunk or the end. */
  #wake: (() => void) | null = null;
  /** collect(): the cap and its refusal. */
  #max = Infinity;
  #tooLarge: (() => unknown) | null = null;

  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** @internal from the handler */
  bind(abort: (err?: Error) => void, resume: () => void): void {
    this.#abort = abort;
    this.#resume = resume;
  }

  /** @internal false: pause the socket until read */
  push(chunk: Buffer): boolean {
    // undici hands over an empty piece when a paused parse resumes: nothing to wait for.
    if (this.#destroyed || chunk.length === 0) return true;
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    if (this.#size > this.#max) {
      this.#fail(this.#tooLarge!());
      return true;
    }
    this.#wakeUp();
    // A whole-answer read takes everything; a chunked read pauses the socket while more than
    // HIGH_WATER bytes wait to be read (as undici's own body stream does).
    if (this.#max !== Infinity || this.#size <= HIGH_WATER) return true;
    this.#paused = true;
    return false;
  }

  /** @internal */
  end(): void {
    this.#ended = true;
    this.#wakeUp();
  }

  /** @internal the call failed (transport, timeout, abort) */
  error(err: unknown): void {
    if (this.#ended || this.#failed) return;
    this.#failed = true;
    this.#error = err;
    this.#wakeUp();
  }

  #fail(err: unknown): void {
    this.error(err);
    this.destroy();
  }

  #wakeUp(): void {
    const w = this.#wake;
    if (w !== null) {
      this.#wake = null;
      w();
    }
  }

  /** Stops the call if it still runs; what was not read is dropped. */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#chunks = NONE;
    if (!this.#ended && this.#abort !== null) {
      const abort = this.#abort;
      this.#abort = null;
      abort(new undiciErrors.RequestAbortedError());
    }
    this.#wakeUp();
  }

  /**
   * The whole body; more than `max` bytes (as it arrives) rejects with `tooLarge()` and stops
   * the call. Rejects with the call's error if it fails first.
   */
  collect(max: number, tooLarge: () => unknown): Promise<Buffer> {
    this.#max = max;
    this.#tooLarge = tooLarge;
    if (this.#size > max) this.#fail(tooLarge());
    else if (this.#paused) { this.#paused = false; this.#resume?.(); }
    return new Promise<Buffer>((resolve, reject) => {
      const check = () => {
        if (this.#failed) { reject(this.#error); return; }
        if (this.#ended) {
          const chunks = this.#chunks;
          resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.#size));
          return;
        }
        if (this.#destroyed) { reject(new undiciErrors.RequestAbortedError()); return; }
        this.#wake = check;
      };
      check();
    });
  }

  /**
   * Every chunk received since the last read, null at the end, or undefined when none has come
   * yet (`arrival()` then says when to ask again); throws the call's error. Without a promise:
   * a stream's reader waits with `arrival()` alone, not with an async frame of its own.
   */
  poll(): Buffer[] | null | undefined {
    for (;;) {
      if (this.#chunks.length > 0) {
        const chunks = this.#chunks;
        this.#chunks = [];
        this.#size = 0;
        return chunks;
      }
      if (this.#failed) throw this.#error;
      if (this.#ended || this.#destroyed) return null;
      if (!this.#paused) return undefined;
      // Resuming may hand over the next chunks at once (parsed from what the socket has).
      this.#paused = false;
      this.#resume?.();
    }
  }

  /** Resolves when poll() has something new to say (a chunk, the end, a failure). One waiter at a time. */
  arrival(): Promise<void> {
    return new Promise<void>((resolve) => { this.#wake = resolve; });
  }

  /**
   * Every chunk received since the last read (waiting for one if none is), or null at the end;
   * rejects with the call's error.
   */
  async read(): Promise<Buffer[] | null> {
    for (;;) {
      const chunks = this.poll();
      if (chunks !== undefined) return chunks;
      await this.arrival();
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Buffer> {
    try {
      for (let chunks = await this.read(); chunks !== null; chunks = await this.read()) yield* chunks;
    } finally {
      this.destroy();
    }
  }
}

class Handler implements Dispatcher.DispatchHandler {
  readonly #signal: AbortSignal | AbortSource;
  /**
   * The call's promise, until it is settled: then dropped, since a stream's handler lives as
   * long as the stream, and through them the settled promise would keep the answer it was
   * resolved with (its headers as undici parsed them).
   */
  #resolve: ((a: UpstreamAnswer) => void) | null;
  #reject: ((err: unknown) => void) | null;
  #body: UpstreamBody | null = null;
  #abort: ((err?: Error) => void) | null = null;
  #reason: unknown = undefined;
  #aborted = false;
  #unlisten: (() => void) | null = null;

  constructor(signal: AbortSignal | AbortSource, resolve: (a: UpstreamAnswer) => void, reject: (err: unknown) => void) {
    this.#signal = signal;
    this.#resolve = resolve;
    this.#reject = reject;
    if (signal.aborted) {
      this.#aborted = true;
      this.#reason = signal.reason ?? new undiciErrors.RequestAbortedError();
    } else {
      this.#unlisten = onAbort(signal, () => this.#onAbort());
    }
  }

  #onAbort(): void {
    this.#unlisten = null;
    this.#aborted = true;
    this.#reason = this.#signal.reason ?? new undiciErrors.RequestAbortedError();
    if (this.#body !== null) {
      this.#body.error(this.#reason);
      this.#body.destroy();
    } else {
      this.#abort?.(this.#reason as Error);
    }
  }

  #stopListening(): void {
    const u = this.#unlisten;
    if (u !== null) {
      this.#unlisten = null;
      u();
    }
  }

  onConnect(abort: (err?: Error) => void): void {
    if (this.#aborted) {
      abort(this.#reason as Error);
      return;
    }
    this.#abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true;
    const body = new UpstreamBody();
    body.bind(this.#abort ?? (() => undefined), resume);
    this.#body = body;
    const resolve = this.#resolve;
    this.#resolve = null;
    this.#reject = null;
    // undici's own parsing, as pool.request does it: names lower-cased, repeats as arrays.
    resolve?.({ statusCode, headers: parseHeaders(rawHeaders), body });
    return true;
  }

  onData(chunk: Buffer): boolean {
    return this.#body!.push(chunk);
  }

  onComplete(): void {
    this.#stopListening();
    this.#body!.end();
  }

  onError(err: Error): void {
    this.#stopListening();
    if (this.#body === null) {
      const reject = this.#reject;
      this.#resolve = null;
      this.#reject = null;
      reject?.(err);
    } else {
      this.#body.error(err);
    }
  }
}

/** Sends one call on `pool`; resolves with the answer's status and headers, its body to be read. */
export function call(pool: Pool, opts: CallOptions): Promise<UpstreamAnswer> {
  return new Promise<UpstreamAnswer>((resolve, reject) => {
    const handler = new Handler(opts.signal, resolve, reject);
    pool.dispatch({ method: opts.method, path: opts.path, headers: opts.headers, body: opts.body }, handler);
  });
}
