// Pins the one code table (lib/errors.ts) against the spec's section 7.1 and CONTRACT section 4:
// every code's status, the type for each status, the envelope, and Retry-After headers.

import t from 'tap';
import {
  ERROR_CODES, GatewayError, MAX_ECHO, clip, envelope, retryAfterHeaders, toGatewayError, typeForStatus, type ErrorCode,
} from '../lib/errors.js';
import { schemas } from './helpers/schemas.js';

// A literal copy of spec section 7.1 (chat-completion-service-v1.md), status -> codes.
const SPEC_7_1 = `
| 400 | invalid_json, missing_required_parameter, invalid_type, invalid_value, unsupported_value, invalid_image_url, too_many_images |
| 401 | invalid_api_key, token_expired, session_revoked |
| 402 | insufficient_credits, quota_exceeded |
| 403 | model_requires_paid_plan, content_blocked |
| 404 | model_not_found |
| 413 | request_too_large |
| 422 | context_length_exceeded, model_does_not_support_images |
| 429 | rate_limit_exceeded, too_many_concurrent |
| 500 | internal_error |
| 502 | provider_error |
| 503 | model_unavailable, service_unavailable |
| 504 | provider_timeout |
`;

function specTable(): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of SPEC_7_1.trim().split('\n')) {
    const [, status, codes] = /^\| (\d{3}) \| (.+) \|$/.exec(line)!;
    for (const code of codes!.split(', ')) out.set(code, Number(status));
  }
  return out;
}

// Codes beyond 7.1: 7.2's unknown_url/method_not_allowed, CONTRACT's 415 and 408 (section 10),
// the admin API's, and CONTRACT section 6's response_not_found.
const EXTRA: Record<string, number> = {
  unknown_url: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  unsupported_media_type: 415,
  account_not_found: 404,
  key_not_found: 404,
  response_not_found: 404,
  // CONTRACT section 18: files and batches.
  not_found: 404,
  account_exists: 409,
  // CONTRACT section 8: per-key controls.
  key_expired: 401,
  budget_exceeded: 402,
  model_not_allowed: 403,
  ip_not_allowed: 403,
  // CONTRACT section 16: open connections per client address.
  too_many_connections: 429,
  // CONTRACT section 13: the queue in front of a full fleet.
  model_overloaded: 503,
  // CONTRACT section 15: teams.
  team_not_found: 404,
  team_exists: 409,
  team_in_use: 409,
  // CONTRACT section 12: the console's sessions, roles and CSRF token.
  not_signed_in: 401,
  forbidden: 403,
  csrf_failed: 403,
  // CONTRACT section 21: a console member may only narrow the controls an admin set on a key.
  permission_denied: 403,
};

t.test('the spec table parses into the 25 codes it lists', async (t) => {
  const spec = specTable();
  t.equal(spec.size, 25);
  t.equal(spec.get('invalid_json'), 400);
  t.equal(spec.get('provider_timeout'), 504);
});

t.test('every spec code is in ERROR_CODES with exactly the spec status', async (t) => {
  for (const [code, status] of specTable()) {
    t.ok(Object.hasOwn(ERROR_CODES, code), `${code} is in the table`);
    t.equal((ERROR_CODES as Record<string, number>)[code], status, `${code} -> ${status}`);
  }
});

t.test('the extra codes have their statuses', async (t) => {
  for (const [code, status] of Object.entries(EXTRA)) {
    t.equal((ERROR_CODES as Record<string, number>)[code], status, `${code} -> ${status}`);
  }
});

t.test('the table holds nothing beyond the spec codes and the extras', async (t) => {
  const expected = new Map([...specTable(), ...Object.entries(EXTRA)]);
  t.equal(expected.size, 47);
  t.equal(Object.keys(ERROR_CODES).length, 47, 'count pinned');
  t.strictSame(Object.keys(ERROR_CODES).sort(), [...expected.keys()].sort());
  t.strictSame(Object.fromEntries(Object.entries(ERROR_CODES)), Object.fromEntries(expected));
  t.ok(Object.isFrozen(ERROR_CODES), 'the table cannot be changed at run time');
});

t.test('every key is a stable snake_case code and equals the code a GatewayError carries', async (t) => {
  for (const key of Object.keys(ERROR_CODES) as ErrorCode[]) {
    t.match(key, /^[a-z]+(?:_[a-z]+)*$/, `${key} is snake_case`);
    const err = new GatewayError(key, 'm');
    t.equal(err.code, key);
    t.equal(err.status, ERROR_CODES[key]);
    t.equal(err.type, typeForStatus(ERROR_CODES[key]));
  }
});

t.test('type for each status (CONTRACT section 4)', async (t) => {
  const expected: Record<number, string> = {
    400: 'invalid_request_error',
    401: 'invalid_request_error',
    404: 'invalid_request_error',
    405: 'invalid_request_error',
    408: 'invalid_request_error',
    409: 'invalid_request_error',
    413: 'invalid_request_error',
    415: 'invalid_request_error',
    422: 'invalid_request_error',
    402: 'insufficient_credits',
    403: 'permission_error',
    429: 'rate_limit_error',
    500: 'server_error',
    502: 'server_error',
    503: 'server_error',
    504: 'server_error',
  };
  for (const [status, type] of Object.entries(expected)) t.equal(typeForStatus(Number(status)), type, `${status} -> ${type}`);
  // Every status the table uses is one the contract names.
  for (const status of new Set(Object.values(ERROR_CODES))) t.ok(Object.hasOwn(expected, status), `${status} has a contract type`);
});

t.test('GatewayError carries code, status, type, param, extras, headers and cause', async (t) => {
  const cause = new Error('root');
  const err = new GatewayError('quota_exceeded', 'Daily quota used up.', {
    param: 'model',
    extras: { quota_code: 'tokens_per_day', wallet_balance_units: 42 },
    headers: { 'retry-after': '3' },
    cause,
  });
  t.ok(err instanceof Error);
  t.ok(err instanceof GatewayError);
  t.equal(err.name, 'GatewayError');
  t.equal(err.message, 'Daily quota used up.');
  t.equal(err.code, 'quota_exceeded');
  t.equal(err.status, 402);
  t.equal(err.type, 'insufficient_credits');
  t.equal(err.param, 'model');
  t.strictSame(err.extras, { quota_code: 'tokens_per_day', wallet_balance_units: 42 });
  t.strictSame(err.headers, { 'retry-after': '3' });
  t.equal(err.cause, cause);

  const bare = new GatewayError('model_not_found', 'No such model.');
  t.equal(bare.param, null);
  t.equal(bare.extras, undefined);
  t.equal(bare.headers, undefined);
  t.equal(bare.cause, undefined);
  t.notOk('cause' in bare, 'no cause member without a cause');
});

t.test('envelope: the spec fields and extras at top level, and again under error (what the SDKs expose)', async (t) => {
  const err = new GatewayError('insufficient_credits', 'Not enough credits.', {
    param: null,
    extras: { quota_code: 'units_per_month', wallet_balance_units: 17, suggested_models: ['echo-small', 'echo-vision'] },
  });
  const body = envelope(err, 'req_abc123');
  t.strictSame(body, {
    message: 'Not enough credits.',
    type: 'insufficient_credits',
    param: null,
    code: 'insufficient_credits',
    request_id: 'req_abc123',
    quota_code: 'units_per_month',
    wallet_balance_units: 17,
    suggested_models: ['echo-small', 'echo-vision'],
    error: {
      message: 'Not enough credits.', type: 'insufficient_credits', param: null, code: 'insufficient_credits',
      quota_code: 'units_per_month', wallet_balance_units: 17, suggested_models: ['echo-small', 'echo-vision'],
    },
  });
  t.strictSame(Object.keys(body), ['message', 'type', 'param', 'code', 'request_id', 'quota_code', 'wallet_balance_units', 'suggested_models', 'error']);
  t.strictSame(schemas.error(body), []);
  t.strictSame(schemas.openaiError(body), [], 'the OpenAI SDK shape is satisfied too');
  // JSON round trip keeps the same shape (what goes on the wire).
  t.strictSame(JSON.parse(JSON.stringify(body)), body);
});

t.test('envelope without request id or extras', async (t) => {
  const err = new GatewayError('invalid_value', 'temperature must be between 0 and 2.', { param: 'temperature' });
  const body = envelope(err, undefined);
  t.strictSame(body, {
    message: 'temperature must be between 0 and 2.',
    type: 'invalid_request_error',
    param: 'temperature',
    code: 'invalid_value',
    error: { message: 'temperature must be between 0 and 2.', type: 'invalid_request_error', param: 'temperature', code: 'invalid_value' },
  });
  t.notOk('request_id' in body);
  t.strictSame(schemas.error(body), []);
});

t.test('the schema helper rejects an envelope that lost its fields', async (t) => {
  const body = envelope(new GatewayError('provider_error', 'Upstream failed.'), 'req_1');
  const broken: Record<string, unknown> = { ...body };
  delete broken.code;
  t.strictSame(schemas.error(broken), [" must have required property 'code'"]);
});

t.test('retryAfterHeaders: whole seconds rounded up, the same in ms', async (t) => {
  t.strictSame(retryAfterHeaders(1500), { 'retry-after': '2', 'retry-after-ms': '1500' });
  t.strictSame(retryAfterHeaders(1000), { 'retry-after': '1', 'retry-after-ms': '1000' });
  t.strictSame(retryAfterHeaders(1001), { 'retry-after': '2', 'retry-after-ms': '1001' });
  t.strictSame(retryAfterHeaders(250.4), { 'retry-after': '1', 'retry-after-ms': '251' });
});

t.test('retryAfterHeaders: zero, negative and NaN still ask for at least one second', async (t) => {
  for (const ms of [0, -5, -100000, Number.NaN]) {
    const h = retryAfterHeaders(ms);
    t.equal(h['retry-after'], '1', `${ms}: retry-after 1`);
    t.ok(Number(h['retry-after-ms']) >= 1, `${ms}: retry-after-ms at least 1`);
    t.match(h['retry-after-ms'], /^\d+$/, `${ms}: retry-after-ms is whole`);
    t.notOk('x-should-retry' in h);
  }
  t.strictSame(retryAfterHeaders(0), { 'retry-after': '1', 'retry-after-ms': '1' });
  t.strictSame(retryAfterHeaders(-5), { 'retry-after': '1', 'retry-after-ms': '1' });
});

t.test('retryAfterHeaders: x-should-retry false only past a minute', async (t) => {
  t.strictSame(retryAfterHeaders(60000), { 'retry-after': '60', 'retry-after-ms': '60000' });
  t.strictSame(retryAfterHeaders(61000), { 'retry-after': '61', 'retry-after-ms': '61000', 'x-should-retry': 'false' });
  t.strictSame(retryAfterHeaders(60001), { 'retry-after': '61', 'retry-after-ms': '60001', 'x-should-retry': 'false' });
});

t.test('toGatewayError hides anything that is not a GatewayError', async (t) => {
  const boom = new Error('boom');
  const err = toGatewayError(boom);
  t.ok(err instanceof GatewayError);
  t.equal(err.code, 'internal_error');
  t.equal(err.status, 500);
  t.equal(err.type, 'server_error');
  t.equal(err.param, null);
  t.notMatch(err.message, /boom/);
  t.equal(err.cause, boom, 'the original stays available for the log');
  const body = envelope(err, 'req_x');
  t.notMatch(JSON.stringify(body), /boom/);
  t.strictSame(schemas.error(body), []);

  const fromString = toGatewayError('boom string');
  t.equal(fromString.code, 'internal_error');
  t.notMatch(fromString.message, /boom/);

  const known = new GatewayError('model_unavailable', 'Try later.');
  t.equal(toGatewayError(known), known, 'a GatewayError passes through unchanged');
});

t.test('clip: client input in a message is at most 256 characters, with an ellipsis when cut', async (t) => {
  t.equal(MAX_ECHO, 256);
  t.equal(clip(''), '');
  t.equal(clip('gpt-4o'), 'gpt-4o', 'short input is echoed as it is');
  const exact = 'a'.repeat(256);
  t.equal(clip(exact), exact, '256 characters are not cut');
  const long = 'b'.repeat(1024 * 1024);
  t.equal(clip(long), `${'b'.repeat(256)}…`);
  t.equal(clip('abcdef', 3), 'abc…', 'a smaller budget');
  // An emoji is two UTF-16 units: a cut between them would leave a lone surrogate.
  const emoji = `${'c'.repeat(255)}😀tail`;
  t.equal(clip(emoji), `${'c'.repeat(255)}…`, 'a surrogate pair is never split');
  t.notMatch(clip(emoji), /[\uD800-\uDFFF]/, 'no half of the pair is left');
});
