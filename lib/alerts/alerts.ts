// Alert detection (CONTRACT section 15): turns what the gateway sees into events in the store's
// outbox, which ./deliver.ts delivers. One per gateway, outliving config reloads (configure()
// takes each new config's `alerts`).
//
// - budget.threshold: after each settlement, from the key's spend the store returns with it:
//   the spend before is the spend after minus the charge, compared locally, so a request that
//   crosses nothing costs nothing more; a crossing appends its event (deterministic id, appended
//   only when absent: once per budget version, period and threshold). Likewise the team's
//   budget, from the team's spend the same settlement returns (subject {account, team, key_id}:
//   the key whose request crossed; the event id names the team only, so one per crossing).
// - wallet.low: the available balance after a settlement below alerts.wallet_low_units. The
//   store keeps an armed flag per account; a fall below disarms it and only the call that found
//   it armed appends the event; a settlement at or above the mark re-arms it. This instance
//   remembers what it last set, and sets it again only when the balance changes side or
//   FLAG_RECHECK_MS passed (another instance may have changed it), so requests that cross
//   nothing write nothing.
// - key.expiring: a sweep every alerts.sweep_interval_ms for keys expiring within 7 days.
// - upstream.ejected: the fleet reports each replica it ejects (outliers or health checks).

import { randomUUID } from 'node:crypto';
import type { Config } from '../config/types.js';
import type { Logger } from '../observe/log.js';
import type { AlertEvent } from '../store/alerts.js';
import type { BudgetPeriod, BudgetPeriods, SettleResult, Store } from '../store/types.js';
import { periodId } from '../store/types.js';
import { DeliveryWorker, type Clock, type WorkerOptions } from './deliver.js';
import {
  EXPIRING_AHEAD_MS, crossedThresholds, ejectedEvent, expiringEvent, thresholdEvent, walletLowEvent, webhooksFor, type BudgetScope,
} from './events.js';

/**
 * How long this instance trusts what it last set an account's wallet flag to: another instance
 * may have changed it since (disarmed it at a fall, or armed it after a top-up that only that
 * one saw), so it is set again, at most this often per account, while the balance stays on one
 * side of the mark.
 */
const FLAG_RECHECK_MS = 5 * 60_000;
/** Accounts whose flag state this instance remembers (the oldest are forgotten past it). */
const MAX_REMEMBERED = 100_000;

export interface AlertsOptions extends WorkerOptions {
  /** Starts the worker and the sweep (tests drive them by hand with false). Default true. */
  background?: boolean;
}

export class Alerts {
  readonly #store: Store;
  readonly #logger: Logger | undefined;
  readonly #clock: Clock;
  readonly worker: DeliveryWorker;
  readonly #background: boolean;
  #config: Config['alerts'] | undefined;
  /** Per event type, the webhooks that want it (from the config in force). */
  #hooks = new Map<AlertEvent['type'], string[]>();
  /** account -> what this instance last set the flag to, and when. */
  readonly #wallet = new Map<string, { armed: boolean; at: number }>();
  /** Appends in flight (stop() waits for them). */
  readonly #pending = new Set<Promise<unknown>>();
  #sweepTimer: NodeJS.Timeout | undefined;
  #sweepEvery = 0;
  #stopped = false;

  constructor(store: Store, logger?: Logger, options: AlertsOptions = {}) {
    this.#store = store;
    this.#logger = logger;
    this.#clock = options.clock ?? { now: () => Date.now() };
    this.#background = options.background ?? true;
    this.worker = new DeliveryWorker(store.alerts, { ...options, clock: this.#clock, logger });
  }

  /** The config in force: a reload calls it again. Starts the worker and sweep the first time. */
  configure(config: Config['alerts']): void {
    this.#config = config;
    this.#hooks = new Map();
    for (const type of ['budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected'] as const) {
      const hooks = webhooksFor(config.webhooks, type);
      if (hooks.length > 0) this.#hooks.set(type, hooks);
    }
    this.worker.configure(config.webhooks, config.delivery_timeout_ms);
    // With no webhook there is nothing to detect nor deliver: no polling, no sweep.
    if (!this.#background || this.#stopped || config.webhooks.length === 0) return;
    this.worker.start();
    if (this.#hooks.has('key.expiring') && this.#sweepEvery !== config.sweep_interval_ms) {
      this.#sweepEvery = config.sweep_interval_ms;
      clearInterval(this.#sweepTimer);
      this.#sweepTimer = setInterval(() => void this.sweep(), config.sweep_interval_ms);
      this.#sweepTimer.unref();
      void this.sweep();
    }
  }

  /** Some webhook wants events of this kind (else nothing is detected for it). */
  #wanted(type: AlertEvent['type']): string[] | undefined {
    return this.#hooks.get(type);
  }

  /** Appends an event in the background; a failure is logged (the request is not concerned). */
  #append(event: AlertEvent, hooks: string[]): Promise<boolean> {
    const p = this.#store.alerts.append(event, hooks, this.#clock.now()).catch((err: unknown) => {
      this.#logger?.warn({ event_id: event.id, type: event.type, err: (err as Error).message }, 'alerts: event not recorded (store unavailable)');
      return false;
    });
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
    return p;
  }

  /**
   * After an applied settlement of `account`'s request (with its key, and the budget periods of
   * its hold): threshold crossings of the key's budget and of its team's, and the wallet's low
   * mark. Synchronous and cheap when nothing is crossed; never throws.
   */
  settled(account: string, keyId: string | undefined, periods: BudgetPeriods | undefined, r: SettleResult): void {
    if (this.#config === undefined || !r.applied) return;
    try {
      if (keyId !== undefined && periods !== undefined && this.#hooks.has('budget.threshold')) {
        if (r.key !== undefined && r.key.budget !== null) {
          const pid = periodId(r.key.budget.period, periods);
          if (r.key.spent.period === pid) this.budget({ account, key_id: keyId }, r.key.budget, pid, r.key.spent.units - r.charged_units, r.key.spent.units);
        }
        if (r.team !== undefined && r.team.budget !== null) {
          const pid = periodId(r.team.budget.period, periods);
          if (r.team.spent.period === pid) {
            this.budget({ account, team: r.team.id, key_id: keyId }, r.team.budget, pid, r.team.spent.units - r.charged_units, r.team.spent.units);
          }
        }
      }
      this.#walletAfter(account, r.available_units);
    } catch (err) {
      this.#logger?.warn({ err: (err as Error).message }, 'alerts: detection failed');
    }
  }

  /**
   * A budget's spend went from `before` to `after` units in period `pid`: appends one
   * budget.threshold event per threshold crossed. Any scope: a key's, or a team's.
   */
  budget(scope: BudgetScope, budget: { units: number; period: BudgetPeriod }, pid: string, before: number, after: number): void {
    const crossed = crossedThresholds(this.#config?.thresholds ?? [], budget.units, before, after);
    if (crossed.length === 0) return;
    const hooks = this.#wanted('budget.threshold');
    if (hooks === undefined) return;
    const now = this.#clock.now();
    for (const t of crossed) void this.#append(thresholdEvent(scope, budget, pid, t, after, now), hooks);
  }

  #walletAfter(account: string, available: number): void {
    const mark = this.#config?.wallet_low_units ?? null;
    if (mark === null || this.#wanted('wallet.low') === undefined) return;
    const armed = available >= mark;
    const seen = this.#wallet.get(account);
    const now = this.#clock.now();
    if (seen !== undefined && seen.armed === armed && now - seen.at < FLAG_RECHECK_MS) return;
    this.#remember(account, { armed, at: now });
    if (armed) {
      void this.#store.alerts.armWallet(account, true).catch(() => this.#wallet.delete(account));
      return;
    }
    const p = this.#store.alerts.armWallet(account, false).then((was) => {
      if (!was) return;
      const hooks = this.#wanted('wallet.low');
      if (hooks !== undefined) return this.#append(walletLowEvent(account, available, mark, this.#clock.now(), randomUUID()), hooks);
    }, () => { this.#wallet.delete(account); });
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  #remember(account: string, state: { armed: boolean; at: number }): void {
    this.#wallet.delete(account);
    this.#wallet.set(account, state);
    if (this.#wallet.size > MAX_REMEMBERED) this.#wallet.delete(this.#wallet.keys().next().value!);
  }

  /** A replica was ejected (passively, or by failing its health check) until `until`. */
  ejected(provider: string, target: string, reason: 'outlier' | 'health_check', until: number): void {
    const hooks = this.#wanted('upstream.ejected');
    if (hooks === undefined) return;
    void this.#append(ejectedEvent(provider, target, reason, until, this.#clock.now()), hooks);
  }

  /** key.expiring for every live key that expires within the next 7 days (each once). */
  async sweep(): Promise<number> {
    const hooks = this.#wanted('key.expiring');
    if (hooks === undefined) return 0;
    const now = this.#clock.now();
    let keys;
    try {
      keys = await this.#store.alerts.expiringKeys(now, now + EXPIRING_AHEAD_MS);
    } catch (err) {
      this.#logger?.warn({ err: (err as Error).message }, 'alerts: expiring keys cannot be read; the sweep is retried');
      return 0;
    }
    let added = 0;
    for (const k of keys) if (await this.#append(expiringEvent(k.account, k.id, k.expires_at, now), hooks)) added++;
    return added;
  }

  /** Waits for the events being recorded. */
  async flush(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  /** SIGTERM's drain: the sweep stops, detected events are recorded, the worker finishes its attempt. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#sweepTimer);
    await this.flush();
    await this.worker.stop();
  }
}
