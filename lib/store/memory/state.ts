// The memory store's journal entries and snapshot state (./store.ts), and their parsing:
// whatever is read back from disk is checked before it is applied.

import { toSettleEntry, toUnsettleEntry, type SettleEntry, type UnsettleEntry } from './metering-entries.js';
import { toAlertEntry, type AlertEntry } from './alerts.js';
import { TEAM_ID, defaultControls, int, isRecord, str, toControls, toTeamSettings, type TeamSettings } from '../rules.js';
import { toAuditEvent } from '../audit-rules.js';
import type { AuditEvent, KeyControls, KeyRecord, AccountRecord, TeamRecord } from '../types.js';

/**
 * One change, as journaled and as replayed. A write through the admin API or the console
 * carries its audit event in the same entry (`audit`); one that changed nothing but is
 * answered as done (a repeated credit, a second revocation), and an event without a store write
 * (a sign-in), is an `audit` entry of its own (./audit.ts).
 */
export type Entry = Change & { audit?: AuditEvent };

type Change =
  | { op: 'audit' }
  | { op: 'account'; id: string; plan: string; balance_units: number; created_at: number }
  | { op: 'credit'; account: string; units: number; ik: string }
  | { op: 'key'; id: string; account: string; digest: string; created_at: number; last4?: string | null; controls?: KeyControls }
  | { op: 'revoke'; id: string; at: number }
  | { op: 'keyupdate'; id: string; controls: KeyControls }
  | { op: 'rotate'; id: string; digest: string; last4: string; until: number }
  | { op: 'used'; uses: [string, number][] }
  | { op: 'session'; sid: string }
  | { op: 'team'; id: string; account: string; created_at: number; settings: TeamSettings }
  | { op: 'teamupdate'; id: string; settings: TeamSettings }
  | { op: 'teamdelete'; id: string }
  | SettleEntry
  | UnsettleEntry
  | AlertEntry;

export interface SnapshotState {
  accounts: AccountRecord[];
  keys: KeyRecord[];
  sessions: string[];
  /** Used idempotency keys per account. */
  credits: Record<string, string[]>;
  /** Teams (absent in snapshots from before teams). */
  teams: TeamRecord[];
  /** A MeteringSnapshot, checked by MemoryMetering.restore(); absent in snapshots from before metering. */
  metering?: unknown;
  /** The alerts outbox (MemoryAlerts.snapshot()); absent in snapshots from before alerts. */
  alerts?: unknown;
  /** The audit log (MemoryAudit.snapshot()); absent in snapshots from before it was journaled. */
  audit?: unknown;
}

export function toEntry(v: Record<string, unknown>): Entry | undefined {
  const change = toChange(v);
  if (change === undefined || v.audit === undefined) return change;
  const audit = toAuditEvent(v.audit);
  return audit === undefined ? undefined : { ...change, audit };
}

function toChange(v: Record<string, unknown>): Change | undefined {
  switch (v.op) {
    case 'audit':
      return v.audit === undefined ? undefined : { op: 'audit' };
    case 'account':
      return str(v.id) && str(v.plan) && int(v.balance_units) && int(v.created_at)
        ? { op: 'account', id: v.id, plan: v.plan, balance_units: v.balance_units, created_at: v.created_at } : undefined;
    case 'credit':
      return str(v.account) && int(v.units) && str(v.ik) ? { op: 'credit', account: v.account, units: v.units, ik: v.ik } : undefined;
    case 'key': {
      if (!(str(v.id) && str(v.account) && str(v.digest) && int(v.created_at))) return undefined;
      const controls = v.controls === undefined ? undefined : toControls(v.controls);
      if (controls === null || !(v.last4 === undefined || v.last4 === null || str(v.last4))) return undefined;
      return { op: 'key', id: v.id, account: v.account, digest: v.digest, created_at: v.created_at, last4: (v.last4 as string | null | undefined) ?? null, ...(controls === undefined ? {} : { controls }) };
    }
    case 'keyupdate': {
      const controls = toControls(v.controls);
      return str(v.id) && controls !== null ? { op: 'keyupdate', id: v.id, controls } : undefined;
    }
    case 'rotate':
      return str(v.id) && str(v.digest) && str(v.last4) && int(v.until) ? { op: 'rotate', id: v.id, digest: v.digest, last4: v.last4, until: v.until } : undefined;
    case 'used':
      return Array.isArray(v.uses) && v.uses.every((u) => Array.isArray(u) && u.length === 2 && str(u[0]) && int(u[1]))
        ? { op: 'used', uses: v.uses as [string, number][] } : undefined;
    case 'revoke':
      return str(v.id) && int(v.at) ? { op: 'revoke', id: v.id, at: v.at } : undefined;
    case 'session':
      return str(v.sid) ? { op: 'session', sid: v.sid } : undefined;
    case 'team': {
      const settings = toTeamSettings(v.settings);
      return str(v.id) && TEAM_ID.test(v.id) && str(v.account) && int(v.created_at) && settings !== null
        ? { op: 'team', id: v.id, account: v.account, created_at: v.created_at, settings } : undefined;
    }
    case 'teamupdate': {
      const settings = toTeamSettings(v.settings);
      return str(v.id) && settings !== null ? { op: 'teamupdate', id: v.id, settings } : undefined;
    }
    case 'teamdelete':
      return str(v.id) ? { op: 'teamdelete', id: v.id } : undefined;
    case 'settle':
      return toSettleEntry(v);
    case 'unsettle':
      return toUnsettleEntry(v);
    case 'alert':
    case 'alertd':
    case 'walarm':
      return toAlertEntry(v);
    default:
      return undefined;
  }
}

export function toSnapshotState(v: unknown): SnapshotState {
  const bad = (): never => { throw new Error('store snapshot: unexpected state'); };
  const list = (x: unknown): Record<string, unknown>[] =>
    Array.isArray(x) && x.every(isRecord) ? x : bad();
  if (!isRecord(v) || !isRecord(v.credits)) return bad();
  const credits: Record<string, string[]> = {};
  for (const [id, used] of Object.entries(v.credits)) credits[id] = Array.isArray(used) && used.every(str) ? used : bad();
  const sessions = Array.isArray(v.sessions) && v.sessions.every(str) ? v.sessions : bad();
  const accounts = list(v.accounts).map((a): AccountRecord =>
    str(a.id) && str(a.plan) && int(a.balance_units) && int(a.created_at)
      ? { id: a.id, plan: a.plan, balance_units: a.balance_units, created_at: a.created_at } : bad());
  const keys = list(v.keys).map((k): KeyRecord => {
    if (!(str(k.id) && str(k.account) && str(k.digest) && int(k.created_at) && (k.revoked_at === null || int(k.revoked_at)))) return bad();
    // Snapshots from before per-key controls hold only the fields above.
    const controls = k.controls === undefined ? defaultControls() : toControls(k.controls) ?? bad();
    const prev = k.previous;
    const previous = prev === undefined || prev === null ? null
      : isRecord(prev) && str(prev.digest) && int(prev.until) ? { digest: prev.digest, until: prev.until } : bad();
    const sp = k.spent;
    const spent = sp === undefined ? { period: 'n', units: 0 } : isRecord(sp) && str(sp.period) && int(sp.units) ? { period: sp.period, units: sp.units } : bad();
    const last4 = k.last4 === undefined || k.last4 === null ? null : str(k.last4) ? k.last4 : bad();
    const used = k.last_used_at === undefined || k.last_used_at === null ? null : int(k.last_used_at) ? k.last_used_at : bad();
    return { id: k.id, account: k.account, digest: k.digest, created_at: k.created_at, revoked_at: k.revoked_at, last4, controls, previous, last_used_at: used, spent };
  });
  const teams = v.teams === undefined ? [] : list(v.teams).map((t): TeamRecord => {
    const settings = toTeamSettings(t) ?? bad();
    const sp = t.spent;
    if (!(str(t.id) && TEAM_ID.test(t.id) && str(t.account) && int(t.created_at) && isRecord(sp) && str(sp.period) && int(sp.units))) return bad();
    return { id: t.id, account: t.account, created_at: t.created_at, ...settings, spent: { period: sp.period, units: sp.units } };
  });
  // The metering part is checked when it is restored (MemoryMetering.restore).
  return {
    accounts, keys, sessions, credits, teams, metering: v.metering,
    ...(v.alerts === undefined ? {} : { alerts: v.alerts }), ...(v.audit === undefined ? {} : { audit: v.audit }),
  };
}
