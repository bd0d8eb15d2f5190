// The alerts outbox of the embedded store (../alerts.ts): events and their deliveries in memory,
// journaled like every other change (so with store.path they survive a restart), in the
// snapshot too. Leases are this process's only (one process uses a memory store; a restart
// drops them, as if they had run out). Events older than ALERT_KEEP_MS are dropped as new ones
// come (the time is the entry's, so a replay drops the same ones).

import {
  ALERT_KEEP_MS, alertCursor, fromAlertCursor, isDelivery, toStoredAlert, type AlertDelivery, type AlertEvent, type AlertOutbox, type AlertPage,
  type ExpiringKey, type StoredAlert,
} from '../alerts.js';
import { isRecord, str } from '../rules.js';
import type { KeyRecord } from '../types.js';

/** The journal entries of the outbox (`n`, the event's place in the list: the journal's own entries have a `seq`). */
export type AlertEntry =
  | { op: 'alert'; a: StoredAlert; n: number; t: number }
  | { op: 'alertd'; id: string; d: AlertDelivery }
  | { op: 'walarm'; account: string; armed: boolean };

export function toAlertEntry(v: Record<string, unknown>): AlertEntry | undefined {
  switch (v.op) {
    case 'alert': {
      const a = toStoredAlert(v.a);
      return a !== undefined && Number.isSafeInteger(v.n) && Number.isSafeInteger(v.t) ? { op: 'alert', a, n: v.n as number, t: v.t as number } : undefined;
    }
    case 'alertd':
      return str(v.id) && isDelivery(v.d) ? { op: 'alertd', id: v.id, d: v.d } : undefined;
    case 'walarm':
      return str(v.account) && typeof v.armed === 'boolean' ? { op: 'walarm', account: v.account, armed: v.armed } : undefined;
    default:
      return undefined;
  }
}

interface Held { seq: number; t: number; alert: StoredAlert }

export interface MemoryAlertsHost {
  /** Waits for the store to load; throws when it cannot serve. */
  begin(): Promise<void>;
  /** Applies an entry (through apply()) and journals it; resolves once written. */
  change(entry: AlertEntry): Promise<void>;
  /** Resolves once everything the state shows is written. */
  settled(): Promise<void>;
  keys(): Iterable<KeyRecord>;
}

export class MemoryAlerts implements AlertOutbox {
  readonly #host: MemoryAlertsHost;
  /** In append order (oldest first). */
  readonly #events = new Map<string, Held>();
  readonly #leases = new Map<string, { owner: string; until: number }>();
  readonly #disarmed = new Set<string>();
  #seq = 0;

  constructor(host: MemoryAlertsHost) {
    this.#host = host;
  }

  apply(e: AlertEntry): void {
    switch (e.op) {
      case 'alert':
        if (this.#events.has(e.a.event.id)) return;
        for (const [id, h] of this.#events) {
          if (h.t >= e.t - ALERT_KEEP_MS) break;
          this.#events.delete(id);
        }
        this.#events.set(e.a.event.id, { seq: e.n, t: e.t, alert: structuredClone(e.a) });
        if (e.n > this.#seq) this.#seq = e.n;
        return;
      case 'alertd': {
        const h = this.#events.get(e.id);
        if (h === undefined) return;
        const ds = h.alert.deliveries;
        const i = ds.findIndex((d) => d.webhook === e.d.webhook);
        if (i === -1) ds.push({ ...e.d });
        else ds[i] = { ...e.d };
        return;
      }
      case 'walarm':
        if (e.armed) this.#disarmed.delete(e.account);
        else this.#disarmed.add(e.account);
        return;
    }
  }

  snapshot(): unknown {
    return { seq: this.#seq, events: [...this.#events.values()], disarmed: [...this.#disarmed] };
  }

  restore(v: unknown): void {
    if (v === undefined) return;
    const bad = (): never => { throw new Error('store snapshot: unexpected alerts state'); };
    if (!isRecord(v) || !Number.isSafeInteger(v.seq) || !Array.isArray(v.events) || !Array.isArray(v.disarmed)) return bad();
    this.#seq = v.seq as number;
    for (const raw of v.events as unknown[]) {
      if (!isRecord(raw) || !Number.isSafeInteger(raw.seq) || !Number.isSafeInteger(raw.t)) return bad();
      const alert = toStoredAlert(raw.alert) ?? bad();
      this.#events.set(alert.event.id, { seq: raw.seq as number, t: raw.t as number, alert });
    }
    for (const a of v.disarmed as unknown[]) this.#disarmed.add(str(a) ? a : bad());
  }

  async append(event: AlertEvent, webhooks: readonly string[], now: number): Promise<boolean> {
    await this.#host.begin();
    if (this.#events.has(event.id)) {
      await this.#host.settled();
      return false;
    }
    const deliveries = webhooks.map((webhook): AlertDelivery => ({ webhook, state: 'pending', attempts: 0, last_status: null, next_at: now }));
    await this.#host.change({ op: 'alert', a: { event: structuredClone(event), deliveries }, n: this.#seq + 1, t: now });
    return true;
  }

  async due(now: number, limit: number, webhook?: string): Promise<string[]> {
    await this.#host.begin();
    const due: Array<{ id: string; at: number }> = [];
    for (const [id, h] of this.#events) {
      let soonest = Infinity;
      for (const d of h.alert.deliveries) {
        if (d.state === 'pending' && d.next_at < soonest && (webhook === undefined || d.webhook === webhook)) soonest = d.next_at;
      }
      if (soonest <= now) due.push({ id, at: soonest });
    }
    due.sort((a, b) => a.at - b.at);
    await this.#host.settled();
    return due.slice(0, limit).map((d) => d.id);
  }

  async get(id: string): Promise<StoredAlert | undefined> {
    await this.#host.begin();
    const h = this.#events.get(id);
    await this.#host.settled();
    return h === undefined ? undefined : structuredClone(h.alert);
  }

  async lease(id: string, owner: string, ttlMs: number, now: number, webhook?: string): Promise<boolean> {
    await this.#host.begin();
    const name = leaseName(id, webhook);
    const cur = this.#leases.get(name);
    if (cur !== undefined && cur.owner !== owner && cur.until > now) return false;
    this.#leases.set(name, { owner, until: now + ttlMs });
    return true;
  }

  async unlease(id: string, owner: string, webhook?: string): Promise<void> {
    const name = leaseName(id, webhook);
    if (this.#leases.get(name)?.owner === owner) this.#leases.delete(name);
  }

  async update(id: string, delivery: AlertDelivery): Promise<void> {
    await this.#host.begin();
    if (!this.#events.has(id)) return this.#host.settled();
    await this.#host.change({ op: 'alertd', id, d: { ...delivery } });
  }

  async list(limit: number, cursor?: string): Promise<AlertPage> {
    await this.#host.begin();
    const before = cursor === undefined ? Infinity : fromAlertCursor(cursor) ?? Infinity;
    const newest = [...this.#events.values()].filter((h) => h.seq < before).sort((a, b) => b.seq - a.seq);
    const page = newest.slice(0, limit);
    await this.#host.settled();
    return {
      alerts: page.map((h) => structuredClone(h.alert)),
      next_cursor: newest.length > limit ? alertCursor(page[page.length - 1]!.seq) : null,
    };
  }

  async armWallet(account: string, armed: boolean): Promise<boolean> {
    await this.#host.begin();
    const was = !this.#disarmed.has(account);
    if (was === armed) {
      await this.#host.settled();
      return was;
    }
    await this.#host.change({ op: 'walarm', account, armed });
    return was;
  }

  async expiringKeys(from: number, until: number): Promise<ExpiringKey[]> {
    await this.#host.begin();
    const out: ExpiringKey[] = [];
    for (const k of this.#host.keys()) {
      const at = k.controls.expires_at;
      if (k.revoked_at === null && at !== null && at > from && at <= until) out.push({ id: k.id, account: k.account, expires_at: at });
    }
    await this.#host.settled();
    return out;
  }
}

/** A lease's name: the event's, or one delivery's of it. */
function leaseName(id: string, webhook: string | undefined): string {
  return webhook === undefined ? id : `${id}\u0000${webhook}`;
}
