// An admin API body as its routes read it (CONTRACT sections 5, 8 and 16): a JSON object that
// holds only the members its route's shape names (./body-shape.ts), with the number literals
// JSON.parse rounded noted, so that an amount is taken exactly or refused, never rounded.

import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';
import { isJsonContentType, readBody } from '../http/body.js';
import { roundedMembers, roundedValues } from '../http/exact-json.js';
import { parseJsonBody } from '../http/json.js';
import { isObject } from '../objects.js';
import { refuseUnknownMembers, type BodyShape } from './body-shape.js';

/**
 * A parsed JSON object body, which of its members had a number literal JSON.parse rounded, and
 * the values of every rounded literal at any depth (for nested amounts).
 */
export interface Body { values: Record<string, unknown>; rounded: Set<string>; roundedValues: Set<number> }

/** The request's JSON object body, with no member `shape` does not take at any depth. */
export async function adminBody(req: IncomingMessage, shape: BodyShape, timeoutMs: number): Promise<Body> {
  if (!isJsonContentType(req.headers['content-type'])) {
    throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
  }
  const raw = await readBody(req, 65536, timeoutMs);
  const values = parseJsonBody(raw);
  if (!isObject(values)) throw new GatewayError('invalid_type', "Invalid type for '(body)': expected a JSON object.", { param: '(body)' });
  refuseUnknownMembers(values, shape);
  const text = raw.toString('utf8');
  return { values, rounded: roundedMembers(text), roundedValues: roundedValues(text) };
}

/** Whether the request carries a body at all (PATCH and rotate take none as an empty one). */
export function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * An integer member from `min` to `max` (both at most 2^53-1 in size), given exactly; undefined
 * when absent. Anything else is 400 naming the member: invalid_type for a non-number,
 * invalid_value for a fraction, a rounded literal or a value out of range.
 */
export function integerParam(body: Body, name: string, min: number, max: number, range: string): number | undefined {
  const v = body.values[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'number') throw new GatewayError('invalid_type', `Invalid type for '${name}': expected an integer.`, { param: name });
  if (!Number.isSafeInteger(v) || body.rounded.has(name) || v < min || v > max) {
    throw new GatewayError('invalid_value', `Invalid value for '${name}': must be ${range}.`, { param: name });
  }
  return v;
}
