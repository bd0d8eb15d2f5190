// The `tollgate` command: serve a config (./serve.ts), check one (./check.ts), or call a running
// gateway's admin API (./admin.ts, one file per group of sub-commands), or run a command of
// its own (COMMANDS in ./help.ts). bin/tollgate.js runs main().

import { ADMIN_COMMANDS, admin } from './admin.js';
import { check } from './check.js';
import { COMMANDS, USAGE, fail } from './help.js';
import { serve } from './serve.js';

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const own = command !== undefined && Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (own !== undefined) {
    process.exitCode = await own.run(rest);
    return;
  }
  if (command !== undefined && ADMIN_COMMANDS.has(command)) {
    process.exitCode = await admin(command, rest);
    return;
  }
  try {
    switch (command) {
      case 'serve': return await serve(rest);
      case 'check': return await check(rest);
      case '-h': case '--help': case 'help': case undefined:
        process.stdout.write(`${USAGE}\n`);
        if (command === undefined) process.exitCode = 2;
        return;
      default: fail(`tollgate: unknown command '${command}'\n${USAGE}`);
    }
  } catch (err) {
    if (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) fail(`tollgate: ${err.message}\n${USAGE}`);
    throw err;
  }
}
