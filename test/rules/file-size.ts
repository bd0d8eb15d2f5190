// The file-size rule (docs/contributing.md): every file under lib/ is at most MAX_LINES lines,
// except the files on OVERSIZED, which were over it when the rule came (Tollgate #41) and may
// not grow. A file that is split below the limit leaves the list.

import { readdir, readFile } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';

export const MAX_LINES = 450;

/**
 * Files already over MAX_LINES when the rule came, with their line count then: each may shrink
 * but not grow. Remove an entry once its file is split to MAX_LINES or fewer; never add one.
 */
export const OVERSIZED: Readonly<Record<string, number>> = {
};

/** Lines as `wc -l` counts them, plus a last line that lacks its newline. */
export function lineCount(text: string): number {
  if (text === '') return 0;
  const newlines = text.split('\n').length - 1;
  return text.endsWith('\n') ? newlines : newlines + 1;
}

/** What breaks the rule, one sentence a file; `files` maps a path like lib/x.ts to its lines. */
export function sizeProblems(files: ReadonlyMap<string, number>, oversized: Readonly<Record<string, number>> = OVERSIZED, max = MAX_LINES): string[] {
  const problems: string[] = [];
  for (const [path, lines] of [...files].sort(([a], [b]) => a.localeCompare(b))) {
    const allowed = oversized[path];
    if (allowed === undefined) {
      if (lines > max) problems.push(`${path}: ${lines} lines, over ${max}: split it by topic`);
    } else if (lines > allowed) {
      problems.push(`${path}: ${lines} lines, grew past its allowlisted ${allowed}: move code out rather than add`);
    } else if (lines <= max) {
      problems.push(`${path}: ${lines} lines, no longer over ${max}: remove it from OVERSIZED in test/rules/file-size.ts`);
    }
  }
  for (const path of Object.keys(oversized).sort()) {
    if (!files.has(path)) problems.push(`${path}: on OVERSIZED but gone: remove its entry`);
  }
  return problems;
}

/** Every file under `dir` (recursively) of the repository at `root`, with its line count. */
export async function linesUnder(root: string, dir: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const entries = await readdir(join(root, dir), { recursive: true, withFileTypes: true });
  for (const e of entries) {
    if (!e.isFile()) continue;
    const full = join(e.parentPath, e.name);
    out.set(relative(root, full).split(sep).join('/'), lineCount(await readFile(full, 'utf8')));
  }
  return out;
}
