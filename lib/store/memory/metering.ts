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
//
// The journal entries and the checks of arguments are in ./metering-entries.ts; the books of
// open holds and settled ids in ./holds.ts.

import { UNDONE, count, int, isRecord, str, type SettleEntry, type UnsettleEntry } from './metering-entries.js';
import { AccountHolds, SettledIds } from './holds.js';
import type { AccountRecord, BudgetPeriod, HoldRequest, HoldResult, QuotaCode, SettleResult, Settlement, UsageTotals } from '../types.js';

export const SETTLED_TTL_MS = 3_600_000;
export const DAY_WINDOWS_KEPT = 40;
export const MONTH_WINDOWS_KEPT = 13;
const SWEEP_MS = 3_600_000;

/** The metering part of the snapshot. */
export interface MeteringSnapshot {
  /** [account, request id, settled at, units charged or UNDONE], each account's oldest first. */
  settled: [string, string, number, number][];
  /** Per account, per window ('YYYY-MM-DD' or 'YYYY-MM'): [requests, tokens, units]. */
  usage: Record<string, Record<string, [number, number, number]>>;
}

/** A key's budget as a hold sees it: its units and what its period has spent so far. */
export interface BudgetState { units: number; spent: number; period: BudgetPeriod }
const zero = (): UsageTotals => ({ requests: 0, tokens: 0, units: 0 });

/** Counts one settled request in usage window `w`. */
function counted(windows: Map<string, UsageTotals>, w: string, tokens: number, charged: number): void {
  let u = windows.get(w);
  if (u === undefined) windows.set(w, (u = zero()));
  u.requests += 1;
  u.tokens += tokens;
  u.units += charged;
}


export class MemoryMetering {
  /** Open holds per account. */
  readonly #holds = new Map<string, AccountHolds>();
  readonly #settled = new SettledIds();
  /** Usage per account, per window. */
  readonly #usage = new Map<string, Map<string, UsageTotals>>();
  #lastSweep = performance.now();

  /**
   * The account's open holds, expired ones purged; undefined when it has none. An account's
   * book is kept once empty, until the sweep (prune): at one request at a time, each request
   * made a book and its four maps anew (issue #46).
   */
  #holdsOf(account: string, now: number): AccountHolds | undefined {
    const holds = this.#holds.get(account);
    if (holds === undefined) return undefined;
    holds.purge(now);
    return holds.byRid.size === 0 ? undefined : holds;
  }

  /** Units held by the open holds of one key of the account. */
  keyHeldUnits(account: string, key: string): number {
    return this.#holdsOf(account, performance.now())?.perKey.get(key) ?? 0;
  }

  #window(account: string, window: string): UsageTotals {
    return this.#usage.get(account)?.get(window) ?? zero();
  }

  heldUnits(account: string): number {
    return this.#holdsOf(account, performance.now())?.units ?? 0;
  }

  /** Units held by the open holds counted against one team of the account. */
  teamHeldUnits(account: string, team: string): number {
    return this.#holdsOf(account, performance.now())?.perTeam.get(team) ?? 0;
  }

  /**
   * `budget`: the key's, when it has one; its open holds count against it as against the
   * wallet. `team`: the key's team, and its budget when it has one (checked after the key's).
   */
  hold(account: AccountRecord, h: HoldRequest, budget?: BudgetState, team?: { id: string; budget: BudgetState | undefined }): HoldResult {
    const now = performance.now();
    this.#maybeSweep(now);
    // What the account's open holds other than this request's own (a hold asked again) hold:
    // in all, of the day, with the key, against the team.
    const holds = this.#holdsOf(account.id, now);
    const own = holds?.byRid.get(h.requestId);
    const keyId = h.key?.id;
    let heldUnits = holds?.units ?? 0;
    let heldCount = holds?.perDay.get(h.day) ?? 0;
    let keyUnits = keyId === undefined ? 0 : holds?.perKey.get(keyId) ?? 0;
    let teamUnits = team === undefined ? 0 : holds?.perTeam.get(team.id) ?? 0;
    if (own !== undefined) {
      heldUnits -= own.units;
      if (own.day === h.day) heldCount--;
      if (keyId !== undefined && own.key === keyId) keyUnits -= own.units;
      if (team !== undefined && own.team === team.id) teamUnits -= own.units;
    }
    const available = account.balance_units - heldUnits;
    const day = this.#window(account.id, h.day);
    const month = this.#window(account.id, h.month);
    let quota: QuotaCode | undefined;
    const { requests_per_day: rpd, tokens_per_day: tpd, units_per_month: upm } = h.quotas;
    if (rpd !== null && day.requests + heldCount >= rpd) quota = 'requests_per_day';
    else if (tpd !== null && day.tokens >= tpd) quota = 'tokens_per_day';
    else if (upm !== null && month.units >= upm) quota = 'units_per_month';
    if (quota !== undefined) return { ok: false, code: 'quota_exceeded', quota_code: quota, available_units: available };
    if (budget !== undefined) {
      const remaining = budget.units - budget.spent - keyUnits;
      if (remaining < h.units) {
        return {
          ok: false, code: 'budget_exceeded', available_units: available, budget_remaining_units: Math.max(0, remaining), budget_period: budget.period,
          budget_scope: 'key',
        };
      }
    }
    if (team?.budget !== undefined) {
      const remaining = team.budget.units - team.budget.spent - teamUnits;
      if (remaining < h.units) {
        return {
          ok: false, code: 'budget_exceeded', available_units: available, budget_remaining_units: Math.max(0, remaining), budget_period: team.budget.period,
          budget_scope: 'team',
        };
      }
    }
    if (available < h.units) return { ok: false, code: 'insufficient_credits', available_units: available };
    let book = this.#holds.get(account.id);
    if (book === undefined) this.#holds.set(account.id, (book = new AccountHolds()));
    book.add(h.requestId, { units: h.units, day: h.day, expires: now + h.ttlMs, key: h.key?.id, team: team?.id });
    return team === undefined ? { ok: true, available_units: available - h.units } : { ok: true, available_units: available - h.units, team: team.id };
  }

  release(account: string, rid: string): void {
    this.#holds.get(account)?.delete(rid);
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
    counted(windows, e.day, e.tokens, e.charged);
    counted(windows, e.month, e.tokens, e.charged);
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
    for (const [account, book] of [...this.#holds]) {
      if (this.#holdsOf(account, now) === undefined) this.#holds.delete(account);
      else book.dropZeros();
    }
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
