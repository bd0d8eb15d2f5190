// Budgets per end user (CONTRACT section 20): a key's `end_user_budget: {units, period}` caps
// each of its end users separately. Each (key, end user) has its spend per budget period and its
// open holds; a hold is refused when spend + open holds + the request's worst case would pass
// the cap, and counts until it is settled (its actual cost added to the spend, once per request
// id) or released, or its ttl passes. The check and the hold are one step (Redis: one script),
// so two instances on one Redis never overshoot. The wallet's hold comes first (quotas, the
// key's and its team's budgets), this one after it (../billing/meter.ts): a refusal here
// releases the wallet's hold.

import type { TotalsQuery, TotalsRow } from './usage-types.js';

/** A hold for one end user of one key. */
export interface EndUserHold {
  /** The key's account. */
  account: string;
  keyId: string;
  endUser: string;
  /** The budget period the request falls in (periodId: 'd:2026-12-07', 'm:2026-12', 'n' for never). */
  period: string;
  requestId: string;
  units: number;
  /** The budget's units. */
  cap: number;
  ttlMs: number;
}

export type EndUserHoldResult = { ok: true } | { ok: false; remaining_units: number };

/** A hold's settlement: `units` (the request's actual debit) added to the period's spend, once. */
export interface EndUserSettlement { keyId: string; endUser: string; period: string; requestId: string; units: number }

/** The end users' budgets, as a store keeps them. */
export interface EndUserLedger {
  hold(h: EndUserHold): Promise<EndUserHoldResult>;
  settle(s: EndUserSettlement): Promise<void>;
  release(keyId: string, endUser: string, requestId: string): Promise<void>;
  /** What the end user spent in `period` (settled), for views and tests. */
  spent(keyId: string, endUser: string, period: string): Promise<number>;
}

/** Settlements remembered (by request id) so that a repeated one adds nothing: a day. */
export const SETTLED_MARK_MS = 86_400_000;

/** What an end user spent in a period by the usage totals (the records the store keeps). */
export type SpentBefore = (account: string, keyId: string, endUser: string, period: string) => Promise<number>;

/**
 * The ledger of one process (the memory store's): exact within it. An end user's spend in a
 * period is first read from the usage totals (`before`: what the records kept by the store say,
 * so a restart of a store with a path starts from them), then kept here.
 */
export class MemoryEndUsers implements EndUserLedger {
  readonly #before: SpentBefore | undefined;
  /** Reads of `before` in flight, per user and period. */
  readonly #loading = new Map<string, Promise<number>>();

  constructor(before?: SpentBefore) {
    this.#before = before;
  }

  /** KEY<NUL>END USER -> its spend per period and its open holds. */
  readonly #users = new Map<string, { spent: Map<string, number>; holds: Map<string, { units: number; expires: number }> }>();
  /** Settled request ids, with when they may be forgotten. */
  readonly #settled = new Map<string, number>();

  #user(keyId: string, endUser: string) {
    const k = `${keyId}\u0000${endUser}`;
    let u = this.#users.get(k);
    if (u === undefined) this.#users.set(k, (u = { spent: new Map(), holds: new Map() }));
    return u;
  }

  async hold(h: EndUserHold): Promise<EndUserHoldResult> {
    const u = this.#user(h.keyId, h.endUser);
    if (!u.spent.has(h.period) && this.#before !== undefined) {
      const k = `${h.keyId}\u0000${h.endUser}\u0000${h.period}`;
      let load = this.#loading.get(k);
      if (load === undefined) {
        load = this.#before(h.account, h.keyId, h.endUser, h.period).finally(() => this.#loading.delete(k));
        this.#loading.set(k, load);
      }
      const before = await load;
      // Set once: settlements that landed meanwhile were added to it already.
      if (!u.spent.has(h.period)) this.#setSpent(u.spent, h.period, before);
    }
    return this.#hold(u, h);
  }

  #hold(u: { spent: Map<string, number>; holds: Map<string, { units: number; expires: number }> }, h: EndUserHold): EndUserHoldResult {
    const now = Date.now();
    let held = 0;
    for (const [id, x] of u.holds) {
      if (x.expires <= now) u.holds.delete(id);
      else if (id !== h.requestId) held += x.units;
    }
    const left = h.cap - (u.spent.get(h.period) ?? 0) - held;
    if (h.units > left) return { ok: false, remaining_units: Math.max(0, left) };
    u.holds.set(h.requestId, { units: h.units, expires: now + h.ttlMs });
    return { ok: true };
  }

  #setSpent(spent: Map<string, number>, period: string, units: number): void {
    // Only the current and the last periods matter to a hold: older ones are dropped.
    if (!spent.has(period) && spent.size >= 2) spent.delete(spent.keys().next().value!);
    spent.set(period, units);
  }

  settle(s: EndUserSettlement): Promise<void> {
    const now = Date.now();
    if ((this.#settled.get(s.requestId) ?? 0) > now) return Promise.resolve();
    if (this.#settled.size > 100_000) for (const [id, until] of this.#settled) if (until <= now) this.#settled.delete(id);
    this.#settled.set(s.requestId, now + SETTLED_MARK_MS);
    const u = this.#user(s.keyId, s.endUser);
    u.holds.delete(s.requestId);
    // A period not read yet is read at its first hold (its records count this settlement then).
    if (u.spent.has(s.period) || this.#before === undefined) this.#setSpent(u.spent, s.period, (u.spent.get(s.period) ?? 0) + s.units);
    return Promise.resolve();
  }

  release(keyId: string, endUser: string, requestId: string): Promise<void> {
    this.#users.get(`${keyId}\u0000${endUser}`)?.holds.delete(requestId);
    return Promise.resolve();
  }

  spent(keyId: string, endUser: string, period: string): Promise<number> {
    return Promise.resolve(this.#users.get(`${keyId}\u0000${endUser}`)?.spent.get(period) ?? 0);
  }
}

/** The UTC days [since, until) (Unix ms) of a budget period's id (periodId: d:, w:, m:, n). */
export function periodDays(period: string, now: number): { since: number; until: number } {
  const day = 86_400_000;
  const at = (iso: string) => Date.parse(`${iso}T00:00:00Z`);
  if (period.startsWith('d:')) return { since: at(period.slice(2)), until: at(period.slice(2)) + day };
  if (period.startsWith('w:')) return { since: at(period.slice(2)), until: at(period.slice(2)) + 7 * day };
  if (period.startsWith('m:')) {
    const since = at(`${period.slice(2)}-01`);
    const d = new Date(since);
    return { since, until: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) };
  }
  return { since: 0, until: (Math.floor(now / day) + 2) * day };
}

/** What `endUser` of `keyId` spent in `period` by the usage totals of `store` (their units, summed over models). */
export async function spentBefore(store: { usageTotals(q: TotalsQuery): Promise<TotalsRow[]> }, account: string, keyId: string, endUser: string, period: string): Promise<number> {
  const { since, until } = periodDays(period, Date.now());
  const rows = await store.usageTotals({ by: ['model'], account, key: keyId, end_user: endUser, since, until, daily: true });
  let units = 0;
  for (const r of rows) units += r.units;
  return units;
}
