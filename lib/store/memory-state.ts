// The memory store's journal entries and snapshot state (./memory.ts), and their parsing:
// whatever is read back from disk is checked before it is applied.

import { toSettleEntry, type SettleEntry } from './memory-metering.js';
import type { AccountRecord, KeyRecord } from './types.js';

/** One change, as journaled and as replayed. */
export type Entry =
  | { op: 'account'; id: string; plan: string; balance_units: number; created_at: number }
  | { op: 'credit'; account: string; units: number; ik: string }
  | { op: 'key'; id: string; account: string; digest: string; created_at: number }
  | { op: 'revoke'; id: string; at: number }
  | { op: 'session'; sid: string }
  | SettleEntry;

export interface SnapshotState {
  accounts: AccountRecord[];
  keys: KeyRecord[];
  sessions: string[];
  /** Used idempotency keys per account. */
  credits: Record<string, string[]>;
  /** A MeteringSnapshot, checked by MemoryMetering.restore(); absent in snapshots from before metering. */
  metering?: unknown;
}

const str = (v: unknown): v is string => typeof v === 'string';
const int = (v: unknown): v is number => Number.isSafeInteger(v);

export function toEntry(v: Record<string, unknown>): Entry | undefined {
  switch (v.op) {
    case 'account':
      return str(v.id) && str(v.plan) && int(v.balance_units) && int(v.created_at)
        ? { op: 'account', id: v.id, plan: v.plan, balance_units: v.balance_units, created_at: v.created_at } : undefined;
    case 'credit':
      return str(v.account) && int(v.units) && str(v.ik) ? { op: 'credit', account: v.account, units: v.units, ik: v.ik } : undefined;
    case 'key':
      return str(v.id) && str(v.account) && str(v.digest) && int(v.created_at)
        ? { op: 'key', id: v.id, account: v.account, digest: v.digest, created_at: v.created_at } : undefined;
    case 'revoke':
      return str(v.id) && int(v.at) ? { op: 'revoke', id: v.id, at: v.at } : undefined;
    case 'session':
      return str(v.sid) ? { op: 'session', sid: v.sid } : undefined;
    case 'settle':
      return toSettleEntry(v);
    default:
      return undefined;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
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
  const keys = list(v.keys).map((k): KeyRecord =>
    str(k.id) && str(k.account) && str(k.digest) && int(k.created_at) && (k.revoked_at === null || int(k.revoked_at))
      ? { id: k.id, account: k.account, digest: k.digest, created_at: k.created_at, revoked_at: k.revoked_at } : bad());
  // The metering part is checked when it is restored (MemoryMetering.restore).
  return { accounts, keys, sessions, credits, metering: v.metering };
}
