// The audit log's events (CONTRACT section 12): the checks shared by ./memory/audit.ts and
// ./redis/audit.ts, and by the memory store's reading of its file.

import type { AuditEvent, AuditQuery } from './types.js';

const AUDIT_FIELDS = ['actor', 'role', 'action', 'target', 'ip', 'request_id'] as const;

/** The event `v` when it is one (as read back from disk), else undefined. */
export function toAuditEvent(v: unknown): AuditEvent | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (!Number.isSafeInteger(o.at)) return undefined;
  for (const f of AUDIT_FIELDS) if (typeof o[f] !== 'string') return undefined;
  return { at: o.at as number, actor: o.actor as string, role: o.role as string, action: o.action as string, target: o.target as string, ip: o.ip as string, request_id: o.request_id as string };
}

/** Checks an event before it is stored: a bad one is a bug of the caller (RangeError). */
export function requireAuditEvent(e: AuditEvent): AuditEvent {
  const ok = toAuditEvent(e);
  if (ok === undefined) throw new RangeError('an audit event needs an integer at and string actor, role, action, target, ip and request_id');
  return ok;
}

export function requireAuditQuery(q: AuditQuery): void {
  if (!Number.isSafeInteger(q.since)) throw new RangeError('since must be an integer (Unix ms)');
  if (!Number.isSafeInteger(q.limit) || q.limit < 1 || q.limit > 1000) throw new RangeError('limit must be an integer from 1 to 1000');
}

