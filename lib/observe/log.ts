// The gateway's logger: pino, written asynchronously so the request path never blocks on
// stdout, and in batches (up to 4 KB, at least every FLUSH_MS) rather than one write per line.
// Credentials are never handed to it; the redact list is a second line of defence.

import pino from 'pino';

export type Logger = pino.Logger;

const FLUSH_MS = 500;

export function createLogger(level = process.env.TOLLGATE_LOG_LEVEL ?? 'info'): Logger {
  const destination = pino.destination({ dest: 1, sync: false, minLength: 4096 });
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
