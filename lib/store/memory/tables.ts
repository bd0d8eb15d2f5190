// The memory store's tables (./store.ts): accounts, credits, keys, sessions and teams, the
// changes of them as journaled and replayed, and their part of the snapshot. The parts of the
// store that answer the Store interface (./keys.ts, ./teams.ts, ./wallets.ts, ./usage.ts) read
// and check these tables and ask the store, through MemoryHost, to journal each change.

import type { AuditEvent, AccountRecord, KeyRecord, Revocation, TeamRecord } from '../types.js';
import { TeamNotFoundError, defaultControls } from '../rules.js';
import type { Entry, SnapshotState } from './state.js';

/** What the parts of the memory store ask of the store itself (./store.ts). */
export interface MemoryHost {
  /** Waits for loading; throws when the store cannot serve. */
  begin(): Promise<void>;
  /** Resolves once everything the state shows is written. */
  settled(): Promise<void>;
  /** Applies a change to the state and journals it (with its audit event); resolves once written. */
  change(entry: Entry, audit?: AuditEvent): Promise<void>;
  /** A write that changed nothing but is answered as done: its audit event alone, else the wait. */
  audited(audit: AuditEvent | undefined): Promise<void>;
  /** Journals an entry already applied; resolves once written. */
  append(entry: Entry): Promise<void>;
  /** Tells the revocation listeners. */
  notify(r: Revocation): void;
  /** Tells them a key's digests (current and previous) are revoked or changed. */
  notifyKey(k: KeyRecord, kind: 'key' | 'key-changed'): void;
}

/** The changes of the tables: every entry but the audit log's, metering's and the alerts'. */
export type TableEntry = Exclude<Entry, { op: 'audit' | 'settle' | 'unsettle' | 'alert' | 'alertd' | 'walarm' }>;

/** A copy callers may keep: nothing they do to it reaches the store's state. */
export function copyKey(k: KeyRecord | undefined): KeyRecord | undefined {
  return k === undefined ? undefined : structuredClone(k);
}

export class MemoryTables {
  readonly accounts = new Map<string, AccountRecord>();
  /** One account per plan in use (accounts are never deleted nor moved): accountsOnPlans(). */
  readonly planUser = new Map<string, string>();
  /** Account ids in ascending order, for listAccounts: sorted when first asked after a change. */
  sortedIds: string[] | null = null;
  readonly credits = new Map<string, Set<string>>();
  /** Keys by id; key ids by digest (current and previous digests); key ids by account. */
  readonly keys = new Map<string, KeyRecord>();
  readonly digests = new Map<string, string>();
  readonly accountKeys = new Map<string, Set<string>>();
  readonly sessions = new Set<string>();
  /** Teams by id (unique across the store); team ids by account. */
  readonly teams = new Map<string, TeamRecord>();
  readonly accountTeams = new Map<string, Set<string>>();

  /** Changes the tables. Shared by live changes and replay, so it tolerates repeats. */
  apply(e: TableEntry): void {
    switch (e.op) {
      case 'account':
        if (!this.accounts.has(e.id)) {
          this.accounts.set(e.id, { id: e.id, plan: e.plan, balance_units: e.balance_units, created_at: e.created_at });
          this.sortedIds = null;
          if (!this.planUser.has(e.plan)) this.planUser.set(e.plan, e.id);
        }
        return;
      case 'credit': {
        const account = this.accounts.get(e.account);
        if (account === undefined) return;
        let used = this.credits.get(e.account);
        if (used === undefined) this.credits.set(e.account, (used = new Set()));
        if (used.has(e.ik)) return;
        used.add(e.ik);
        account.balance_units += e.units;
        return;
      }
      case 'key':
        if (this.accounts.has(e.account) && !this.digests.has(e.digest) && !this.keys.has(e.id)) {
          this.addKey({
            id: e.id, account: e.account, digest: e.digest, created_at: e.created_at, revoked_at: null, last4: e.last4 ?? null,
            controls: e.controls ?? defaultControls(), previous: null, last_used_at: null, spent: { period: 'n', units: 0 },
          });
        }
        return;
      case 'revoke': {
        const key = this.keys.get(e.id);
        if (key !== undefined && key.revoked_at === null) key.revoked_at = e.at;
        return;
      }
      case 'keyupdate': {
        const key = this.keys.get(e.id);
        if (key !== undefined) key.controls = e.controls;
        return;
      }
      case 'rotate': {
        const key = this.keys.get(e.id);
        if (key === undefined || this.digests.has(e.digest)) return;
        if (key.previous !== null) this.digests.delete(key.previous.digest);
        key.previous = { digest: key.digest, until: e.until };
        key.digest = e.digest;
        key.last4 = e.last4;
        this.digests.set(e.digest, key.id);
        return;
      }
      case 'used':
        for (const [id, at] of e.uses) {
          const key = this.keys.get(id);
          if (key !== undefined && (key.last_used_at === null || key.last_used_at < at)) key.last_used_at = at;
        }
        return;
      case 'session':
        this.sessions.add(e.sid);
        return;
      case 'team':
        if (this.accounts.has(e.account) && !this.teams.has(e.id)) {
          this.addTeam({ id: e.id, account: e.account, created_at: e.created_at, ...structuredClone(e.settings), spent: { period: 'n', units: 0 } });
        }
        return;
      case 'teamupdate': {
        const team = this.teams.get(e.id);
        if (team !== undefined) Object.assign(team, structuredClone(e.settings));
        return;
      }
      case 'teamdelete': {
        const team = this.teams.get(e.id);
        if (team === undefined) return;
        this.teams.delete(e.id);
        this.accountTeams.get(team.account)?.delete(e.id);
        return;
      }
    }
  }

  snapshot(): Pick<SnapshotState, 'accounts' | 'keys' | 'sessions' | 'credits' | 'teams'> {
    return {
      accounts: [...this.accounts.values()],
      keys: [...this.keys.values()],
      sessions: [...this.sessions],
      credits: Object.fromEntries([...this.credits].map(([id, used]) => [id, [...used]])),
      teams: [...this.teams.values()],
    };
  }

  restore(s: SnapshotState): void {
    for (const a of s.accounts) {
      this.accounts.set(a.id, { ...a });
      this.sortedIds = null;
      if (!this.planUser.has(a.plan)) this.planUser.set(a.plan, a.id);
    }
    for (const k of s.keys) this.addKey({ ...k });
    for (const sid of s.sessions) this.sessions.add(sid);
    for (const [id, used] of Object.entries(s.credits)) this.credits.set(id, new Set(used));
    for (const t of s.teams) this.addTeam({ ...t });
  }

  addTeam(t: TeamRecord): void {
    this.teams.set(t.id, t);
    let ids = this.accountTeams.get(t.account);
    if (ids === undefined) this.accountTeams.set(t.account, (ids = new Set()));
    ids.add(t.id);
  }

  /** Throws TeamNotFoundError unless `team` (when named) is a team of `account`. */
  requireTeam(account: string, team: string | null | undefined): void {
    if (team === null || team === undefined) return;
    if (this.teams.get(team)?.account !== account) throw new TeamNotFoundError(team);
  }

  /** The live keys of an account that name `team`. */
  teamKeys(account: string, team: string): KeyRecord[] {
    return [...this.accountKeys.get(account) ?? []].map((id) => this.keys.get(id)!).filter((k) => k.revoked_at === null && k.controls.team === team);
  }

  addKey(k: KeyRecord): void {
    this.keys.set(k.id, k);
    this.digests.set(k.digest, k.id);
    if (k.previous !== null) this.digests.set(k.previous.digest, k.id);
    let ids = this.accountKeys.get(k.account);
    if (ids === undefined) this.accountKeys.set(k.account, (ids = new Set()));
    ids.add(k.id);
  }
}
