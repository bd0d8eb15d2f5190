// The CLI's part of spend attribution (CONTRACT section 20): a key's `--tags a,b`,
// `--tags-locked true|false` and `--end-user-budget-units N [--end-user-budget-period P]` for
// `tollgate keys create|update`, and the key list's lines for its team, tags and end-user
// budget.

import type { KeyAnswer } from './answers.js';

/** The options parseArgs learns. */
export const TAG_OPTIONS = {
  tags: { type: 'string' }, 'tags-locked': { type: 'string' }, 'end-user-budget-units': { type: 'string' }, 'end-user-budget-period': { type: 'string' },
  // usage export's filters
  tag: { type: 'string' }, 'end-user': { type: 'string' },
} as const;

export const TAG_USAGE = `--tags a,b (null: none)  --tags-locked true|false
              --end-user-budget-units N (null: none)  --end-user-budget-period day|week|month|never`;

/** Puts the team and the tags the options name into a key body; a usage error as `fail(message)`. */
export function addTeamAndTags(body: Record<string, unknown>, str: (k: string) => string | undefined, verb: string, fail: (message: string) => never): void {
  const team = str('team');
  if (team !== undefined) body.team = team === 'null' ? null : team;
  const tags = str('tags');
  // The server checks each tag; the CLI only splits the list.
  if (tags !== undefined) body.tags = tags === 'null' ? null : tags.split(',').map((t) => t.trim());
  const locked = str('tags-locked');
  if (locked !== undefined) {
    if (locked !== 'true' && locked !== 'false') fail(`${verb}: --tags-locked must be true or false, not ${JSON.stringify(locked)}`);
    body.tags_locked = locked === 'true';
  }
  const units = str('end-user-budget-units');
  const period = str('end-user-budget-period');
  if (units === 'null') {
    if (period !== undefined) fail(`${verb}: --end-user-budget-period with --end-user-budget-units null: a cleared budget has no period`);
    body.end_user_budget = null;
  } else if (units !== undefined) {
    if (!/^(0|[1-9][0-9]*)$/.test(units) || !Number.isSafeInteger(Number(units))) fail(`${verb}: --end-user-budget-units must be a whole number of units, not ${JSON.stringify(units)}`);
    if (period !== undefined && !['day', 'week', 'month', 'never'].includes(period)) fail(`${verb}: --end-user-budget-period must be day, week, month or never, not ${JSON.stringify(period)}`);
    body.end_user_budget = { units: Number(units), period: period === undefined || period === 'never' ? null : period };
  } else if (period !== undefined) {
    fail(`${verb}: --end-user-budget-period needs --end-user-budget-units (a budget is set whole)`);
  }
}

/** The key list's lines for the key's team and tags (none when it has neither). */
export function teamAndTagLines(k: KeyAnswer): string[] {
  const out: string[] = [];
  if (k.team !== null && k.team !== undefined) out.push(`  team: ${k.team}`);
  const tags = k.tags ?? [];
  if (tags.length > 0 || k.tags_locked === true) out.push(`  tags: ${tags.length === 0 ? '(none)' : tags.join(', ')}${k.tags_locked === true ? ' (locked)' : ''}`);
  const eub = k.end_user_budget;
  if (eub != null) out.push(`  each end user: ${eub.units} per ${eub.period ?? 'lifetime'}`);
  return out;
}
