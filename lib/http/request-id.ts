// x-request-id: a safe incoming one is kept, otherwise one is generated.

import { randomBytes } from 'node:crypto';

const SAFE = /^[A-Za-z0-9._:-]{1,128}$/;

// Random prefix per process + a counter: unique, cheap, and not guessable across restarts.
const prefix = randomBytes(6).toString('hex');
let counter = 0;

export function requestIdFor(incoming: string | string[] | undefined): string {
  if (typeof incoming === 'string' && SAFE.test(incoming)) return incoming;
  counter = (counter + 1) % Number.MAX_SAFE_INTEGER;
  return `req_${prefix}${counter.toString(36)}`;
}
