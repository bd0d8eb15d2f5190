// Real Redis topologies on loopback for scale-out tests: a 3-primary Cluster (made with
// `redis-cli --cluster create`), and a primary + replica watched by three Sentinels. Every
// server runs without persistence in its own temp folder, on a free port; stop() ends them all
// and removes the folders. Without redis-server (and redis-cli) on PATH these fail, so a CI run
// can never skip them.

import { execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { command, freePort, halt, launch, redisServerOnPath } from './redis.js';

const run = promisify(execFile);

function binaries(): { server: string; cli: string } {
  const server = redisServerOnPath();
  if (server === undefined) throw new Error('redis-server is not on PATH: scale-out tests start real topologies (install the redis-server package)');
  return { server, cli: join(dirname(server), 'redis-cli') };
}

interface Node { port: number; child: ChildProcess; dir: string; args: string[] }

async function startNode(server: string, extra: string[], configFile?: string): Promise<Node> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-topo-'));
  const where = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir];
  let args = [...where, '--save', '', '--appendonly', 'no', ...extra];
  if (configFile !== undefined) {
    // A sentinel rewrites its config file: it must be its own, in its folder.
    const file = join(dir, 'sentinel.conf');
    writeFileSync(file, configFile.replaceAll('$PORT', String(port)));
    args = [file, '--sentinel', ...where];
  }
  const child = await launch(server, args, port);
  return { port, child, dir, args };
}

async function stopNode(n: Node): Promise<void> {
  await halt(n.child);
  rmSync(n.dir, { recursive: true, force: true });
}

export interface TestCluster {
  /** host:port of each primary, as store.cluster takes them. */
  nodes: string[];
  ports: number[];
  /** The port of the primary serving `key`'s slot, and the slot. */
  ownerOf(key: string): Promise<{ port: number; slot: number }>;
  /** Adds a replica of the primary on `port`, and waits until it is in sync. */
  addReplica(port: number): Promise<number>;
  /** Moves `slot` with its keys from one primary to another (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE). */
  moveSlot(slot: number, from: number, to: number): Promise<number>;
  /** SIGKILLs the node on `port`. */
  kill(port: number): Promise<void>;
  /** Starts the node on `port` again with its cluster config (it rejoins; a failed-over primary as a replica). */
  restart(port: number): Promise<void>;
  stop(): Promise<void>;
}

/** A plain connection to one node (no cluster redirections), for looking and for admin commands. */
export async function nodeClient(port: number): Promise<Redis> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
  await c.connect();
  return c;
}

async function onNode<T>(port: number, f: (c: Redis) => Promise<T>): Promise<T> {
  const c = await nodeClient(port);
  try {
    return await f(c);
  } finally {
    c.disconnect();
  }
}

/** Three primaries, the 16384 slots split between them, no replicas. */
export async function startCluster(primaries = 3): Promise<TestCluster> {
  const { server, cli } = binaries();
  const nodes: Node[] = [];
  const stop = async () => { await Promise.all(nodes.map(stopNode)); };
  try {
    for (let i = 0; i < primaries; i++) {
      nodes.push(await startNode(server, ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000']));
    }
    const addrs = nodes.map((n) => `127.0.0.1:${n.port}`);
    await run(cli, ['--cluster', 'create', ...addrs, '--cluster-replicas', '0', '--cluster-yes'], { timeout: 20_000 });
    const deadline = Date.now() + 10_000;
    for (const n of nodes) {
      while (!(await command(n.port, 'CLUSTER INFO').catch(() => '')).includes('cluster_state:ok')) {
        if (Date.now() > deadline) throw new Error(`cluster node ${n.port} did not become ok`);
        await sleep(50);
      }
    }
    const ports = nodes.map((n) => n.port);
    const myId = (port: number) => onNode(port, (c) => c.call('CLUSTER', 'MYID') as Promise<string>);
    return {
      nodes: addrs,
      ports,
      stop,
      ownerOf: (key) => onNode(ports[0]!, async (c) => {
        const slot = await c.call('CLUSTER', 'KEYSLOT', key) as number;
        const ranges = await c.call('CLUSTER', 'SLOTS') as Array<[number, number, [string, number, string]]>;
        const range = ranges.find(([lo, hi]) => slot >= lo && slot <= hi);
        if (range === undefined) throw new Error(`no node serves slot ${slot}`);
        return { port: Number(range[2][1]), slot };
      }),
      async addReplica(port) {
        const id = await myId(port);
        const replica = await startNode(server, ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000']);
        nodes.push(replica);
        await run(cli, ['--cluster', 'add-node', `127.0.0.1:${replica.port}`, `127.0.0.1:${port}`, '--cluster-slave', '--cluster-master-id', id], { timeout: 20_000 });
        await waitFor(async () => (await info(port, 'replication')).includes('connected_slaves:1')
          && (await info(replica.port, 'replication')).includes('master_link_status:up'), 15_000, 'the cluster replica to sync');
        return replica.port;
      },
      async kill(port) {
        const n = nodes.find((x) => x.port === port)!;
        const exited = new Promise<void>((resolve) => n.child.once('exit', () => resolve()));
        n.child.kill('SIGKILL');
        await exited;
      },
      async restart(port) {
        const n = nodes.find((x) => x.port === port)!;
        n.child = await launch(server, n.args, port);
      },
      async moveSlot(slot, from, to) {
        const [fromId, toId] = [await myId(from), await myId(to)];
        await onNode(to, (c) => c.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId));
        await onNode(from, (c) => c.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId));
        let moved = 0;
        await onNode(from, async (c) => {
          for (;;) {
            const keys = await c.call('CLUSTER', 'GETKEYSINSLOT', slot, 10) as string[];
            if (keys.length === 0) break;
            await c.call('MIGRATE', '127.0.0.1', to, '', 0, 5000, 'KEYS', ...keys);
            moved += keys.length;
          }
        });
        for (const port of [to, from, ...ports.filter((p) => p !== to && p !== from)]) {
          await onNode(port, (c) => c.call('CLUSTER', 'SETSLOT', slot, 'NODE', toId));
        }
        return moved;
      },
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

export interface TestSentinel {
  /** The master group name. */
  name: string;
  /** host:port of each sentinel, as store.sentinel.sentinels takes them. */
  sentinels: string[];
  /** Ports of the servers that started as primary and as replica. */
  primaryPort: number;
  replicaPort: number;
  /** SIGKILLs the server that started as primary (no goodbye to anyone). */
  killPrimary(): Promise<void>;
  /** Starts the killed primary again, empty, as a replica of the server on `port`; waits until in sync. */
  restartPrimaryAsReplicaOf(port: number): Promise<void>;
  /** The port the sentinels name as primary now. */
  currentPrimary(): Promise<number>;
  /** SENTINEL <args> on the first sentinel, or on sentinel `on` (an index into `sentinels`). */
  sentinelCommand(...args: string[]): Promise<unknown>;
  sentinelCommandOn(on: number, ...args: string[]): Promise<unknown>;
  /** SIGSTOPs / SIGCONTs sentinel `i`: it takes connections (the kernel does) but answers nothing. */
  pauseSentinel(i: number): void;
  resumeSentinel(i: number): void;
  stop(): Promise<void>;
}

/**
 * A primary, its replica, and three sentinels (quorum 2) that call the primary down after
 * `downAfterMs` without an answer, and promote the replica. `serverArgs` go to both servers.
 */
export async function startSentinel(downAfterMs = 500, serverArgs: string[] = []): Promise<TestSentinel> {
  const { server } = binaries();
  const name = 'tgmaster';
  const nodes: Node[] = [];
  const stop = async () => { await Promise.all(nodes.map(stopNode)); };
  try {
    const primary = await startNode(server, serverArgs);
    nodes.push(primary);
    const replica = await startNode(server, [...serverArgs, '--replicaof', '127.0.0.1', String(primary.port)]);
    nodes.push(replica);
    await waitFor(async () => (await info(primary.port, 'replication')).includes('connected_slaves:1')
      && (await info(replica.port, 'replication')).includes('master_link_status:up'), 10_000, 'the replica to sync');
    const conf = [
      'port $PORT',
      'bind 127.0.0.1',
      `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} 2000`,
      `sentinel parallel-syncs ${name} 1`,
      '',
    ].join('\n');
    const sentinels: Node[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await startNode(server, [], conf);
      sentinels.push(s);
      nodes.push(s);
    }
    // Every sentinel knows the replica and the two other sentinels before a test may kill anything.
    for (const s of sentinels) {
      await waitFor(async () => {
        const text = await sentinelInfo(s.port, name);
        return text.includes('num-slaves') && /num-slaves\s+1/.test(text) && /num-other-sentinels\s+2/.test(text);
      }, 15_000, `sentinel ${s.port} to see the replica and the other sentinels`);
    }
    const sentinelOn = async (i: number, args: string[]) => {
      const c = await nodeClient(sentinels[i]!.port);
      try {
        return await c.call('SENTINEL', ...args);
      } finally {
        c.disconnect();
      }
    };
    return {
      name,
      sentinels: sentinels.map((s) => `127.0.0.1:${s.port}`),
      primaryPort: primary.port,
      replicaPort: replica.port,
      killPrimary: async () => {
        const exited = new Promise<void>((resolve) => primary.child.once('exit', () => resolve()));
        primary.child.kill('SIGKILL');
        await exited;
      },
      restartPrimaryAsReplicaOf: async (port) => {
        primary.child = await launch(server, [...primary.args, '--replicaof', '127.0.0.1', String(port)], primary.port);
        await waitFor(async () => (await info(primary.port, 'replication')).includes('master_link_status:up'), 15_000, 'the old primary to sync as a replica');
      },
      sentinelCommand: (...args) => sentinelOn(0, args),
      sentinelCommandOn: (on, ...args) => sentinelOn(on, args),
      pauseSentinel: (i) => { sentinels[i]!.child.kill('SIGSTOP'); },
      resumeSentinel: (i) => { sentinels[i]!.child.kill('SIGCONT'); },
      currentPrimary: async () => {
        const c = new Redis({ port: sentinels[0]!.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
        try {
          await c.connect();
          const addr = await c.call('SENTINEL', 'get-master-addr-by-name', name) as [string, string];
          return Number(addr[1]);
        } finally {
          c.disconnect();
        }
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function info(port: number, section: string): Promise<string> {
  return command(port, `INFO ${section}`).catch(() => '');
}

/** SENTINEL MASTER name, flattened to "key value" lines. */
async function sentinelInfo(port: number, name: string): Promise<string> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await c.connect();
    const flat = await c.call('SENTINEL', 'master', name) as string[];
    const lines: string[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) lines.push(`${flat[i]} ${flat[i + 1]}`);
    return lines.join('\n');
  } catch {
    return '';
  } finally {
    c.disconnect();
  }
}

export async function waitFor(check: () => Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
