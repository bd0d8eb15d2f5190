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
//
// A log that cannot be written never stops the gateway: a failure (a full disk, a reader gone)
// and lines dropped (a reader more than 16 MB behind) are said on stderr, once per episode, and
// the exit writes what is left once, giving up on an error rather than waiting for the log.

import { fstatSync, writeSync } from 'node:fs';
import { isatty } from 'node:tty';
import pino from 'pino';
import { ownLogger } from './access-line.js';

export type Logger = pino.Logger;

const FLUSH_MS = 500;
/** Lines are written once this much is buffered (and every FLUSH_MS). */
const BATCH_BYTES = 4096;

/** Whether writes to `fd` may be synchronous: a regular file, or a character device that is no terminal (/dev/null). */
export function writesSynchronously(fd: number): boolean {
  try {
    const st = fstatSync(fd);
    return st.isFile() || (st.isCharacterDevice() && !isatty(fd));
  } catch {
    return false;
  }
}

/** What the destination may hold while stdout cannot take it; beyond it new lines are dropped. */
const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
/**
 * How long the exit keeps offering the log to a descriptor that answers EAGAIN (a non-blocking
 * one whose reader is behind) without its reader taking a byte: a reader that catches up gets
 * every line, one that has stalled costs the exit this long. A blocking descriptor whose reader
 * is alive but not reading holds the exit, as it holds any process that writes to it.
 */
const EXIT_WAIT_MS = 3000;
/** How often, at most, lines dropped behind a slow reader are counted on stderr. */
const DROP_REPORT_MS = 60_000;

/** What this module reads of sonic-boom (4.x): its public surface and the buffers it keeps. */
type Destination = ReturnType<typeof pino.destination> & {
  sync: boolean;
  minLength: number;
  fd: number;
  _writing?: boolean;
  _writingBuf?: string | Buffer;
  _bufs?: Array<string | Buffer>;
};

/** A notice on stderr, written at once; stderr itself failing (its reader gone too) is ignored. */
function notice(text: string): void {
  try {
    writeSync(2, `tollgate: ${text}\n`);
  } catch {
    // Nowhere left to say it.
  }
}

/**
 * Whether the log can be written. A failure is said once on stderr and its end when a write
 * lands again, with the lines dropped meanwhile. Lines dropped behind a reader that is slow but
 * not failing are said at the first and then counted at most once a minute. While the log
 * fails, lines are only buffered and the periodic flush alone tries again, so that no request
 * pays for a failing write.
 */
export class LogHealth {
  failing = false;
  #dropped = 0;
  #dropSaidAt = -Infinity;
  readonly #destination: { minLength: number } | undefined;
  readonly #say: (text: string) => void;

  constructor(destination?: { minLength: number }, say: (text: string) => void = notice) {
    this.#destination = destination;
    this.#say = say;
  }

  failed(err: NodeJS.ErrnoException): void {
    if (this.failing) return;
    this.failing = true;
    if (this.#destination !== undefined) this.#destination.minLength = MAX_BUFFERED_BYTES;
    this.#say(`the log cannot be written (${err.message}); requests are served on, lines are kept up to ${MAX_BUFFERED_BYTES / 1024 / 1024} MB and dropped beyond`);
  }

  dropped(now = Date.now()): void {
    this.#dropped++;
    if (this.failing || now - this.#dropSaidAt < DROP_REPORT_MS) return;
    this.#say(`${this.#dropped} log line(s) dropped: the log reader is more than ${MAX_BUFFERED_BYTES / 1024 / 1024} MB behind`);
    this.#dropSaidAt = now;
    this.#dropped = 0;
  }

  wrote(bytes: number): void {
    if (!this.failing || bytes === 0) return;
    this.failing = false;
    if (this.#destination !== undefined) this.#destination.minLength = BATCH_BYTES;
    this.#say(`the log is written again (${this.#dropped} line(s) were dropped meanwhile)`);
    this.#dropped = 0;
  }

  /** At exit: lines dropped and not yet said. */
  unsaid(): number {
    return this.#dropped;
  }
}

/** Blocks the thread for `ms` (the exit has no event loop left to wait with). */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * The last flush, at exit (ours, and pino's own exit hook for an asynchronous destination).
 * sonic-boom's flushSync retries a failed write forever, so a full disk or a log reader gone at
 * shutdown hung the exit. This one writes every buffered line synchronously, as flushSync does
 * (a write still in flight in the thread pool is not waited for, nor written twice); it gives
 * a reader that is behind (EAGAIN) up to EXIT_WAIT_MS to take each next byte, and stops at any
 * other error, saying on stderr how much was not written.
 */
function finalFlush(d: Destination, health: LogHealth): void {
  const queued = d._bufs;
  if (!Array.isArray(queued)) return; // not the sonic-boom this was written for: nothing safe to do
  const chunks = [...(!d._writing && d._writingBuf !== undefined && d._writingBuf.length > 0 ? [d._writingBuf] : []), ...queued]
    .map((c) => (typeof c === 'string' ? Buffer.from(c) : c));
  d._writingBuf = '';
  queued.length = 0;
  let deadline = Date.now() + EXIT_WAIT_MS;
  let left = chunks.reduce((n, c) => n + c.length, 0);
  try {
    for (let buf of chunks) {
      while (buf.length > 0) {
        try {
          const n = writeSync(d.fd, buf);
          buf = buf.subarray(n);
          left -= n;
          if (n > 0) deadline = Date.now() + EXIT_WAIT_MS;
          health.wrote(n);
        } catch (err) {
          const e = err as NodeJS.ErrnoException;
          if ((e.code === 'EAGAIN' || e.code === 'EBUSY') && Date.now() < deadline) {
            pause(10);
            continue;
          }
          throw e;
        }
      }
    }
  } catch (err) {
    health.failed(err as NodeJS.ErrnoException);
    notice(`${left} bytes of log lines were not written at exit`);
  }
  const dropped = health.unsaid();
  if (dropped > 0) notice(`${dropped} log line(s) were dropped and not said before the exit`);
}

export function createLogger(level = process.env.TOLLGATE_LOG_LEVEL ?? 'info'): Logger {
  const destination = pino.destination({ dest: 1, sync: writesSynchronously(1), minLength: BATCH_BYTES, maxLength: MAX_BUFFERED_BYTES }) as Destination;
  const health = new LogHealth(destination);
  // After pino's own listener, which silences the destination on EPIPE (a reader gone for good).
  destination.on('error', (err: NodeJS.ErrnoException) => health.failed(err));
  destination.on('write', (n: number) => health.wrote(n));
  destination.on('drop', () => health.dropped());
  let flushed = false;
  destination.flushSync = () => {
    if (flushed) return;
    flushed = true;
    finalFlush(destination, health);
  };
  setInterval(() => destination.flush(), FLUSH_MS).unref();
  process.once('exit', () => destination.flushSync());
  return ownLogger(pino(
    {
      level,
      base: { service: 'tollgate' },
      redact: {
        paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'api_key', 'token', 'key'],
        censor: '[redacted]',
      },
    },
    destination,
  ));
}
