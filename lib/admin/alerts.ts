// GET /admin/alerts?limit=&cursor= (CONTRACT section 15): the alerts outbox, newest first, one
// page at a time, `{events:[{id, type, at, subject, data, delivery}], next_cursor}`
// (next_cursor null on the last page). An event's delivery is its webhooks' taken together:
// `pending` while any webhook's is, else `failed` when any gave up, else `delivered` (all
// did); `attempts` the most any webhook took; `last_status` the last HTTP status of the webhook
// that decides the state (null when none answered).

import { GatewayError } from '../errors.js';
import { ALERT_PAGE_MAX, fromAlertCursor, type AlertDelivery, type StoredAlert } from '../store/alerts.js';
import type { Store } from '../store/types.js';

/** The page size when `limit` is not given. */
export const ALERTS_DEFAULT_LIMIT = 50;

export interface AlertView {
  id: string;
  type: string;
  at: string;
  subject: Record<string, unknown>;
  data: Record<string, unknown>;
  delivery: { state: AlertDelivery['state']; attempts: number; last_status: number | null };
}

/** One event's deliveries taken together (see the header). */
export function aggregate(deliveries: readonly AlertDelivery[]): AlertView['delivery'] {
  const attempts = deliveries.reduce((n, d) => Math.max(n, d.attempts), 0);
  const deciding = deliveries.find((d) => d.state === 'pending') ?? deliveries.find((d) => d.state === 'failed');
  if (deciding !== undefined) return { state: deciding.state, attempts, last_status: deciding.last_status };
  const last = deliveries.reduce<AlertDelivery | undefined>((m, d) => (m === undefined || d.attempts >= m.attempts ? d : m), undefined);
  return { state: 'delivered', attempts, last_status: last?.last_status ?? null };
}

export function alertView(a: StoredAlert): AlertView {
  const { id, type, at, subject, data } = a.event;
  return { id, type, at, subject: { ...subject }, data, delivery: aggregate(a.deliveries) };
}

function limitOf(text: string | null): number {
  if (text === null) return ALERTS_DEFAULT_LIMIT;
  const range = `an integer from 1 to ${ALERT_PAGE_MAX}`;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) {
    throw new GatewayError('invalid_type', `Invalid type for 'limit': expected ${range}.`, { param: 'limit' });
  }
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > ALERT_PAGE_MAX) {
    throw new GatewayError('invalid_value', `Invalid value for 'limit': must be ${range}.`, { param: 'limit' });
  }
  return n;
}

/** The page `url`'s query asks for. */
export async function alertsPage(store: Store, url: string): Promise<{ events: AlertView[]; next_cursor: string | null }> {
  const q = new URL(url, 'http://admin').searchParams;
  const limit = limitOf(q.get('limit'));
  const cursor = q.get('cursor') ?? undefined;
  if (cursor !== undefined && (cursor.length > 64 || fromAlertCursor(cursor) === undefined)) {
    throw new GatewayError('invalid_value', "Invalid value for 'cursor': pass a next_cursor of an earlier page, unchanged.", { param: 'cursor' });
  }
  const page = await store.alerts.list(limit, cursor);
  return { events: page.alerts.map(alertView), next_cursor: page.next_cursor };
}
