// JSON parsing that a hostile body cannot hurt: nesting is bounded and prototype-polluting
// keys are refused (CONTRACT section 4, Hostile input).

import { GatewayError, clip } from '../errors.js';

export const MAX_JSON_DEPTH = 64;

function invalid(message: string): GatewayError {
  return new GatewayError('invalid_json', message);
}

/** Depth of the top-level value is 1. */
function inspect(value: unknown, depth: number): void {
  if (value === null || typeof value !== 'object') return;
  if (depth > MAX_JSON_DEPTH) throw invalid(`The JSON body is nested deeper than ${MAX_JSON_DEPTH} levels.`);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) inspect(value[i], depth + 1);
    return;
  }
  for (const key in value) {
    if (key === '__proto__') throw invalid('The JSON body contains a forbidden "__proto__" key.');
    const child = (value as Record<string, unknown>)[key];
    if (key === 'constructor' && child !== null && typeof child === 'object' && Object.hasOwn(child, 'prototype')) {
      throw invalid('The JSON body contains a forbidden "constructor.prototype" key.');
    }
    inspect(child, depth + 1);
  }
}

/** Parses and inspects a body; any problem is 400 invalid_json. */
export function parseJsonBody(buf: Buffer): unknown {
  if (buf.length === 0) throw invalid('The request body is empty; a JSON object is required.');
  let value: unknown;
  try {
    value = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    // V8 quotes a bit of the body; clipped all the same, as any echo of client input.
    throw invalid(`The request body is not valid JSON: ${clip((err as Error).message)}`);
  }
  inspect(value, 1);
  return value;
}
