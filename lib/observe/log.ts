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

/** What the destination may hold while stdout cannot be written; beyond it new lines are dropped. */
const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
/** The most writes the final flush makes (each writes one buffered chunk of up to 16 KB). */
const MAX_FINAL_WRITES = MAX_BUFFERED_BYTES / 4096;

type Destination = ReturnType<typeof pino.destination> & { sync: boolean };

/**
 * Whether the log can be written: a failure (a full disk, a log reader gone) is said once on
 * stderr, with the lines dropped meanwhile counted, and the return said when a write lands.
 * The gateway never stops for its log.
 */
export class LogHealth {
  failing = false;
  #dropped = 0;

  failed(err: NodeJS.ErrnoException): void {
    if (this.failing) return;
    this.failing = true;
    process.stderr.write(`tollgate: the log cannot be written (${err.message}); ` +
      `requests are served on, lines are kept up to ${MAX_BUFFERED_BYTES / 1024 / 1024} MB and dropped beyond\n`);
  }

  dropped(): void {
    this.#dropped++;
  }

  wrote(bytes: number): void {
    if (!this.failing || bytes === 0) return;
    this.failing = false;
    process.stderr.write(`tollgate: the log is written again (${this.#dropped} lines were dropped meanwhile)\n`);
    this.#dropped = 0;
  }
}

/**
 * The last flush, at exit (ours, and pino's own exit hook for an asynchronous destination):
 * sonic-boom's flushSync retries a failed write forever, so a full disk or a log reader gone at
 * shutdown would hang the exit. This one writes what is buffered synchronously, chunk by chunk,
 * and stops at the first failure (said by LogHealth) or once nothing is left. A write still in
 * flight in the thread pool is not waited for, as flushSync does not either.
 */
function finalFlush(destination: Destination, health: LogHealth): void {
  if (health.failing) return;
  destination.sync = true;
  let wrote = 1;
  const count = (n: number) => { wrote += n; };
  destination.on('write', count);
  try {
    for (let i = 0; i < MAX_FINAL_WRITES && wrote > 0 && !health.failing; i++) {
      wrote = 0;
      destination.flush();
    }
  } catch {
    // A destination already ended: nothing more can be written.
  } finally {
    destination.removeListener('write', count);
  }
}

export function createLogger(level = process.env.TOLLGATE_LOG_LEVEL ?? 'info'): Logger {
  const destination = pino.destination({ dest: 1, sync: writesSynchronously(1), minLength: 4096, maxLength: MAX_BUFFERED_BYTES }) as Destination;
  const health = new LogHealth();
  // After pino's own listener, which silences the destination on EPIPE (a reader gone for good).
  destination.on('error', (err: NodeJS.ErrnoException) => health.failed(err));
  destination.on('write', (n: number) => health.wrote(n));
  destination.on('drop', () => health.dropped());
  destination.flushSync = () => finalFlush(destination, health);
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
