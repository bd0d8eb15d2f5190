// Errors in Anthropic's shape (CONTRACT section 6): the status as chat has it, Anthropic's error
// type for that status (what its SDKs read), and our stable code and param added.

import type { GatewayError } from '../../errors.js';
import type { ErrorType } from '../../hub/anthropic.js';

function anthropicType(status: number): ErrorType {
  switch (status) {
    case 401: return 'authentication_error';
    case 402: return 'billing_error';
    case 403: return 'permission_error';
    case 404: return 'not_found_error';
    case 413: return 'request_too_large';
    case 429: return 'rate_limit_error';
    case 503: return 'overloaded_error';
    case 504: return 'timeout_error';
    default: return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

export function errorJson(err: GatewayError, requestId: string): string {
  const error: Record<string, unknown> = { type: anthropicType(err.status), message: err.message, code: err.code };
  if (err.param !== null) error.param = err.param;
  if (err.extras !== undefined) Object.assign(error, err.extras);
  return JSON.stringify({ type: 'error', error, request_id: requestId });
}
