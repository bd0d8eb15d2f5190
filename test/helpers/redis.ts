// A throwaway redis-server on a free port (no persistence), for tests that need a real Redis.
// Without redis-server on PATH: fails under CI=true; otherwise uses REDIS_URL when set (an
// external server that these helpers never stop or restart), else fails saying what to do.

import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createConnection, createServer, type AddressInfo } from 'node:net';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface TestRedis {
  url: string;
  port: number;
  /** True for REDIS_URL: stop() does nothing and restart() rejects. */
  external: boolean;
  stop(): Promise<void>;
  /** Stops the server but keeps its folder: restart() brings it back (with its data when `persist`). */
  halt(): Promise<void>;
  /** Stops and starts the server on the same port; its data is gone (--save ''), unless `persist`. */
  restart(): Promise<void>;
  /** SIGSTOP / SIGCONT: connections stay open but nothing answers (a hung server). */
  freeze(): void;
  thaw(): void;
}

export function redisServerOnPath(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const file = join(dir, 'redis-server');
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch { /* not here */ }
  }
  return undefined;
}

export interface StartOptions {
  /** A one-node Redis Cluster holding every slot: scripts touching keys of two slots fail. */
  cluster?: boolean;
  /** Keep the data across restart() (an append-only file, fsynced on every write). */
  persist?: boolean;
}

// Servers still running when the test process exits are killed with it.
const running = new Set<ChildProcess>();
process.once('exit', () => { for (const c of running) c.kill('SIGKILL'); });

export async function startRedis(options: StartOptions = {}): Promise<TestRedis> {
  const bin = redisServerOnPath();
  if (bin === undefined) {
    if (process.env.CI === 'true') throw new Error('redis-server is not on PATH; CI must have it (install the redis-server package)');
    const url = process.env.REDIS_URL;
    if (url === undefined || url === '') {
      throw new Error('redis-server is not on PATH: install it (e.g. apt-get install redis-server) or set REDIS_URL to a Redis these tests may write to');
    }
    return {
      url,
      port: Number(new URL(url).port || 6379),
      external: true,
      stop: async () => {},
      halt: () => Promise.reject(new Error('cannot stop the external Redis at REDIS_URL')),
      restart: () => Promise.reject(new Error('cannot restart the external Redis at REDIS_URL')),
      freeze: () => { throw new Error('cannot freeze the external Redis at REDIS_URL'); },
      thaw: () => {},
    };
  }

  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--dir', dir,
    ...(options.persist === true ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'])];
  if (options.cluster === true) args.push('--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf');
  let child = await launch(bin, args, port);
  if (options.cluster === true) await assignAllSlots(port);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    external: false,
    freeze: () => { child.kill('SIGSTOP'); },
    thaw: () => { child.kill('SIGCONT'); },
    async stop() {
      await halt(child);
      rmSync(dir, { recursive: true, force: true });
    },
    halt: () => halt(child),
    async restart() {
      await halt(child);
      mkdirSync(dir, { recursive: true });
      child = await launch(bin, args, port);
    },
  };
}

/** Gives the single node every slot and waits until the cluster reports ok. */
async function assignAllSlots(port: number): Promise<void> {
  await command(port, 'CLUSTER ADDSLOTSRANGE 0 16383');
  const deadline = Date.now() + 5000;
  while (!(await command(port, 'CLUSTER INFO')).includes('cluster_state:ok')) {
    if (Date.now() > deadline) throw new Error(`the one-node cluster on port ${port} did not become ok`);
    await sleep(20);
  }
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function launch(bin: string, args: string[], port: number): Promise<ChildProcess> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  child.once('exit', () => running.delete(child));
  child.stdout?.resume();
  let stderr = '';
  child.stderr?.on('data', (d) => { stderr += String(d); });
  const deadline = Date.now() + 5000;
  while (!(await answersPing(port))) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`redis-server on port ${port} exited (${child.exitCode ?? child.signalCode}): ${stderr}`);
    }
    if (Date.now() > deadline) {
      await halt(child);
      throw new Error(`redis-server on port ${port} did not answer PING within 5 s`);
    }
    await sleep(20);
  }
  return child;
}

export async function halt(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGCONT'); // in case it is frozen
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

async function answersPing(port: number): Promise<boolean> {
  return (await command(port, 'PING').catch(() => '')).startsWith('+PONG');
}

/** One inline command over a fresh socket (no client library, so nothing retries or queues). */
export function command(port: number, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    let reply = '';
    const finish = (err?: Error) => {
      socket.destroy();
      if (err) reject(err); else resolve(reply);
    };
    socket.setTimeout(500, () => finish(new Error(`no answer to ${line}`)));
    socket.once('error', finish);
    socket.once('connect', () => socket.write(`${line}\r\n`));
    socket.on('data', (d) => {
      reply += String(d);
      if (complete(reply)) finish();
    });
  });
}

/** Whether a simple, error, integer or bulk string reply has fully arrived. */
function complete(reply: string): boolean {
  const eol = reply.indexOf('\r\n');
  if (eol === -1) return false;
  if (reply[0] !== '$') return true;
  const n = Number(reply.slice(1, eol));
  return n < 0 || Buffer.byteLength(reply.slice(eol + 2)) >= n + 2;
}
