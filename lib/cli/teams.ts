// `tollgate teams create|list|update|delete` (CONTRACT section 15): a team's settings from the
// options (the key controls a team has), and a team as the list prints it.

import type { TeamAnswer } from './answers.js';
import { controlsOf } from './keys.js';
import { CliError, enc, need, type Opts, type Step } from './call.js';

/** A team's settings the options name (CONTRACT section 15): the key controls a team has. */
function teamSettingsOf(opts: Opts, verb: string): Record<string, unknown> {
  const body = controlsOf(opts, verb);
  for (const [member, opt] of [['expires_at', 'expires'], ['priority', 'priority'], ['allowed_ips', 'allow-ips'], ['metadata', 'metadata'], ['team', 'team']] as const) {
    if (body[member] !== undefined) throw new CliError(`${verb}: --${opt} is a key's control, not a team's`, 2);
  }
  return body;
}

/** One team as the list shows it. */
function teamLines(tm: TeamAnswer): string {
  const b = tm.budget;
  const budget = b.units === null ? `spent ${b.spent_units} (no budget)` : `${b.spent_units}/${b.units} per ${b.period ?? 'lifetime'}${b.resets_at ? ` (resets ${b.resets_at})` : ''}`;
  const l = tm.limits;
  const limits = [['rpm', l.requests_per_minute], ['tpm', l.tokens_per_minute], ['concurrent', l.max_concurrent]]
    .filter(([, v]) => v !== null).map(([n, v]) => `${n}=${v}`).join(' ') || 'plan and keys only';
  return [
    `${tm.id}  account=${tm.account}${tm.name === null ? '' : `  "${tm.name}"`}`,
    `  models: ${tm.models === null ? 'any the plan and key allow' : tm.models.join(', ')}${tm.mcp_tools == null ? '' : `  mcp tools: ${tm.mcp_tools.join(', ')}`}`,
    `  budget: ${budget}`,
    `  limits: ${limits}`,
    `  created: ${tm.created_at}`,
  ].join('\n');
}
/** The call of a `teams` sub-command; undefined for an unknown one. */
export function planTeams(sub: string | undefined, args: string[], opts: Opts): Step | undefined {
  switch (sub) {
    case 'create': {
      need(args, 2, 'teams create ACCOUNT TEAM_ID [--name N] [--budget-units N --budget-period day|week|month|never] [--rpm N] [--tpm N] [--max-concurrent N] [--models a,b]');
      const body = { id: args[1], ...teamSettingsOf(opts, 'teams create') };
      return { call: { method: 'POST', path: `/admin/accounts/${enc(args[0]!)}/teams`, body }, show: (b: TeamAnswer) => `created ${teamLines(b)}` };
    }
    case 'list':
      need(args, 1, 'teams list ACCOUNT');
      return {
        call: { method: 'GET', path: `/admin/accounts/${enc(args[0]!)}/teams` },
        show: (b: { teams: TeamAnswer[] }) => (b.teams.length === 0 ? `no teams for ${args[0]}` : b.teams.map(teamLines).join('\n')),
      };
    case 'update': {
      need(args, 1, 'teams update TEAM_ID [--name N|null] [--budget-units N|null] [--rpm N|null] [--models a,b|null] ...');
      const body = teamSettingsOf(opts, 'teams update');
      if (Object.keys(body).length === 0) throw new CliError('teams update: name at least one setting to change (see tollgate --help)', 2);
      return { call: { method: 'PATCH', path: `/admin/teams/${enc(args[0]!)}`, body }, show: (b: TeamAnswer) => `updated ${teamLines(b)}` };
    }
    case 'delete':
      need(args, 1, 'teams delete TEAM_ID');
      return { call: { method: 'DELETE', path: `/admin/teams/${enc(args[0]!)}` }, show: () => `deleted team ${args[0]}` };  }
  return undefined;
}
