// The admin API (CONTRACT section 5): accounts, credits, developer keys and session
// revocation, under /admin with Bearer admin.token. Every answer is JSON; errors use the
// envelope. Keys are returned in plaintext exactly once; only their SHA-256 is stored.

import { createHash, randomInt, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { bearer, keyIdOf, sha256Hex } from '../auth/keys.js';
import type { Config } from '../config/types.js';
import { GatewayError } from '../errors.js';
import { isJsonContentType, readBody } from '../http/body.js';
import { parseJsonBody } from '../http/json.js';
import { sendJson } from '../http/respond.js';
import { windows } from '../billing/meter.js';
import type { AccountRecord, Store, UsageTotals } from '../store/types.js';

const ACCOUNT_ID = /^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$/;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
/** Random characters in an issued key: 40 of base62 is about 238 bits. */
const KEY_CHARS = 40;

export function newKey(prefix: string): string {
  let out = `${prefix}_`;
  for (let i = 0; i < KEY_CHARS; i++) out += BASE62[randomInt(62)];
  return out;
}

/** Compares digests so neither the length nor the content of the token leaks through timing. */
function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function notFound(path: string): GatewayError {
  return new GatewayError('unknown_url', `Unknown path: ${path.slice(0, 200)}`);
}

function methodNotAllowed(method: string | undefined, path: string, allow: string): GatewayError {
  return new GatewayError('method_not_allowed', `Method ${method} is not allowed on ${path}; use ${allow}.`, { headers: { allow } });
}

/** The contract's account view: balance, open holds, and usage this UTC day and month. */
export interface AccountView {
  id: string;
  plan: string;
  balance_units: number;
  held_units: number;
  available_units: number;
  usage: { day: UsageTotals; month: UsageTotals };
}

export class AdminApi {
  readonly #store: Store;
  readonly #config: Config;
  readonly #token: string;
  /** GET /admin/upstreams: every provider's replicas (CONTRACT section 7). */
  readonly #upstreams: () => unknown;

  constructor(store: Store, config: Config, upstreams: () => unknown = () => ({ providers: {} })) {
    this.#store = store;
    this.#config = config;
    this.#token = config.admin.token!;
    this.#upstreams = upstreams;
  }

  async handle(req: IncomingMessage, res: ServerResponse, path: string, requestId: string): Promise<void> {
    const token = bearer(req.headers.authorization);
    if (token === undefined || !sameSecret(token, this.#token)) {
      throw new GatewayError('invalid_api_key', 'Invalid admin token.');
    }
    const parts = path.split('/').slice(2).map((p) => {
      try { return decodeURIComponent(p); } catch { throw notFound(path); }
    });
    const method = req.method;
    const headers = { 'x-request-id': requestId };
    const send = (status: number, body: unknown) => sendJson(res, status, JSON.stringify(body), { ...headers });
    const [a, b, c, d] = parts;
    const accountView = (acct: AccountRecord) => this.#view(acct);

    if (a === 'accounts' && parts.length === 1) {
      if (method !== 'POST') throw methodNotAllowed(method, path, 'POST');
      send(201, await accountView(await this.#createAccount(await this.#body(req))));
    } else if (a === 'accounts' && b !== undefined && parts.length === 2) {
      if (method !== 'GET') throw methodNotAllowed(method, path, 'GET');
      send(200, await accountView(await this.#account(b)));
    } else if (a === 'accounts' && b !== undefined && c === 'credits' && parts.length === 3) {
      if (method !== 'POST') throw methodNotAllowed(method, path, 'POST');
      const { applied, account } = await this.#credit(b, await this.#body(req));
      send(200, { ...(await accountView(account)), applied });
    } else if (a === 'accounts' && b !== undefined && c === 'keys' && parts.length === 3) {
      if (method !== 'POST') throw methodNotAllowed(method, path, 'POST');
      send(201, await this.#issueKey(b));
    } else if (a === 'keys' && b !== undefined && parts.length === 2) {
      if (method !== 'DELETE') throw methodNotAllowed(method, path, 'DELETE');
      if ((await this.#store.revokeKey(b)) === undefined) throw new GatewayError('key_not_found', `No key with id '${b}'.`);
      res.writeHead(204, headers);
      res.end();
    } else if (a === 'sessions' && b !== undefined && c === 'revoke' && d === undefined) {
      if (method !== 'POST') throw methodNotAllowed(method, path, 'POST');
      await this.#store.revokeSession(b);
      send(200, { sid: b, revoked: true });
    } else if (a === 'upstreams' && parts.length === 1) {
      if (method !== 'GET' && method !== 'HEAD') throw methodNotAllowed(method, path, 'GET');
      send(200, this.#upstreams());
    } else if (a === 'usage' && parts.length === 1) {
      if (method !== 'GET' && method !== 'HEAD') throw methodNotAllowed(method, path, 'GET');
      send(200, await this.#usage(req.url ?? ''));
    } else {
      throw notFound(path);
    }
  }

  async #view(a: AccountRecord): Promise<AccountView> {
    const w = windows();
    const u = await this.#store.accountUsage(a.id, w.day, w.month);
    return {
      id: a.id, plan: a.plan, balance_units: a.balance_units, held_units: u.held_units,
      available_units: a.balance_units - u.held_units, usage: { day: u.day, month: u.month },
    };
  }

  /** GET /admin/usage?account=A&since=ISO-8601 (default: the start of this UTC month). */
  async #usage(url: string): Promise<Record<string, unknown>> {
    const q = new URL(url, 'http://admin').searchParams;
    const account = q.get('account') ?? undefined;
    const sinceText = q.get('since') ?? `${windows().month}-01T00:00:00Z`;
    const since = Date.parse(sinceText);
    if (!Number.isFinite(since)) {
      throw new GatewayError('invalid_value', "Invalid value for 'since': an ISO-8601 date or time, e.g. 2026-11-01T00:00:00Z.", { param: 'since' });
    }
    if (account !== undefined && (await this.#store.getAccount(account)) === undefined) {
      throw new GatewayError('account_not_found', `No account with id '${account}'.`);
    }
    const report = await this.#store.usageReport(account, since);
    return { account: account ?? null, since: new Date(since).toISOString(), ...report };
  }

  async #body(req: IncomingMessage): Promise<Record<string, unknown>> {
    if (!isJsonContentType(req.headers['content-type'])) {
      throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
    }
    const body = parseJsonBody(await readBody(req, 65536));
    if (!isObject(body)) throw new GatewayError('invalid_type', "Invalid type for '(body)': expected a JSON object.", { param: '(body)' });
    return body;
  }

  async #account(id: string): Promise<AccountRecord> {
    const account = await this.#store.getAccount(id);
    if (account === undefined) throw new GatewayError('account_not_found', `No account with id '${id}'.`);
    return account;
  }

  async #createAccount(body: Record<string, unknown>): Promise<AccountRecord> {
    const { id, plan } = body;
    const units = body.wallet_units ?? 0;
    if (id === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'id'.", { param: 'id' });
    if (typeof id !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'id': expected a string.", { param: 'id' });
    if (!ACCOUNT_ID.test(id)) throw new GatewayError('invalid_value', "Invalid value for 'id': 1-128 letters, digits and ._:@+-.", { param: 'id' });
    if (plan === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'plan'.", { param: 'plan' });
    if (typeof plan !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'plan': expected a string.", { param: 'plan' });
    const plans = Object.keys(this.#config.plans);
    if (!plans.includes(plan)) {
      throw new GatewayError('unsupported_value', `Unsupported value for 'plan': ${JSON.stringify(plan)}. Supported values are: ${plans.map((p) => `'${p}'`).join(', ')}.`, { param: 'plan' });
    }
    if (typeof units !== 'number') throw new GatewayError('invalid_type', "Invalid type for 'wallet_units': expected an integer.", { param: 'wallet_units' });
    if (!Number.isSafeInteger(units) || units < 0) {
      throw new GatewayError('invalid_value', "Invalid value for 'wallet_units': must be a non-negative integer.", { param: 'wallet_units' });
    }
    if (!(await this.#store.createAccount({ id, plan, balance_units: units }))) {
      throw new GatewayError('account_exists', `An account with id '${id}' exists.`, { param: 'id' });
    }
    return this.#account(id);
  }

  async #credit(id: string, body: Record<string, unknown>): Promise<{ applied: boolean; account: AccountRecord }> {
    const { units, idempotency_key: key } = body;
    if (units === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'units'.", { param: 'units' });
    if (typeof units !== 'number') throw new GatewayError('invalid_type', "Invalid type for 'units': expected an integer.", { param: 'units' });
    if (!Number.isSafeInteger(units) || units === 0) throw new GatewayError('invalid_value', "Invalid value for 'units': must be a non-zero integer.", { param: 'units' });
    if (key === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'idempotency_key'.", { param: 'idempotency_key' });
    if (typeof key !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'idempotency_key': expected a string.", { param: 'idempotency_key' });
    if (!IDEMPOTENCY_KEY.test(key)) throw new GatewayError('invalid_value', "Invalid value for 'idempotency_key': 1-200 printable characters.", { param: 'idempotency_key' });
    const result = await this.#store.addCredits(id, units, key);
    if (result === undefined) throw new GatewayError('account_not_found', `No account with id '${id}'.`);
    return { applied: result.applied, account: await this.#account(id) };
  }

  async #issueKey(account: string): Promise<{ id: string; account: string; key: string }> {
    const key = newKey(this.#config.service.key_prefix);
    const digest = sha256Hex(key);
    const id = keyIdOf(digest);
    if (!(await this.#store.createKey({ id, account, digest }))) throw new GatewayError('account_not_found', `No account with id '${account}'.`);
    return { id, account, key };
  }
}
