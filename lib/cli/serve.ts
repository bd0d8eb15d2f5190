// `tollgate serve --config FILE`: starts the gateway on node:http, drains it on SIGTERM/SIGINT,
// reloads the config on SIGHUP, from the console, and (server.watch_config) when the file
// changes. The config loader and the gateway are imported when the command runs: the admin
// sub-commands start without loading them.

import { watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { parseArgs } from 'node:util';
import type { Gateway } from '../gateway.js';
import type { RunningServer } from '../server.js';
import { USAGE, fail } from './help.js';

export async function serve(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { config: { type: 'string', short: 'c' }, host: { type: 'string' }, port: { type: 'string' } },
    strict: true,
  });
  if (values.config === undefined) fail(`tollgate serve: --config FILE is required\n${USAGE}`);
  // All three at once: serve needs them all, so none waits for another.
  const [{ ConfigError, loadConfigFile }, { ConfigValueError }, { listenProblem }, { createGateway }, { listen }] = await Promise.all([
    import('../config/load.js'), import('../config/value-error.js'), import('../config/local.js'), import('../gateway.js'), import('../server.js'),
  ]);
  const path = values.config;
  let config;
  try {
    config = await loadConfigFile(path);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // The very lines `tollgate check` prints for this file.
    fail(err.problems.join('\n'), 1);
  }
  const port = values.port === undefined ? config.server.port : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`tollgate serve: --port must be an integer from 0 to 65535`);
  const host = values.host ?? config.server.host;

  // The config was validated above: the gateway takes it as it is. The signals are handled
  // from here on, while it starts too.
  const gateway = createGateway(config);
  // The last resort (CONTRACT section 21: no store fault ends the process). Node ends a process
  // on a rejection nobody handled; every path of the gateway handles its own (a store fault is a
  // 503), so one reaching here is a bug, and ending the process for it would cut every tenant
  // off for a result no code was waiting for. Logged at error level, with the reason, and the
  // gateway serves on. Only `serve` installs it: an embedder owns its process. A thrown
  // exception (uncaughtException) still ends the process: state may be half-changed then.
  process.on('unhandledRejection', (reason) => {
    gateway.logger.error({ err: reason instanceof Error ? reason : String(reason) }, 'unhandled rejection (a bug in the gateway: please report it); serving on');
  });
  let running: RunningServer | undefined;
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    if (running === undefined) {
      // Still starting: nothing is served yet, so nothing to drain; the store is closed cleanly.
      gateway.logger.info({ signal }, 'stopping before serving');
      void closeWithin(gateway, config.server.drain_timeout_ms).then(() => process.exit(0));
      return;
    }
    gateway.logger.info({ signal, inflight: gateway.inflight }, 'draining');
    running.drain(config.server.drain_timeout_ms).then(
      () => process.exit(0),
      (err) => { gateway.logger.error({ err }, 'drain failed'); process.exit(1); },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));

  try {
    running = await listen(gateway, host, port);
  } catch (err) {
    if (stopping) return;
    const where = { host, port, hostPath: values.host === undefined ? 'server.host' : '--host', portPath: values.port === undefined ? 'server.port' : '--port' };
    const lines = err instanceof ConfigValueError ? [err.line] : listenProblems(err, where, listenProblem);
    if (lines === undefined) gateway.logger.error({ err }, 'the gateway could not start');
    process.stderr.write(`${(lines ?? [`tollgate: cannot start: ${firstLine(err)}`]).join('\n')}\n`);
    await closeWithin(gateway, 5000);
    process.exit(1);
  }
  if (stopping) return;
  // Stdout carries this line and the log: when it cannot be written (a full disk, a reader
  // gone), the log says so once on stderr (observe/log.ts) and the gateway serves on; should
  // stderr's reader be gone too, that goes unsaid rather than stopping the gateway.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  process.stdout.write(`tollgate listening on ${running.url}\n`);
  gateway.logger.info({ url: running.url, config: path, models: config.models.length }, 'listening');

  let reloading = Promise.resolve();
  const reload = (why: string) => {
    reloading = reloading.then(async () => {
      try {
        await gateway.reload(await loadConfigFile(path));
        gateway.logger.info({ config: path, why }, 'config reloaded');
      } catch (err) {
        const problems = err instanceof ConfigError ? err.problems : err instanceof ConfigValueError ? [err.line] : [String(err)];
        gateway.logger.error({ config: path, why, problems }, 'config reload rejected; the previous config stays in force');
      }
    });
  };
  process.on('SIGHUP', () => reload('SIGHUP'));
  // The console's "Reload": the same reload, in the same queue, answering with its problems.
  gateway.setReloader(() => {
    const done = reloading.then(async () => {
      try {
        await gateway.reload(await loadConfigFile(path));
        gateway.logger.info({ config: path, why: 'console' }, 'config reloaded');
        return [];
      } catch (err) {
        const problems = err instanceof ConfigError ? err.problems : err instanceof ConfigValueError ? [err.line] : [String(err)];
        gateway.logger.error({ config: path, why: 'console', problems }, 'config reload rejected; the previous config stays in force');
        return problems;
      }
    });
    reloading = done.then(() => undefined);
    return done;
  });
  if (config.server.watch_config) {
    // The folder, not the file: editors often save by writing a new file and renaming it.
    const name = basename(path);
    let debounce: NodeJS.Timeout | undefined;
    watch(dirname(path), (_event, changed) => {
      if (changed !== null && changed !== name) return;
      clearTimeout(debounce);
      debounce = setTimeout(() => reload('file changed'), 200);
    }).unref();
  }
}

/** Where serve listens, and the config path (or flag) each came from. */
interface ListenAt { host: string; port: number; hostPath: string; portPath: string }

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]!;
}

/**
 * A failure to listen as a `path: message` line (CONTRACT section 11), naming the config key or
 * the flag that gave the address, and saying a host's problem as `check` says it; undefined for
 * any other error.
 */
function listenProblems(err: unknown, at: ListenAt, hostProblem: (host: string, err: NodeJS.ErrnoException) => string): string[] | undefined {
  const e = err as NodeJS.ErrnoException;
  if (!(err instanceof Error) || e.code === undefined || !['listen', 'bind', 'getaddrinfo'].includes(e.syscall ?? '')) return undefined;
  const addr = `${at.host.includes(':') ? `[${at.host}]` : at.host}:${at.port}`;
  if (e.code === 'EADDRINUSE') return [`${at.portPath}: ${addr} is already in use (EADDRINUSE)`];
  if (e.code === 'EACCES') return [`${at.portPath}: no permission to listen on ${addr} (EACCES)`];
  return [`${at.hostPath}: ${hostProblem(at.host, e)}`];
}

/** Closes the gateway (its store flushed), giving up after `ms`. */
async function closeWithin(gateway: Gateway, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    gateway.close().catch(() => undefined),
    new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); }),
  ]);
  clearTimeout(timer);
}
