// The admin API's key writes (CONTRACT sections 5, 8 and 21): issue a key with its controls,
// change them (PATCH), rotate its plaintext, revoke it. Each hands the write's audit event to
// the store call that makes the write (./audit.ts). A console member's writes may only narrow
// what an admin set, and a member's new key stays within its plan and its account's teams
// (./narrowing.ts). Keys are returned in plaintext exactly once; only their SHA-256 is stored.

import { randomInt } from 'node:crypto';
import type { Config, QueuePriority } from '../config/types.js';
import { GatewayError, clip } from '../errors.js';
import { keyIdOf, sha256Hex } from '../store/digest.js';
import { TeamNotFoundError, applyPatch, defaultControls, type KeyRecord, type Store } from '../store/types.js';
import { readControls } from '../auth/controls.js';
import type { Principal } from './permissions.js';
import type { WriteAudit } from './audit.js';
import { integerParam, type Body } from './body.js';
import { refuseMemberKey, refuseWidening } from './narrowing.js';
import { keyTeamNotFound } from './teams.js';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
/** Random characters in an issued key: 40 of base62 is about 238 bits. */
const KEY_CHARS = 40;
/** The longest grace a rotation may give the old plaintext: 30 days. */
export const MAX_GRACE_SECONDS = 30 * 86_400;

export function newKey(prefix: string): string {
  let out = `${prefix}_`;
  for (let i = 0; i < KEY_CHARS; i++) out += BASE62[randomInt(62)];
  return out;
}

/** What a key write needs: the store, the config, who asks, and the write's audit event. */
export interface KeyWrite { store: Store; config: Config; principal: Principal; audit: WriteAudit }

/** A key create or PATCH naming a team its account lacks: 404 team_not_found (CONTRACT section 15). */
function teamRefused(err: unknown): never {
  if (err instanceof TeamNotFoundError) throw keyTeamNotFound(err.team);
  throw err;
}

/** The queue priority of an account's plan (a member's keys stay at or below it). */
async function planPriority(w: KeyWrite, account: string): Promise<QueuePriority> {
  const a = await w.store.getAccount(account);
  if (a === undefined) throw new GatewayError('account_not_found', `No account with id '${clip(account)}'.`);
  return w.config.plans[a.plan]?.priority ?? 'normal';
}

/**
 * POST /admin/accounts/{id}/keys: a key with the controls the body names, all checked before
 * anything is stored (a key asked for with restrictions never comes out without them). The
 * answer is the contract's `{id, account, key}`; the controls show in the key list.
 */
export async function issueKey(w: KeyWrite, account: string, body: Body | undefined): Promise<{ id: string; account: string; key: string }> {
  const controls = applyPatch(defaultControls(), body === undefined ? {} : readControls(body.values, body.roundedValues));
  if (w.principal.role === 'member') {
    const priority = await planPriority(w, account);
    const teams = await w.store.listTeams(account) ?? [];
    refuseMemberKey(controls, priority, teams.map((t) => t.id));
  }
  const key = newKey(w.config.service.key_prefix);
  const digest = sha256Hex(key);
  const id = keyIdOf(digest);
  if (!(await w.store.createKey({ id, account, digest, last4: key.slice(-4), controls }, w.audit.take()).catch(teamRefused))) {
    throw new GatewayError('account_not_found', `No account with id '${clip(account)}'.`);
  }
  return { id, account, key };
}

/** PATCH /admin/keys/{id}: the controls the body names; a member's may only narrow (./narrowing.ts). */
export async function patchKey(w: KeyWrite, id: string, body: Body | undefined): Promise<KeyRecord> {
  const patch = body === undefined ? {} : readControls(body.values, body.roundedValues);
  let check: ((current: KeyRecord) => void) | undefined;
  if (w.principal.role === 'member' && w.principal.account !== null) {
    const priority = await planPriority(w, w.principal.account);
    check = (current) => refuseWidening(current, patch, priority);
  }
  const updated = await w.store.updateKey(id, patch, w.audit.take(), check).catch(teamRefused);
  if (updated === undefined) throw new GatewayError('key_not_found', `No live key with id '${clip(id)}'.`);
  return updated;
}

/**
 * POST /admin/keys/{id}/rotate {grace_seconds}: a new plaintext for the same key id (and its
 * controls, budget and usage); the old one works until the grace ends, then 401.
 */
export async function rotateKey(w: KeyWrite, id: string, body: Body | undefined): Promise<Record<string, unknown>> {
  const grace = body === undefined || body.values.grace_seconds === null ? 0
    : integerParam(body, 'grace_seconds', 0, MAX_GRACE_SECONDS, `an integer from 0 to ${MAX_GRACE_SECONDS} (30 days)`) ?? 0;
  const key = newKey(w.config.service.key_prefix);
  const until = Date.now() + grace * 1000;
  const rotated = await w.store.rotateKey(id, sha256Hex(key), key.slice(-4), until, w.audit.take());
  if (rotated === undefined) throw new GatewayError('key_not_found', `No live key with id '${clip(id)}'.`);
  return { id, account: rotated.account, key, previous_key_valid_until: new Date(until).toISOString() };
}

/** DELETE /admin/keys/{id}: 204 (revoking twice keeps the first time). */
export async function revokeKey(w: KeyWrite, id: string): Promise<void> {
  if ((await w.store.revokeKey(id, w.audit.take())) === undefined) throw new GatewayError('key_not_found', `No key with id '${clip(id)}'.`);
}
