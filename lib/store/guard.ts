// The store as the gateway uses it, whatever the implementation behind it. Two promises hold at
// this one place instead of at every call site:
// - a fault of the store itself (unreachable, slower than store.timeout_ms, failing to write)
//   rejects with StoreUnavailableError, which every route answers as 503 service_unavailable
//   with Retry-After; a bad argument stays what it is (a bug: 500, detail in the log);
// - a hold release that fails is retried in the background until it lands (./retry.ts), so it
//   resolves once the release is done or queued. A hold that fails is released the same way:
//   a store that answers late (Redis stalled, not gone) may still apply it after the request
//   got its 503, and it would lock the account's credits until its TTL ran out. A hold that
//   Redis refused outright is not (RetryQueue.undo): during a failover under load those
//   refusals come by the ten thousand, and releasing each filled the retry queue past its
//   bound, which dropped the oldest entries: the releases of the holds that had landed.
// And a third: a settle (a debit) whose outcome is unknown is resolved before the request is
// answered (CONTRACT section 16). A store that times out or loses its connection with the
// settle in flight may still apply it (a stalled Redis runs it when it resumes), so the settle
// is asked again by request id, which applies it at most once and otherwise reports what the
// first one debited, until the store answers or store.settle_wait_ms passes. Only a settle the
// store provably refused (notApplied) fails at once. Past the bound the request is answered 503
// and the settlement is undone in the background (unsettle, retried like a release until it
// lands): refunded if it landed, fenced if not, so that a 503 is never debited and usage
// records (written with what the answer reported) follow the ledger.

import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AccountConfig } from '../config/types.js';
import type { EndUserLedger } from './end-users.js';
import { GatewayError, StoreUnavailableError } from '../errors.js';
import { notApplied, type RetryQueue } from './retry.js';
import type { ResponseChain } from './response-chains.js';
import type { AlertOutbox } from './alerts.js';
import type {
  AccountRecord, AuditEvent, AuditPage, AuditQuery, CreditResult, HoldRequest, HoldResult, KeyPatch, KeyRecord, KeyWithAccount, KnownKey, NewKey, Revocation, SettleResult, Settlement, Store,
  TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings, UnsettleResult, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageTotals, HourlyQuery, HourTotals, TopQuery, TopRow, TotalsQuery, TotalsRow, AccountsQuery, AccountsPage,
} from './types.js';
import { TeamNotFoundError } from './rules.js';

/** store.settle_wait_ms's default. */
export const SETTLE_WAIT_MS = 10_000;
/** Pauses between the re-asks of an unknown settle: the first, and the longest. */
const REASK_FIRST_MS = 25;
const REASK_MAX_MS = 500;

/** A bad argument: a bug, which no retry cures. */
function badArgument(err: unknown): boolean {
  // A key naming a team its account lacks is an answer, not an outage.
  return err instanceof TypeError || err instanceof RangeError || err instanceof TeamNotFoundError;
}

/**
 * Rejections of the store become StoreUnavailableError, except a bad argument's and an answer a
 * caller's own check gave (updateKey's `check`: a GatewayError).
 */
async function guard<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    if (badArgument(err) || err instanceof GatewayError) throw err;
    throw new StoreUnavailableError(err);
  }
}

export interface GuardOptions {
  /** How long a settle whose outcome is unknown is asked again (store.settle_wait_ms); default SETTLE_WAIT_MS. */
  settleWaitMs?: number;
}

export class GuardedStore implements Store {
  readonly #inner: Store;
  readonly #retries: RetryQueue;
  readonly #settleWaitMs: number;
  /** This store's part of its records' write ids: unique across the instances sharing a store. */
  readonly #writer = randomBytes(9).toString('base64url');
  #records = 0;

  constructor(inner: Store, retries: RetryQueue, options: GuardOptions = {}) {
    this.#inner = inner;
    this.#retries = retries;
    this.#settleWaitMs = options.settleWaitMs ?? SETTLE_WAIT_MS;
    // A release is retried until it lands (as a hold's); the rest answer or fail once.
    const eu = inner.endUsers;
    this.endUsers = {
      hold: (h) => guard(eu.hold(h)), settle: (x) => guard(eu.settle(x)), spent: (k, u, p) => guard(eu.spent(k, u, p)),
      release: (k, u, id) => this.#retries.run(`eu\u0000${k}\u0000${id}`, () => eu.release(k, u, id)),
    };
  }

  readonly endUsers: EndUserLedger;

  createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> { return guard(this.#inner.createAccount(account, audit)); }
  getAccount(id: string): Promise<AccountRecord | undefined> { return guard(this.#inner.getAccount(id)); }
  addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    return guard(this.#inner.addCredits(accountId, units, idempotencyKey, audit));
  }
  createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> { return guard(this.#inner.createKey(key, audit)); }
  getKey(id: string): Promise<KeyRecord | undefined> { return guard(this.#inner.getKey(id)); }
  listKeys(account: string): Promise<KeyRecord[] | undefined> { return guard(this.#inner.listKeys(account)); }
  updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    return guard(this.#inner.updateKey(id, patch, audit, check));
  }
  createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> { return guard(this.#inner.createTeam(account, id, settings, audit)); }
  getTeam(id: string): Promise<TeamRecord | undefined> { return guard(this.#inner.getTeam(id)); }
  listTeams(account: string): Promise<TeamRecord[] | undefined> { return guard(this.#inner.listTeams(account)); }
  updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> { return guard(this.#inner.updateTeam(id, patch, audit)); }
  deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> { return guard(this.#inner.deleteTeam(id, audit)); }
  rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    return guard(this.#inner.rotateKey(id, digest, last4, previousUntil, audit));
  }
  touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> { return guard(this.#inner.touchKeys(uses)); }
  accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> { return guard(this.#inner.accountsOnPlans(plans)); }
  putResponse(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void> {
    return guard(this.#inner.putResponse(account, id, value, parent, ttlMs));
  }
  getResponse(account: string, id: string): Promise<string | undefined> { return guard(this.#inner.getResponse(account, id)); }
  responseChain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined> {
    return guard(this.#inner.responseChain(account, id, maxDepth));
  }
  responseBytes(account: string): Promise<number> { return guard(this.#inner.responseBytes(account)); }
  deleteResponse(account: string, id: string): Promise<boolean> { return guard(this.#inner.deleteResponse(account, id)); }
  keyByDigest(digest: string): Promise<KeyRecord | undefined> { return guard(this.#inner.keyByDigest(digest)); }
  keyWithAccount(digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined> { return guard(this.#inner.keyWithAccount(digest, known)); }
  get holdRecordsKeyUse(): boolean { return this.#inner.holdRecordsKeyUse; }
  /** The outbox, its faults StoreUnavailableError like every call's. */
  get alerts(): AlertOutbox {
    const a = this.#inner.alerts;
    return this.#alerts ??= {
      append: (e, w, now) => guard(a.append(e, w, now)), due: (now, limit, hook) => guard(a.due(now, limit, hook)), get: (id) => guard(a.get(id)),
      lease: (id, owner, ttl, now, hook) => guard(a.lease(id, owner, ttl, now, hook)), unlease: (id, owner, hook) => guard(a.unlease(id, owner, hook)),
      update: (id, d) => guard(a.update(id, d)), list: (limit, cursor) => guard(a.list(limit, cursor)),
      armWallet: (account, armed) => guard(a.armWallet(account, armed)), expiringKeys: (from, until) => guard(a.expiringKeys(from, until)),
    };
  }
  #alerts: AlertOutbox | undefined;
  revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> { return guard(this.#inner.revokeKey(id, audit)); }
  revokeSession(sid: string, audit?: AuditEvent): Promise<void> { return guard(this.#inner.revokeSession(sid, audit)); }
  isSessionRevoked(sid: string): Promise<boolean> { return guard(this.#inner.isSessionRevoked(sid)); }
  seed(accounts: readonly AccountConfig[]): Promise<void> { return guard(this.#inner.seed(accounts)); }
  async hold(h: HoldRequest): Promise<HoldResult | undefined> {
    try {
      return await guard(this.#inner.hold(h));
    } catch (err) {
      if (err instanceof StoreUnavailableError) void this.#retries.undo(err, this.#holdKey(h.account, h.requestId), () => this.#inner.release(h.account, h.requestId)).catch(() => undefined);
      throw err;
    }
  }
  /**
   * Debits once, as the store does; resolves with what the store applied, also when the first
   * attempt's outcome was unknown (see the header). Rejects with StoreUnavailableError when the
   * store refused it, or could not tell within settleWaitMs (one re-ask's timeout more at most);
   * the settlement is then undone in the background.
   */
  async settle(s: Settlement): Promise<SettleResult | undefined> {
    try {
      return await this.#inner.settle(s);
    } catch (err) {
      if (badArgument(err)) throw err;
      if (notApplied(err)) throw new StoreUnavailableError(err);
      return this.#resolve(s, err);
    }
  }

  /** Asks again until the store answers, or undoes the settlement once settleWaitMs has passed. */
  async #resolve(s: Settlement, first: unknown): Promise<SettleResult | undefined> {
    const until = performance.now() + this.#settleWaitMs;
    for (let pause = REASK_FIRST_MS; ; pause = Math.min(pause * 2, REASK_MAX_MS)) {
      const left = until - performance.now();
      if (left <= 0) break;
      await sleep(Math.min(pause, left));
      try {
        // By request id: applies nothing twice, and reports the first settlement's charge.
        return await this.#inner.settle(s);
      } catch (err) {
        if (badArgument(err)) throw err;
      }
    }
    void this.#retries.run(`unsettle\u0000${s.account}\u0000${s.requestId}`, () => this.#inner.unsettle(s)).catch(() => undefined);
    throw new StoreUnavailableError(first);
  }

  unsettle(s: Settlement): Promise<UnsettleResult | undefined> { return guard(this.#inner.unsettle(s)); }

  /** Resolves once the hold is dropped or queued for retry (a request id's hold is dropped once). */
  release(account: string, requestId: string): Promise<void> {
    return this.#retries.run(this.#holdKey(account, requestId), () => this.#inner.release(account, requestId));
  }

  #holdKey(account: string, requestId: string): string {
    return `hold\u0000${account}\u0000${requestId}`;
  }

  accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    return guard(this.#inner.accountUsage(account, day, month));
  }
  /**
   * A usage record that the store cannot take now is retried like a release, until it lands
   * (a request already debited must not lose its record to an outage). Every attempt carries
   * the same write id, so a write that timed out but was applied all the same is not written
   * again: records follow the ledger, one per request.
   */
  recordUsage(r: UsageRecord): Promise<void> {
    // Its own retry key and write id: request ids come from clients (x-request-id) and may repeat.
    const writeId = `${this.#writer}.${++this.#records}`;
    return this.#retries.run(`usage\u0000${writeId}`, () => this.#inner.recordUsage(r, writeId));
  }
  usageReport(account: string | undefined, since: number): Promise<UsageReport> { return guard(this.#inner.usageReport(account, since)); }
  usageRecords(q: UsageQuery): Promise<UsagePage> { return guard(this.#inner.usageRecords(q)); }
  usageHourly(q: HourlyQuery): Promise<HourTotals[]> { return guard(this.#inner.usageHourly(q)); }
  usageTop(q: TopQuery): Promise<TopRow[]> { return guard(this.#inner.usageTop(q)); }
  usageTotals(q: TotalsQuery): Promise<TotalsRow[]> { return guard(this.#inner.usageTotals(q)); }
  usageRecordsRead(): number { return this.#inner.usageRecordsRead(); }
  listAccounts(q: AccountsQuery): Promise<AccountsPage> { return guard(this.#inner.listAccounts(q)); }
  onRevoke(listener: (r: Revocation) => void): () => void { return this.#inner.onRevoke(listener); }
  ping(): Promise<void> { return guard(this.#inner.ping()); }
  appendAudit(e: AuditEvent): Promise<void> { return guard(this.#inner.appendAudit(e)); }
  listAudit(q: AuditQuery): Promise<AuditPage> { return guard(this.#inner.listAudit(q)); }
  close(): Promise<void> { return this.#inner.close(); }
}
