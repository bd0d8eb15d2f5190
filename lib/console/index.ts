// The operator console (CONTRACT section 12; docs/console.md): the page and its bundle at
// /console, sign-in (the admin token, or SSO: ./oidc.ts), sessions (./session.ts), and the
// console's own API under /console/api (the effective config with secrets masked, a YAML
// check, reload, usage export). Everything else the page shows comes from the admin API, which
// takes the session cookie (Gateway passes the principal checked here to AdminApi.handle).
// Both go through the one permission table (./permissions.ts); every write is recorded in the
// audit log before it is answered (../admin/audit.ts): a sign-out with the session's
// revocation, in one store step; a sign-in, a config check and a reload (no store write of
// their own) alone, before they act.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { setImmediate as nextTurn } from 'node:timers/promises';
import YAML from 'yaml';
import type { AdminApi } from '../admin/api.js';
import type { Config } from '../config/types.js';
import { GatewayError, clip } from '../errors.js';
import { isJsonContentType, readBody } from '../http/body.js';
import { parseJsonBody } from '../http/json.js';
import { sendJson } from '../http/respond.js';
import type { Logger } from '../observe/log.js';
import { isObject } from '../objects.js';
import type { Store } from '../store/types.js';
import { Assets } from './assets.js';
import { OidcSignIn, type Flow } from './oidc.js';
import { decide, isWrite, outsideAccount } from '../admin/permissions.js';
import { redactConfig } from './redact.js';
import { FLOW_COOKIE, FLOW_TTL_S, SESSION_COOKIE, SessionKeys, cookie, overTls, setCookie, type Session } from './session.js';
import { toCsv, toJsonl } from './export.js';
import { SessionLimit } from './session-limit.js';

/**
 * Headers of every console answer, whatever its status (CONTRACT sections 12 and 21): no inline
 * or eval'd script, no framing, no sniffing, no referrer. handle() sets them before anything
 * else, so that the errors the gateway writes (lib/pipeline/finish.ts) carry them too.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
});

/** The most records one export holds (a bigger range: narrow the filters). */
export const EXPORT_MAX_RECORDS = 100_000;

/** Whether the console is on for this config: console.enabled, else on when admin.token or console.oidc is set. */
export function consoleEnabled(config: Config): boolean {
  return config.console.enabled ?? (config.admin.token !== null || config.console.oidc !== null);
}

export interface ConsoleDeps {
  config: Config;
  store: Store;
  admin: AdminApi;
  logger: Logger;
  /** Reloads the config from its file (serve's SIGHUP path); the problems, [] when it took effect. Undefined: not available (embedded). */
  reload: (() => Promise<string[]>) | undefined;
}

export class Console {
  readonly #d: ConsoleDeps;
  readonly #keys: SessionKeys;
  readonly #sso: OidcSignIn | null;
  readonly #assets = new Assets();
  /** Requests per minute per session (./session-limit.ts). */
  readonly #limit: SessionLimit;

  constructor(deps: ConsoleDeps) {
    this.#d = deps;
    this.#keys = new SessionKeys(deps.config);
    this.#limit = new SessionLimit(deps.config.console.requests_per_minute);
    this.#sso = deps.config.console.oidc === null ? null : new OidcSignIn(deps.config.console.oidc);
  }

  /** Whether `path` is the console's: /console, /console/..., or the SSO callback. */
  owns(path: string): boolean {
    return path === '/console' || path.startsWith('/console/') || (this.#sso !== null && path === this.#sso.callbackPath);
  }

  /** Whether the request carries a console session cookie at all. */
  hasCookie(req: IncomingMessage): boolean {
    return cookie(req, SESSION_COOKIE) !== undefined;
  }

  /**
   * The request's session: signed by this fleet, not expired, not signed out (the store's
   * revocation list); a write must also carry the session's CSRF token. 401 not_signed_in,
   * 403 csrf_failed. The request spends one of the session's requests_per_minute (unless
   * `spend` is false): 429 rate_limit_exceeded when the minute has none left.
   */
  async signedIn(req: IncomingMessage, spend = true): Promise<Session> {
    const s = this.#keys.session(cookie(req, SESSION_COOKIE));
    if (s === undefined || (await this.#d.store.isSessionRevoked(s.sid))) {
      throw new GatewayError('not_signed_in', 'Not signed in to the console (or the session ended); sign in again.');
    }
    if (isWrite(req.method) && !this.#keys.csrfOk(s.sid, req.headers['x-csrf-token'])) {
      throw new GatewayError('csrf_failed', 'A console write needs the session\'s CSRF token in the X-CSRF-Token header.');
    }
    if (spend) await this.#limit.spend(s.sid);
    return s;
  }

  async handle(req: IncomingMessage, res: ServerResponse, path: string, requestId: string): Promise<void> {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
    const method = req.method ?? 'GET';
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      sendJson(res, status, JSON.stringify(body), { ...SECURITY_HEADERS, 'x-request-id': requestId, ...headers });
    if (path === '/console') return this.#redirect(res, '/console/', requestId);
    if (path === '/console/' || path === '/console/index.html') return this.#static(req, res, 'index.html', requestId);
    if (path.startsWith('/console/assets/')) return this.#static(req, res, path.slice('/console/assets/'.length), requestId);
    if (this.#sso !== null && path === this.#sso.callbackPath) return this.#callback(req, res, requestId);
    if (path === '/console/sso') return this.#ssoStart(req, res, requestId);
    if (path === '/console/api/info') {
      onlyMethods(method, path, 'GET, HEAD');
      return send(200, { sso: this.#sso !== null, token: this.#d.config.admin.token !== null });
    }
    if (path === '/console/api/login') {
      onlyMethods(method, path, 'POST');
      return this.#login(req, res, requestId);
    }
    // Signing out is never refused for the session's rate.
    const session = await this.signedIn(req, path !== '/console/api/logout');
    if (path === '/console/api/session') {
      onlyMethods(method, path, 'GET, HEAD');
      return send(200, {
        actor: session.actor, role: session.role, account: session.account, csrf: this.#keys.csrf(session.sid),
        expires_at: new Date(session.expires).toISOString(),
      });
    }
    if (path === '/console/api/logout') {
      onlyMethods(method, path, 'POST');
      await this.#d.store.revokeSession(session.sid, this.#d.admin.auditEvent(session, 'POST /console/api/logout', '', req, requestId));
      this.#d.logger.info({ actor: session.actor, role: session.role }, 'console sign-out');
      res.writeHead(204, { ...SECURITY_HEADERS, 'x-request-id': requestId, 'set-cookie': setCookie(SESSION_COOKIE, '', 0, overTls(req, this.#d.config), 'Strict') });
      res.end();
      return;
    }
    const parts = path.split('/').slice(1);
    const decision = decide(session, method, parts);
    if (decision.scope === 'query' && session.role === 'member'
      && new URL(req.url ?? '', 'http://console').searchParams.get('account') !== session.account) throw outsideAccount(session);
    // A write with no store step of its own: its event is recorded before it acts.
    const audit = (action: string) => this.#d.store.appendAudit(this.#d.admin.auditEvent(session, action, '', req, requestId));
    if (path === '/console/api/config') {
      onlyMethods(method, path, 'GET, HEAD');
      return send(200, { yaml: YAML.stringify(redactConfig(this.#d.config)) });
    }
    if (path === '/console/api/config/check') {
      onlyMethods(method, path, 'POST');
      const { checkConfigText } = await import('../config/load.js');
      const { configWarnings } = await import('../config/cross-check.js');
      const text = (await this.#json(req, 1_048_576)).yaml;
      if (typeof text !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'yaml': expected a string.", { param: 'yaml' });
      await audit(`POST ${decision.route}`);
      const checked = await checkConfigText(text);
      return send(200, { ok: checked.problems.length === 0, problems: checked.problems, warnings: checked.config === undefined ? [] : configWarnings(checked.config) });
    }
    if (path === '/console/api/reload') {
      onlyMethods(method, path, 'POST');
      if (this.#d.reload === undefined) throw new GatewayError('unknown_url', 'Reload is available when the gateway runs as `tollgate serve --config FILE`.');
      await audit(`POST ${decision.route}`);
      const problems = await this.#d.reload();
      return send(200, { reloaded: problems.length === 0, problems });
    }
    if (path === '/console/api/usage/export') {
      onlyMethods(method, path, 'GET');
      return this.#export(req, res, requestId, session);
    }
    throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
  }

  #redirect(res: ServerResponse, to: string, requestId: string, cookies: string[] = []): void {
    res.writeHead(302, { ...SECURITY_HEADERS, location: to, 'x-request-id': requestId, 'content-length': '0', ...(cookies.length > 0 ? { 'set-cookie': cookies } : {}) });
    res.end();
  }

  async #static(req: IncomingMessage, res: ServerResponse, name: string, requestId: string): Promise<void> {
    onlyMethods(req.method ?? 'GET', `/console/${name}`, 'GET, HEAD');
    const a = await this.#assets.get(name);
    if (a === undefined) throw new GatewayError('unknown_url', `Unknown path: ${clip(`/console/assets/${name}`)}`);
    const zipped = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    const body = zipped ? a.gzip : a.body;
    const headers: Record<string, string> = {
      ...SECURITY_HEADERS, 'content-type': a.type, 'content-length': String(body.length), etag: a.etag, vary: 'accept-encoding', 'x-request-id': requestId,
      ...(zipped ? { 'content-encoding': 'gzip' } : {}),
    };
    if (name !== 'index.html') headers['cache-control'] = 'no-cache';
    if (req.headers['if-none-match'] === a.etag) {
      res.writeHead(304, { etag: a.etag, 'cache-control': headers['cache-control']!, 'x-request-id': requestId });
      res.end();
      return;
    }
    res.writeHead(200, headers);
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  async #json(req: IncomingMessage, limit: number): Promise<Record<string, unknown>> {
    if (!isJsonContentType(req.headers['content-type'])) {
      throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
    }
    const v = parseJsonBody(await readBody(req, limit, this.#d.config.server.body_timeout_ms));
    if (!isObject(v)) throw new GatewayError('invalid_type', "Invalid type for '(body)': expected a JSON object.", { param: '(body)' });
    return v;
  }

  /** POST /console/api/login {token}: the admin token signs in as admin; a wrong one is 401 and nothing else. */
  async #login(req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
    const body = await this.#json(req, 8192);
    const token = body.token;
    if (typeof token !== 'string' || this.#d.config.admin.token === null || !(await this.#d.admin.isToken(req, token))) {
      throw new GatewayError('invalid_api_key', 'Invalid admin token.');
    }
    const session = this.#keys.newSession({ actor: 'admin-token', role: 'admin', account: null }, this.#d.config.console.session_ttl_s);
    this.#d.logger.info({ actor: session.actor, role: session.role }, 'console sign-in with the admin token');
    await this.#d.store.appendAudit(this.#d.admin.auditEvent(session, 'POST /console/api/login', '', req, requestId));
    this.#signIn(req, res, session, requestId, undefined);
  }

  #signIn(req: IncomingMessage, res: ServerResponse, session: Session, requestId: string, redirect: string | undefined): void {
    const secure = overTls(req, this.#d.config);
    const cookies = [setCookie(SESSION_COOKIE, this.#keys.seal('session', session), this.#d.config.console.session_ttl_s, secure, 'Strict')];
    if (redirect !== undefined) {
      cookies.push(setCookie(FLOW_COOKIE, '', 0, secure, 'Lax'));
      return this.#redirect(res, redirect, requestId, cookies);
    }
    sendJson(res, 200, JSON.stringify({ actor: session.actor, role: session.role, account: session.account, csrf: this.#keys.csrf(session.sid), expires_at: new Date(session.expires).toISOString() }),
      { ...SECURITY_HEADERS, 'x-request-id': requestId, 'set-cookie': cookies[0]! } as Record<string, string>);
  }

  async #ssoStart(req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
    onlyMethods(req.method ?? 'GET', '/console/sso', 'GET');
    if (this.#sso === null) throw new GatewayError('unknown_url', 'Unknown path: /console/sso');
    let started;
    try {
      started = await this.#sso.start();
    } catch (err) {
      this.#d.logger.error({ err: (err as Error).message, issuer: this.#d.config.console.oidc?.issuer }, 'console SSO: the issuer could not be discovered');
      return this.#redirect(res, '/console/?sso=unavailable', requestId);
    }
    // Lax: the callback arrives as a top-level navigation from the issuer's site.
    const flowCookie = setCookie(FLOW_COOKIE, this.#keys.seal('flow', started.flow), FLOW_TTL_S, overTls(req, this.#d.config), 'Lax');
    this.#redirect(res, started.url, requestId, [flowCookie]);
  }

  async #callback(req: IncomingMessage, res: ServerResponse, requestId: string): Promise<void> {
    onlyMethods(req.method ?? 'GET', 'the SSO callback', 'GET');
    const flow = this.#keys.open('flow', cookie(req, FLOW_COOKIE)) as Flow | undefined;
    const clear = setCookie(FLOW_COOKIE, '', 0, overTls(req, this.#d.config), 'Lax');
    if (flow === undefined || typeof flow.exp !== 'number' || flow.exp < Date.now()) {
      this.#d.logger.warn('console SSO: a callback without a valid sign-in in progress (expired, or not started here)');
      return this.#redirect(res, '/console/?sso=failed', requestId, [clear]);
    }
    const url = req.url ?? '';
    const q = url.indexOf('?');
    let result;
    try {
      result = await this.#sso!.finish(q === -1 ? '' : url.slice(q), flow);
    } catch (err) {
      this.#d.logger.warn({ err: (err as Error).message }, 'console SSO: sign-in failed');
      return this.#redirect(res, '/console/?sso=failed', requestId, [clear]);
    }
    if ('refused' in result) {
      this.#d.logger.warn({ why: result.refused }, 'console SSO: sign-in refused');
      return this.#redirect(res, '/console/?sso=refused', requestId, [clear]);
    }
    const session = this.#keys.newSession(result, this.#d.config.console.session_ttl_s);
    this.#d.logger.info({ actor: session.actor, role: session.role, account: session.account }, 'console sign-in with SSO');
    await this.#d.store.appendAudit(this.#d.admin.auditEvent(session, 'GET /console/sso (sign-in)', session.account ?? '', req, requestId));
    this.#signIn(req, res, session, requestId, '/console/');
  }

  /**
   * GET /console/api/usage/export?format=csv|jsonl&<the records filters>: every matching record
   * (up to EXPORT_MAX_RECORDS), streamed page by page, each a bounded records page written
   * before the next is read, with a turn of the event loop between; each page after the first
   * spends one of the session's requests_per_minute (waiting for the next minute when none is left).
   */
  async #export(req: IncomingMessage, res: ServerResponse, requestId: string, session: Session): Promise<void> {
    const url = new URL(req.url ?? '', 'http://console');
    const format = url.searchParams.get('format') ?? 'csv';
    if (format !== 'csv' && format !== 'jsonl') {
      throw new GatewayError('unsupported_value', `Unsupported value for 'format': ${clip(JSON.stringify(format), 64)}. Supported values are: 'csv', 'jsonl'.`, { param: 'format' });
    }
    url.searchParams.delete('format');
    url.searchParams.set('limit', '1000');
    url.searchParams.delete('cursor');
    // The first page before the headers: a bad filter is still a 400 envelope.
    let page = await this.#d.admin.records(`${url.pathname}?${url.searchParams}`);
    res.writeHead(200, {
      ...SECURITY_HEADERS, 'x-request-id': requestId,
      'content-type': format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson; charset=utf-8',
      'content-disposition': `attachment; filename="usage.${format}"`,
    });
    let n = 0;
    let first = true;
    for (;;) {
      const chunk = format === 'csv' ? toCsv(page.records, first) : toJsonl(page.records);
      first = false;
      n += page.records.length;
      if (!res.write(chunk)) await drained(res);
      if (page.next_cursor === null || n >= EXPORT_MAX_RECORDS || res.destroyed) break;
      await nextTurn();
      if (!(await this.#limit.awaitPage(session.sid, res))) break;
      url.searchParams.set('cursor', page.next_cursor);
      page = await this.#d.admin.records(`${url.pathname}?${url.searchParams}`);
    }
    res.end();
  }
}

function onlyMethods(method: string, path: string, allow: string): void {
  if (!allow.split(', ').includes(method)) {
    throw new GatewayError('method_not_allowed', `Method ${clip(method, 16)} is not allowed on ${clip(path, 200)}; use ${allow}.`, { headers: { allow } });
  }
}

/** Resolves once `res` takes more (drain), or is gone (close). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}
