// Budgets per end user (CONTRACT section 20): a key's `end_user_budget: {units, period}` caps
// each of its end users separately. Each (key, end user) has its spend per budget period and its
// open holds; a hold is refused when spend + open holds + the request's worst case would pass
// the cap, and counts until it is settled (its actual cost added to the spend, once per request
// id) or released, or its ttl passes. The check and the hold are one step (Redis: one script),
// so two instances on one Redis never overshoot. The wallet's hold comes first (quotas, the
// key's and its team's budgets), this one after it (../billing/meter.ts): a refusal here
// releases the wallet's hold.

/** A hold for one end user of one key. */
export interface EndUserHold {
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

/** The ledger of one process (the memory store's): exact within it. */
export class MemoryEndUsers implements EndUserLedger {
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

  hold(h: EndUserHold): Promise<EndUserHoldResult> {
    const u = this.#user(h.keyId, h.endUser);
    const now = Date.now();
    let held = 0;
    for (const [id, x] of u.holds) {
      if (x.expires <= now) u.holds.delete(id);
      else if (id !== h.requestId) held += x.units;
    }
    const left = h.cap - (u.spent.get(h.period) ?? 0) - held;
    if (h.units > left) return Promise.resolve({ ok: false, remaining_units: Math.max(0, left) });
    u.holds.set(h.requestId, { units: h.units, expires: now + h.ttlMs });
    return Promise.resolve({ ok: true });
  }

  settle(s: EndUserSettlement): Promise<void> {
    const now = Date.now();
    if ((this.#settled.get(s.requestId) ?? 0) > now) return Promise.resolve();
    if (this.#settled.size > 100_000) for (const [id, until] of this.#settled) if (until <= now) this.#settled.delete(id);
    this.#settled.set(s.requestId, now + SETTLED_MARK_MS);
    const u = this.#user(s.keyId, s.endUser);
    u.holds.delete(s.requestId);
    // Only the current and the last periods matter to a hold: older ones are dropped.
    if (!u.spent.has(s.period) && u.spent.size >= 2) u.spent.delete(u.spent.keys().next().value!);
    u.spent.set(s.period, (u.spent.get(s.period) ?? 0) + s.units);
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
