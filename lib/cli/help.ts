// The `tollgate` command's usage text, and the way a command refuses its words: the message on
// stderr and exit code 2.

import { ADMIN_USAGE } from './admin.js';

export const USAGE = `usage:
  tollgate serve --config FILE [--host H] [--port N]
  tollgate check --config FILE
${ADMIN_USAGE}`;
export function fail(message: string, code = 2): never {
  process.stderr.write(`${message}\n`);
  process.exit(code);
}
