// The CLI's part of spend attribution (CONTRACT section 20): a key's `--tags a,b` and
// `--tags-locked true|false` for `tollgate keys create|update`, and the key list's lines for
// its team and tags. Kept apart from ./cli-admin.ts, which may not grow.

import type { KeyAnswer } from './cli-admin-answers.js';

/** The options parseArgs learns. */
export const TAG_OPTIONS = { tags: { type: 'string' }, 'tags-locked': { type: 'string' } } as const;

export const TAG_USAGE = '--tags a,b (null: none)  --tags-locked true|false';

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
}

/** The key list's lines for the key's team and tags (none when it has neither). */
export function teamAndTagLines(k: KeyAnswer): string[] {
  const out: string[] = [];
  if (k.team !== null && k.team !== undefined) out.push(`  team: ${k.team}`);
  const tags = k.tags ?? [];
  if (tags.length > 0 || k.tags_locked === true) out.push(`  tags: ${tags.length === 0 ? '(none)' : tags.join(', ')}${k.tags_locked === true ? ' (locked)' : ''}`);
  return out;
}
