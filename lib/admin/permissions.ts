// The one permission table of the admin API and the console API (CONTRACT section 12): for
// each (route, method), the roles that may use it and how a member's account is found. Every
// request through /admin or /console/api is checked here on the server before its handler
// runs; the page only hides what it may not do. Routes the table does not name (added by
// other features) are read-only for viewers and closed to members: a new route is never open
// by accident.

import { GatewayError, clip } from '../errors.js';

export type Role = 'admin' | 'viewer' | 'member';

/** Who is asking: an SSO user, a token sign-in, or the admin token itself ("admin-token"). */
export interface Principal {
  actor: string;
  role: Role;
  /** A member's account; null for admin and viewer. */
  account: string | null;
  /** The console session's id (undefined for the Bearer admin token). */
  sid?: string;
}

/**
 * Where a member's account is named: `path` (the route's {id} is an account id), `key` (the
 * route's {id} is a key id: its account is looked up), `query` (the `account` query
 * parameter, required), `none` (members may not use the route).
 */
export type Scope = 'path' | 'key' | 'query' | 'none';

export interface Permission {
  /** Route template, e.g. "/admin/accounts/{id}/credits". */
  route: string;
  methods: readonly string[];
  roles: readonly Role[];
  scope: Scope;
}

const R = ['GET', 'HEAD'] as const;
const ALL: readonly Role[] = ['admin', 'viewer', 'member'];
const STAFF: readonly Role[] = ['admin', 'viewer'];
const ADMIN_MEMBER: readonly Role[] = ['admin', 'member'];

export const PERMISSIONS: readonly Permission[] = [
  { route: '/admin/accounts', methods: R, roles: STAFF, scope: 'none' },
  { route: '/admin/accounts', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/admin/accounts/{id}', methods: R, roles: ALL, scope: 'path' },
  { route: '/admin/accounts/{id}/credits', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/admin/accounts/{id}/keys', methods: R, roles: ALL, scope: 'path' },
  { route: '/admin/accounts/{id}/keys', methods: ['POST'], roles: ADMIN_MEMBER, scope: 'path' },
  { route: '/admin/accounts/{id}/teams', methods: R, roles: ALL, scope: 'path' },
  { route: '/admin/accounts/{id}/teams', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/admin/teams/{id}', methods: ['PATCH', 'DELETE'], roles: ['admin'], scope: 'none' },
  { route: '/admin/keys/{id}', methods: R, roles: ALL, scope: 'key' },
  { route: '/admin/keys/{id}', methods: ['PATCH', 'DELETE'], roles: ADMIN_MEMBER, scope: 'key' },
  { route: '/admin/keys/{id}/rotate', methods: ['POST'], roles: ADMIN_MEMBER, scope: 'key' },
  { route: '/admin/sessions/{id}/revoke', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/admin/upstreams', methods: R, roles: STAFF, scope: 'none' },
  { route: '/admin/batches', methods: R, roles: STAFF, scope: 'none' },
  { route: '/admin/batches/{id}', methods: R, roles: STAFF, scope: 'none' },
  { route: '/admin/batches/{id}/cancel', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/admin/usage', methods: R, roles: ALL, scope: 'query' },
  { route: '/admin/usage/records', methods: R, roles: ALL, scope: 'query' },
  { route: '/admin/usage/hourly', methods: R, roles: ALL, scope: 'query' },
  { route: '/admin/usage/top', methods: R, roles: ALL, scope: 'query' },
  { route: '/admin/audit', methods: R, roles: STAFF, scope: 'none' },
  { route: '/admin/alerts', methods: R, roles: STAFF, scope: 'none' },
  { route: '/console/api/config', methods: R, roles: STAFF, scope: 'none' },
  // Checking a YAML changes nothing (a POST only for its body): viewers may.
  { route: '/console/api/config/check', methods: ['POST'], roles: STAFF, scope: 'none' },
  { route: '/console/api/reload', methods: ['POST'], roles: ['admin'], scope: 'none' },
  { route: '/console/api/usage/export', methods: ['GET'], roles: ALL, scope: 'query' },
];

/** Whether the method changes something: such requests are audited and need the CSRF token. */
export function isWrite(method: string | undefined): boolean {
  return method !== 'GET' && method !== 'HEAD';
}

/** The route template matching a path's segments ({id} for any one segment), else undefined. */
export function matches(route: string, parts: readonly string[]): string | undefined {
  const t = route.split('/').slice(1);
  if (t.length !== parts.length) return undefined;
  let id = '';
  for (let i = 0; i < t.length; i++) {
    if (t[i] === '{id}') id = parts[i]!;
    else if (t[i] !== parts[i]) return undefined;
  }
  return id;
}

export interface Decision {
  /** The route template (for the audit log's action), or the path itself when unlisted. */
  route: string;
  /** The {id} segment of the route, if any (the audit target for account and key routes). */
  id: string;
  scope: Scope;
}

/**
 * Decides a request: throws 403 forbidden when the principal's role may not use the route, and
 * says how a member's account must then be checked (by the caller, who can read keys).
 * `parts` are the decoded path segments ("admin", "accounts", ...).
 */
export function decide(p: Principal, method: string | undefined, parts: readonly string[]): Decision {
  const m = method ?? 'GET';
  for (const rule of PERMISSIONS) {
    const id = matches(rule.route, parts);
    if (id === undefined || !rule.methods.includes(m)) continue;
    if (!rule.roles.includes(p.role)) throw forbidden(p, m, rule.route);
    return { route: rule.route, id, scope: rule.scope };
  }
  const route = `/${parts.join('/')}`;
  // Unlisted: admins all, viewers reads, members nothing.
  if (p.role === 'admin' || (p.role === 'viewer' && !isWrite(m))) return { route, id: '', scope: 'none' };
  throw forbidden(p, m, route);
}

export function forbidden(p: Principal, method: string, route: string): GatewayError {
  const who = p.role === 'member' ? `a member of account '${clip(p.account ?? '', 128)}'` : `the ${p.role} role`;
  return new GatewayError('forbidden', `Forbidden: ${who} may not ${method} ${route}.`);
}

/** A member asking about another account (or without naming theirs where the route needs it). */
export function outsideAccount(p: Principal): GatewayError {
  return new GatewayError('forbidden', `Forbidden: a member of account '${clip(p.account ?? '', 128)}' sees and manages only that account.`);
}
