// The audit log as the admin API reads it (CONTRACT section 12): GET /admin/audit, a page at a
// time, newest first.

import { GatewayError } from '../errors.js';
import type { AuditEvent, Store } from '../store/types.js';

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
