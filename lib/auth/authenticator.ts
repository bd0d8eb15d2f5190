// Who is calling, from the Authorization header: a developer key (`<key_prefix>_...`), looked
// up in the store by its SHA-256 digest, or a dashboard JWT. Lookups are cached briefly
// (lru-cache); a revocation on any instance evicts at once through the store's revocation
// feed, and the short TTL bounds the delay even if that feed is interrupted.
//
// A developer key's own controls (CONTRACT section 8) are compiled into its cached principal;
// each request then checks its expiry and the caller's address against it without a store read.
// A PATCH or a rotation on any instance is announced through the same feed (key-changed), so
// caches drop the key at once; the TTL bounds the delay if the feed misses it. A key still in
// use is looked up again before its entry runs out (REFRESH_AHEAD_MS), in the background and in
// one round trip sent with the request's own store commands, so no request waits for the
// lookup while the key keeps being used. A lookup under way when a key revocation or change is
// announced is not cached (its answer may predate it); a session revocation does not matter to it.
//
// When a key was last used: a Redis store records it with the request's hold (the same script);
// other uses (requests that hold nothing, refused ones, the memory store) are collected here and
// written in one batch per second, not once per request. A batch leaves out uses noted in its
// last half second (the next one takes them), so that a request's hold, which follows its
// authentication by a round trip or so, drops its use before any batch would write it.
//
// A store that cannot answer rejects with StoreUnavailableError (503). With store.on_error:
// open, a developer key is then still accepted when this instance saw it resolve in the last
// 10 minutes, or, never seen (at boot), when the config's own accounts list it: it stands for
// that config account on the config's plan until the store answers again. Either fallback is
// dropped when the store refuses the key, when a revocation or a change of the key (its
// controls, its digest) is announced, and, for a rotated-out digest, as soon as it is seen in
// its grace; the config's keys are checked against the store after each seed. When the store
// says announcements may have been missed (its subscription was cut), the cache and the keys
// seen recently are dropped and the config's keys checked again.

import type { IncomingMessage } from 'node:http';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lru.js';
import type { Config } from '../config/types.js';
import { GatewayError, StoreUnavailableError, retryAfterHeaders } from '../errors.js';
import type { Logger } from '../observe/log.js';
import type { AccountRecord, KnownKey, Revocation, Store } from '../store/types.js';
import { looksLikeJwt } from './jwt-common.js';
import type { JwtVerifier } from './jwt.js';
import { bearer } from './bearer.js';
import { keyIdOf, sha256Hex } from '../store/digest.js';
import { addressReader, type AddressOf } from './client-address.js';
import { compilePolicy } from './controls.js';
import type { Principal } from './principal.js';

/**
 * How long a looked-up key (or its absence) or a session's state may be served from cache:
 * changes are announced at once; this bounds the delay when an announcement is lost, so that a
 * PATCH is in force everywhere within a second.
 */
export const CACHE_TTL_MS = 750;
/** A cached key used with less than this left of its entry is looked up again in the background. */
export const REFRESH_AHEAD_MS = 375;
/** How often the times keys were last used are written (one batch for all keys). */
export const TOUCH_FLUSH_MS = 1000;
/** With store.on_error: open, how long a principal stays usable while the store is down. */
export const KNOWN_TTL_MS = 10 * 60_000;
/** An account on a plan the config lacks is logged at most this often per plan. */
const MISSING_PLAN_LOG_MS = 60_000;

/** A lookup's verdict: the principal (undefined: not a usable key) and how long to cache it. */
interface Found {
  principal: Principal | undefined;
  ttl: number;
}

function invalidKey(): GatewayError {
  return new GatewayError('invalid_api_key', 'Invalid API key. Send "Authorization: Bearer <key>" with a valid key.');
}

/** Requests the gateway makes itself for a principal (batch lines): authenticate() answers with it. */
const DELEGATED = new WeakMap<IncomingMessage, Principal>();

/** Marks `req` (made in-process, never a client's) as `principal`'s. */
export function delegate(req: IncomingMessage, principal: Principal): void {
  DELEGATED.set(req, principal);
}

export class Authenticator {
  readonly #store: Store;
  readonly #config: Config;
  readonly #prefix: string;
  /** Made by start() when the config sets auth.jwt: jose is imported only then. */
  #jwt: JwtVerifier | null = null;
  readonly #keys = new LRUCache<string, Principal | 'none'>({ ...entryBound(50_000), ttl: CACHE_TTL_MS });
  readonly #revokedSessions = new LRUCache<string, boolean>({ ...entryBound(50_000), ttl: CACHE_TTL_MS });
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
  /** Keys used since the last flush: key id -> account, last time, and when first noted. */
  #used = new Map<string, { account: string; at: number; noted: number }>();
  #flushTimer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();
  /** Counts announced key revocations and changes: a lookup that saw it move is not cached. */
  #epoch = 0;
  /** Digests being looked up again in the background (one lookup each at a time). */
  readonly #refreshing = new Set<string>();
  /** Principals of rotated-out digests, cached for what is left of their grace: never refreshed. */
  readonly #graced = new WeakSet<Principal>();
  /** The client's address as server.trust_proxy says to read it (for keys with allowed_ips). */
  readonly #addressOf: AddressOf;

  constructor(store: Store, config: Config, seeded: () => boolean = () => true, logger?: Logger) {
    this.#store = store;
    this.#config = config;
    this.#logger = logger;
    this.#prefix = `${config.service.key_prefix}_`;
    this.#addressOf = addressReader(config.server.trust_proxy);
    this.#known = config.store.on_error === 'open' ? new LRUCache({ ...entryBound(50_000), ttl: KNOWN_TTL_MS }) : null;
    this.#configKeys = configKeys(config);
    this.#open = config.store.on_error === 'open';
    this.#seeded = seeded;
    this.#unsubscribe = store.onRevoke((r: Revocation) => {
      if (r.kind === 'key-changed') {
        // Its controls or its digest changed: what an outage would fall back to is out of date.
        this.#epoch++;
        this.#keys.delete(r.digest);
        this.#known?.delete(r.digest);
        this.#configKeys.delete(r.digest);
      } else if (r.kind === 'key') {
        this.#epoch++;
        this.#keys.delete(r.digest);
        this.#known?.delete(r.digest);
        this.#configKeys.delete(r.digest);
      } else if (r.kind === 'missed') {
        // Announcements may have been lost: nothing learnt before is trusted as it was. The
        // config's keys are checked again (the store has just answered).
        this.#epoch++;
        this.#keys.clear();
        this.#known?.clear();
        this.#revokedSessions.clear();
        void this.checkConfigKeys();
      } else {
        this.#revokedSessions.set(r.sid, true);
      }
    });
  }

  /**
   * Makes the dashboard JWT verifier when the config sets auth.jwt (throws, as the config's
   * check does, when its key is unusable). Awaited by GatewayState.start(), before the state
   * serves a request.
   */
  async start(): Promise<void> {
    const jwt = this.#config.auth.jwt;
    if (jwt === null) return;
    const { JwtVerifier } = await import('./jwt.js');
    this.#jwt = new JwtVerifier(jwt);
  }

  /**
   * The principal behind an Authorization header; throws 401 (or 422 TokenShapeError). With the
   * request, a developer key's expiry (401 key_expired) and address allowlist (403
   * ip_not_allowed) are checked too, and its use recorded.
   */
  async authenticate(header: string | undefined, req?: IncomingMessage): Promise<Principal> {
    // A batch line, sent in-process with its owner's identity (lib/batch/runner.ts).
    const delegated = req === undefined ? undefined : DELEGATED.get(req);
    if (delegated !== undefined) return delegated;
    const token = bearer(header);
    if (token === undefined) throw invalidKey();
    if (token.startsWith(this.#prefix)) {
      const principal = await this.#developerKey(token);
      if (req !== undefined) this.#checkKey(principal, req);
      return principal;
    }
    if (this.#jwt !== null && looksLikeJwt(token)) return this.#dashboard(this.#jwt, token);
    throw invalidKey();
  }

  #checkKey(principal: Principal, req: IncomingMessage): void {
    const key = principal.key;
    if (key === undefined) return;
    const now = Date.now();
    if (key.expiresAt !== null && now >= key.expiresAt) {
      throw new GatewayError('key_expired', `This API key expired at ${new Date(key.expiresAt).toISOString()}.`);
    }
    if (key.ips !== null) {
      // No address (an X-Forwarded-For entry that must be read is not one) matches nothing.
      const ip = this.#addressOf(req);
      if (ip === undefined || !key.ips(ip)) throw new GatewayError('ip_not_allowed', 'This API key may not be used from this address.');
    }
    this.#touch(key.id, principal.accountId, now);
  }

  /** Notes a key's use; written with every other key's in the next batch. */
  #touch(id: string, account: string, at: number): void {
    const used = this.#used.get(id);
    if (used === undefined) this.#used.set(id, { account, at, noted: at });
    else if (used.at < at) used.at = at;
    this.#arm();
  }

  #arm(): void {
    if (this.#flushTimer !== undefined) return;
    this.#flushTimer = setTimeout(() => { this.#flushTimer = undefined; this.#flushDue(); }, TOUCH_FLUSH_MS);
    this.#flushTimer.unref();
  }

  /** The timer's batch: uses noted at least half a period ago; the rest wait for the next. */
  #flushDue(): void {
    const due = Date.now() - TOUCH_FLUSH_MS / 2;
    const uses: Array<{ id: string; account: string; at: number }> = [];
    for (const [id, u] of this.#used) {
      if (u.noted > due) continue;
      uses.push({ id, account: u.account, at: u.at });
      this.#used.delete(id);
    }
    if (this.#used.size > 0) this.#arm();
    // `void`: #write never rejects (a failed write is logged there and dropped), and a timer has
    // no caller to await it; flushUses awaits the same chain.
    if (uses.length > 0) void this.#write(uses);
  }

  /**
   * The principal's request was held, and the store's hold recorded its key's use at a time at
   * or after `since`: a use noted before that need not be written again.
   */
  held(principal: Principal, since: number): void {
    const key = principal.key;
    if (key === undefined || !this.#store.holdRecordsKeyUse) return;
    const used = this.#used.get(key.id);
    if (used !== undefined && used.at <= since) this.#used.delete(key.id);
  }

  /** Writes the pending last-used times now (a failed write is dropped: it is not money). */
  flushUses(): Promise<void> {
    if (this.#used.size === 0) return this.#flushing;
    const uses = [...this.#used].map(([id, u]) => ({ id, account: u.account, at: u.at }));
    this.#used = new Map();
    return this.#write(uses);
  }

  #write(uses: ReadonlyArray<{ id: string; account: string; at: number }>): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#store.touchKeys(uses)).catch((err: unknown) => {
      this.#logger?.debug({ err: (err as Error).message }, 'last-used times of keys not written');
    });
    return this.#flushing;
  }

  /** The principal of the developer key whose digest is `digest` (a batch's owner, after a restart); throws 401 as for the key. */
  keyPrincipal(digest: string): Promise<Principal> {
    return this.#developerKey('', digest);
  }

  async #developerKey(token: string, digest = sha256Hex(token)): Promise<Principal> {
    const cached = this.#keys.get(digest);
    if (cached === 'none') throw invalidKey();
    if (cached !== undefined) {
      if (this.#keys.getRemainingTTL(digest) < REFRESH_AHEAD_MS && !this.#graced.has(cached)) this.#refresh(digest, cached);
      return cached;
    }
    const epoch = this.#epoch;
    let found: Found;
    try {
      found = await this.#lookUp(digest);
    } catch (err) {
      if (err instanceof StoreUnavailableError) {
        const fallback = this.#known?.get(digest) ?? (this.#open ? this.#configKeys.get(digest) : undefined);
        if (fallback !== undefined) return fallback;
      }
      throw err;
    }
    const principal = found.principal;
    if (principal === undefined && this.#configKeys.has(digest) && !this.#seeded()) {
      // The store is back but does not hold the config's accounts yet: not the caller's fault.
      throw new StoreUnavailableError(new Error("the config's accounts are not seeded yet"));
    }
    this.#remember(digest, found, epoch === this.#epoch);
    if (principal === undefined) throw invalidKey();
    return principal;
  }

  /**
   * What the store says of a digest now, and how long that may be cached: a rotated-out digest
   * no longer than its grace.
   */
  async #lookUp(digest: string, known?: KnownKey): Promise<Found> {
    const found = await this.#store.keyWithAccount(digest, known);
    const record = found?.key;
    const now = Date.now();
    const current = record !== undefined && record.digest === digest;
    const grace = record?.previous?.digest === digest ? record.previous.until - now : 0;
    if (record === undefined || record.revoked_at !== null || (!current && grace <= 0)) return { principal: undefined, ttl: CACHE_TTL_MS };
    const principal = this.#principal(record.account, found!.account, record.id);
    if (principal === undefined) return { principal, ttl: CACHE_TTL_MS };
    principal.key = compilePolicy(record, found!.team);
    if (current || grace >= CACHE_TTL_MS) return { principal, ttl: CACHE_TTL_MS };
    // Served no longer than its grace, and not looked up again: the grace only shrinks.
    this.#graced.add(principal);
    return { principal, ttl: Math.max(1, grace) };
  }

  /**
   * Caches a lookup's verdict (unless a revocation or change was announced while it was under
   * way: its answer may predate it). A refusal is acted on either way: an announcement cannot
   * make a "no" stale, and not even an outage brings the key back.
   */
  #remember(digest: string, found: Found, cache: boolean): void {
    const principal = found.principal;
    // A digest on its way out (rotated, in its grace) is no more an outage's fallback than one
    // refused: the outage could outlast the grace.
    if (principal === undefined || this.#graced.has(principal)) {
      this.#known?.delete(digest);
      this.#configKeys.delete(digest);
    }
    if (!cache) return;
    this.#keys.set(digest, principal ?? 'none', { ttl: found.ttl });
    if (principal !== undefined && !this.#graced.has(principal)) this.#known?.set(digest, principal);
  }

  /**
   * Checks the config's keys against the store (after each seed): one the store revoked or
   * rotated out is no longer an outage's fallback, and one it knows is served in an outage with
   * what the store says of it (its account's plan, its controls) rather than the config's
   * account and plan alone. A store that cannot answer leaves them as they are.
   */
  async checkConfigKeys(): Promise<void> {
    if (!this.#open) return; // the fallbacks serve store.on_error: open alone
    await Promise.all([...this.#configKeys.keys()].map(async (digest) => {
      const epoch = this.#epoch;
      let found: Found;
      try {
        found = await this.#lookUp(digest);
      } catch {
        return;
      }
      if (epoch !== this.#epoch || !this.#configKeys.has(digest)) return;
      if (found.principal === undefined || this.#graced.has(found.principal)) this.#configKeys.delete(digest);
      else this.#configKeys.set(digest, found.principal);
    }));
  }

  /**
   * Looks a cached key up again while its entry still serves. The store commands go out now,
   * with the request's own (one write to Redis); a failure leaves the entry to run out, and the
   * next request after that looks the key up itself, with the usual errors.
   */
  #refresh(digest: string, was: Principal): void {
    if (was.key === undefined || this.#refreshing.has(digest)) return;
    const known = { id: was.key.id, account: was.accountId };
    this.#refreshing.add(digest);
    const epoch = this.#epoch;
    this.#lookUp(digest, known).then((found) => {
      // The config's accounts not seeded (a store emptied and not yet seeded again): not a
      // verdict on the key; its entry runs out and the next request decides.
      if (found.principal === undefined && this.#configKeys.has(digest) && !this.#seeded()) return;
      // A slow lookup whose entry ran out, and was made again by a request's own lookup
      // meanwhile: that answer is newer.
      const now = this.#keys.peek(digest);
      this.#remember(digest, found, epoch === this.#epoch && (now === undefined || now === was));
    }, (err: unknown) => {
      this.#logger?.debug({ err: (err as Error).message }, 'a cached key was not looked up again');
    }).finally(() => this.#refreshing.delete(digest)).catch(() => undefined);
  }

  async #dashboard(jwt: JwtVerifier, token: string): Promise<Principal> {
    const identity = await jwt.verify(token);
    if (identity.sessionId !== undefined && (await this.#sessionRevoked(identity.sessionId))) {
      throw new GatewayError('session_revoked', 'This dashboard session was revoked; sign in again.');
    }
    const account = await this.#store.getAccount(identity.accountId);
    const principal = this.#principal(identity.accountId, account, identity.sessionId === undefined ? 'jwt' : `session_${identity.sessionId}`);
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

  #principal(accountId: string, account: AccountRecord | undefined, credentialId: string): Principal | undefined {
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
    clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    void this.flushUses();
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
