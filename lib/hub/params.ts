// The contract's 400s for a bad request field, each naming its param (a field path such as
// `messages[1].content[0].type`): built here once, for every dialect's parser.

import { GatewayError, clip } from '../errors.js';
import { isObject } from '../objects.js';

export function missing(param: string): GatewayError {
  return new GatewayError('missing_required_parameter', `Missing required parameter: '${param}'.`, { param });
}
export function wrongType(param: string, expected: string): GatewayError {
  return new GatewayError('invalid_type', `Invalid type for '${param}': expected ${expected}.`, { param });
}
export function badValue(param: string, why: string): GatewayError {
  return new GatewayError('invalid_value', `Invalid value for '${param}': ${why}.`, { param });
}
export function unsupported(param: string, value: unknown, allowed: Iterable<string>): GatewayError {
  return new GatewayError(
    'unsupported_value',
    `Unsupported value for '${param}': ${clip(String(JSON.stringify(value)))}. Supported values are: ${[...allowed].map((v) => `'${v}'`).join(', ')}.`,
    { param },
  );
}

/** An optional number field within [min, max]; null counts as absent. */
export function checkNumber(body: Record<string, unknown>, key: string, min: number, max: number): void {
  const v = body[key];
  if (v === undefined || v === null) return;
  if (typeof v !== 'number') throw wrongType(key, 'a number');
  if (!Number.isFinite(v) || v < min || v > max) throw badValue(key, `must be a number from ${min} to ${max}`);
}

/** An optional integer field within [min, max]; null counts as absent. */
export function checkInteger(body: Record<string, unknown>, key: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number') throw wrongType(key, 'an integer');
  if (!Number.isInteger(v) || v < min || v > max) {
    throw badValue(key, max === Number.MAX_SAFE_INTEGER ? `must be an integer of at least ${min}` : `must be an integer from ${min} to ${max}`);
  }
  return v;
}

/** An optional boolean field; null counts as absent. */
export function checkBoolean(body: Record<string, unknown>, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw wrongType(key, 'a boolean');
  return v;
}

/** `stop`: absent, null, a string or an array of strings. */
export function checkStop(body: Record<string, unknown>): void {
  const stop = body.stop;
  if (stop === undefined || stop === null || typeof stop === 'string') return;
  if (!Array.isArray(stop)) throw wrongType('stop', 'a string or an array of strings');
  stop.forEach((s, i) => { if (typeof s !== 'string') throw wrongType(`stop[${i}]`, 'a string'); });
}

/** `stream_options.include_usage` (stream_options absent, null or an object): whether it is true. */
export function checkIncludeUsage(body: Record<string, unknown>): boolean {
  const so = body.stream_options;
  if (so === undefined || so === null) return false;
  if (!isObject(so)) throw wrongType('stream_options', 'an object');
  const iu = so.include_usage;
  if (iu !== undefined && iu !== null && typeof iu !== 'boolean') throw wrongType('stream_options.include_usage', 'a boolean');
  return iu === true;
}
