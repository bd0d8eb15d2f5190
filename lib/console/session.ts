// Console sessions (CONTRACT sections 12 and 21): signed and revocable. The cookie carries the
// session (id, actor, role, member account, expiry) with an HMAC-SHA256 over it; the key is
// derived from console.session_secret, else admin.token (secrets every instance of a fleet
// shares, so any instance accepts a session another signed), never from the OIDC client secret:
// that one is the identity provider's, and its administrators know it. `check` refuses an SSO
// console with neither (lib/config/secrets.ts), and an empty or short one. Signing out revokes
// the session id in the gateway's store (Store.revokeSession: memory or Redis, shared by every
// instance and announced to them), and every request checks it there. With neither secret no
// one can sign in at all (check refuses such a console): the key is then random, never empty.
//
// The CSRF token is a second HMAC of the session id: the page reads it from
// GET /console/api/session and sends it in X-CSRF-Token on every write; a cross-site form can
// neither read it nor set the header (and SameSite=Strict keeps the cookie off such requests).

import { createHmac, hkdfSync, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Config } from '../config/types.js';
import type { Principal, Role } from '../admin/permissions.js';

export const SESSION_COOKIE = 'tg_console';
/** The SSO round trip's state, nonce and PKCE verifier, for the callback (10 minutes). */
export const FLOW_COOKIE = 'tg_console_flow';
export const FLOW_TTL_S = 600;
/** Session ids in the store's revocation list carry this prefix (dashboard JWT sessions do not). */
const SID_PREFIX = 'console:';

export interface Session extends Principal {
  sid: string;
  /** Unix ms. */
  expires: number;
}

const b64 = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

export class SessionKeys {
  readonly #key: Buffer;

  constructor(config: Config) {
    const secret = config.console.session_secret ?? config.admin.token;
    const ikm = secret === null || secret === '' ? randomBytes(32) : Buffer.from(secret, 'utf8');
    this.#key = Buffer.from(hkdfSync('sha256', ikm, 'tollgate-console', 'session-signing', 32));
  }

  #mac(label: string, data: string): string {
    return createHmac('sha256', this.#key).update(`${label}\n${data}`).digest('base64url');
  }

  /** A signed value: base64url(JSON).mac. */
  seal(label: string, value: unknown): string {
    const body = b64(JSON.stringify(value));
    return `${body}.${this.#mac(label, body)}`;
  }

  /** The value sealed under `label`, or undefined when the signature does not match. */
  open(label: string, sealed: string | undefined): unknown {
    if (sealed === undefined || sealed.length > 4096) return undefined;
    const dot = sealed.indexOf('.');
    if (dot < 1) return undefined;
    const body = sealed.slice(0, dot);
    const mac = Buffer.from(sealed.slice(dot + 1));
    const want = Buffer.from(this.#mac(label, body));
    if (mac.length !== want.length || !timingSafeEqual(mac, want)) return undefined;
    try { return JSON.parse(Buffer.from(body, 'base64url').toString('utf8')); } catch { return undefined; }
  }

  newSession(p: Omit<Principal, 'sid'>, ttlS: number): Session {
    return { ...p, sid: `${SID_PREFIX}${randomUUID()}`, expires: Date.now() + ttlS * 1000 };
  }

  /** The session a cookie value holds, if signed by us, well formed and not expired (revocation: the caller asks the store). */
  session(cookie: string | undefined): Session | undefined {
    const v = this.open('session', cookie) as Partial<Session> | undefined;
    if (typeof v !== 'object' || v === null) return undefined;
    const roles: Role[] = ['admin', 'viewer', 'member'];
    if (typeof v.sid !== 'string' || !v.sid.startsWith(SID_PREFIX) || typeof v.actor !== 'string' || !roles.includes(v.role as Role)) return undefined;
    if (typeof v.expires !== 'number' || v.expires <= Date.now()) return undefined;
    if (v.role === 'member' ? typeof v.account !== 'string' : v.account !== null) return undefined;
    return { sid: v.sid, actor: v.actor, role: v.role as Role, account: v.account ?? null, expires: v.expires };
  }

  csrf(sid: string): string {
    return this.#mac('csrf', sid);
  }

  /** Whether `given` is the session's CSRF token. */
  csrfOk(sid: string, given: string | string[] | undefined): boolean {
    if (typeof given !== 'string') return false;
    const a = Buffer.from(given);
    const b = Buffer.from(this.csrf(sid));
    return a.length === b.length && timingSafeEqual(a, b);
  }
}

/** One cookie's value from the Cookie header. */
export function cookie(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Whether the request came over TLS (directly, or as a trusted proxy says): then cookies are Secure. */
export function overTls(req: IncomingMessage, config: Config): boolean {
  if ((req.socket as { encrypted?: boolean }).encrypted === true) return true;
  return config.server.trust_proxy !== false && config.server.trust_proxy !== 0 && req.headers['x-forwarded-proto'] === 'https';
}

/** A Set-Cookie value: HttpOnly, Path=/, Secure behind TLS; `maxAge` 0 deletes it. */
export function setCookie(name: string, value: string, maxAgeS: number, secure: boolean, sameSite: 'Strict' | 'Lax'): string {
  return `${name}=${value}; Path=/; HttpOnly; SameSite=${sameSite}; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;
}
