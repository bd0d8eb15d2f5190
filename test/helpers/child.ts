// Runs `tollgate serve` as a child process, as an operator does, for tests that kill or
// signal the gateway itself.

import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

export const BIN = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));

export interface ChildGateway {
  proc: ChildProcess;
  url: string;
  /** Everything the child printed so far. */
  output: () => string;
}

/**
 * Starts the child (with `nodeArgs` before the script: --import, --trace-gc) and resolves once
 * it printed its listening URL; killed at teardown.
 */
export async function serveChild(t: any, configFile: string, env: NodeJS.ProcessEnv = {}, nodeArgs: string[] = []): Promise<ChildGateway> {
  const proc = spawn(process.execPath, [...nodeArgs, BIN, 'serve', '--config', configFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn', ...env },
  });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  // Patient: a loaded machine may take many seconds to start Node; the loop ends at the line.
  for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const m = /listening on (\S+)/.exec(out);
  if (m === null) throw new Error(`the gateway did not start: ${out}`);
  return { proc, url: m[1]!, output: () => out };
}
