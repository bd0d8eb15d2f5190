// The gateway's logger: pino, written asynchronously so the request path never blocks on
// stdout. Credentials are never handed to it; the redact list is a second line of defence.

import pino from 'pino';

export type Logger = pino.Logger;

export function createLogger(level = process.env.TOLLGATE_LOG_LEVEL ?? 'info'): Logger {
  return pino(
    {
      level,
      base: { service: 'tollgate' },
      redact: {
        paths: ['authorization', 'headers.authorization', 'headers["x-api-key"]', 'api_key', 'token', 'key'],
        censor: '[redacted]',
      },
    },
    pino.destination({ dest: 1, sync: false, minLength: 0 }),
  );
}
