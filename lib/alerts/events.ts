// The four alert events (CONTRACT section 15) as values: their ids, subjects and data, and the
// rules that decide when one happens. Pure functions: detection (./alerts.ts) calls them.
//
// Ids are deterministic where an event must happen once: the outbox appends an id only when it
// is absent, so every instance (and every retry) that sees the same crossing makes the same id
// and one event results.

import { createHash } from 'node:crypto';
import type { AlertEventType } from '../config/types.js';
import type { AlertEvent, AlertSubject } from '../store/alerts.js';
import type { BudgetPeriod } from '../store/types.js';

/** key.expiring is sent this long before the key expires. */
export const EXPIRING_AHEAD_MS = 7 * 24 * 3600_000;
/** upstream.ejected: ejections of one replica within one such window (on any instance) are one event. */
export const EJECTED_WINDOW_MS = 60_000;

/** An event id: evt_ and 32 hex digits of a hash of the parts that make the event what it is. */
export function eventId(...parts: Array<string | number | null>): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(`${p === null ? '\u0001' : String(p)}\u0000`);
  return `evt_${h.digest('hex').slice(0, 32)}`;
}

/**
 * Whose budget: a key's (key_id), or a team's (team; key_id then names the key whose request
 * crossed, for the subject only: the event is the team's, whichever key crossed); always in an account.
 */
export type BudgetScope = { account: string; key_id: string; team?: undefined } | { account: string; team: string; key_id?: string };

/**
 * The thresholds (percent) a spend going from `before` to `after` units crosses in a budget of
 * `units`: those with before < t% of units <= after, compared exactly in integers (units x t
 * against spend x 100). Ascending. None when nothing was added or the budget is 0.
 */
export function crossedThresholds(thresholds: readonly number[], units: number, before: number, after: number): number[] {
  if (after <= before || units <= 0) return [];
  const u = BigInt(units);
  const b = BigInt(before) * 100n;
  const a = BigInt(after) * 100n;
  return thresholds.filter((t) => {
    const mark = u * BigInt(t);
    return b < mark && mark <= a;
  }).sort((x, y) => x - y);
}

/**
 * budget.threshold: once per scope, budget version (its units and period: a changed budget is a
 * new one, re-armed), period id (a new period re-arms) and threshold.
 */
export function thresholdEvent(
  scope: BudgetScope, budget: { units: number; period: BudgetPeriod }, periodId: string, threshold: number, spent: number, at: number,
): AlertEvent {
  const who = scope.team === undefined ? `key:${scope.key_id}` : `team:${scope.team}`;
  const subject: AlertSubject = { account: scope.account, ...(scope.team === undefined ? {} : { team: scope.team }), ...(scope.key_id === undefined ? {} : { key_id: scope.key_id }) };
  return {
    id: eventId('budget.threshold', who, budget.units, budget.period, periodId, threshold),
    type: 'budget.threshold',
    at: new Date(at).toISOString(),
    subject,
    data: { threshold, scope: scope.team === undefined ? 'key' : 'team', budget_units: budget.units, period: budget.period, period_id: periodId, spent_units: spent },
  };
}

/** wallet.low: one per crossing (the store's armed flag decides); `crossing` tells crossings apart. */
export function walletLowEvent(account: string, available: number, lowMark: number, at: number, crossing: string): AlertEvent {
  return {
    id: eventId('wallet.low', account, crossing),
    type: 'wallet.low',
    at: new Date(at).toISOString(),
    subject: { account },
    data: { available_units: available, wallet_low_units: lowMark },
  };
}

/** key.expiring: once per key and expiry (a new expires_at is a new event). */
export function expiringEvent(account: string, keyId: string, expiresAt: number, at: number): AlertEvent {
  return {
    id: eventId('key.expiring', keyId, expiresAt),
    type: 'key.expiring',
    at: new Date(at).toISOString(),
    subject: { account, key_id: keyId },
    data: { expires_at: new Date(expiresAt).toISOString() },
  };
}

/** upstream.ejected: one per replica per EJECTED_WINDOW_MS, whichever instances ejected it. */
export function ejectedEvent(provider: string, target: string, reason: 'outlier' | 'health_check', until: number, at: number): AlertEvent {
  return {
    id: eventId('upstream.ejected', provider, target, Math.floor(at / EJECTED_WINDOW_MS)),
    type: 'upstream.ejected',
    at: new Date(at).toISOString(),
    subject: { provider, target },
    data: { reason, until: new Date(until).toISOString() },
  };
}

/** The webhooks (their URLs) that get events of `type`. */
export function webhooksFor(webhooks: ReadonlyArray<{ url: string; events: readonly AlertEventType[] }>, type: AlertEventType): string[] {
  return webhooks.filter((w) => w.events.includes(type)).map((w) => w.url);
}
