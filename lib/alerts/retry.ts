// What one delivery attempt leads to (CONTRACT section 15): the signature of a body, and the
// backoff schedule: exponential with jitter for 24 hours from the event, then `failed`. Pure
// functions; ./lane.ts applies them.

import { createHmac } from 'node:crypto';
import type { AlertDelivery } from '../store/alerts.js';

/** Events are retried this long after they happened; then their pending deliveries fail. */
export const RETRY_WINDOW_MS = 24 * 3600_000;
/** The first retry's delay; each next one doubles, up to MAX_DELAY_MS. */
export const FIRST_DELAY_MS = 30_000;
export const MAX_DELAY_MS = 3600_000;
/** Jitter: a delay is scaled by 1 + JITTER x (2 x random - 1). */
export const JITTER = 0.2;

export interface Clock { now(): number }

/** `x-tollgate-signature` of a body: sha256= and the hex HMAC-SHA256 of its exact bytes. */
export function signature(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** The delay before attempt `attempts + 1`, after `attempts` failed ones (>= 1); `random` in [0, 1). */
export function retryDelay(attempts: number, random: number): number {
  const base = Math.min(FIRST_DELAY_MS * 2 ** Math.min(attempts - 1, 30), MAX_DELAY_MS);
  return Math.round(base * (1 + JITTER * (2 * random - 1)));
}

/** The delivery after an attempt that ended with `status` (null: no answer) at `now`. */
export function afterAttempt(d: AlertDelivery, eventAt: number, status: number | null, now: number, random: number): AlertDelivery {
  const attempts = d.attempts + 1;
  if (status !== null && status >= 200 && status < 300) return { ...d, state: 'delivered', attempts, last_status: status, next_at: now };
  const next = now + retryDelay(attempts, random);
  if (next > eventAt + RETRY_WINDOW_MS) return { ...d, state: 'failed', attempts, last_status: status, next_at: now };
  return { ...d, state: 'pending', attempts, last_status: status, next_at: next };
}
