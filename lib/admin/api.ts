// The admin API (CONTRACT sections 5 and 8): accounts, credits, developer keys with their
// controls (list, PATCH, rotation: ./keys.ts), teams (./teams.ts) and session revocation, under
// /admin with Bearer admin.token, or a console session. Every answer is JSON, except the two
// revocations (204, no body); errors use the envelope. Amounts are exact integers of at most
// 2^53-1 in size, and a balance never leaves 0..2^53-1 (CONTRACT sections 9 and 10). A body
// holds only the members its route's shape names, at any depth (./body-shape.ts; CONTRACT
// section 16). Every write is recorded in the audit log in the same store step as the write,
// before it is answered (./audit.ts; CONTRACT section 21).
// Routes are one table (#routes: a path template, a handler per method), so a method a route
// lacks is 405 with its Allow made from the table.

import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { bearer } from '../auth/bearer.js';
import type { Config } from '../config/types.js';
import type { BatchStore } from '../store/batches.js';
import { cancelBatch, getBatch, listBatches } from './batches.js';
import { GatewayError, MAX_ECHO, clip } from '../errors.js';
import { ACCOUNT_BODY, CONTROLS_BODY, CREDIT_BODY, NO_MEMBERS, ROTATE_BODY, TEAM_BODY, TEAM_PATCH_BODY, type BodyShape } from './body-shape.js';
import { createTeam, deleteTeam, getTeam, listTeams, updateTeam } from './teams.js';
import { keyView } from '../auth/controls.js';
import { sendJson } from '../http/respond.js';
import { windows } from '../billing/meter.js';
import { MAX_UNITS, type AccountRecord, type AuditEvent, type KeyRecord, type Store, type UsageQuery, type UsageRecord, type UsageTotals } from '../store/types.js';
import { isCursor } from '../store/usage-records.js';
import { alertsPage } from './alerts.js';
import { decide, isWrite, matches, outsideAccount, type Principal } from './permissions.js';
import { addressReader, type AddressOf } from '../auth/client-address.js';
import { accountsPage, usageHourly, usageTop } from './insights.js';
import { TokenGuard } from './token-guard.js';
import { WriteAudit, auditEvent, auditPage } from './audit.js';
import { adminBody, hasBody, integerParam, type Body } from './body.js';
import { issueKey, patchKey, revokeKey, rotateKey, type KeyWrite } from './keys.js';
import { usageGroups, wantsGroups } from './usage-groups.js';

const ACCOUNT_ID = /^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$/;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;

/** Compares digests so neither the length nor the content of the token leaks through timing. */
function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

function notFound(path: string): GatewayError {
  return new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
}

function methodNotAllowed(method: string | undefined, path: string, allow: string): GatewayError {
  return new GatewayError('method_not_allowed', `Method ${clip(method ?? '', 16)} is not allowed on ${clip(path, MAX_ECHO - 16)}; use ${allow}.`, { headers: { allow } });
}

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

/** One admin request as a route's handler sees it. */
interface AdminCall {
  req: IncomingMessage;
  url: string;
  /** The route's {id} segment, decoded ('' when it has none). */
  id: string;
  send(status: number, body: unknown): Promise<void>;
  noContent(): Promise<void>;
  /** The write's audit event, for the store call that makes the write. */
  event(): AuditEvent | undefined;
  body(shape: BodyShape): Promise<Body>;
  /** What a key write needs; set for every write (POST, PATCH, DELETE). */
  keys: KeyWrite | undefined;
}

interface AdminRoute {
  route: string;
  methods: Partial<Record<Method, (c: AdminCall) => Promise<void>>>;
}

/** The Allow header of a route: its methods, HEAD with GET, in one fixed order. */
function allowOf(methods: AdminRoute['methods']): string {
  const allow: string[] = [];
  if (methods.GET !== undefined) allow.push('GET', 'HEAD');
  for (const m of ['POST', 'PATCH', 'DELETE'] as const) if (methods[m] !== undefined) allow.push(m);
  return allow.join(', ');
}

/** A key write's store, config, principal and audit event; every write has them (isWrite). */
function writer(c: AdminCall): KeyWrite {
  if (c.keys === undefined) throw new Error('a write without its audit event');
  return c.keys;
}

/** Records pages hold 1 to RECORDS_MAX_LIMIT records; RECORDS_DEFAULT_LIMIT unless asked. */
export const RECORDS_DEFAULT_LIMIT = 100;
export const RECORDS_MAX_LIMIT = 1000;

/** An ISO-8601 date or time of a records query (since, until); undefined when absent. */
function recordsTime(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const t = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (!Number.isFinite(t)) {
    throw new GatewayError('invalid_value', `Invalid value for '${name}': an ISO-8601 date or time, e.g. 2026-11-01T00:00:00Z.`, { param: name });
  }
  return t;
}

/** The limit of a records query: a plain integer from 1 to RECORDS_MAX_LIMIT. */
function recordsLimit(text: string | undefined): number {
  if (text === undefined) return RECORDS_DEFAULT_LIMIT;
  const range = `an integer from 1 to ${RECORDS_MAX_LIMIT}`;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) {
    throw new GatewayError('invalid_type', `Invalid type for 'limit': expected ${range}.`, { param: 'limit' });
  }
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > RECORDS_MAX_LIMIT) {
    throw new GatewayError('invalid_value', `Invalid value for 'limit': must be ${range}.`, { param: 'limit' });
  }
  return n;
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
  readonly #token: string | null;
  readonly #address: AddressOf;
  /** Wrong admin tokens per client address. */
  readonly #guard: TokenGuard;
  /** GET /admin/batches: every account's batches (CONTRACT section 18); the gateway sets the store. */
  batchStore: BatchStore | null = null;

  /** GET /admin/upstreams: every provider's replicas (CONTRACT section 7). */
  readonly #upstreams: () => unknown;

  constructor(store: Store, config: Config, upstreams: () => unknown = () => ({ providers: {} })) {
    this.#store = store;
    this.#config = config;
    this.#token = config.admin.token;
    this.#upstreams = upstreams;
    this.#address = addressReader(config.server.trust_proxy);
    this.#guard = new TokenGuard(this.#address, config.admin.max_token_failures);
  }

  /**
   * The Bearer admin token's principal; 401 without the token (or with no admin.token set),
   * 429 once its address has sent too many wrong ones (./token-guard.ts).
   */
  async #tokenPrincipal(req: IncomingMessage): Promise<Principal> {
    const token = bearer(req.headers.authorization);
    if (token === undefined || !(await this.isToken(req, token))) throw new GatewayError('invalid_api_key', 'Invalid admin token.');
    return { actor: 'admin-token', role: 'admin', account: null };
  }

  /**
   * A member's request must stay inside their account (CONTRACT section 12): the route's
   * account id, the account of the route's key, or the `account` query parameter.
   */
  async #inScope(p: Principal, scope: string, id: string, url: string): Promise<void> {
    if (p.role !== 'member') return;
    if (scope === 'path' && id === p.account) return;
    if (scope === 'query' && new URL(url, 'http://admin').searchParams.get('account') === p.account) return;
    if (scope === 'key') {
      const key = await this.#store.getKey(id);
      if (key === undefined) throw new GatewayError('key_not_found', `No live key with id '${clip(id)}'.`);
      if (key.account === p.account) return;
    }
    throw outsideAccount(p);
  }

  /**
   * Whether `given`, sent by `req`, is the admin token (the Bearer token here, and the
   * console's token sign-in); a wrong one is counted against its address, and an address
   * that sent too many is refused 429 whatever it sends (./token-guard.ts).
   */
  isToken(req: IncomingMessage, given: string): Promise<boolean> {
    const token = this.#token;
    return this.#guard.attempt(req, given, (g) => token !== null && sameSecret(g, token));
  }

  /** The event of a write by `p` (the console's sign-ins, check and reload record it alone, ./audit.ts). */
  auditEvent(p: Principal, action: string, target: string, req: IncomingMessage, requestId: string): AuditEvent {
    return auditEvent(p, action, target, req, this.#address, requestId);
  }

  /**
   * One /admin request: by the Bearer admin token, or (`session`) by a console session the
   * gateway checked (cookie, revocation, CSRF). Either way through the permission table
   * (permissions.ts); every write that succeeds is recorded in the audit log with
   * the write, in one store step, before it is answered (./audit.ts).
   */
  async handle(req: IncomingMessage, res: ServerResponse, path: string, requestId: string, session?: Principal): Promise<void> {
    const principal = session ?? await this.#tokenPrincipal(req);
    const parts = path.split('/').slice(2).map((p) => {
      // An empty segment (`/admin/keys/`, `//`) names nothing.
      if (p === '') throw notFound(path);
      try { return decodeURIComponent(p); } catch { throw notFound(path); }
    });
    const method = req.method;
    const decision = decide(principal, method, ['admin', ...parts]);
    await this.#inScope(principal, decision.scope, decision.id, req.url ?? '');
    const audit = isWrite(method) ? new WriteAudit(this.auditEvent(principal, `${method ?? ''} ${decision.route}`, decision.id, req, requestId)) : undefined;
    const headers = { 'x-request-id': requestId };
    // A write's answer goes once its event is recorded: with the write, or alone.
    const send = async (status: number, body: unknown) => {
      await audit?.done(this.#store);
      sendJson(res, status, JSON.stringify(body), { ...headers });
    };
    const noContent = async () => { await audit?.done(this.#store); res.writeHead(204, headers); res.end(); };
    const event = () => audit?.take();
    const body = (shape: BodyShape) => adminBody(req, shape, this.#config.server.body_timeout_ms);
    const keys: KeyWrite | undefined = audit === undefined ? undefined : { store: this.#store, config: this.#config, principal, audit };
    const call: AdminCall = { req, url: req.url ?? '', id: '', send, noContent, event, body, keys };
    for (const route of this.#routes) {
      const id = matches(route.route, ['admin', ...parts]);
      if (id === undefined) continue;
      const m = method === 'HEAD' ? 'GET' : method ?? '';
      const handler = Object.hasOwn(route.methods, m) ? route.methods[m as Method] : undefined;
      if (handler === undefined) throw methodNotAllowed(method, path, allowOf(route.methods));
      call.id = id;
      return handler(call);
    }
    throw notFound(path);
  }

  /**
   * The admin API's routes: for each path template ({id}: any one segment), a handler per
   * method. GET answers HEAD too; any other method is 405 with the route's methods in Allow.
   */
  readonly #routes: readonly AdminRoute[] = [
    { route: '/admin/accounts', methods: {
      GET: async (c) => c.send(200, await accountsPage(this.#store, c.url, (acct) => this.#view(acct))),
      POST: async (c) => c.send(201, await this.#view(await this.#createAccount(await c.body(ACCOUNT_BODY), c.event()))),
    } },
    { route: '/admin/accounts/{id}', methods: {
      GET: async (c) => c.send(200, await this.#view(await this.#account(c.id))),
    } },
    { route: '/admin/accounts/{id}/credits', methods: {
      POST: async (c) => {
        const { applied, account } = await this.#credit(c.id, await c.body(CREDIT_BODY), c.event());
        await c.send(200, { ...(await this.#view(account)), applied });
      },
    } },
    { route: '/admin/accounts/{id}/keys', methods: {
      GET: async (c) => {
        const list = await this.#store.listKeys(c.id);
        if (list === undefined) throw new GatewayError('account_not_found', `No account with id '${clip(c.id)}'.`);
        await c.send(200, { keys: list.map((k) => this.#keyView(k)) });
      },
      POST: async (c) => c.send(201, await issueKey(writer(c), c.id, hasBody(c.req) ? await c.body(CONTROLS_BODY) : undefined)),
    } },
    { route: '/admin/keys/{id}', methods: {
      GET: async (c) => {
        const key = await this.#store.getKey(c.id);
        if (key === undefined || key.revoked_at !== null) throw new GatewayError('key_not_found', `No live key with id '${clip(c.id)}'.`);
        await c.send(200, this.#keyView(key));
      },
      PATCH: async (c) => c.send(200, this.#keyView(await patchKey(writer(c), c.id, hasBody(c.req) ? await c.body(CONTROLS_BODY) : undefined))),
      DELETE: async (c) => {
        await revokeKey(writer(c), c.id);
        await c.noContent();
      },
    } },
    { route: '/admin/keys/{id}/rotate', methods: {
      POST: async (c) => c.send(200, await rotateKey(writer(c), c.id, hasBody(c.req) ? await c.body(ROTATE_BODY) : undefined)),
    } },
    { route: '/admin/accounts/{id}/teams', methods: {
      GET: async (c) => c.send(200, await listTeams(this.#store, c.id)),
      POST: async (c) => c.send(201, await createTeam(this.#store, c.id, await c.body(TEAM_BODY), c.event())),
    } },
    { route: '/admin/teams/{id}', methods: {
      GET: async (c) => c.send(200, await getTeam(this.#store, c.id)),
      PATCH: async (c) => c.send(200, await updateTeam(this.#store, c.id, hasBody(c.req) ? await c.body(TEAM_PATCH_BODY) : undefined, c.event())),
      DELETE: async (c) => {
        await deleteTeam(this.#store, c.id, c.event());
        await c.noContent();
      },
    } },
    { route: '/admin/sessions/{id}/revoke', methods: {
      POST: async (c) => {
        if (hasBody(c.req)) await c.body(NO_MEMBERS);
        await this.#store.revokeSession(c.id, c.event());
        await c.noContent();
      },
    } },
    { route: '/admin/batches', methods: { GET: async (c) => c.send(200, await listBatches(this.batchStore, c.url)) } },
    { route: '/admin/batches/{id}', methods: { GET: async (c) => c.send(200, await getBatch(this.batchStore, c.id)) } },
    { route: '/admin/batches/{id}/cancel', methods: {
      POST: async (c) => {
        if (hasBody(c.req)) await c.body(NO_MEMBERS);
        await c.send(200, await cancelBatch(this.batchStore, c.id));
      },
    } },
    { route: '/admin/upstreams', methods: { GET: async (c) => c.send(200, this.#upstreams()) } },
    { route: '/admin/usage', methods: { GET: async (c) => c.send(200, await this.#usage(c.url)) } },
    { route: '/admin/audit', methods: {
      GET: async (c) => {
        const q = new URL(c.url, 'http://admin').searchParams;
        await c.send(200, await auditPage(this.#store, recordsTime(q.get('since') ?? undefined, 'since') ?? 0, recordsLimit(q.get('limit') ?? undefined), q.get('cursor') ?? undefined));
      },
    } },
    { route: '/admin/usage/hourly', methods: { GET: async (c) => c.send(200, await usageHourly(this.#store, c.url)) } },
    { route: '/admin/usage/top', methods: { GET: async (c) => c.send(200, await usageTop(this.#store, c.url)) } },
    { route: '/admin/usage/records', methods: { GET: async (c) => c.send(200, await this.records(c.url)) } },
    { route: '/admin/alerts', methods: { GET: async (c) => c.send(200, await alertsPage(this.#store, c.url)) } },
  ];

  /** Each route's template and its Allow header (the methods it answers), in the table's order. */
  get allowed(): ReadonlyMap<string, string> {
    return new Map(this.#routes.map((r) => [r.route, allowOf(r.methods)]));
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
      throw new GatewayError('account_not_found', `No account with id '${clip(account)}'.`);
    }
    if (wantsGroups(q)) return usageGroups(this.#store, q, account, since);
    const report = await this.#store.usageReport(account, since);
    return { account: account ?? null, since: new Date(since).toISOString(), ...report };
  }

  /**
   * GET /admin/usage/records?account=&key=&team=&model=&tag=&end_user=&since=&until=&limit=&cursor= (CONTRACT
   * section 8): one page, `{records, next_cursor}`; next_cursor is null on the last page. Pass a
   * page's next_cursor with the same filters for the next one. `at` is ISO-8601 (ms, UTC).
   */
  async records(url: string): Promise<{ records: Array<Omit<UsageRecord, 'at'> & { at: string }>; next_cursor: string | null }> {
    const q = new URL(url, 'http://admin').searchParams;
    const text = (name: string): string | undefined => {
      const v = q.get(name) ?? undefined;
      if (v === '') throw new GatewayError('invalid_value', `Invalid value for '${name}': must not be empty.`, { param: name });
      if (v !== undefined && v.length > 256) throw new GatewayError('invalid_value', `Invalid value for '${name}': at most 256 characters.`, { param: name });
      return v;
    };
    const query: UsageQuery = {
      account: text('account'), keyId: text('key'), team: text('team'), model: text('model'), tag: text('tag'), endUser: text('end_user'), batchId: text('batch_id'),
      since: recordsTime(text('since'), 'since') ?? 0,
      until: recordsTime(text('until'), 'until'),
      limit: recordsLimit(text('limit')),
      cursor: text('cursor'),
    };
    if (query.until !== undefined && query.until <= query.since) {
      throw new GatewayError('invalid_value', "Invalid value for 'until': must be later than 'since'.", { param: 'until' });
    }
    if (query.cursor !== undefined && !isCursor(query.cursor)) {
      throw new GatewayError('invalid_value', "Invalid value for 'cursor': pass a next_cursor of an earlier page, unchanged.", { param: 'cursor' });
    }
    if (query.account !== undefined && (await this.#store.getAccount(query.account)) === undefined) {
      throw new GatewayError('account_not_found', `No account with id '${clip(query.account)}'.`);
    }
    const page = await this.#store.usageRecords(query);
    return { records: page.records.map((r) => ({ ...r, at: new Date(r.at).toISOString() })), next_cursor: page.next_cursor };
  }

  #keyView(k: KeyRecord): Record<string, unknown> {
    return keyView(k, this.#config.service.key_prefix);
  }

  async #account(id: string): Promise<AccountRecord> {
    const account = await this.#store.getAccount(id);
    if (account === undefined) throw new GatewayError('account_not_found', `No account with id '${clip(id)}'.`);
    return account;
  }

  async #createAccount(body: Body, audit: AuditEvent | undefined): Promise<AccountRecord> {
    const { id, plan } = body.values;
    if (id === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'id'.", { param: 'id' });
    if (typeof id !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'id': expected a string.", { param: 'id' });
    if (!ACCOUNT_ID.test(id)) throw new GatewayError('invalid_value', "Invalid value for 'id': 1-128 letters, digits and ._:@+-.", { param: 'id' });
    if (plan === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'plan'.", { param: 'plan' });
    if (typeof plan !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'plan': expected a string.", { param: 'plan' });
    const plans = Object.keys(this.#config.plans);
    if (!plans.includes(plan)) {
      throw new GatewayError('unsupported_value', `Unsupported value for 'plan': ${clip(JSON.stringify(plan))}. Supported values are: ${plans.map((p) => `'${p}'`).join(', ')}.`, { param: 'plan' });
    }
    const units = body.values.wallet_units === null ? 0 : integerParam(body, 'wallet_units', 0, MAX_UNITS, `an integer from 0 to ${MAX_UNITS}`) ?? 0;
    if (!(await this.#store.createAccount({ id, plan, balance_units: units }, audit))) {
      throw new GatewayError('account_exists', `An account with id '${clip(id)}' exists.`, { param: 'id' });
    }
    return this.#account(id);
  }

  async #credit(id: string, body: Body, audit: AuditEvent | undefined): Promise<{ applied: boolean; account: AccountRecord }> {
    const { idempotency_key: key } = body.values;
    const units = integerParam(body, 'units', -MAX_UNITS, MAX_UNITS, `a non-zero integer from -${MAX_UNITS} to ${MAX_UNITS}`);
    if (units === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'units'.", { param: 'units' });
    if (units === 0) throw new GatewayError('invalid_value', `Invalid value for 'units': must be a non-zero integer from -${MAX_UNITS} to ${MAX_UNITS}.`, { param: 'units' });
    if (key === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'idempotency_key'.", { param: 'idempotency_key' });
    if (typeof key !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'idempotency_key': expected a string.", { param: 'idempotency_key' });
    if (!IDEMPOTENCY_KEY.test(key)) throw new GatewayError('invalid_value', "Invalid value for 'idempotency_key': 1-200 printable characters.", { param: 'idempotency_key' });
    const result = await this.#store.addCredits(id, units, key, audit);
    if (result === undefined) throw new GatewayError('account_not_found', `No account with id '${clip(id)}'.`);
    if (result.refused === 'below_zero') {
      throw new GatewayError('invalid_value', `Invalid value for 'units': deducting ${-units} units would take the balance (${result.balance_units}) below zero; nothing changed.`, { param: 'units' });
    }
    if (result.refused === 'above_max') {
      throw new GatewayError('invalid_value', `Invalid value for 'units': adding ${units} units would take the balance (${result.balance_units}) above ${MAX_UNITS}, the largest exact amount; nothing changed.`, { param: 'units' });
    }
    return { applied: result.applied, account: await this.#account(id) };
  }
}
