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

import { keyIdOf } from '../digest.js';
import type { AccountConfig } from '../../config/types.js';
import { Journal } from './journal.js';
import { MemoryAudit, holdsAudit, removeLegacyAudit } from './audit.js';
import { MemoryMetering, validateHold, validateSettlement, type UnsettleEntry } from './metering.js';
import { MemoryResponses } from './responses.js';
import { MemoryAlerts } from './alerts.js';
import type { ResponseChain } from '../response-chains.js';
import { toEntry, toSnapshotState, type Entry, type SnapshotState } from './state.js';
import { TEAM_ID, TeamNotFoundError, addSpend, applyPatch, applyTeamPatch, seededKeys, creditRefusal, defaultControls, periodId, requireId, requireRequestId, spentIn, toTeamSettings } from '../rules.js';
import type {
  AccountRecord, AuditEvent, AuditPage, AuditQuery, CreditResult, HoldRequest, HoldResult, KeyControls, KeyPatch, KeyRecord, KeyWithAccount, NewKey, Revocation,
  SettleResult, Settlement, Store, TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings, UnsettleResult, UsagePage, UsageQuery, UsageRecord,
  UsageReport, UsageTotals, AccountsPage, AccountsQuery, HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow,
} from '../types.js';
import { FileUsageLog, UsageWriteError } from './usage-files.js';
import { MemoryUsageLog } from './usage-columns.js';
import { WRITE_MARK_MS, validateUsageRecord, type UsageLog } from '../usage-records.js';
import { requireAuditEvent } from '../audit-rules.js';
import { MemoryEndUsers, spentBefore } from '../end-users.js';
import { checkRange, checkTop, checkTotalsQuery } from '../usage-totals.js';
import { accountsCursor, checkAccountsQuery } from '../account-pages.js';

const byId = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

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

const DIGEST = /^[0-9a-f]{64}$/;

function requireUnits(what: string, v: unknown): void {
  if (!Number.isSafeInteger(v)) throw new RangeError(`${what} must be a safe integer`);
}

export class MemoryStore implements Store {
  readonly #opts: MemoryStoreOptions;
  readonly #accounts = new Map<string, AccountRecord>();
  /** One account per plan in use (accounts are never deleted nor moved): accountsOnPlans(). */
  readonly #planUser = new Map<string, string>();
  /** Account ids in ascending order, for listAccounts: sorted when first asked after a change. */
  #sortedIds: string[] | null = null;
  /** Recent usage writes by write id, oldest first (recordUsage). */
  readonly #writes = new Map<string, { at: number; record: UsageRecord; done: Promise<void> }>();
  readonly #credits = new Map<string, Set<string>>();
  /** Keys by id; key ids by digest (current and previous digests); key ids by account. */
  readonly #keys = new Map<string, KeyRecord>();
  readonly #digests = new Map<string, string>();
  readonly #accountKeys = new Map<string, Set<string>>();
  readonly #sessions = new Set<string>();
  /** Teams by id (unique across the store); team ids by account. */
  readonly #teams = new Map<string, TeamRecord>();
  readonly #accountTeams = new Map<string, Set<string>>();
  readonly #listeners = new Set<(r: Revocation) => void>();
  readonly #metering = new MemoryMetering();
  readonly endUsers = new MemoryEndUsers((account, key, endUser, period) => spentBefore(this, account, key, endUser, period));
  readonly #responses = new MemoryResponses();
  /** The alerts outbox (./alerts.ts), journaled with the rest. */
  readonly alerts: MemoryAlerts = new MemoryAlerts({
    begin: () => this.#begin(),
    change: (e) => this.#change(e),
    settled: () => this.#settled(),
    keys: () => this.#keys.values(),
  });
  readonly #audit = new MemoryAudit();
  #usageLog: UsageLog;
  #journal: Journal | null = null;
  /** Set while a durable store is still loading its files. */
  #loading: Promise<void> | null = null;
  #loadError: Error | null = null;
  #closed = false;

  /** Prefer MemoryStore.open() for a durable store: it reports a failure to load at once. */
  constructor(opts: MemoryStoreOptions) {
    this.#opts = opts;
    this.#usageLog = new MemoryUsageLog(opts.usageRetentionDays);
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
      this.#usageLog = await FileUsageLog.open(dir, { retentionDays: this.#opts.usageRetentionDays, fsyncMs: this.#opts.fsyncMs ?? 1000 });
      if (!legacyAudit) await removeLegacyAudit(dir);
    } catch (e) {
      await journal.close();
      throw e;
    }
    this.#journal = journal;
    await journal.compactIfLarge();
  }

  /** Waits for loading; throws when the store cannot serve. */
  async #begin(): Promise<void> {
    if (this.#loading !== null) await this.#loading;
    if (this.#loadError !== null) throw this.#loadError;
    if (this.#closed) throw new Error('store closed');
    const failed = this.#journal?.failed;
    if (failed) throw failed;
  }

  /** Resolves once everything the state shows is written. */
  #settled(): Promise<void> {
    return this.#journal?.barrier() ?? Promise.resolve();
  }

  /**
   * Applies a change to the state and journals it; resolves once it is written. With `audit`,
   * the write's audit event goes in the same entry (./audit.ts).
   */
  #change(entry: Entry, audit?: AuditEvent): Promise<void> {
    const e = audit === undefined ? entry : { ...entry, audit: requireAuditEvent(audit) };
    this.#apply(e);
    return this.#journal?.append(e) ?? Promise.resolve();
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
      case 'account':
        if (!this.#accounts.has(e.id)) {
          this.#accounts.set(e.id, { id: e.id, plan: e.plan, balance_units: e.balance_units, created_at: e.created_at });
          this.#sortedIds = null;
          if (!this.#planUser.has(e.plan)) this.#planUser.set(e.plan, e.id);
        }
        return;
      case 'credit': {
        const account = this.#accounts.get(e.account);
        if (account === undefined) return;
        let used = this.#credits.get(e.account);
        if (used === undefined) this.#credits.set(e.account, (used = new Set()));
        if (used.has(e.ik)) return;
        used.add(e.ik);
        account.balance_units += e.units;
        return;
      }
      case 'key':
        if (this.#accounts.has(e.account) && !this.#digests.has(e.digest) && !this.#keys.has(e.id)) {
          this.#addKey({
            id: e.id, account: e.account, digest: e.digest, created_at: e.created_at, revoked_at: null, last4: e.last4 ?? null,
            controls: e.controls ?? defaultControls(), previous: null, last_used_at: null, spent: { period: 'n', units: 0 },
          });
        }
        return;
      case 'revoke': {
        const key = this.#keys.get(e.id);
        if (key !== undefined && key.revoked_at === null) key.revoked_at = e.at;
        return;
      }
      case 'keyupdate': {
        const key = this.#keys.get(e.id);
        if (key !== undefined) key.controls = e.controls;
        return;
      }
      case 'rotate': {
        const key = this.#keys.get(e.id);
        if (key === undefined || this.#digests.has(e.digest)) return;
        if (key.previous !== null) this.#digests.delete(key.previous.digest);
        key.previous = { digest: key.digest, until: e.until };
        key.digest = e.digest;
        key.last4 = e.last4;
        this.#digests.set(e.digest, key.id);
        return;
      }
      case 'used':
        for (const [id, at] of e.uses) {
          const key = this.#keys.get(id);
          if (key !== undefined && (key.last_used_at === null || key.last_used_at < at)) key.last_used_at = at;
        }
        return;
      case 'session':
        this.#sessions.add(e.sid);
        return;
      case 'team':
        if (this.#accounts.has(e.account) && !this.#teams.has(e.id)) {
          this.#addTeam({ id: e.id, account: e.account, created_at: e.created_at, ...structuredClone(e.settings), spent: { period: 'n', units: 0 } });
        }
        return;
      case 'teamupdate': {
        const team = this.#teams.get(e.id);
        if (team !== undefined) Object.assign(team, structuredClone(e.settings));
        return;
      }
      case 'teamdelete': {
        const team = this.#teams.get(e.id);
        if (team === undefined) return;
        this.#teams.delete(e.id);
        this.#accountTeams.get(team.account)?.delete(e.id);
        return;
      }
      case 'settle':
        if (this.#metering.apply(this.#accounts.get(e.account), e)) {
          if (e.key !== undefined && e.kpid !== undefined) {
            const key = this.#keys.get(e.key);
            if (key !== undefined) key.spent = addSpend(key.spent, e.kpid, e.charged);
          }
          if (e.team !== undefined && e.tpid !== undefined) {
            const team = this.#teams.get(e.team);
            if (team !== undefined && team.account === e.account) team.spent = addSpend(team.spent, e.tpid, e.charged);
          }
        }
        return;
      case 'unsettle':
        this.#undo(e);
        return;
      case 'alert':
      case 'alertd':
      case 'walarm':
        this.alerts.apply(e);
        return;
    }
  }

  #snapshot(): SnapshotState {
    return {
      accounts: [...this.#accounts.values()],
      keys: [...this.#keys.values()],
      sessions: [...this.#sessions],
      credits: Object.fromEntries([...this.#credits].map(([id, used]) => [id, [...used]])),
      teams: [...this.#teams.values()],
      metering: this.#metering.snapshot(),
      alerts: this.alerts.snapshot(),
      audit: this.#audit.snapshot(),
    };
  }

  #restore(s: SnapshotState): void {
    for (const a of s.accounts) {
      this.#accounts.set(a.id, { ...a });
      this.#sortedIds = null;
      if (!this.#planUser.has(a.plan)) this.#planUser.set(a.plan, a.id);
    }
    for (const k of s.keys) this.#addKey({ ...k });
    for (const sid of s.sessions) this.#sessions.add(sid);
    for (const [id, used] of Object.entries(s.credits)) this.#credits.set(id, new Set(used));
    for (const t of s.teams) this.#addTeam({ ...t });
    this.#metering.restore(s.metering);
    this.alerts.restore(s.alerts);
    if (s.audit !== undefined) this.#audit.restore(s.audit);
  }

  #addTeam(t: TeamRecord): void {
    this.#teams.set(t.id, t);
    let ids = this.#accountTeams.get(t.account);
    if (ids === undefined) this.#accountTeams.set(t.account, (ids = new Set()));
    ids.add(t.id);
  }

  /** Throws TeamNotFoundError unless `team` (when named) is a team of `account`. */
  #requireTeam(account: string, team: string | null | undefined): void {
    if (team === null || team === undefined) return;
    if (this.#teams.get(team)?.account !== account) throw new TeamNotFoundError(team);
  }

  /** The live keys of an account that name `team`. */
  #teamKeys(account: string, team: string): KeyRecord[] {
    return [...this.#accountKeys.get(account) ?? []].map((id) => this.#keys.get(id)!).filter((k) => k.revoked_at === null && k.controls.team === team);
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

  /** Creates the account when absent; the pending write, or undefined when it exists. */
  #createAccount(a: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<void> | undefined {
    requireId('account id', a.id);
    requireId('plan', a.plan);
    requireUnits('balance_units', a.balance_units);
    if (a.balance_units < 0) throw new RangeError('balance_units must not be negative');
    if (this.#accounts.has(a.id)) return undefined;
    return this.#change({ op: 'account', id: a.id, plan: a.plan, balance_units: a.balance_units, created_at: Date.now() }, audit);
  }

  #addKey(k: KeyRecord): void {
    this.#keys.set(k.id, k);
    this.#digests.set(k.digest, k.id);
    if (k.previous !== null) this.#digests.set(k.previous.digest, k.id);
    let ids = this.#accountKeys.get(k.account);
    if (ids === undefined) this.#accountKeys.set(k.account, (ids = new Set()));
    ids.add(k.id);
  }

  /** Creates the key when its account exists and its digest and id are new; the pending write. */
  #createKey(k: NewKey, audit?: AuditEvent): Promise<void> | undefined {
    requireId('key id', k.id);
    requireId('account id', k.account);
    if (typeof k.digest !== 'string' || !DIGEST.test(k.digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    if (!this.#accounts.has(k.account) || this.#digests.has(k.digest) || this.#keys.has(k.id)) return undefined;
    this.#requireTeam(k.account, k.controls?.team);
    return this.#change({
      op: 'key', id: k.id, account: k.account, digest: k.digest, created_at: Date.now(), last4: k.last4 ?? null,
      ...(k.controls === undefined ? {} : { controls: k.controls }),
    }, audit);
  }

  /** A copy callers may keep: nothing they do to it reaches the store's state. */
  #copy(k: KeyRecord | undefined): KeyRecord | undefined {
    return k === undefined ? undefined : structuredClone(k);
  }

  #notifyKey(k: KeyRecord, kind: 'key' | 'key-changed'): void {
    this.#notify({ kind, digest: k.digest });
    if (k.previous !== null) this.#notify({ kind, digest: k.previous.digest });
  }

  async createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> {
    await this.#begin();
    const written = this.#createAccount(account, audit);
    await (written ?? this.#settled());
    return written !== undefined;
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    await this.#begin();
    const a = this.#accounts.get(id);
    const copy = a === undefined ? undefined : { ...a };
    await this.#settled();
    return copy;
  }

  async addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    await this.#begin();
    requireUnits('units', units);
    requireId('idempotency key', idempotencyKey);
    const account = this.#accounts.get(accountId);
    if (account === undefined) {
      await this.#settled();
      return undefined;
    }
    if (this.#credits.get(accountId)?.has(idempotencyKey) === true) {
      const balance = account.balance_units;
      await this.#audited(audit);
      return { applied: false, balance_units: balance };
    }
    // Checked and applied in one synchronous step: no other change can come in between.
    const refused = creditRefusal(account.balance_units, units);
    if (refused !== undefined) {
      await this.#settled();
      return { applied: false, balance_units: account.balance_units, refused };
    }
    const written = this.#change({ op: 'credit', account: accountId, units, ik: idempotencyKey }, audit);
    const balance = account.balance_units;
    await written;
    return { applied: true, balance_units: balance };
  }

  async accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> {
    await this.#begin();
    const found = new Map<string, string>();
    for (const plan of plans) {
      const id = this.#planUser.get(plan);
      if (id !== undefined) found.set(plan, id);
    }
    await this.#settled();
    return found;
  }

  async listAccounts(q: AccountsQuery): Promise<AccountsPage> {
    const { after } = checkAccountsQuery(q);
    await this.#begin();
    const ids = (this.#sortedIds ??= [...this.#accounts.keys()].sort(byId));
    const prefix = q.prefix ?? '';
    const start = after !== undefined && after >= prefix ? after : prefix;
    // The first id after `start` (or at it, when it is the prefix and no cursor passed it).
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const id = ids[mid]!;
      if (id < start || (id === start && start === after)) lo = mid + 1;
      else hi = mid;
    }
    const accounts: AccountRecord[] = [];
    let i = lo;
    for (; i < ids.length && accounts.length < q.limit; i++) {
      if (!ids[i]!.startsWith(prefix)) break;
      accounts.push({ ...this.#accounts.get(ids[i]!)! });
    }
    const more = i < ids.length && ids[i]!.startsWith(prefix) && accounts.length > 0;
    await this.#settled();
    return { accounts, next_cursor: more ? accountsCursor(accounts[accounts.length - 1]!.id) : null };
  }

  async createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> {
    await this.#begin();
    const written = this.#createKey(key, audit);
    await (written ?? this.#settled());
    return written !== undefined;
  }

  async keyByDigest(digest: string): Promise<KeyRecord | undefined> {
    await this.#begin();
    const copy = this.#copy(this.#keys.get(this.#digests.get(digest) ?? ''));
    await this.#settled();
    return copy;
  }

  /** Holds are not journaled: a key's last use is recorded by touchKeys only. */
  readonly holdRecordsKeyUse = false;

  async keyWithAccount(digest: string): Promise<KeyWithAccount | undefined> {
    await this.#begin();
    const key = this.#copy(this.#keys.get(this.#digests.get(digest) ?? ''));
    const a = key === undefined ? undefined : this.#accounts.get(key.account);
    const team = key?.controls.team == null ? undefined : this.#teams.get(key.controls.team);
    const teamCopy = team === undefined || team.account !== key!.account ? undefined : structuredClone(team);
    await this.#settled();
    if (key === undefined) return undefined;
    return { key, account: a === undefined ? undefined : { ...a }, ...(teamCopy === undefined ? {} : { team: teamCopy }) };
  }

  async getKey(id: string): Promise<KeyRecord | undefined> {
    await this.#begin();
    const copy = this.#copy(this.#keys.get(id));
    await this.#settled();
    return copy;
  }

  async listKeys(account: string): Promise<KeyRecord[] | undefined> {
    await this.#begin();
    const list = this.#accounts.has(account)
      ? [...this.#accountKeys.get(account) ?? []].map((id) => this.#keys.get(id)!).filter((k) => k.revoked_at === null)
        .sort((a, b) => a.created_at - b.created_at).map((k) => this.#copy(k)!)
      : undefined;
    await this.#settled();
    return list;
  }

  async updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    await this.#begin();
    const key = this.#keys.get(id);
    if (key === undefined || key.revoked_at !== null) {
      await this.#settled();
      return undefined;
    }
    // Checked against the controls this very change replaces (nothing can come in between).
    check?.(this.#copy(key)!);
    this.#requireTeam(key.account, patch.team);
    const controls: KeyControls = applyPatch(key.controls, patch);
    const written = this.#change({ op: 'keyupdate', id, controls }, audit);
    const copy = this.#copy(key)!;
    this.#notifyKey(key, 'key-changed');
    await written;
    return copy;
  }

  async createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> {
    await this.#begin();
    requireId('account id', account);
    if (typeof id !== 'string' || !TEAM_ID.test(id)) throw new TypeError('team id must match TEAM_ID');
    if (toTeamSettings(settings) === null) throw new TypeError('team settings are malformed');
    let outcome: TeamCreated = 'created';
    if (!this.#accounts.has(account)) outcome = 'account_not_found';
    else if (this.#teams.has(id)) outcome = 'team_exists';
    if (outcome !== 'created') {
      await this.#settled();
      return outcome;
    }
    await this.#change({ op: 'team', id, account, created_at: Date.now(), settings: structuredClone(settings) }, audit);
    return outcome;
  }

  async getTeam(id: string): Promise<TeamRecord | undefined> {
    await this.#begin();
    const t = this.#teams.get(id);
    const copy = t === undefined ? undefined : structuredClone(t);
    await this.#settled();
    return copy;
  }

  async listTeams(account: string): Promise<TeamRecord[] | undefined> {
    await this.#begin();
    const list = this.#accounts.has(account)
      ? [...this.#accountTeams.get(account) ?? []].map((id) => structuredClone(this.#teams.get(id)!)).sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1))
      : undefined;
    await this.#settled();
    return list;
  }

  async updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> {
    await this.#begin();
    const team = this.#teams.get(id);
    if (team === undefined) {
      await this.#settled();
      return undefined;
    }
    const { id: _id, account: _a, created_at: _c, spent: _s, ...current } = team;
    const settings = applyTeamPatch(current, patch);
    const written = this.#change({ op: 'teamupdate', id, settings }, audit);
    const copy = structuredClone(team);
    // The team's keys' cached principals carry its limits and models: drop them everywhere.
    for (const k of this.#teamKeys(team.account, id)) this.#notifyKey(k, 'key-changed');
    await written;
    return copy;
  }

  async deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> {
    await this.#begin();
    const team = this.#teams.get(id);
    let outcome: TeamDeleted = 'deleted';
    if (team === undefined) outcome = 'not_found';
    else if (this.#teamKeys(team.account, id).length > 0) outcome = 'in_use';
    if (outcome !== 'deleted') {
      await this.#settled();
      return outcome;
    }
    await this.#change({ op: 'teamdelete', id }, audit);
    return outcome;
  }

  async rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    await this.#begin();
    if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    requireUnits('previousUntil', previousUntil);
    const key = this.#keys.get(id);
    if (key === undefined || key.revoked_at !== null || this.#digests.has(digest)) {
      await this.#settled();
      return undefined;
    }
    const before = this.#copy(key)!;
    const written = this.#change({ op: 'rotate', id, digest, last4, until: previousUntil }, audit);
    const copy = this.#copy(key)!;
    // The digests whose cached state is now wrong: the one rotated out, and one whose grace ended.
    this.#notifyKey(before, 'key-changed');
    await written;
    return copy;
  }

  async touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> {
    await this.#begin();
    const known = uses.filter((u) => this.#keys.has(u.id) && Number.isSafeInteger(u.at)).map((u): [string, number] => [u.id, u.at]);
    if (known.length === 0) return this.#settled();
    await this.#change({ op: 'used', uses: known });
  }

  async revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    await this.#begin();
    const key = this.#keys.get(id);
    if (key === undefined || key.revoked_at !== null) {
      const copy = this.#copy(key);
      // Revoking twice keeps the first time, and is answered as done: audited.
      await (key === undefined ? this.#settled() : this.#audited(audit));
      return copy;
    }
    const written = this.#change({ op: 'revoke', id, at: Date.now() }, audit);
    const copy = this.#copy(key);
    // Tell listeners at once: dropping a key from a cache early is always safe.
    this.#notifyKey(key, 'key');
    await written;
    return copy;
  }

  async revokeSession(sid: string, audit?: AuditEvent): Promise<void> {
    await this.#begin();
    requireId('session id', sid);
    if (this.#sessions.has(sid)) return this.#audited(audit);
    const written = this.#change({ op: 'session', sid }, audit);
    this.#notify({ kind: 'session', sid });
    await written;
  }

  async isSessionRevoked(sid: string): Promise<boolean> {
    await this.#begin();
    const revoked = this.#sessions.has(sid);
    await this.#settled();
    return revoked;
  }

  async seed(accounts: readonly AccountConfig[]): Promise<void> {
    await this.#begin();
    // All checks and changes happen in one synchronous pass; then one wait for the writes.
    const writes: Array<Promise<void> | undefined> = [];
    for (const a of accounts) {
      writes.push(this.#createAccount({ id: a.id, plan: a.plan, balance_units: a.wallet_units }));
      for (const key of seededKeys(a)) writes.push(this.#createKey({ id: keyIdOf(key.digest), account: a.id, ...key }));
    }
    await Promise.all([...writes, this.#settled()]);
  }

  async hold(h: HoldRequest): Promise<HoldResult | undefined> {
    await this.#begin();
    validateHold(h);
    const account = this.#accounts.get(h.account);
    let budget;
    let team;
    const key = h.key === undefined ? undefined : this.#keys.get(h.key.id);
    if (key !== undefined && key.account === h.account && h.key !== undefined) {
      const b = key.controls.budget;
      if (b !== null) budget = { units: b.units, period: b.period, spent: spentIn(key.spent.period, key.spent.units, periodId(b.period, h.key.periods)) };
      // The team the key names now: its budget is held in the same synchronous step.
      const t = key.controls.team === null ? undefined : this.#teams.get(key.controls.team);
      if (t !== undefined && t.account === h.account) {
        const tb = t.budget;
        team = {
          id: t.id,
          budget: tb === null ? undefined : { units: tb.units, period: tb.period, spent: spentIn(t.spent.period, t.spent.units, periodId(tb.period, h.key.periods)) },
        };
      }
    }
    const result = account === undefined ? undefined : this.#metering.hold(account, h, budget, team);
    await this.#settled();
    return result;
  }

  async settle(s: Settlement): Promise<SettleResult | undefined> {
    await this.#begin();
    validateSettlement(s);
    const account = this.#accounts.get(s.account);
    const repeated = account === undefined ? undefined : this.#metering.repeated(account, s.requestId);
    if (account === undefined || repeated !== undefined) {
      await this.#settled();
      return repeated;
    }
    const key = s.key === undefined ? undefined : this.#keys.get(s.key.id);
    let keyPart;
    if (key !== undefined && key.account === s.account && s.key !== undefined) {
      const b = key.controls.budget;
      const kpid = periodId(b?.period ?? null, s.key.periods);
      keyPart = { kpid, budgetLeft: b === null ? undefined : b.units - spentIn(key.spent.period, key.spent.units, kpid) };
    }
    // The team the hold counted against (a key moved to another team since still pays this one).
    const team = s.key?.team === undefined ? undefined : this.#teams.get(s.key.team);
    let teamPart;
    if (team !== undefined && team.account === s.account && s.key !== undefined) {
      const b = team.budget;
      const tpid = periodId(b?.period ?? null, s.key.periods);
      teamPart = { id: team.id, tpid, budgetLeft: b === null ? undefined : b.units - spentIn(team.spent.period, team.spent.units, tpid) };
    }
    const entry = this.#metering.entry(account, s, keyPart, teamPart);
    const written = this.#change(entry);
    const result: SettleResult = {
      applied: true,
      charged_units: entry.charged,
      balance_units: account.balance_units,
      available_units: account.balance_units - this.#metering.heldUnits(account.id),
      ...(keyPart === undefined || key === undefined ? {} : { key: { budget: key.controls.budget === null ? null : { ...key.controls.budget }, spent: { ...key.spent } } }),
      ...(teamPart === undefined || team === undefined ? {} : { team: { id: team.id, budget: team.budget === null ? null : { ...team.budget }, spent: { ...team.spent } } }),
    };
    await written;
    return result;
  }

  async unsettle(s: Settlement): Promise<UnsettleResult | undefined> {
    await this.#begin();
    validateSettlement(s);
    const account = this.#accounts.get(s.account);
    if (account === undefined) return undefined;
    const entry: UnsettleEntry = { op: 'unsettle', account: s.account, rid: s.requestId, tokens: s.promptTokens + s.completionTokens, day: s.day, month: s.month, at: Date.now() };
    const key = s.key === undefined ? undefined : this.#keys.get(s.key.id);
    if (key !== undefined && key.account === s.account && s.key !== undefined) {
      entry.key = key.id;
      entry.kpid = periodId(key.controls.budget?.period ?? null, s.key.periods);
    }
    const team = s.key?.team === undefined ? undefined : this.#teams.get(s.key.team);
    if (team !== undefined && team.account === s.account && s.key !== undefined) {
      entry.team = team.id;
      entry.tpid = periodId(team.budget?.period ?? null, s.key.periods);
    }
    const result = this.#undo(entry);
    // A repeat changed nothing: nothing to journal.
    if (result?.outcome === 'repeat') await this.#settled();
    else await this.#journal?.append(entry);
    return result === undefined ? undefined : { outcome: result.outcome, refunded_units: result.refunded };
  }

  /** Undoes a settlement (live or replayed); a refund takes its units out of the key's spend in the same period. */
  #undo(e: UnsettleEntry): ReturnType<MemoryMetering['undo']> {
    const r = this.#metering.undo(this.#accounts.get(e.account), e);
    if (r?.outcome !== 'refunded' || r.refunded === 0) return r;
    if (e.key !== undefined && e.kpid !== undefined) {
      const key = this.#keys.get(e.key);
      if (key !== undefined && key.spent.period === e.kpid) key.spent = { period: e.kpid, units: Math.max(0, key.spent.units - r.refunded) };
    }
    if (e.team !== undefined && e.tpid !== undefined) {
      const team = this.#teams.get(e.team);
      if (team !== undefined && team.spent.period === e.tpid) team.spent = { period: e.tpid, units: Math.max(0, team.spent.units - r.refunded) };
    }
    return r;
  }

  async release(account: string, requestId: string): Promise<void> {
    requireId('account id', account);
    requireRequestId(requestId);
    await this.#begin();
    this.#metering.release(account, requestId);
  }

  async accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    await this.#begin();
    const usage = this.#metering.usage(account, day, month);
    await this.#settled();
    return usage;
  }

  /**
   * With a `writeId` seen in the last WRITE_MARK_MS, a repeat waits for the first write and
   * appends nothing, unless that write failed with its record not in the file (as Redis marks
   * write ids): a record, and its totals, land once however often the write is asked.
   */
  async recordUsage(r: UsageRecord, writeId?: string): Promise<void> {
    await this.#begin();
    validateUsageRecord(r);
    const copy = { ...r };
    if (writeId === undefined) return this.#usageLog.record(copy);
    const now = Date.now();
    for (const [id, w] of this.#writes) {
      if (now - w.at < WRITE_MARK_MS) break;
      this.#writes.delete(id);
    }
    const first = this.#writes.get(writeId);
    if (first !== undefined) {
      try {
        await first.done;
        return;
      } catch (e) {
        if (e instanceof UsageWriteError && e.landed.has(first.record)) return;
      }
    }
    const write = { at: now, record: copy, done: this.#usageLog.record(copy) };
    this.#writes.delete(writeId);
    this.#writes.set(writeId, write);
    try {
      await write.done;
    } catch (e) {
      const landed = e instanceof UsageWriteError && e.landed.has(copy);
      if (!landed && this.#writes.get(writeId) === write) this.#writes.delete(writeId);
      throw e;
    }
  }

  async usageReport(account: string | undefined, since: number): Promise<UsageReport> {
    await this.#begin();
    return this.#usageLog.report(account, since);
  }

  async usageRecords(q: UsageQuery): Promise<UsagePage> {
    await this.#begin();
    return this.#usageLog.page(q);
  }

  async usageHourly(q: HourlyQuery): Promise<HourTotals[]> {
    checkRange(q.since, q.until);
    await this.#begin();
    return this.#usageLog.hourly(q.since, q.until, q.account);
  }

  async usageTop(q: TopQuery): Promise<TopRow[]> {
    checkRange(q.since, q.until);
    checkTop(q.by, q.limit);
    await this.#begin();
    return this.#usageLog.top(q.by, q.since, q.until, q.limit, q.account);
  }

  async usageTotals(q: TotalsQuery): Promise<TotalsRow[]> {
    checkTotalsQuery(q);
    await this.#begin();
    return this.#usageLog.totals(q);
  }

  usageRecordsRead(): number { return this.#usageLog.reads.n; }

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
      await this.#usageLog.close();
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
