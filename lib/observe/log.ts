// The gateway's logger: pino, in batches (up to 4 KB, at least every FLUSH_MS) rather than one
// write per line. Credentials are never handed to it; the redact list is a second line of
// defence.
//
// How a batch is written depends on what stdout is, as Node's own process.stdout decides:
// - a file (or /dev/null): synchronously. A write lands in the page cache and costs a few
//   microseconds; written asynchronously, every batch went through libuv's thread pool (a
//   thread woken, the write, the loop woken back), which on a gateway pinned to one core took
//   more CPU from the request path than the write itself (bench: futex calls per request
//   halved, the same as a bare proxy's);
// - a pipe, a socket or a terminal: asynchronously, so a log reader that falls behind never
//   stalls the request path.

import { fstatSync } from 'node:fs';
import { isatty } from 'node:tty';
import pino from 'pino';

export type Logger = pino.Logger;

const FLUSH_MS = 500;

/** Whether writes to `fd` may be synchronous: a regular file, or a character device that is no terminal (/dev/null). */
export function writesSynchronously(fd: number): boolean {
  try {
    const st = fstatSync(fd);
    return st.isFile() || (st.isCharacterDevice() && !isatty(fd));
  } catch {
    return false;
  }
}

export function createLogger(level = process.env.TOLLGATE_LOG_LEVEL ?? 'info'): Logger {
  const destination = pino.destination({ dest: 1, sync: writesSynchronously(1), minLength: 4096 });
  setInterval(() => destination.flush(), FLUSH_MS).unref();
  process.once('exit', () => destination.flushSync());
  return pino(
    {
      level,
      base: { service: 'tollgate' },
      redact: {
        paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'api_key', 'token', 'key'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
