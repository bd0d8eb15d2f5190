// How an upstream call is aborted: the reason the pipeline gives when its time ran out
// (TIMEOUT), and an abort without an EventTarget (CallAbort) that the hot path listens to
// through onAbort, without a listener object per call.

/** The reason the pipeline aborts an upstream call whose time ran out. */
export const TIMEOUT = Symbol('tollgate.timeout');

/** An abort without an EventTarget (CallAbort below). */
export interface AbortSource {
  readonly aborted: boolean;
  readonly reason: unknown;
  onAbort(fn: () => void): () => void;
}

/** Listens for an abort of either kind; returns the unsubscribe. */
export function onAbort(signal: AbortSignal | AbortSource, fn: () => void): () => void {
  if ('onAbort' in signal) return signal.onAbort(fn);
  signal.addEventListener('abort', fn);
  return () => signal.removeEventListener('abort', fn);
}

/**
 * An attempt's abort. Its AbortSignal is made only when something asks for it (an error path,
 * an embedding call); the upstream call and a stream waiting for the client listen through
 * onAbort, without an EventTarget listener per call.
 */
export class CallAbort {
  #controller: AbortController | undefined;
  #listeners: Array<() => void> | undefined;
  aborted = false;
  reason: unknown = undefined;

  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.aborted) this.#controller.abort(this.reason);
    }
    return this.#controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    if (listeners !== undefined) for (const l of listeners) l();
    this.#controller?.abort(reason);
  }

  /** Calls `fn` once when aborted (never if already aborted); returns the unsubscribe. */
  onAbort(fn: () => void): () => void {
    (this.#listeners ??= []).push(fn);
    return () => {
      const i = this.#listeners?.indexOf(fn) ?? -1;
      if (i >= 0) this.#listeners!.splice(i, 1);
    };
  }
}
