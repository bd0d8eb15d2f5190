// An async function where Node wants a void callback (an http handler, an 'end' listener): a
// rejection is thrown again on the next turn, an uncaught exception that fails the test, as a
// fault in a fake should; never a promise dropped (test/rules/lint: no-misused-promises).

import type { IncomingMessage, ServerResponse } from 'node:http';

export function asyncHandler<A extends unknown[]>(fn: (...args: A) => Promise<unknown>): (...args: A) => void {
  return (...args: A) => {
    fn(...args).catch((err: unknown) => setImmediate(() => { throw err; }));
  };
}

/** asyncHandler for an http server's request listener (its parameters typed from it). */
export function httpHandler(fn: (req: IncomingMessage, res: ServerResponse) => Promise<unknown>): (req: IncomingMessage, res: ServerResponse) => void {
  return asyncHandler(fn);
}
