// The access log line, one per request, written by a serializer that knows its fields.
//
// pino builds a line by walking the object it is given (and running its redaction over it):
// for the one line every request writes, that was the largest allocation on the request path
// after the answer itself. This writes the same line, byte for byte as pino would (a property
// test holds the two together; where a field holds a lone surrogate, pino writes it raw and the
// file gets U+FFFD, JSON.stringify escapes it and the line keeps it), straight to the logger's destination, and only for a logger
// made by createLogger: a logger an embedding server hands in may have hooks, formatters or
// another destination, and gets `logger.info(fields, 'request')` as before. The fields are the
// ones below and no others, so the redaction (credentials under known names) has nothing to do
// here: no credential is ever one of them.

import pino from 'pino';

/** log.ts's Logger (pino's), named here so that log.ts may import this file and not the reverse. */
type Logger = pino.Logger;

/** The access line's fields, in the order they are written; an undefined one is left out, as pino leaves it. */
export interface AccessFields {
  request_id: string;
  route: string;
  account: string | undefined;
  credential: string | undefined;
  model: string | undefined;
  provider: string | undefined;
  stream: boolean | undefined;
  status: number;
  code: string | undefined;
  duration_ms: number;
  upstream_ms: number | undefined;
  queue_ms: number | undefined;
  ttfc_ms: number | undefined;
  prompt_tokens: number | undefined;
  completion_tokens: number | undefined;
  usage_source: string | undefined;
  units: number | undefined;
}

/** Loggers made by createLogger: their lines may be written without pino's walk. */
const own = new WeakSet<Logger>();

/** Marks a logger createLogger made (plain pino: no hooks, formatters or mixin; `msg` as message key). */
export function ownLogger(logger: Logger): Logger {
  own.add(logger);
  return logger;
}

const INFO = 30;

/** A string as JSON writes it (pino's own writer differs only on lone surrogates, which it does not escape). */
const str = JSON.stringify as (s: string) => string;

/** A number as JSON writes it (NaN and the infinities as null, as pino does). */
function num(n: number): string {
  return Number.isFinite(n) ? String(n) : 'null';
}

/** The line pino would write for `logger.info(fields, 'request')`, without its trailing newline. */
export function accessLine(fields: AccessFields, time: number, bindings: string): string {
  let s = '{"level":30,"time":' + time + bindings + ',"request_id":' + str(fields.request_id) + ',"route":' + str(fields.route);
  if (fields.account !== undefined) s += ',"account":' + str(fields.account);
  if (fields.credential !== undefined) s += ',"credential":' + str(fields.credential);
  if (fields.model !== undefined) s += ',"model":' + str(fields.model);
  if (fields.provider !== undefined) s += ',"provider":' + str(fields.provider);
  if (fields.stream !== undefined) s += fields.stream ? ',"stream":true' : ',"stream":false';
  s += ',"status":' + num(fields.status);
  if (fields.code !== undefined) s += ',"code":' + str(fields.code);
  s += ',"duration_ms":' + num(fields.duration_ms);
  if (fields.upstream_ms !== undefined) s += ',"upstream_ms":' + num(fields.upstream_ms);
  if (fields.queue_ms !== undefined) s += ',"queue_ms":' + num(fields.queue_ms);
  if (fields.ttfc_ms !== undefined) s += ',"ttfc_ms":' + num(fields.ttfc_ms);
  if (fields.prompt_tokens !== undefined) s += ',"prompt_tokens":' + num(fields.prompt_tokens);
  if (fields.completion_tokens !== undefined) s += ',"completion_tokens":' + num(fields.completion_tokens);
  if (fields.usage_source !== undefined) s += ',"usage_source":' + str(fields.usage_source);
  if (fields.units !== undefined) s += ',"units":' + num(fields.units);
  return s + ',"msg":"request"}';
}

/** Writes the access line: straight to the destination for createLogger's loggers, through pino otherwise. */
export function writeAccessLine(logger: Logger, fields: AccessFields): void {
  if (!own.has(logger)) {
    logger.info(fields, 'request');
    return;
  }
  if (logger.levelVal > INFO) return;
  const l = logger as unknown as Record<symbol, unknown>;
  const stream = l[pino.symbols.streamSym] as { write(s: string): void };
  stream.write(accessLine(fields, Date.now(), l[pino.symbols.chindingsSym] as string) + '\n');
}
