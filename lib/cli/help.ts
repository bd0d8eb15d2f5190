// The `tollgate` command's usage text, the commands of their own beside serve, check and the
// admin groups, and the way a command refuses its words: the message on stderr and exit code 2.

import { ADMIN_USAGE } from './admin.js';
import { BATCHES_USAGE, batches } from './batches.js';

/** A command of its own: its usage lines, and its run over its words, answering the exit code. */
export interface Command { usage: string; run: (argv: string[]) => Promise<number> }

/** The commands of their own, by name (main() runs them before the admin groups): one entry each. */
export const COMMANDS: Readonly<Record<string, Command>> = {
  batches: { usage: BATCHES_USAGE, run: batches },
};

export const USAGE = [`usage:
  tollgate serve --config FILE [--host H] [--port N]
  tollgate check --config FILE`, ADMIN_USAGE, ...Object.values(COMMANDS).map((c) => c.usage)].join('\n');

export function fail(message: string, code = 2): never {
  process.stderr.write(`${message}\n`);
  process.exit(code);
}
