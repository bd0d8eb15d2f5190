// The memory store's metering entries (./metering.ts): a settlement and its undoing as they are
// journaled, their parsing when read back from disk, and the checks of a hold's and a
// settlement's arguments before anything is held or charged.

import { requireId, requireRequestId } from '../rules.js';
import type { HoldRequest, Settlement } from '../types.js';

/** The journal entry of one settlement: the units actually charged, the tokens counted. */
// A type, not an interface: journal entries must be assignable to Record<string, unknown>.
export type SettleEntry = {
  op: 'settle';
  account: string;
  rid: string;
  charged: number;
  tokens: number;
  day: string;
  month: string;
  /** Unix ms of the settlement: when its request id may be forgotten. */
  at: number;
  /** The request's key and the budget period its spend counts in (absent: a JWT, or older entries). */
  key?: string;
  kpid?: string;
  /** The team its hold counted against, and the team budget's period (absent: none). */
  team?: string;
  tpid?: string;
};

/** The journal entry undoing a request's settlement (Store.unsettle), with the settlement's figures. */
export type UnsettleEntry = Omit<SettleEntry, 'op' | 'charged'> & { op: 'unsettle' };

/** What a settled id maps to once its settlement was undone (refunded or fenced): it debited nothing. */
export const UNDONE = -1;

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const MONTH = /^\d{4}-\d{2}$/;
export const str = (v: unknown): v is string => typeof v === 'string';
export const int = (v: unknown): v is number => Number.isSafeInteger(v);
export const count = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function toSettleEntry(v: Record<string, unknown>): SettleEntry | undefined {
  if (!(str(v.account) && str(v.rid) && count(v.charged) && count(v.tokens) && str(v.day) && str(v.month) && int(v.at))) return undefined;
  const e: SettleEntry = { op: 'settle', account: v.account, rid: v.rid, charged: v.charged, tokens: v.tokens, day: v.day, month: v.month, at: v.at };
  if (v.key !== undefined || v.kpid !== undefined) {
    if (!str(v.key) || !str(v.kpid)) return undefined;
    e.key = v.key;
    e.kpid = v.kpid;
  }
  return withTeam(e, v);
}

export function toUnsettleEntry(v: Record<string, unknown>): UnsettleEntry | undefined {
  if (!(str(v.account) && str(v.rid) && count(v.tokens) && str(v.day) && str(v.month) && int(v.at))) return undefined;
  const e: UnsettleEntry = { op: 'unsettle', account: v.account, rid: v.rid, tokens: v.tokens, day: v.day, month: v.month, at: v.at };
  if (v.key !== undefined || v.kpid !== undefined) {
    if (!str(v.key) || !str(v.kpid)) return undefined;
    e.key = v.key;
    e.kpid = v.kpid;
  }
  return withTeam(e, v);
}

/** An entry's team part (team and tpid, both or neither), or undefined when malformed. */
function withTeam<E extends SettleEntry | UnsettleEntry>(e: E, v: Record<string, unknown>): E | undefined {
  if (v.team === undefined && v.tpid === undefined) return e;
  if (!str(v.team) || !str(v.tpid)) return undefined;
  e.team = v.team;
  e.tpid = v.tpid;
  return e;
}

function requireWindows(day: unknown, month: unknown): void {
  if (typeof day !== 'string' || !DAY.test(day)) throw new TypeError('day must be YYYY-MM-DD');
  if (typeof month !== 'string' || !MONTH.test(month)) throw new TypeError('month must be YYYY-MM');
}

function requireCount(what: string, v: unknown): void {
  if (!count(v)) throw new RangeError(`${what} must be a non-negative safe integer`);
}

export function validateHold(h: HoldRequest): void {
  requireId('account id', h.account);
  requireRequestId(h.requestId);
  requireCount('units', h.units);
  if (typeof h.ttlMs !== 'number' || !(h.ttlMs > 0)) throw new RangeError('ttlMs must be a positive number');
  requireWindows(h.day, h.month);
  if (!isRecord(h.quotas)) throw new TypeError('quotas must be an object');
  for (const q of ['requests_per_day', 'tokens_per_day', 'units_per_month'] as const) {
    if (h.quotas[q] !== null) requireCount(`quotas.${q}`, h.quotas[q]);
  }
}

export function validateSettlement(s: Settlement): void {
  requireId('account id', s.account);
  requireRequestId(s.requestId);
  requireCount('units', s.units);
  requireCount('promptTokens', s.promptTokens);
  requireCount('completionTokens', s.completionTokens);
  requireWindows(s.day, s.month);
}

