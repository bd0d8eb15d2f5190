// What a console member may set on its account's keys (CONTRACT section 21): the controls an
// admin sets bound the member, who may only narrow them. An admin gives a key a team, a
// priority, models, addresses, a budget, limits and an expiry; a member who could lift any of
// them would escape the team's budget or the queue's order at will. Refused: 403
// permission_denied naming the member (`param`), nothing changed.
//
// A member's PATCH (checked against the key as the store applies it, so that a racing PATCH
// cannot slip a wider value under the check: Store.updateKey's `check`) may:
// - team: join one when the key has none; never leave its team or move to another;
// - priority: only lower it (null is the plan's priority);
// - models, allowed_ips: only a list each of whose entries the current list covers (a glob
//   covers what it matches; a CIDR the CIDRs inside it); null (any) only where it is null;
// - budget: fewer units in the same period (changing the period would start a new period's
//   spend from 0); null only where it is null; any budget where it is null;
// - limits, each one: a smaller number; null only where it is null;
// - expires_at: an earlier time; null only where it is null;
// - name and metadata: anything (they bound nothing).
// A member's NEW key has no admin controls to narrow, so it may carry any of the above but:
// - priority: at most its plan's (the queue's order is the operator's);
// - team: in an account with teams, one of them. Teams are how an admin bounds a group of
//   keys; a member who could create a key outside every team would escape all of them at once.
//   An admin may still create keys without a team. (An account without teams is bounded by its
//   wallet and plan alone, which a member cannot change.)

import { BlockList } from 'node:net';
import type { QueuePriority } from '../config/types.js';
import { GatewayError, clip } from '../errors.js';
import { parseCidr } from '../http/cidr.js';
import type { KeyControls, KeyPatch, KeyRecord } from '../store/types.js';

const RANK: Record<QueuePriority, number> = { low: 0, normal: 1, high: 2 };

function denied(param: string, why: string): GatewayError {
  return new GatewayError('permission_denied', `Permission denied for '${param}': ${why}. A member may only narrow the controls an admin set on a key.`, { param });
}

/** A glob (`*` any run of characters) covering `entry`, itself a slug or a glob (see the header). */
export function globCovers(glob: string, entry: string): boolean {
  if (!glob.includes('*')) return glob === entry;
  // Tested against the entry's text: a `*` in the entry is matched only by a `*` of the glob
  // (the glob's literal characters are never `*`), so everything the entry matches, the glob does.
  const re = new RegExp(`^${glob.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\/-]/g, '\\$&')).join('.*')}$`, 's');
  return re.test(entry);
}

/** Whether CIDR `outer` holds every address of CIDR `inner` (same family, no wider prefix). */
export function cidrCovers(outer: string, inner: string): boolean {
  const o = parseCidr(outer);
  const i = parseCidr(inner);
  if (o === undefined || i === undefined || o[2] !== i[2] || i[1] < o[1]) return false;
  const list = new BlockList();
  list.addSubnet(o[0], o[1], o[2]);
  return list.check(i[0], i[2]);
}

/** A list that may only narrow `current` (null: no restriction). */
function narrowList(param: string, current: string[] | null, next: string[] | null, covers: (outer: string, inner: string) => boolean, what: string): void {
  if (current === null) return;
  if (next === null) throw denied(param, `it is limited to ${current.length} ${what}; null would lift the limit`);
  next.forEach((entry, i) => {
    if (!current.some((outer) => covers(outer, entry))) throw denied(`${param}[${i}]`, `'${clip(entry, 128)}' is outside the key's ${what}`);
  });
}

/** A number that may only go down (null: no limit). */
function narrowNumber(param: string, current: number | null, next: number | null): void {
  if (current === null) return;
  if (next === null) throw denied(param, `it is ${current}; null would lift it`);
  if (next > current) throw denied(param, `it is ${current}; a member may lower it, not raise it to ${next}`);
}

/** The priority a key's requests get: its own, else its plan's. */
function effective(p: QueuePriority | null, plan: QueuePriority): QueuePriority {
  return p ?? plan;
}

/** Throws 403 permission_denied unless a member's `patch` only narrows `key`'s controls. */
export function refuseWidening(key: KeyRecord, patch: KeyPatch, planPriority: QueuePriority): void {
  const c = key.controls;
  if (patch.team !== undefined && c.team !== null && patch.team !== c.team) {
    throw denied('team', `the key is in team '${c.team}'; a member may not move it out of its team`);
  }
  if (patch.priority !== undefined) {
    const now = effective(c.priority, planPriority);
    const next = effective(patch.priority, planPriority);
    if (RANK[next] > RANK[now]) throw denied('priority', `the key's priority is ${now}; a member may lower it, not raise it to ${next}`);
  }
  if (patch.models !== undefined) narrowList('models', c.models, patch.models, globCovers, 'models');
  if (patch.mcp_tools !== undefined) narrowList('mcp_tools', c.mcp_tools ?? null, patch.mcp_tools, globCovers, 'MCP tools');
  if (patch.allowed_ips !== undefined) narrowList('allowed_ips', c.allowed_ips, patch.allowed_ips, cidrCovers, 'addresses');
  if (patch.budget !== undefined && c.budget !== null) {
    if (patch.budget === null) throw denied('budget', `the key has a budget of ${c.budget.units} units; null would lift it`);
    if (patch.budget.period !== c.budget.period) {
      throw denied('budget.period', `the key's budget is per ${c.budget.period ?? 'lifetime (null)'}; a member may not change the period (a new period starts from 0 spent)`);
    }
    narrowNumber('budget.units', c.budget.units, patch.budget.units);
  }
  for (const [name, value] of Object.entries(patch.limits ?? {}) as Array<[keyof KeyControls['limits'], number | null | undefined]>) {
    if (value !== undefined) narrowNumber(`limits.${name}`, c.limits[name], value);
  }
  if (patch.end_user_budget !== undefined && c.end_user_budget !== null) {
    if (patch.end_user_budget === null || patch.end_user_budget.period !== c.end_user_budget.period) {
      throw denied('end_user_budget', 'a member may lower the units of an end-user budget, not lift it or change its period');
    }
    narrowNumber('end_user_budget.units', c.end_user_budget.units, patch.end_user_budget.units);
  }
  // A key whose tags are locked keeps them: unlocking or relabelling would let its spend be mislabelled.
  if (c.tags_locked && (patch.tags_locked === false || (patch.tags !== undefined && patch.tags.join(',') !== c.tags.join(',')))) {
    throw denied(patch.tags_locked === false ? 'tags_locked' : 'tags', "the key's tags are locked; a member may not change or unlock them");
  }
  if (patch.expires_at !== undefined && c.expires_at !== null) {
    if (patch.expires_at === null) throw denied('expires_at', `the key expires at ${new Date(c.expires_at).toISOString()}; null would make it never expire`);
    if (patch.expires_at > c.expires_at) throw denied('expires_at', `the key expires at ${new Date(c.expires_at).toISOString()}; a member may bring it forward, not extend it`);
  }
}

/** Throws 403 permission_denied unless a member may create a key with `controls` (see the header). */
export function refuseMemberKey(controls: KeyControls, planPriority: QueuePriority, teams: readonly string[]): void {
  if (controls.priority !== null && RANK[controls.priority] > RANK[planPriority]) {
    throw denied('priority', `the account's plan has priority ${planPriority}; a member's key may not be above it`);
  }
  if (controls.team === null && teams.length > 0) {
    const named = teams.slice(0, 10).map((t) => `'${t}'`).join(', ');
    throw denied('team', `the account has teams (${named}${teams.length > 10 ? ', …' : ''}); a member's new key must name one of them`);
  }
}
