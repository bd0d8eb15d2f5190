// Wallets in the memory store: holds, settlements and their undoing, for MemoryStore
// (./store.ts). The holds and usage windows are ./metering.ts's; this part reads the budgets of
// the request's key and team from the tables (./tables.ts) in the same synchronous step, and
// counts a settlement's charge in their spend.

import { addSpend, periodId, requireId, requireRequestId, spentIn } from '../rules.js';
import type { HoldRequest, HoldResult, SettleResult, Settlement, UnsettleResult, UsageTotals } from '../types.js';
import { MemoryMetering } from './metering.js';
import { validateHold, validateSettlement, type SettleEntry, type UnsettleEntry } from './metering-entries.js';
import type { MemoryHost, MemoryTables } from './tables.js';

export class MemoryWallets {
  readonly metering = new MemoryMetering();
  readonly #t: MemoryTables;
  readonly #host: MemoryHost;

  constructor(tables: MemoryTables, host: MemoryHost) {
    this.#t = tables;
    this.#host = host;
  }

  /** Applies a settlement (live or replayed): its charge, and the key's and the team's spend. */
  applySettle(e: SettleEntry): void {
    if (this.metering.apply(this.#t.accounts.get(e.account), e)) {
      if (e.key !== undefined && e.kpid !== undefined) {
        const key = this.#t.keys.get(e.key);
        if (key !== undefined) key.spent = addSpend(key.spent, e.kpid, e.charged);
      }
      if (e.team !== undefined && e.tpid !== undefined) {
        const team = this.#t.teams.get(e.team);
        if (team !== undefined && team.account === e.account) team.spent = addSpend(team.spent, e.tpid, e.charged);
      }
    }
  }

  async hold(h: HoldRequest): Promise<HoldResult | undefined> {
    await this.#host.begin();
    validateHold(h);
    const account = this.#t.accounts.get(h.account);
    let budget;
    let team;
    const key = h.key === undefined ? undefined : this.#t.keys.get(h.key.id);
    if (key !== undefined && key.account === h.account && h.key !== undefined) {
      const b = key.controls.budget;
      if (b !== null) budget = { units: b.units, period: b.period, spent: spentIn(key.spent.period, key.spent.units, periodId(b.period, h.key.periods)) };
      // The team the key names now: its budget is held in the same synchronous step.
      const t = key.controls.team === null ? undefined : this.#t.teams.get(key.controls.team);
      if (t !== undefined && t.account === h.account) {
        const tb = t.budget;
        team = {
          id: t.id,
          budget: tb === null ? undefined : { units: tb.units, period: tb.period, spent: spentIn(t.spent.period, t.spent.units, periodId(tb.period, h.key.periods)) },
        };
      }
    }
    const result = account === undefined ? undefined : this.metering.hold(account, h, budget, team);
    await this.#host.settled();
    return result;
  }

  async settle(s: Settlement): Promise<SettleResult | undefined> {
    await this.#host.begin();
    validateSettlement(s);
    const account = this.#t.accounts.get(s.account);
    const repeated = account === undefined ? undefined : this.metering.repeated(account, s.requestId);
    if (account === undefined || repeated !== undefined) {
      await this.#host.settled();
      return repeated;
    }
    const key = s.key === undefined ? undefined : this.#t.keys.get(s.key.id);
    let keyPart;
    if (key !== undefined && key.account === s.account && s.key !== undefined) {
      const b = key.controls.budget;
      const kpid = periodId(b?.period ?? null, s.key.periods);
      keyPart = { kpid, budgetLeft: b === null ? undefined : b.units - spentIn(key.spent.period, key.spent.units, kpid) };
    }
    // The team the hold counted against (a key moved to another team since still pays this one).
    const team = s.key?.team === undefined ? undefined : this.#t.teams.get(s.key.team);
    let teamPart;
    if (team !== undefined && team.account === s.account && s.key !== undefined) {
      const b = team.budget;
      const tpid = periodId(b?.period ?? null, s.key.periods);
      teamPart = { id: team.id, tpid, budgetLeft: b === null ? undefined : b.units - spentIn(team.spent.period, team.spent.units, tpid) };
    }
    const entry = this.metering.entry(account, s, keyPart, teamPart);
    const written = this.#host.change(entry);
    const result: SettleResult = {
      applied: true,
      charged_units: entry.charged,
      balance_units: account.balance_units,
      available_units: account.balance_units - this.metering.heldUnits(account.id),
    };
    // Members added, not spread in: no object made only to be copied.
    if (keyPart !== undefined && key !== undefined) result.key = { budget: key.controls.budget === null ? null : { ...key.controls.budget }, spent: { ...key.spent } };
    if (teamPart !== undefined && team !== undefined) result.team = { id: team.id, budget: team.budget === null ? null : { ...team.budget }, spent: { ...team.spent } };
    await written;
    return result;
  }

  async unsettle(s: Settlement): Promise<UnsettleResult | undefined> {
    await this.#host.begin();
    validateSettlement(s);
    const account = this.#t.accounts.get(s.account);
    if (account === undefined) return undefined;
    const entry: UnsettleEntry = { op: 'unsettle', account: s.account, rid: s.requestId, tokens: s.promptTokens + s.completionTokens, day: s.day, month: s.month, at: Date.now() };
    const key = s.key === undefined ? undefined : this.#t.keys.get(s.key.id);
    if (key !== undefined && key.account === s.account && s.key !== undefined) {
      entry.key = key.id;
      entry.kpid = periodId(key.controls.budget?.period ?? null, s.key.periods);
    }
    const team = s.key?.team === undefined ? undefined : this.#t.teams.get(s.key.team);
    if (team !== undefined && team.account === s.account && s.key !== undefined) {
      entry.team = team.id;
      entry.tpid = periodId(team.budget?.period ?? null, s.key.periods);
    }
    const result = this.undo(entry);
    // A repeat changed nothing: nothing to journal.
    if (result?.outcome === 'repeat') await this.#host.settled();
    else await this.#host.append(entry);
    return result === undefined ? undefined : { outcome: result.outcome, refunded_units: result.refunded };
  }

  /** Undoes a settlement (live or replayed); a refund takes its units out of the key's spend in the same period. */
  undo(e: UnsettleEntry): ReturnType<MemoryMetering['undo']> {
    const r = this.metering.undo(this.#t.accounts.get(e.account), e);
    if (r?.outcome !== 'refunded' || r.refunded === 0) return r;
    if (e.key !== undefined && e.kpid !== undefined) {
      const key = this.#t.keys.get(e.key);
      if (key !== undefined && key.spent.period === e.kpid) key.spent = { period: e.kpid, units: Math.max(0, key.spent.units - r.refunded) };
    }
    if (e.team !== undefined && e.tpid !== undefined) {
      const team = this.#t.teams.get(e.team);
      if (team !== undefined && team.spent.period === e.tpid) team.spent = { period: e.tpid, units: Math.max(0, team.spent.units - r.refunded) };
    }
    return r;
  }

  async release(account: string, requestId: string): Promise<void> {
    requireId('account id', account);
    requireRequestId(requestId);
    await this.#host.begin();
    this.metering.release(account, requestId);
  }

  async accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    await this.#host.begin();
    const usage = this.metering.usage(account, day, month);
    await this.#host.settled();
    return usage;
  }
}
