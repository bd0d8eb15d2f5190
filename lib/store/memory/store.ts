// The embedded store: accounts, keys and sessions in this process's memory. With a `path` it
// is durable: every change goes through a journal (./journal.ts) before it is acknowledged, and
// the state is rebuilt from the snapshot and journal on open. Without one it is a plain
// in-memory store (tests, demos).
//
// Every change is applied to the state synchronously (so checks and changes are atomic in this
// single-threaded process), journaled, and acknowledged once written. Every answer, reads
// included, waits until what it saw is written, so nothing that could be lost in a crash is
// ever reported, not even as "already applied".
//
// Metering (./metering.ts): holds are in memory only (a restart drops them, as if their
// TTL ran out); a settlement is one journal entry; settled request ids are kept for an hour
// and usage windows for about 40 days / 13 months (pruned at snapshots). Usage records go to
// their own day files, <path>/usage/YYYY-MM-DD.jsonl, or to columns per day in memory, kept
// for the retention (../usage-records.ts, ./usage-files.ts, ./usage-columns.ts). The alerts
// outbox (./alerts.ts) is journaled and snapshotted with the rest.
//
// The calls are split by what they touch, as ../redis/ is: accounts, keys and sessions
// ./keys.ts, teams ./teams.ts, holds and settlements ./wallets.ts (over ./metering.ts), usage
// records ./usage.ts, stored responses ./responses.ts, the audit log ./audit.ts. Their tables
// are ./tables.ts's. This file loads and journals the state, and hands each call to its part.

import type { AccountConfig } from '../../config/types.js';
import { Journal } from './journal.js';
import { MemoryAudit, holdsAudit, removeLegacyAudit } from './audit.js';
import { MemoryResponses } from './responses.js';
import { MemoryAlerts } from './alerts.js';
import type { ResponseChain } from '../response-chains.js';
import { toEntry, toSnapshotState, type Entry, type SnapshotState } from './state.js';
import type {
  AccountRecord, AuditEvent, AuditPage, AuditQuery, CreditResult, HoldRequest, HoldResult, KeyPatch, KeyRecord, KeyWithAccount, NewKey, Revocation,
  SettleResult, Settlement, Store, TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings, UnsettleResult, UsagePage, UsageQuery, UsageRecord,
  UsageReport, UsageTotals, AccountsPage, AccountsQuery, HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow,
} from '../types.js';
import { FileUsageLog } from './usage-files.js';
import { MemoryUsageLog } from './usage-columns.js';
import { requireAuditEvent } from '../audit-rules.js';
import { MemoryEndUsers, spentBefore } from '../end-users.js';
import { MemoryTables, type MemoryHost } from './tables.js';
import { MemoryKeys } from './keys.js';
import { MemoryTeams } from './teams.js';
import { MemoryWallets } from './wallets.js';
import { MemoryUsage } from './usage.js';


export interface MemoryStoreOptions {
  /** Directory of the journal and snapshot (created when absent); null keeps nothing on disk. */
  path: string | null;
  /** Longest time between fsyncs of written changes; 0 syncs before acknowledging. Default 1000. */
  fsyncMs?: number;
  /** Journal size (bytes) that triggers compaction into a snapshot. Default 1 MiB. */
  compactBytes?: number;
  /** Usage records are kept this many days after their time; default 90. */
  usageRetentionDays?: number;
  /** Errors of background work (periodic fsync, compaction), which the store survives. */
  onError?: (err: Error) => void;
}

/** Resolved, and shared: what is awaited when there is nothing to wait for (#begin of a store serving, no journal). */
const DONE: Promise<void> = Promise.resolve();

export class MemoryStore implements Store {
  readonly #opts: MemoryStoreOptions;
  readonly #tables = new MemoryTables();
  /** What the parts below ask of this store: loading, the journal, the revocation listeners. */
  readonly #host: MemoryHost = {
    begin: () => this.#begin(),
    settled: () => this.#settled(),
    change: (entry, audit) => this.#change(entry, audit),
    audited: (audit) => this.#audited(audit),
    append: (entry) => this.#journal?.append(entry) ?? DONE,
    notify: (r) => this.#notify(r),
    notifyKey: (k, kind) => this.#notifyKey(k, kind),
  };
  readonly #keys = new MemoryKeys(this.#tables, this.#host);
  readonly #teams = new MemoryTeams(this.#tables, this.#host);
  readonly #wallets = new MemoryWallets(this.#tables, this.#host);
  readonly #usage: MemoryUsage;
  readonly #listeners = new Set<(r: Revocation) => void>();
  readonly endUsers = new MemoryEndUsers((account, key, endUser, period) => spentBefore(this, account, key, endUser, period));
  readonly #responses = new MemoryResponses();
  /** The alerts outbox (./alerts.ts), journaled with the rest. */
  readonly alerts: MemoryAlerts = new MemoryAlerts({
    begin: () => this.#begin(),
    change: (e) => this.#change(e),
    settled: () => this.#settled(),
    keys: () => this.#tables.keys.values(),
  });
  readonly #audit = new MemoryAudit();
  #journal: Journal | null = null;
  /** Set while a durable store is still loading its files. */
  #loading: Promise<void> | null = null;
  #loadError: Error | null = null;
  #closed = false;

  /** Prefer MemoryStore.open() for a durable store: it reports a failure to load at once. */
  constructor(opts: MemoryStoreOptions) {
    this.#opts = opts;
    this.#usage = new MemoryUsage(new MemoryUsageLog(opts.usageRetentionDays), this.#host);
    if (opts.path !== null) {
      this.#loading = this.#load(opts.path).then(
        () => { this.#loading = null; },
        (e: unknown) => { this.#loading = null; this.#loadError = e instanceof Error ? e : new Error(String(e)); },
      );
    }
  }

  /** Opens a store, loading the snapshot and journal under `path` when it is set. */
  static async open(opts: MemoryStoreOptions): Promise<MemoryStore> {
    const store = new MemoryStore(opts);
    await store.#begin();
    return store;
  }

  async #load(dir: string): Promise<void> {
    const { journal, recovered } = await Journal.open({
      dir,
      fsyncMs: this.#opts.fsyncMs ?? 1000,
      compactBytes: this.#opts.compactBytes ?? 1024 * 1024,
      snapshot: () => this.#snapshot(),
      onError: this.#opts.onError ?? (() => {}),
    });
    try {
      if (recovered.state !== undefined) this.#restore(toSnapshotState(recovered.state));
      // A store from before the audit log was journaled kept it in a file of its own (./audit.ts).
      const legacyAudit = !holdsAudit(recovered.state);
      if (legacyAudit) await this.#audit.restoreLegacy(dir);
      for (const raw of recovered.entries) {
        const entry = toEntry(raw);
        if (entry === undefined) throw new Error(`${dir}: journal entry ${String(raw.seq)} is not a store change`);
        this.#apply(entry);
      }
      this.#usage.log = await FileUsageLog.open(dir, { retentionDays: this.#opts.usageRetentionDays, fsyncMs: this.#opts.fsyncMs ?? 1000 });
      if (!legacyAudit) await removeLegacyAudit(dir);
    } catch (e) {
      await journal.close();
      throw e;
    }
    this.#journal = journal;
    await journal.compactIfLarge();
  }

  /**
   * Waits for loading; throws when the store cannot serve. A store serving answers with one
   * promise, made once: every call of every request awaits this (issue #46).
   */
  #begin(): Promise<void> {
    if (this.#loading === null && this.#loadError === null && !this.#closed && !this.#journal?.failed) return DONE;
    return this.#beginSlow();
  }

  async #beginSlow(): Promise<void> {
    if (this.#loading !== null) await this.#loading;
    if (this.#loadError !== null) throw this.#loadError;
    if (this.#closed) throw new Error('store closed');
    const failed = this.#journal?.failed;
    if (failed) throw failed;
  }

  /** Resolves once everything the state shows is written. */
  #settled(): Promise<void> {
    return this.#journal?.barrier() ?? DONE;
  }

  /**
   * Applies a change to the state and journals it; resolves once it is written. With `audit`,
   * the write's audit event goes in the same entry (./audit.ts).
   */
  #change(entry: Entry, audit?: AuditEvent): Promise<void> {
    const e = audit === undefined ? entry : { ...entry, audit: requireAuditEvent(audit) };
    this.#apply(e);
    return this.#journal?.append(e) ?? DONE;
  }

  /**
   * For a write that changed nothing but is answered as done (a repeated credit, a second
   * revocation): its audit event alone, when it has one; else just the wait for what was read.
   */
  #audited(audit: AuditEvent | undefined): Promise<void> {
    return audit === undefined ? this.#settled() : this.#change({ op: 'audit' }, audit);
  }

  /** Changes the state and keeps the entry's audit event. Shared by live changes and replay. */
  #apply(e: Entry): void {
    this.#applyChange(e);
    if (e.audit !== undefined) this.#audit.add(e.audit);
  }


  /** Changes the state. Shared by live changes and replay, so it tolerates repeats. */
  #applyChange(e: Entry): void {
    switch (e.op) {
      case 'audit':
        return;
      case 'settle':
        this.#wallets.applySettle(e);
        return;
      case 'unsettle':
        this.#wallets.undo(e);
        return;
      case 'alert':
      case 'alertd':
      case 'walarm':
        this.alerts.apply(e);
        return;
      default:
        this.#tables.apply(e);
    }
  }

  #snapshot(): SnapshotState {
    return {
      ...this.#tables.snapshot(),
      metering: this.#wallets.metering.snapshot(),
      alerts: this.alerts.snapshot(),
      audit: this.#audit.snapshot(),
    };
  }

  #restore(s: SnapshotState): void {
    this.#tables.restore(s);
    this.#wallets.metering.restore(s.metering);
    this.alerts.restore(s.alerts);
    if (s.audit !== undefined) this.#audit.restore(s.audit);
  }

  #notify(r: Revocation): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(r);
      } catch {
        // A failing listener must not stop the others or the revocation.
      }
    }
  }

  #notifyKey(k: KeyRecord, kind: 'key' | 'key-changed'): void {
    this.#notify({ kind, digest: k.digest });
    if (k.previous !== null) this.#notify({ kind, digest: k.previous.digest });
  }


  // Accounts, keys and sessions: see keys.ts.
  createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> { return this.#keys.createAccount(account, audit); }
  getAccount(id: string): Promise<AccountRecord | undefined> { return this.#keys.getAccount(id); }
  addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    return this.#keys.addCredits(accountId, units, idempotencyKey, audit);
  }
  accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> { return this.#keys.accountsOnPlans(plans); }
  listAccounts(q: AccountsQuery): Promise<AccountsPage> { return this.#keys.listAccounts(q); }
  createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> { return this.#keys.createKey(key, audit); }
  keyByDigest(digest: string): Promise<KeyRecord | undefined> { return this.#keys.keyByDigest(digest); }

  /** Holds are not journaled: a key's last use is recorded by touchKeys only. */
  readonly holdRecordsKeyUse = false;

  keyWithAccount(digest: string): Promise<KeyWithAccount | undefined> { return this.#keys.keyWithAccount(digest); }
  getKey(id: string): Promise<KeyRecord | undefined> { return this.#keys.getKey(id); }
  listKeys(account: string): Promise<KeyRecord[] | undefined> { return this.#keys.listKeys(account); }
  updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    return this.#keys.updateKey(id, patch, audit, check);
  }
  rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    return this.#keys.rotateKey(id, digest, last4, previousUntil, audit);
  }
  touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> { return this.#keys.touchKeys(uses); }
  revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> { return this.#keys.revokeKey(id, audit); }
  revokeSession(sid: string, audit?: AuditEvent): Promise<void> { return this.#keys.revokeSession(sid, audit); }
  isSessionRevoked(sid: string): Promise<boolean> { return this.#keys.isSessionRevoked(sid); }
  seed(accounts: readonly AccountConfig[]): Promise<void> { return this.#keys.seed(accounts); }

  // Teams: see teams.ts.
  createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> { return this.#teams.createTeam(account, id, settings, audit); }
  getTeam(id: string): Promise<TeamRecord | undefined> { return this.#teams.getTeam(id); }
  listTeams(account: string): Promise<TeamRecord[] | undefined> { return this.#teams.listTeams(account); }
  updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> { return this.#teams.updateTeam(id, patch, audit); }
  deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> { return this.#teams.deleteTeam(id, audit); }

  // Holds and settlements: see wallets.ts.
  hold(h: HoldRequest): Promise<HoldResult | undefined> { return this.#wallets.hold(h); }
  settle(s: Settlement): Promise<SettleResult | undefined> { return this.#wallets.settle(s); }
  unsettle(s: Settlement): Promise<UnsettleResult | undefined> { return this.#wallets.unsettle(s); }
  release(account: string, requestId: string): Promise<void> { return this.#wallets.release(account, requestId); }
  accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    return this.#wallets.accountUsage(account, day, month);
  }

  // Usage records: see usage.ts.
  recordUsage(r: UsageRecord, writeId?: string): Promise<void> { return this.#usage.recordUsage(r, writeId); }
  usageReport(account: string | undefined, since: number): Promise<UsageReport> { return this.#usage.usageReport(account, since); }
  usageRecords(q: UsageQuery): Promise<UsagePage> { return this.#usage.usageRecords(q); }
  usageHourly(q: HourlyQuery): Promise<HourTotals[]> { return this.#usage.usageHourly(q); }
  usageTop(q: TopQuery): Promise<TopRow[]> { return this.#usage.usageTop(q); }
  usageTotals(q: TotalsQuery): Promise<TotalsRow[]> { return this.#usage.usageTotals(q); }
  usageRecordsRead(): number { return this.#usage.usageRecordsRead(); }


  async putResponse(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void> {
    this.#responses.put(account, id, value, parent, ttlMs);
  }

  async getResponse(account: string, id: string): Promise<string | undefined> {
    return this.#responses.get(account, id);
  }

  async responseChain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined> {
    return this.#responses.chain(account, id, maxDepth);
  }

  async responseBytes(account: string): Promise<number> {
    return this.#responses.bytes(account);
  }

  async deleteResponse(account: string, id: string): Promise<boolean> {
    return this.#responses.delete(account, id);
  }

  onRevoke(listener: (r: Revocation) => void): () => void {
    const own = (r: Revocation): void => listener(r);
    this.#listeners.add(own);
    return () => { this.#listeners.delete(own); };
  }

  async ping(): Promise<void> {
    await this.#begin();
  }

  async close(): Promise<void> {
    if (this.#loading !== null) await this.#loading;
    if (this.#closed) return;
    this.#closed = true;
    this.#listeners.clear();
    try {
      await this.#journal?.close();
    } finally {
      await this.#usage.log.close();
    }
  }

  async appendAudit(e: AuditEvent): Promise<void> {
    await this.#begin();
    await this.#change({ op: 'audit' }, e);
  }

  async listAudit(q: AuditQuery): Promise<AuditPage> {
    await this.#begin();
    const page = this.#audit.list(q);
    await this.#settled();
    return page;
  }
}
