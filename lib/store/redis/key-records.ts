// How the Redis store's keys and accounts read and write their hashes (./keys.ts): a key's
// record from its account-side hash (its controls: `c` as created, with the c:MEMBER fields of
// later PATCHes over it; the budget in bu/bp, the team in tm), a digest record's key, an
// account's record, a PATCH as the fields tgKeyPatch sets and deletes, and the arguments the
// scripts take. See "Changes of controls" in ./keys.ts's header.

import { defaultControls, TEAM_ID, toControls } from '../rules.js';
import type { AccountRecord, KeyControls, KeyPatch, KeyRecord, KeyWithAccount } from '../types.js';
import { teamFromFields } from './team-records.js';

export function integer(n: number, what: string): string {
  if (!Number.isSafeInteger(n)) throw new RangeError(`${what} must be a safe integer`);
  return String(n);
}

export function tuple(reply: unknown, length: number): unknown[] {
  if (!Array.isArray(reply) || reply.length !== length) throw new Error(`unexpected reply from Redis: ${JSON.stringify(reply)}`);
  return reply;
}

/** The controls but the budget (which the scripts keep in bu/bp) and the team (tm), as stored in `c`. */
export function controlsJson(c: KeyControls): string {
  const { budget: _budget, team: _team, ...rest } = c;
  return JSON.stringify(rest);
}

/** A team id as a script argument; '' for none. */
export function teamId(team: string | null): string {
  if (team === null) return '';
  if (typeof team !== 'string' || !TEAM_ID.test(team)) throw new TypeError('team must be a team id');
  return team;
}

/** tgKeyAndAccount's reply: the key's hash, its account's own fields, its team's fields. */
export type KeyAndAccount = [string[], string[], string[]];

export function found(key: KeyRecord | undefined, both: KeyAndAccount): KeyWithAccount | undefined {
  if (key === undefined) return undefined;
  const account = accountRecord(hashOf(both[1]));
  const team = key.controls.team === null ? undefined : teamFromFields(key.controls.team, key.account, hashOf(both[2] ?? []));
  return team === undefined ? { key, account } : { key, account, team };
}

/** The field a patched member is kept in: c:name, c:limits.max_concurrent (see the header). */
const MEMBER = 'c:';

/**
 * A patch as the fields tgKeyPatch sets (field, JSON value, ...) and deletes: each member it
 * names, null included (a null field overrides what `c` holds), each limit on its own, and
 * the budget as bu/bp (deleted when null).
 */
export function patchFields(patch: KeyPatch): { set: string[]; del: string[] } {
  const set: string[] = [];
  const del: string[] = [];
  for (const [member, value] of Object.entries(patch)) {
    if (value === undefined || member === 'team') continue; // the team: tgKeyPatch's own argument
    if (member === 'budget') {
      const b = value as KeyControls['budget'];
      if (b === null) del.push('bu', 'bp');
      else set.push('bu', integer(b.units, 'budget.units'), 'bp', b.period ?? '');
    } else if (member === 'limits') {
      for (const [name, limit] of Object.entries(value as Partial<KeyControls['limits']>)) {
        if (limit !== undefined) set.push(`${MEMBER}limits.${name}`, JSON.stringify(limit));
      }
    } else {
      set.push(`${MEMBER}${member}`, JSON.stringify(value));
    }
  }
  return { set, del };
}

/**
 * The controls (but the budget) a key's hash holds: `c` as created, with the c:MEMBER fields
 * of later PATCHes over it. Throws on a field that is not JSON.
 */
function storedControls(k: Record<string, string>): Record<string, unknown> {
  const c = JSON.parse(k.c ?? '') as Record<string, unknown>;
  if (typeof c !== 'object' || c === null) throw new TypeError('stored controls are not an object');
  const limits: Record<string, unknown> = { ...(c.limits as object) };
  for (const field of Object.keys(k)) {
    if (!field.startsWith(MEMBER)) continue;
    const member = field.slice(MEMBER.length);
    const value: unknown = JSON.parse(k[field]!);
    if (LIMIT_MEMBERS.has(member)) limits[member.slice(7)] = value;
    else if (KEY_MEMBERS.has(member)) c[member] = value;
  }
  return { ...c, limits };
}

const KEY_MEMBERS: ReadonlySet<string> = new Set(['name', 'models', 'expires_at', 'priority', 'allowed_ips', 'metadata', 'mcp_tools', 'tags', 'tags_locked', 'end_user_budget']);
const LIMIT_MEMBERS: ReadonlySet<string> = new Set(['limits.requests_per_minute', 'limits.tokens_per_minute', 'limits.max_concurrent']);

/** A key's record from its account-side hash; `revokedAt` from its digest record, if known. */
export function keyRecord(id: string, k: Record<string, string>, revokedAt: string | undefined): KeyRecord {
  let parsed: unknown;
  try { parsed = storedControls(k); } catch { parsed = undefined; }
  const bu = k.bu === undefined ? null : Number(k.bu);
  const period = k.bp === 'day' || k.bp === 'week' || k.bp === 'month' ? k.bp : null;
  // Unreadable controls would be a key without restrictions: refuse it rather than serve it so.
  const controls = toControls({ ...(parsed as object), budget: bu === null ? null : { units: bu, period }, team: k.tm ?? null });
  const ra = k.ra ?? revokedAt;
  return {
    id, account: k.account!, digest: k.digest!, created_at: Number(k.created_at),
    revoked_at: ra === undefined ? (controls === null ? 0 : null) : Number(ra),
    last4: k.last4 === undefined || k.last4 === '' ? null : k.last4,
    controls: controls ?? defaultControls(),
    previous: k.pd === undefined ? null : { digest: k.pd, until: Number(k.pu) },
    last_used_at: k.lu === undefined ? null : Number(k.lu),
    spent: { period: k.sp ?? 'n', units: Number(k.su ?? '0') },
  };
}

/**
 * The key a digest's index entry `h` names, from the key's own hash `k`; undefined for a record
 * whose creation stopped before the key's hash (`own`: see the header).
 */
export function indexedKey(digest: string, h: Record<string, string>, k: Record<string, string>): KeyRecord | undefined {
  if (k.account === undefined) {
    if (h.own === '1') return undefined;
    // A key from before per-key controls: it has none.
    return {
      id: h.id!, account: h.account!, digest: h.digest ?? digest, created_at: Number(h.created_at),
      revoked_at: h.revoked_at === undefined ? null : Number(h.revoked_at), last4: null, controls: defaultControls(),
      previous: null, last_used_at: null, spent: { period: 'n', units: 0 },
    };
  }
  return keyRecord(h.id!, k, h.revoked_at);
}

export function accountRecord(h: Record<string, string>): AccountRecord | undefined {
  if (h.id === undefined) return undefined;
  return { id: h.id, plan: h.plan ?? '', balance_units: Number(h.balance_units), created_at: Number(h.created_at) };
}

/** An HGETALL's reply inside a script (fields and values in turn) as ioredis's hgetall gives it. */
export function hashOf(flat: readonly string[]): Record<string, string> {
  const h: Record<string, string> = Object.create(null);
  for (let i = 0; i + 1 < flat.length; i += 2) h[flat[i]!] = flat[i + 1]!;
  return h;
}
