// Who is calling, from the Authorization header: a developer key (`<key_prefix>_...`), looked
// up in the store by its SHA-256 digest, or a dashboard JWT. Lookups are cached briefly
// (lru-cache); a revocation on any instance evicts at once through the store's revocation
// feed, and the short TTL bounds the delay even if that feed is interrupted.
//
// A store that cannot answer rejects with StoreUnavailableError (503). With store.on_error:
// open, a developer key is then still accepted when this instance saw it resolve in the last
// 10 minutes, or, never seen (at boot), when the config's own accounts list it: it stands for
// that config account on the config's plan until the store answers again.

import { LRUCache } from 'lru-cache';
import type { Config } from '../config/types.js';
import { GatewayError, StoreUnavailableError, retryAfterHeaders } from '../errors.js';
import type { Logger } from '../observe/log.js';
import type { Revocation, Store } from '../store/types.js';
import { JwtVerifier, looksLikeJwt } from './jwt.js';
import { bearer, keyIdOf, sha256Hex } from './keys.js';
import type { Principal } from './principal.js';

/** How long a looked-up key (or its absence) or a session's state may be served from cache. */
export const CACHE_TTL_MS = 1000;
/** With store.on_error: open, how long a principal stays usable while the store is down. */
export const KNOWN_TTL_MS = 10 * 60_000;
/** An account on a plan the config lacks is logged at most this often per plan. */
const MISSING_PLAN_LOG_MS = 60_000;

function invalidKey(): GatewayError {
  return new GatewayError('invalid_api_key', 'Invalid API key. Send "Authorization: Bearer <key>" with a valid key.');
}

export class Authenticator {
  readonly #store: Store;
  readonly #config: Config;
  readonly #prefix: string;
  readonly #jwt: JwtVerifier | null;
  readonly #keys = new LRUCache<string, Principal | 'none'>({ max: 50_000, ttl: CACHE_TTL_MS });
  readonly #revokedSessions = new LRUCache<string, boolean>({ max: 50_000, ttl: CACHE_TTL_MS });
  /**
   * store.on_error: open — the last principal each credential resolved to, so callers seen
   * recently keep being served while the store is down (revocations are honoured as received).
   */
  readonly #known: LRUCache<string, Principal> | null;
  /** The config's own keys by digest: store.on_error: open serves them while the store is down. */
  readonly #configKeys: Map<string, Principal>;
  readonly #open: boolean;
  /** Whether the config's accounts are in the store yet (see GatewayState). */
  readonly #seeded: () => boolean;
  readonly #unsubscribe: () => void;
  readonly #logger: Logger | undefined;
  /** When each missing plan was last logged. */
  readonly #missingPlanLogged = new Map<string, number>();

  constructor(store: Store, config: Config, seeded: () => boolean = () => true, logger?: Logger) {
    this.#store = store;
    this.#config = config;
    this.#logger = logger;
    this.#prefix = `${config.service.key_prefix}_`;
    this.#jwt = config.auth.jwt === null ? null : new JwtVerifier(config.auth.jwt);
    this.#known = config.store.on_error === 'open' ? new LRUCache({ max: 50_000, ttl: KNOWN_TTL_MS }) : null;
    this.#configKeys = configKeys(config);
    this.#open = config.store.on_error === 'open';
    this.#seeded = seeded;
    this.#unsubscribe = store.onRevoke((r: Revocation) => {
      if (r.kind === 'key') {
        this.#keys.delete(r.digest);
        this.#known?.delete(r.digest);
        this.#configKeys.delete(r.digest);
      } else {
        this.#revokedSessions.set(r.sid, true);
      }
    });
  }

  /** The principal behind an Authorization header; throws 401 (or 422 TokenShapeError). */
  async authenticate(header: string | undefined): Promise<Principal> {
    const token = bearer(header);
    if (token === undefined) throw invalidKey();
    if (token.startsWith(this.#prefix)) return this.#developerKey(token);
    if (this.#jwt !== null && looksLikeJwt(token)) return this.#dashboard(this.#jwt, token);
    throw invalidKey();
  }

  async #developerKey(token: string): Promise<Principal> {
    const digest = sha256Hex(token);
    const cached = this.#keys.get(digest);
    if (cached === 'none') throw invalidKey();
    if (cached !== undefined) return cached;
    let principal: Principal | undefined;
    try {
      const record = await this.#store.keyByDigest(digest);
      principal = record === undefined || record.revoked_at !== null
        ? undefined
        : await this.#principal(record.account, record.id);
    } catch (err) {
      if (err instanceof StoreUnavailableError) {
        const fallback = this.#known?.get(digest) ?? (this.#open ? this.#configKeys.get(digest) : undefined);
        if (fallback !== undefined) return fallback;
      }
      throw err;
    }
    if (principal === undefined && this.#configKeys.has(digest) && !this.#seeded()) {
      // The store is back but does not hold the config's accounts yet: not the caller's fault.
      throw new StoreUnavailableError(new Error("the config's accounts are not seeded yet"));
    }
    this.#keys.set(digest, principal ?? 'none');
    if (principal === undefined) {
      // The store said no: not even an outage brings this key back.
      this.#known?.delete(digest);
      this.#configKeys.delete(digest);
      throw invalidKey();
    }
    this.#known?.set(digest, principal);
    return principal;
  }

  async #dashboard(jwt: JwtVerifier, token: string): Promise<Principal> {
    const identity = await jwt.verify(token);
    if (identity.sessionId !== undefined && (await this.#sessionRevoked(identity.sessionId))) {
      throw new GatewayError('session_revoked', 'This dashboard session was revoked; sign in again.');
    }
    const principal = await this.#principal(identity.accountId, identity.sessionId === undefined ? 'jwt' : `session_${identity.sessionId}`);
    if (principal === undefined) throw invalidKey();
    return principal;
  }

  async #sessionRevoked(sid: string): Promise<boolean> {
    const cached = this.#revokedSessions.get(sid);
    if (cached !== undefined) return cached;
    const revoked = await this.#store.isSessionRevoked(sid);
    this.#revokedSessions.set(sid, revoked);
    return revoked;
  }

  async #principal(accountId: string, credentialId: string): Promise<Principal | undefined> {
    const account = await this.#store.getAccount(accountId);
    if (account === undefined) return undefined;
    // hasOwn: a stored plan named like an Object.prototype member is not a plan either.
    if (!Object.hasOwn(this.#config.plans, account.plan)) throw this.#missingPlan(accountId, account.plan);
    return { accountId, planName: account.plan, plan: this.#config.plans[account.plan]!, credentialId };
  }

  /**
   * An account whose plan the config does not define (a config started without a plan the store
   * still uses): the operator must fix the config, the caller may retry later. Never a 500.
   */
  #missingPlan(accountId: string, plan: string): GatewayError {
    const now = Date.now();
    const last = this.#missingPlanLogged.get(plan);
    if (last === undefined || now - last >= MISSING_PLAN_LOG_MS) {
      this.#missingPlanLogged.set(plan, now);
      this.#logger?.error({ account: accountId, plan },
        `account '${accountId}' is on plan '${plan}', which the config does not define; its requests answer 503 until the plan is configured again`);
    }
    return new GatewayError('service_unavailable', 'This account cannot be served right now; retry later.', {
      headers: retryAfterHeaders(30_000),
    });
  }

  close(): void {
    this.#unsubscribe();
  }
}

function configKeys(config: Config): Map<string, Principal> {
  const keys = new Map<string, Principal>();
  for (const a of config.accounts) {
    const plan = config.plans[a.plan];
    if (plan === undefined) continue;
    for (const digest of [...a.keys.map(sha256Hex), ...a.key_sha256.map((d) => d.toLowerCase())]) {
      keys.set(digest, { accountId: a.id, planName: a.plan, plan, credentialId: keyIdOf(digest) });
    }
  }
  return keys;
}
