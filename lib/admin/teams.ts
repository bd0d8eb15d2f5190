// The admin API's teams (CONTRACT section 15): POST and GET /admin/accounts/{id}/teams, GET,
// PATCH and DELETE /admin/teams/{team_id}. A team groups keys of one account: its budget is held
// with each request's key budget and wallet in one store step, its limits count over all its
// keys, and its models narrow what its keys may use. Team ids are unique across the gateway.
// Bodies are checked by their shapes first (./body-shape.ts: TEAM_BODY, TEAM_PATCH_BODY), then
// member by member as a key's controls are (../auth/controls.ts). Each write hands its audit
// event to the store call that makes it (./audit.ts).

import { readTeamId, readTeamSettings, teamView } from '../auth/controls.js';
import { GatewayError, clip } from '../errors.js';
import { applyTeamPatch, defaultTeamSettings, type AuditEvent, type Store } from '../store/types.js';

/** A body as the admin API has read it: its values, and the number literals JSON.parse rounded. */
export interface TeamBody { values: Record<string, unknown>; roundedValues: Set<number> }

const teamNotFound = (id: string) => new GatewayError('team_not_found', `No team with id '${clip(id)}'.`);
const accountNotFound = (id: string) => new GatewayError('account_not_found', `No account with id '${clip(id)}'.`);

/** POST /admin/accounts/{account}/teams {id, name, budget, limits, models}: 201 with the team. */
export async function createTeam(store: Store, account: string, body: TeamBody, audit?: AuditEvent): Promise<Record<string, unknown>> {
  const { id } = body.values;
  if (id === undefined || id === null) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'id'.", { param: 'id' });
  const teamId = readTeamId(id, 'id');
  const { id: _id, ...rest } = body.values;
  const settings = applyTeamPatch(defaultTeamSettings(), readTeamSettings(rest, body.roundedValues));
  const outcome = await store.createTeam(account, teamId, settings, audit);
  if (outcome === 'account_not_found') throw accountNotFound(account);
  if (outcome === 'team_exists') throw new GatewayError('team_exists', `A team with id '${clip(teamId)}' exists.`, { param: 'id' });
  const team = await store.getTeam(teamId);
  // Deleted again between the two calls: as if it had never been.
  if (team === undefined) throw teamNotFound(teamId);
  return teamView(team);
}

/** GET /admin/accounts/{account}/teams: `{teams: [...]}`, oldest first. */
export async function listTeams(store: Store, account: string): Promise<{ teams: Array<Record<string, unknown>> }> {
  const teams = await store.listTeams(account);
  if (teams === undefined) throw accountNotFound(account);
  const now = Date.now();
  return { teams: teams.map((t) => teamView(t, now)) };
}

/** GET /admin/teams/{id}. */
export async function getTeam(store: Store, id: string): Promise<Record<string, unknown>> {
  const team = await store.getTeam(id);
  if (team === undefined) throw teamNotFound(id);
  return teamView(team);
}

/** PATCH /admin/teams/{id}: the members named change; a budget change keeps this period's spend. */
export async function updateTeam(store: Store, id: string, body: TeamBody | undefined, audit?: AuditEvent): Promise<Record<string, unknown>> {
  const patch = body === undefined ? {} : readTeamSettings(body.values, body.roundedValues);
  const team = await store.updateTeam(id, patch, audit);
  if (team === undefined) throw teamNotFound(id);
  return teamView(team);
}

/** DELETE /admin/teams/{id}: 204, or 409 team_in_use while a live key names it. */
export async function deleteTeam(store: Store, id: string, audit?: AuditEvent): Promise<void> {
  const outcome = await store.deleteTeam(id, audit);
  if (outcome === 'not_found') throw teamNotFound(id);
  if (outcome === 'in_use') {
    throw new GatewayError('team_in_use', `The team '${clip(id)}' is named by live keys: give them another team (PATCH /admin/keys/{id} {"team": null}) or revoke them first.`);
  }
}

/** A key create or PATCH that named a team its account does not have: 404 team_not_found. */
export function keyTeamNotFound(team: string): GatewayError {
  return new GatewayError('team_not_found', `No team with id '${clip(team)}' in the key's account.`, { param: 'team' });
}
