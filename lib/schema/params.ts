// The contract's 400s for a bad request field, each naming its param (a field path such as
// `messages[1].content[0].type`): built here once, for every dialect's parser.

import { GatewayError, clip } from '../errors.js';

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
