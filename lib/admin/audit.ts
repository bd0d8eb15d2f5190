// The audit log as the admin API and the console write and read it (CONTRACT sections 12 and
// 21). Every write through /admin or /console/api is recorded before it is answered, in the
// same store step as the write itself: the route hands the write's event (WriteAudit.take) to
// the store call that makes the write, which records both at once (../store/types.ts), so a
// store fault leaves both or neither and is answered 503. A write with no store step of its
// own (a sign-in, a config check or reload) appends its event alone, before it acts or answers.
// GET /admin/audit reads the log a page at a time, newest first.

import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../errors.js';
import type { AddressOf } from '../auth/client-address.js';
import type { Principal } from './permissions.js';
import type { AuditEvent, Store } from '../store/types.js';

/** The event of one write: who, in which role, what (`METHOD route`), on what, from where, which request. */
export function auditEvent(p: Principal, action: string, target: string, req: IncomingMessage, address: AddressOf, requestId: string): AuditEvent {
  return { at: Date.now(), actor: p.actor, role: p.role, action, target, ip: address(req) ?? '', request_id: requestId };
}

/**
 * One write's event, on its way to the store. take() hands it to the store call that makes the
 * write (which records it in the same step); a write that took none by the time it is answered
 * (a route with no store step) records it alone first (done()).
 */
export class WriteAudit {
  readonly #event: AuditEvent;
  #taken = false;

  constructor(event: AuditEvent) {
    this.#event = event;
  }

  /** The event, for the store call that makes the write. */
  take(): AuditEvent {
    this.#taken = true;
    return this.#event;
  }

  /** Before the answer: the event alone, unless a store call took it with the write. */
  async done(store: Store): Promise<void> {
    if (!this.#taken) await store.appendAudit(this.take());
  }
}

/**
 * GET /admin/audit?since=&limit=&cursor= (since and limit read by the caller, as the records
 * routes read them): `{events, next_cursor}`, newest first; `at` is ISO-8601.
 */
export async function auditPage(store: Store, since: number, limit: number, cursor: string | undefined):
  Promise<{ events: Array<Omit<AuditEvent, 'at'> & { at: string }>; next_cursor: string | null }> {
  const bad = () => new GatewayError('invalid_value', "Invalid value for 'cursor': pass a next_cursor of an earlier page, unchanged.", { param: 'cursor' });
  if (cursor !== undefined && (cursor === '' || cursor.length > 64)) throw bad();
  let page;
  try {
    page = await store.listAudit({ since, limit, cursor });
  } catch (err) {
    if (err instanceof RangeError) throw bad();
    throw err;
  }
  return { events: page.events.map((e) => ({ ...e, at: new Date(e.at).toISOString() })), next_cursor: page.next_cursor };
}
