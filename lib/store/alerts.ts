// The alerts outbox as both stores keep it (./memory/alerts.ts, ./redis/alerts.ts): events
// appended once by id, a delivery state per (event, webhook), what is due per webhook (each
// webhook's lane in ../alerts/lane.ts reads its own), a lease per (event, webhook) so that one
// instance delivers it at a time, the wallet.low armed flag per account, and the keys that
// expire soon. What is detected and how it is delivered is ../alerts/.

import type { AlertEventType } from '../config/types.js';

/** Who an event is about: an account's key or team, or (upstream.ejected) a provider's replica. */
export interface AlertSubject {
  account?: string;
  team?: string;
  key_id?: string;
  provider?: string;
  target?: string;
}

/** One event, as the webhook receives it (the body is its JSON). */
export interface AlertEvent {
  /** Deterministic where the event must happen once (see ../alerts/events.ts). */
  id: string;
  type: AlertEventType;
  /** ISO-8601 time the event was detected. */
  at: string;
  subject: AlertSubject;
  data: Record<string, unknown>;
}

export type DeliveryState = 'pending' | 'delivered' | 'failed';

/** One webhook's delivery of one event. */
export interface AlertDelivery {
  /** The webhook's URL: its identity across config reloads. */
  webhook: string;
  state: DeliveryState;
  attempts: number;
  /** The last answer's HTTP status; null before any attempt or when none came (timeout, refused). */
  last_status: number | null;
  /** Unix ms the next attempt is due (pending only). */
  next_at: number;
}

export interface StoredAlert {
  event: AlertEvent;
  deliveries: AlertDelivery[];
}

export interface AlertPage {
  alerts: StoredAlert[];
  /** Null on the last page. */
  next_cursor: string | null;
}

/** A key whose expiry is near (key.expiring). */
export interface ExpiringKey {
  id: string;
  account: string;
  expires_at: number;
}

export interface AlertOutbox {
  /**
   * Appends `event` with a pending delivery, due at once, for each webhook URL given, unless an
   * event with its id is there: then nothing changes and it resolves false. Durable before it
   * resolves.
   */
  append(event: AlertEvent, webhooks: readonly string[], now: number): Promise<boolean>;
  /**
   * Ids of events with a pending delivery due at or before `now`, earliest due first; with
   * `webhook`, only those whose delivery to that webhook is (ordered by its own next_at).
   */
  due(now: number, limit: number, webhook?: string): Promise<string[]>;
  get(id: string): Promise<StoredAlert | undefined>;
  /**
   * Takes the delivery lease of the event (with `webhook`: of its delivery to that webhook
   * only, the one delivery uses) for `ttlMs` (SET NX PX): true when `owner` now holds it (an
   * expired lease is taken over; the owner's own lease is extended).
   */
  lease(id: string, owner: string, ttlMs: number, now: number, webhook?: string): Promise<boolean>;
  /** Gives the lease back, if `owner` still holds it. */
  unlease(id: string, owner: string, webhook?: string): Promise<void>;
  /** Replaces one webhook's delivery state of the event (a webhook it does not have is added). */
  update(id: string, delivery: AlertDelivery): Promise<void>;
  /** Newest first, `limit` a page (1..1000); `cursor` from the previous page. */
  list(limit: number, cursor?: string): Promise<AlertPage>;
  /**
   * Sets the account's wallet.low flag to `armed` and returns what it was (an account never set
   * is armed). Durable before it resolves.
   */
  armWallet(account: string, armed: boolean): Promise<boolean>;
  /** Live keys whose expires_at is after `from` and at or before `until` (Unix ms). */
  expiringKeys(from: number, until: number): Promise<ExpiringKey[]>;
}

/** Events are kept this long after they were appended (at least the 24 h of retries). */
export const ALERT_KEEP_MS = 30 * 24 * 3600_000;

/** The page size GET /admin/alerts defaults to, and its largest. */
export const ALERT_PAGE_MAX = 1000;

/** A cursor of list(): the position after the last event of a page. */
export function alertCursor(seq: number): string {
  return Buffer.from(String(seq)).toString('base64url');
}

/** The position a cursor names, or undefined when it is not one of alertCursor's. */
export function fromAlertCursor(cursor: string): number | undefined {
  const text = Buffer.from(cursor, 'base64url').toString();
  return /^[0-9]{1,15}$/.test(text) ? Number(text) : undefined;
}

/** An event as read back from a journal or Redis, or undefined when it is not one. */
export function toStoredAlert(v: unknown): StoredAlert | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const a = v as Record<string, unknown>;
  const e = a.event as Record<string, unknown> | undefined;
  if (typeof e !== 'object' || e === null || typeof e.id !== 'string' || typeof e.type !== 'string' || typeof e.at !== 'string') return undefined;
  if (typeof e.subject !== 'object' || e.subject === null || typeof e.data !== 'object' || e.data === null) return undefined;
  if (!Array.isArray(a.deliveries) || !a.deliveries.every(isDelivery)) return undefined;
  return v as StoredAlert;
}

export function isDelivery(v: unknown): v is AlertDelivery {
  if (typeof v !== 'object' || v === null) return false;
  const d = v as Record<string, unknown>;
  return typeof d.webhook === 'string' && (d.state === 'pending' || d.state === 'delivered' || d.state === 'failed') &&
    Number.isSafeInteger(d.attempts) && (d.last_status === null || Number.isSafeInteger(d.last_status)) && Number.isSafeInteger(d.next_at);
}
