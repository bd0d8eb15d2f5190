// The one table of every error a client can see: code -> status and type.
// Everything else that goes wrong becomes 500 internal_error; its detail stays in the log.

import { merged } from './objects.js';

export type ErrorType =
  | 'invalid_request_error'
  | 'insufficient_credits'
  | 'permission_error'
  | 'rate_limit_error'
  | 'server_error';

/** Type for each status (CONTRACT section 4). */
export function typeForStatus(status: number): ErrorType {
  switch (status) {
    case 402: return 'insufficient_credits';
    case 403: return 'permission_error';
    case 429: return 'rate_limit_error';
    default: return status >= 500 ? 'server_error' : 'invalid_request_error';
  }
}

/** code -> HTTP status. Each key is the code a client sees. */
export const ERROR_CODES = Object.freeze({
  invalid_json: 400,
  missing_required_parameter: 400,
  invalid_type: 400,
  invalid_value: 400,
  unsupported_value: 400,
  invalid_image_url: 400,
  too_many_images: 400,
  invalid_api_key: 401,
  token_expired: 401,
  session_revoked: 401,
  key_expired: 401,
  not_signed_in: 401,
  insufficient_credits: 402,
  quota_exceeded: 402,
  budget_exceeded: 402,
  model_requires_paid_plan: 403,
  content_blocked: 403,
  model_not_allowed: 403,
  ip_not_allowed: 403,
  forbidden: 403,
  permission_denied: 403,
  csrf_failed: 403,
  model_not_found: 404,
  unknown_url: 404,
  account_not_found: 404,
  key_not_found: 404,
  team_not_found: 404,
  response_not_found: 404,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  account_exists: 409,
  team_exists: 409,
  team_in_use: 409,
  request_too_large: 413,
  unsupported_media_type: 415,
  context_length_exceeded: 422,
  model_does_not_support_images: 422,
  rate_limit_exceeded: 429,
  too_many_concurrent: 429,
  too_many_connections: 429,
  internal_error: 500,
  provider_error: 502,
  model_unavailable: 503,
  model_overloaded: 503,
  service_unavailable: 503,
  provider_timeout: 504,
} as const);

export type ErrorCode = keyof typeof ERROR_CODES;

/** The most characters of client input an error message may echo (CONTRACT section 10). */
export const MAX_ECHO = 256;

/**
 * Client input as an error message may quote it: at most `max` characters, and an ellipsis
 * when cut, so that a huge model name or path is never sent back whole. Never splits a
 * surrogate pair.
 */
export function clip(input: string, max: number = MAX_ECHO): string {
  if (input.length <= max) return input;
  const end = max > 0 && (input.charCodeAt(max - 1) & 0xfc00) === 0xd800 ? max - 1 : max;
  return `${input.slice(0, end)}…`;
}

/** Extra members some codes carry in the envelope (spec 2.5). */
export interface ErrorExtras {
  quota_code?: string;
  wallet_balance_units?: number;
  suggested_models?: string[];
  /** Which budget refused a 402 budget_exceeded (CONTRACT section 15): the key's or its team's. */
  budget_scope?: 'key' | 'team' | 'end_user';
  budget_remaining_units?: number;
  /** ISO-8601, or null for a budget that never resets. */
  budget_resets_at?: string | null;
}

/** An error that reaches the client as the envelope. `headers` are added to the answer. */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly type: ErrorType;
  readonly param: string | null;
  readonly extras: ErrorExtras | undefined;
  readonly headers: Record<string, string> | undefined;
  /**
   * For upstream failures: whether the upstream is at fault (connection failure, 5xx, timeout,
   * invalid body), so that it counts toward the target's circuit. False for outcomes a request
   * caused itself or a "not now" (an answer its own stop sequence emptied, an upstream 429):
   * those must never open a circuit for other accounts (CONTRACT section 10).
   */
  readonly fault: boolean;

  constructor(
    code: ErrorCode,
    message: string,
    opts: { param?: string | null; extras?: ErrorExtras; headers?: Record<string, string>; cause?: unknown; fault?: boolean } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERROR_CODES[code];
    this.type = typeForStatus(this.status);
    this.param = opts.param ?? null;
    this.extras = opts.extras;
    this.headers = opts.headers;
    this.fault = opts.fault ?? true;
  }
}

/**
 * A fault of the account store itself (unreachable, too slow, failing to write). The store the
 * gateway uses raises it for every such fault (store/guard.ts), so whichever route touches the
 * store answers 503 service_unavailable with Retry-After, never a 500.
 */
export class StoreUnavailableError extends GatewayError {
  constructor(cause: unknown) {
    super('service_unavailable', 'The account store is unavailable; retry shortly.', { headers: retryAfterHeaders(1000), cause });
    this.name = 'StoreUnavailableError';
  }
}

/**
 * Retry-After headers for 429/503 answers: whole seconds (at least 1), the same in
 * milliseconds, and x-should-retry: false when the wait exceeds a minute.
 */
export function retryAfterHeaders(ms: number): Record<string, string> {
  const waitMs = Math.max(1, Math.ceil(Number.isFinite(ms) ? ms : 1000));
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const headers: Record<string, string> = {
    'retry-after': String(seconds),
    'retry-after-ms': String(waitMs),
  };
  if (seconds > 60) headers['x-should-retry'] = 'false';
  return headers;
}

/** Anything thrown that is not a GatewayError is hidden behind internal_error. */
export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  return new GatewayError('internal_error', 'The gateway failed to handle the request.', { cause: err });
}

/**
 * The envelope: the spec's fields at top level, and again under `error`. The official OpenAI
 * SDKs expose only that nested object (as `err.error`), so it carries the extras too
 * (suggested_models, wallet_balance_units, quota_code) for SDK users to read.
 */
export function envelope(err: GatewayError, requestId: string | undefined): Record<string, unknown> {
  const fields = { message: err.message, type: err.type, param: err.param, code: err.code };
  const body: Record<string, unknown> = Object.assign({}, fields);
  if (requestId !== undefined) body.request_id = requestId;
  if (err.extras !== undefined) Object.assign(body, err.extras);
  body.error = err.extras === undefined ? fields : merged<Record<string, unknown>>(fields, err.extras);
  return body;
}
