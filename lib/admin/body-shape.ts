// The members an admin body may hold, at every depth (CONTRACT section 16). Every admin route
// that reads a body names its shape, and one check refuses any other member before a value is
// read: 400 unsupported_value, param the member's path (`budget.unit`). A misspelt control
// (`allowed_ip`, `expires`, `Models`) was ignored, and the key came out unrestricted.

import { CONTROL_FIELDS, LIMIT_FIELDS } from '../auth/controls.js';
import { GatewayError, clip } from '../errors.js';
import { isObject } from '../objects.js';

/**
 * A body, or an object inside one: the members it takes, each with what it holds. `value`: a
 * scalar or a list (whose type its reader checks); `map`: an object of free member names
 * (metadata); a shape: an object of these members only.
 */
export type BodyShape = { readonly [member: string]: 'value' | 'map' | BodyShape };

/** The longest member name echoed in a param or message. */
const MAX_NAME = 64;


/**
 * Throws 400 unsupported_value for the first member (in body order, depth first) that `shape`
 * does not take. A member holding the wrong type is left to its reader (invalid_type).
 */
export function refuseUnknownMembers(body: Record<string, unknown>, shape: BodyShape, at = ''): void {
  for (const member of Object.keys(body)) {
    const path = `${at}${clip(member, MAX_NAME)}`;
    // Own members only: a body's `constructor` or `toString` is no member of any shape.
    const inner = Object.hasOwn(shape, member) ? shape[member] : undefined;
    if (inner === undefined) {
      const taken = Object.keys(shape);
      const where = at === '' ? 'this body' : `'${at.slice(0, -1)}'`;
      throw new GatewayError('unsupported_value',
        `Unsupported parameter: '${path}'; ${where} takes ${taken.length === 0 ? 'no members' : taken.join(', ')}.`, { param: path });
    }
    const value = body[member];
    if (typeof inner === 'object' && isObject(value)) refuseUnknownMembers(value, inner, `${path}.`);
  }
}

// ---- the shapes of the admin API's bodies (CONTRACT sections 5 and 8) ----------------------

/** POST /admin/accounts */
export const ACCOUNT_BODY: BodyShape = { id: 'value', plan: 'value', wallet_units: 'value' };

/** POST /admin/accounts/{id}/credits */
export const CREDIT_BODY: BodyShape = { units: 'value', idempotency_key: 'value' };

/** POST /admin/accounts/{id}/keys and PATCH /admin/keys/{id}: a key's controls, each of them. */
export const CONTROLS_BODY: BodyShape = {
  name: 'value', models: 'value', expires_at: 'value', budget: { units: 'value', period: 'value' },
  limits: Object.fromEntries(LIMIT_FIELDS.map((f) => [f, 'value' as const])), priority: 'value', allowed_ips: 'value', metadata: 'map', team: 'value',
  mcp_tools: 'value', tags: 'value', tags_locked: 'value', end_user_budget: { units: 'value', period: 'value' },
} satisfies Record<(typeof CONTROL_FIELDS)[number], BodyShape[string]>;

/** PATCH /admin/teams/{id} (CONTRACT section 15): a team's settings. */
export const TEAM_PATCH_BODY: BodyShape = {
  name: 'value', budget: { units: 'value', period: 'value' }, limits: Object.fromEntries(LIMIT_FIELDS.map((f) => [f, 'value' as const])), models: 'value',
  mcp_tools: 'value',
};

/** POST /admin/accounts/{id}/teams: its id and settings. */
export const TEAM_BODY: BodyShape = { id: 'value', ...TEAM_PATCH_BODY };

/** POST /admin/keys/{id}/rotate */
export const ROTATE_BODY: BodyShape = { grace_seconds: 'value' };

/** POST /admin/sessions/{sid}/revoke: no body, or an empty object. */
export const NO_MEMBERS: BodyShape = {};
