// `tollgate check --config FILE`: loads and checks a config as `serve` would, printing every
// problem (exit 1) or the warnings and `FILE: ok`. The config loader is imported here, when the
// command runs: the admin sub-commands start without compiling the config schema.

import { parseArgs } from 'node:util';
import { USAGE, fail } from './help.js';

export async function check(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string', short: 'c' } }, strict: true });
  if (values.config === undefined) fail(`tollgate check: --config FILE is required\n${USAGE}`);
  const { ConfigError, loadConfigFile } = await import('../config/load.js');
  const { configWarnings } = await import('../config/cross-check.js');
  let config;
  try {
    config = await loadConfigFile(values.config);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.problems.join('\n')}\n`);
    process.exit(1);
  }
  // Valid but unworkable values: reported, never fatal.
  for (const w of configWarnings(config)) process.stderr.write(`WARNING ${w}\n`);
  process.stdout.write(`${values.config}: ok\n`);
}
