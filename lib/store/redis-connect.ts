// How the Redis store reaches Redis: one server (a URL), a Sentinel-managed primary, or a
// Cluster, all through ioredis's own support, with one policy for every connection: no offline
// queue and no resending after a reconnect (a command the caller has seen fail is never applied
// later), each command bounded by the store's timeout, reconnecting by itself with backoff.
//
// Failover: with Sentinel, ioredis asks the sentinels for the primary on every (re)connect, and
// reconnects as soon as they announce a new one (failoverDetector); a connection that still
// reaches a demoted primary gets READONLY on its first write and reconnects. With Cluster,
// ioredis follows MOVED/ASK and refreshes its slot map; a node it cannot reach is dropped until
// the cluster names its successor.
//
// ioredis gives a client up for good (status "end") when its connect is cut short: a disconnect
// while it is still asking the sentinels makes that connect reject, and it never tries again;
// every command then fails with "Connection is closed." forever. Its own failover detector does
// exactly that when +switch-master arrives mid-reconnect, which a killed primary makes likely
// (and a READONLY reconnect can too). Here a client stays ended only when retired on purpose:
// any other end is followed by a fresh connect, with the same backoff.

import { Cluster, Redis, type ClusterNode, type RedisOptions } from 'ioredis';

/** Either kind of client: every command the store sends works on both. */
export type RedisClient = Redis | Cluster;

export type RedisTopology =
  | { kind: 'url'; url: string }
  | { kind: 'sentinel'; name: string; sentinels: string[]; password?: string | null; sentinelPassword?: string | null }
  | { kind: 'cluster'; nodes: string[]; password?: string | null };

export interface ConnectOptions {
  /** CLIENT SETNAME, so an operator can tell the connections apart. */
  connectionName: string;
  /** Upper bound on each command, in ms; undefined: none (the subscriber waits as long as it takes). */
  commandTimeout?: number;
  /** Connect timeout and backoff cap, in ms. */
  connectTimeout: number;
  /** A subscriber connection: queues its SUBSCRIBE until connected, resubscribes after reconnects. */
  subscriber?: boolean;
}

/** "host:port" (the host possibly a bracketed IPv6 address) as ioredis takes it. */
export function hostPort(text: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(text);
  if (m === null) throw new TypeError(`not host:port: ${JSON.stringify(text)}`);
  return { host: m[1] ?? m[2] ?? '', port: Number(m[3]) };
}

/** A write refused by a replica: this connection reaches a primary that was demoted. */
function readonlyError(err: Error): boolean {
  return err.message.startsWith('READONLY');
}

const backoff = (times: number) => Math.min(times * 50, 1000);

/** Clients being closed on purpose: the only ones left ended. */
const retired = new WeakSet<RedisClient>();

/** Marks `client` as closed on purpose (call it before QUIT or disconnect): it is not revived. */
export function retire(client: RedisClient): void {
  retired.add(client);
}

/** Connects `client` again, with backoff, each time ioredis gives it up without being asked to. */
function revive(client: Redis): Redis {
  let attempts = 0;
  client.on('ready', () => { attempts = 0; });
  client.on('end', () => {
    if (retired.has(client)) return;
    setTimeout(() => {
      // A failed connect ends the client again, and so comes back here.
      if (!retired.has(client) && client.status === 'end') client.connect().catch(() => undefined);
    }, backoff(++attempts)).unref();
  });
  return client;
}

export function connect(topology: RedisTopology, options: ConnectOptions): RedisClient {
  const base: RedisOptions = {
    connectionName: options.connectionName,
    connectTimeout: options.connectTimeout,
    retryStrategy: backoff,
    lazyConnect: false,
    // Reconnect (to whatever is primary now), without resending the refused command.
    reconnectOnError: (err) => readonlyError(err),
    ...(options.subscriber === true
      ? { maxRetriesPerRequest: null, autoResubscribe: true }
      : {
        commandTimeout: options.commandTimeout,
        // Commands issued in one tick (a request's limits, slot and hold; its release, token
        // correction and usage record) go out as one write: one round trip.
        enableAutoPipelining: true,
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        autoResendUnfulfilledCommands: false,
      }),
  };
  switch (topology.kind) {
    case 'url':
      return revive(new Redis(topology.url, base));
    case 'sentinel':
      return revive(new Redis({
        ...base,
        name: topology.name,
        sentinels: topology.sentinels.map(hostPort),
        role: 'master',
        ...(topology.password ? { password: topology.password } : {}),
        ...(topology.sentinelPassword ? { sentinelPassword: topology.sentinelPassword } : {}),
        sentinelCommandTimeout: options.connectTimeout,
        // Keep asking the sentinels, however long the outage: the store recovers by itself.
        sentinelRetryStrategy: backoff,
        failoverDetector: true,
      }));
    case 'cluster': {
      const nodes: ClusterNode[] = topology.nodes.map(hostPort);
      // Node connections reconnect as the cluster's slot map says, not by themselves.
      const { retryStrategy: _own, ...nodeOptions } = base;
      return new Cluster(nodes, {
        clusterRetryStrategy: backoff,
        enableAutoPipelining: options.subscriber !== true,
        enableOfflineQueue: options.subscriber === true,
        scaleReads: 'master',
        // Redirections and waits for a failover stay well inside the command's own timeout.
        maxRedirections: 8,
        retryDelayOnFailover: 50,
        retryDelayOnClusterDown: 50,
        retryDelayOnTryAgain: 20,
        slotsRefreshTimeout: options.connectTimeout,
        redisOptions: {
          ...nodeOptions,
          ...(topology.password ? { password: topology.password } : {}),
        },
      });
    }
  }
}

/**
 * SUBSCRIBEs `client` to `channel`, and again whenever it becomes ready after a subscribe
 * failed. ioredis subscribes again by itself only a client that had been ready: one given up
 * during its very first connect (and connected again by revive()) would come back deaf, its
 * queued SUBSCRIBE thrown away. Returns the latest attempt (resolved once subscribed).
 */
export function keepSubscribed(client: RedisClient, channel: string): () => Promise<void> {
  let failed = false;
  const attempt = (): Promise<void> => {
    const p = client.subscribe(channel).then(() => { failed = false; });
    p.catch(() => { failed = true; });
    return p;
  };
  let current = attempt();
  client.on('ready', () => {
    if (!failed) return;
    failed = false;
    current = attempt();
  });
  return () => current;
}

/** Where a client connects, for logs: never a password. */
export function describeTopology(topology: RedisTopology): Record<string, unknown> {
  switch (topology.kind) {
    case 'url': return { url: redactedUrl(topology.url) };
    case 'sentinel': return { sentinel: topology.name, sentinels: topology.sentinels };
    case 'cluster': return { cluster: topology.nodes };
  }
}

function redactedUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}
