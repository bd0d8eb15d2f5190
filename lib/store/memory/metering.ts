// Metering state of the memory store (./store.ts): holds, settled request ids and usage
// windows. Every method is synchronous, so a check and the change it decides are atomic in
// this single-threaded process; the store journals settlements around these calls.
//
// - Holds live in memory only and are never journaled: a restart drops them, which is the same
//   as their TTL running out (a crashed instance's holds). Expired holds are ignored everywhere
//   and purged lazily (when their account is touched, and in an hourly sweep). Their expiry
//   uses the monotonic clock, so a wall-clock jump neither frees nor pins them.
// - A settlement is one journal entry ({op: 'settle'}: debit + usage + request id), and so is
//   its undoing ({op: 'unsettle'}: see Store.unsettle), which leaves the id settled as UNDONE.
//   Settled
//   request ids (with the units first charged) are remembered for SETTLED_TTL_MS (an hour):
//   a retry within that time never charges twice (see SETTLED_KEEP_MS in ../redis/metering.ts
//   for why an hour is ample). Older ids are dropped as new settlements
//   arrive and when a snapshot is taken, so they survive a restart only until then.
// - Usage totals per account per UTC day and month are part of the snapshot; day windows older
//   than DAY_WINDOWS_KEPT days and month windows older than MONTH_WINDOWS_KEPT months are
//   dropped at snapshot time (and in the hourly sweep).
// - Quotas are checked before credits: a hold that breaks both is refused as quota_exceeded.
//   requests_per_day counts the day's settled requests plus the account's open holds for that
//   day; a hold's own request id (re-holding it replaces the old hold) is not counted twice.

import { flattened } from '../../strings.js';
import { requireId, requireRequestId } from '../rules.js';
import type { AccountRecord, BudgetPeriod, HoldRequest, HoldResult, QuotaCode, SettleResult, Settlement, UsageTotals } from '../types.js';

export const SETTLED_TTL_MS = 3_600_000;
export const DAY_WINDOWS_KEPT = 40;
export const MONTH_WINDOWS_KEPT = 13;
const SWEEP_MS = 3_600_000;

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
export type UnsettleEntry = {
  op: 'unsettle';
  account: string;
  rid: string;
  tokens: number;
  day: string;
  month: string;
  at: number;
  key?: string;
  kpid?: string;
  team?: string;
  tpid?: string;
};

/** What a settled id maps to once its settlement was undone (refunded or fenced): it debited nothing. */
export const UNDONE = -1;

/** The metering part of the snapshot. */
export interface MeteringSnapshot {
  /** [account, request id, settled at, units charged or UNDONE], each account's oldest first. */
  settled: [string, string, number, number][];
  /** Per account, per window ('YYYY-MM-DD' or 'YYYY-MM'): [requests, tokens, units]. */
  usage: Record<string, Record<string, [number, number, number]>>;
}

interface Hold { units: number; day: string; expires: number; key: string | undefined; team: string | undefined }

/** A key's budget as a hold sees it: its units and what its period has spent so far. */
export interface BudgetState { units: number; spent: number; period: BudgetPeriod }

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const MONTH = /^\d{4}-\d{2}$/;
const str = (v: unknown): v is string => typeof v === 'string';
const int = (v: unknown): v is number => Number.isSafeInteger(v);
const count = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

function isRecord(v: unknown): v is Record<string, unknown> {
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

const zero = (): UsageTotals => ({ requests: 0, tokens: 0, units: 0 });

/**
 * One account's open holds, with their running totals, so that a hold or a settle does not walk
 * every hold of the account (at 64 requests in flight that walk was the store's main cost).
 * `soonest` is no later than the earliest expiry among them: until then none has expired and
 * the totals are exact; from then on the holds are walked once, expired ones purged, and the
 * totals recomputed.
 */
class AccountHolds {
  readonly byRid = new Map<string, Hold>();
  units = 0;
  /** Open holds per UTC day. */
  readonly perDay = new Map<string, number>();
  /** Units held per key id. (Sums stay exact: holds are only taken while they fit a balance below 2^53.) */
  readonly perKey = new Map<string, number>();
  /** Units held per team id. */
  readonly perTeam = new Map<string, number>();
  soonest = Infinity;

  add(rid: string, h: Hold): void {
    const old = this.byRid.get(rid);
    if (old !== undefined) this.#forget(old);
    this.byRid.set(rid, h);
    this.units += h.units;
    this.perDay.set(h.day, (this.perDay.get(h.day) ?? 0) + 1);
    if (h.key !== undefined) this.perKey.set(h.key, (this.perKey.get(h.key) ?? 0) + h.units);
    if (h.team !== undefined) this.perTeam.set(h.team, (this.perTeam.get(h.team) ?? 0) + h.units);
    if (h.expires < this.soonest) this.soonest = h.expires;
  }

  delete(rid: string): void {
    const h = this.byRid.get(rid);
    if (h === undefined) return;
    this.byRid.delete(rid);
    this.#forget(h);
  }

  #forget(h: Hold): void {
    this.units -= h.units;
    const n = this.perDay.get(h.day)! - 1;
    if (n === 0) this.perDay.delete(h.day);
    else this.perDay.set(h.day, n);
    if (h.key !== undefined) {
      // A key with nothing left held reads as 0 whether or not its entry is kept.
      const k = this.perKey.get(h.key)! - h.units;
      if (k === 0) this.perKey.delete(h.key);
      else this.perKey.set(h.key, k);
    }
    if (h.team !== undefined) {
      const t = this.perTeam.get(h.team)! - h.units;
      if (t === 0) this.perTeam.delete(h.team);
      else this.perTeam.set(h.team, t);
    }
  }

  /** Drops the holds expired at `now` (monotonic ms), when any may have. */
  purge(now: number): void {
    if (now < this.soonest) return;
    let soonest = Infinity;
    for (const [rid, h] of this.byRid) {
      if (h.expires <= now) this.delete(rid);
      else if (h.expires < soonest) soonest = h.expires;
    }
    this.soonest = soonest;
  }
}

/**
 * Settled request ids, with the units each was first charged, forgotten SETTLED_TTL_MS after.
 * There is one per metered request for an hour (3.6 million at 1,000 requests a second), so
 * they are kept lean: per account, a Map from the id (flat) to the units, and the times in runs,
 * one time and one count per second in which the account settled, not one time per id. About
 * 110 bytes an id for a UUID, where a map from an account-and-id string to [time, units] took 190.
 * A run is forgotten once its first id is past the hour (its others up to a second early).
 */
class SettledIds {
  readonly #accounts = new Map<string, AccountSettled>();

  get(account: string, rid: string): number | undefined {
    return this.#accounts.get(account)?.ids.get(rid);
  }

  /** Marks an id settled before as UNDONE (its place in the runs, and so its age, unchanged). */
  undo(account: string, rid: string): void {
    const ids = this.#accounts.get(account)?.ids;
    if (ids?.has(rid) === true) ids.set(rid, UNDONE);
  }

  /** Adds an id not settled before (callers check); its account's expired runs are forgotten. */
  add(account: string, rid: string, at: number, charged: number, cutoff: number): void {
    let a = this.#accounts.get(account);
    if (a === undefined) this.#accounts.set(account, (a = new AccountSettled()));
    a.add(flattened(rid), at, charged);
    a.forget(cutoff);
  }

  /** Forgets every account's ids settled before `cutoff`. */
  forget(cutoff: number): void {
    for (const [account, a] of this.#accounts) {
      a.forget(cutoff);
      if (a.ids.size === 0) this.#accounts.delete(account);
    }
  }

  /** [account, request id, settled at (its run's time), units], each account's oldest first. */
  *entries(): Generator<[string, string, number, number]> {
    for (const [account, a] of this.#accounts) {
      let run = a.head;
      let left = a.counts[run] ?? 0;
      for (const [rid, charged] of a.ids) {
        while (left === 0) left = a.counts[++run]!;
        left--;
        yield [account, rid, a.times[run]!, charged];
      }
    }
  }
}

class AccountSettled {
  readonly ids = new Map<string, number>();
  /** Runs of ids in settlement order (the Map's order): the first id's time, and how many. */
  times: number[] = [];
  counts: number[] = [];
  head = 0;

  add(rid: string, at: number, charged: number): void {
    this.ids.set(rid, charged);
    const last = this.times.length - 1;
    if (last >= this.head && Math.floor(this.times[last]! / 1000) === Math.floor(at / 1000)) this.counts[last]!++;
    else {
      this.times.push(at);
      this.counts.push(1);
    }
  }

  forget(cutoff: number): void {
    let dropped = 0;
    while (this.head < this.times.length && this.times[this.head]! < cutoff) dropped += this.counts[this.head++]!;
    if (dropped === 0) return;
    for (const rid of this.ids.keys()) {
      this.ids.delete(rid);
      if (--dropped === 0) break;
    }
    // The arrays are cut once their forgotten half is worth moving.
    if (this.head > 64 && this.head * 2 > this.times.length) {
      this.times = this.times.slice(this.head);
      this.counts = this.counts.slice(this.head);
      this.head = 0;
    }
  }
}

export class MemoryMetering {
  /** Open holds per account. */
  readonly #holds = new Map<string, AccountHolds>();
  readonly #settled = new SettledIds();
  /** Usage per account, per window. */
  readonly #usage = new Map<string, Map<string, UsageTotals>>();
  #lastSweep = performance.now();

  /**
   * Units held by the account's open holds (purging expired ones), except request `except`;
   * how many are of `day`, and the units of those made with key `key`.
   */
  #held(account: string, now: number, except?: string, day?: string, key?: string, team?: string): { units: number; count: number; keyUnits: number; teamUnits: number } {
    const holds = this.#holds.get(account);
    if (holds === undefined) return { units: 0, count: 0, keyUnits: 0, teamUnits: 0 };
    holds.purge(now);
    if (holds.byRid.size === 0) {
      this.#holds.delete(account);
      return { units: 0, count: 0, keyUnits: 0, teamUnits: 0 };
    }
    let units = holds.units;
    let n = day === undefined ? 0 : holds.perDay.get(day) ?? 0;
    let keyUnits = key === undefined ? 0 : holds.perKey.get(key) ?? 0;
    let teamUnits = team === undefined ? 0 : holds.perTeam.get(team) ?? 0;
    const own = except === undefined ? undefined : holds.byRid.get(except);
    if (own !== undefined) {
      units -= own.units;
      if (own.day === day) n--;
      if (key !== undefined && own.key === key) keyUnits -= own.units;
      if (team !== undefined && own.team === team) teamUnits -= own.units;
    }
    return { units, count: n, keyUnits, teamUnits };
  }

  /** Units held by the open holds of one key of the account. */
  keyHeldUnits(account: string, key: string): number {
    return this.#held(account, performance.now(), undefined, undefined, key).keyUnits;
  }

  #window(account: string, window: string): UsageTotals {
    return this.#usage.get(account)?.get(window) ?? zero();
  }

  heldUnits(account: string): number {
    return this.#held(account, performance.now()).units;
  }

  /** Units held by the open holds counted against one team of the account. */
  teamHeldUnits(account: string, team: string): number {
    return this.#held(account, performance.now(), undefined, undefined, undefined, team).teamUnits;
  }

  /**
   * `budget`: the key's, when it has one; its open holds count against it as against the
   * wallet. `team`: the key's team, and its budget when it has one (checked after the key's).
   */
  hold(account: AccountRecord, h: HoldRequest, budget?: BudgetState, team?: { id: string; budget: BudgetState | undefined }): HoldResult {
    const now = performance.now();
    this.#maybeSweep(now);
    const held = this.#held(account.id, now, h.requestId, h.day, h.key?.id, team?.id);
    const available = account.balance_units - held.units;
    const day = this.#window(account.id, h.day);
    const month = this.#window(account.id, h.month);
    let quota: QuotaCode | undefined;
    const { requests_per_day: rpd, tokens_per_day: tpd, units_per_month: upm } = h.quotas;
    if (rpd !== null && day.requests + held.count >= rpd) quota = 'requests_per_day';
    else if (tpd !== null && day.tokens >= tpd) quota = 'tokens_per_day';
    else if (upm !== null && month.units >= upm) quota = 'units_per_month';
    if (quota !== undefined) return { ok: false, code: 'quota_exceeded', quota_code: quota, available_units: available };
    if (budget !== undefined) {
      const remaining = budget.units - budget.spent - held.keyUnits;
      if (remaining < h.units) {
        return {
          ok: false, code: 'budget_exceeded', available_units: available, budget_remaining_units: Math.max(0, remaining), budget_period: budget.period,
          budget_scope: 'key',
        };
      }
    }
    if (team?.budget !== undefined) {
      const remaining = team.budget.units - team.budget.spent - held.teamUnits;
      if (remaining < h.units) {
        return {
          ok: false, code: 'budget_exceeded', available_units: available, budget_remaining_units: Math.max(0, remaining), budget_period: team.budget.period,
          budget_scope: 'team',
        };
      }
    }
    if (available < h.units) return { ok: false, code: 'insufficient_credits', available_units: available };
    let holds = this.#holds.get(account.id);
    if (holds === undefined) this.#holds.set(account.id, (holds = new AccountHolds()));
    holds.add(h.requestId, { units: h.units, day: h.day, expires: now + h.ttlMs, key: h.key?.id, team: team?.id });
    return team === undefined ? { ok: true, available_units: available - h.units } : { ok: true, available_units: available - h.units, team: team.id };
  }

  release(account: string, rid: string): void {
    const holds = this.#holds.get(account);
    if (holds === undefined) return;
    holds.delete(rid);
    if (holds.byRid.size === 0) this.#holds.delete(account);
  }

  /** The outcome of a repeated settlement, or undefined when the request id is new. */
  repeated(account: AccountRecord, rid: string): SettleResult | undefined {
    const charged = this.#settled.get(account.id, rid);
    if (charged === undefined) return undefined;
    return { applied: false, charged_units: Math.max(0, charged), balance_units: account.balance_units, available_units: account.balance_units - this.heldUnits(account.id) };
  }

  /**
   * The journal entry settling `s` now: the cost, capped at what the balance covers and, for a
   * key with a budget, at what is left of it (`budgetLeft`); `kpid` the key's period.
   */
  entry(
    account: AccountRecord, s: Settlement, key?: { kpid: string; budgetLeft: number | undefined },
    team?: { id: string; tpid: string; budgetLeft: number | undefined },
  ): SettleEntry {
    let charged = Math.min(s.units, Math.max(0, account.balance_units));
    if (key?.budgetLeft !== undefined) charged = Math.min(charged, Math.max(0, key.budgetLeft));
    if (team?.budgetLeft !== undefined) charged = Math.min(charged, Math.max(0, team.budgetLeft));
    const e: SettleEntry = { op: 'settle', account: account.id, rid: s.requestId, charged, tokens: s.promptTokens + s.completionTokens, day: s.day, month: s.month, at: Date.now() };
    if (key !== undefined && s.key !== undefined) {
      e.key = s.key.id;
      e.kpid = key.kpid;
    }
    if (team !== undefined) {
      e.team = team.id;
      e.tpid = team.tpid;
    }
    return e;
  }

  /** Applies a settlement (live or replayed); false when its request id was settled already. */
  apply(account: AccountRecord | undefined, e: SettleEntry): boolean {
    if (account === undefined) return false;
    if (this.#settled.get(e.account, e.rid) !== undefined) return false;
    // Kept an hour: flat (the request id may be a deep tree of cons strings, see flattened()).
    this.#settled.add(e.account, e.rid, e.at, e.charged, Date.now() - SETTLED_TTL_MS);
    account.balance_units -= e.charged;
    this.release(e.account, e.rid);
    let windows = this.#usage.get(e.account);
    if (windows === undefined) this.#usage.set(e.account, (windows = new Map()));
    for (const w of [e.day, e.month]) {
      let u = windows.get(w);
      if (u === undefined) windows.set(w, (u = zero()));
      u.requests += 1;
      u.tokens += e.tokens;
      u.units += e.charged;
    }
    return true;
  }

  /**
   * Applies the undoing of a settlement (live or replayed): a settlement that landed is given
   * back (balance, usage windows), one that did not is fenced (its id settled as UNDONE). The
   * outcome, with the units given back (the key's spend is the caller's: store.ts).
   */
  undo(account: AccountRecord | undefined, e: UnsettleEntry): { outcome: 'refunded' | 'fenced' | 'repeat'; refunded: number } | undefined {
    if (account === undefined) return undefined;
    const charged = this.#settled.get(e.account, e.rid);
    if (charged === UNDONE) return { outcome: 'repeat', refunded: 0 };
    if (charged === undefined) {
      this.#settled.add(e.account, e.rid, e.at, UNDONE, Date.now() - SETTLED_TTL_MS);
      return { outcome: 'fenced', refunded: 0 };
    }
    this.#settled.undo(e.account, e.rid);
    account.balance_units += charged;
    const windows = this.#usage.get(e.account);
    for (const w of [e.day, e.month]) {
      const u = windows?.get(w);
      if (u === undefined) continue;
      u.requests = Math.max(0, u.requests - 1);
      u.tokens = Math.max(0, u.tokens - e.tokens);
      u.units = Math.max(0, u.units - charged);
    }
    return { outcome: 'refunded', refunded: charged };
  }

  usage(account: string, day: string, month: string): { held_units: number; day: UsageTotals; month: UsageTotals } {
    return { held_units: this.heldUnits(account), day: { ...this.#window(account, day) }, month: { ...this.#window(account, month) } };
  }

  #maybeSweep(now: number): void {
    if (now - this.#lastSweep < SWEEP_MS) return;
    this.#lastSweep = now;
    this.prune();
  }

  /** Drops expired holds, settled ids past their hour and old usage windows. */
  prune(): void {
    const now = performance.now();
    for (const account of [...this.#holds.keys()]) this.#held(account, now);
    this.#settled.forget(Date.now() - SETTLED_TTL_MS);
    const today = new Date();
    const oldestDay = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - DAY_WINDOWS_KEPT)).toISOString().slice(0, 10);
    const oldestMonth = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - MONTH_WINDOWS_KEPT, 1)).toISOString().slice(0, 7);
    for (const [account, windows] of this.#usage) {
      for (const w of windows.keys()) {
        if (w.length === 10 ? w < oldestDay : w < oldestMonth) windows.delete(w);
      }
      if (windows.size === 0) this.#usage.delete(account);
    }
  }

  /** The durable part (holds are not), pruned first. */
  snapshot(): MeteringSnapshot {
    this.prune();
    const settled: MeteringSnapshot['settled'] = [...this.#settled.entries()];
    const usage: MeteringSnapshot['usage'] = {};
    for (const [account, windows] of this.#usage) {
      usage[account] = Object.fromEntries([...windows].map(([w, u]) => [w, [u.requests, u.tokens, u.units]]));
    }
    return { settled, usage };
  }

  /** Loads a snapshot's metering part; undefined (a snapshot from before metering) is empty. */
  restore(v: unknown): void {
    if (v === undefined) return;
    const bad = (): never => { throw new Error('store snapshot: unexpected metering state'); };
    if (!isRecord(v) || !Array.isArray(v.settled) || !isRecord(v.usage)) return bad();
    for (const s of v.settled) {
      if (!Array.isArray(s) || s.length !== 4 || !str(s[0]) || !str(s[1]) || !int(s[2]) || !(count(s[3]) || s[3] === UNDONE)) return bad();
      if (this.#settled.get(s[0], s[1]) === undefined) this.#settled.add(s[0], s[1], s[2], s[3], -Infinity);
    }
    for (const [account, windows] of Object.entries(v.usage)) {
      if (!isRecord(windows)) return bad();
      const map = new Map<string, UsageTotals>();
      for (const [w, u] of Object.entries(windows)) {
        if (!Array.isArray(u) || u.length !== 3) return bad();
        const [requests, tokens, units] = u as unknown[];
        if (!count(requests) || !count(tokens) || !count(units)) return bad();
        map.set(w, { requests, tokens, units });
      }
      this.#usage.set(account, map);
    }
  }
}
