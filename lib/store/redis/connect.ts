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

import type { Socket } from 'node:net';
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
        // Not ioredis's auto-pipelining: see batchWrites() below, which does its job cheaper.
        enableAutoPipelining: false,
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        autoResendUnfulfilledCommands: false,
      }),
  };
  switch (topology.kind) {
    case 'url':
      return revive(batched(new Redis(topology.url, base), options));
    case 'sentinel':
      return revive(batched(new Redis({
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
      }), options));
    case 'cluster': {
      const nodes: ClusterNode[] = topology.nodes.map(hostPort);
      // Node connections reconnect as the cluster's slot map says, not by themselves.
      const { retryStrategy: _own, ...nodeOptions } = base;
      const cluster = new Cluster(nodes, {
        clusterRetryStrategy: backoff,
        enableAutoPipelining: false,
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
      if (options.subscriber !== true) {
        // Each node's own connection batches what is sent to it.
        for (const node of cluster.nodes('all')) batchWrites(node);
        cluster.on('+node', (node: Redis) => batchWrites(node));
        directScripts(cluster);
      }
      return cluster;
    }
  }
}

function batched(client: Redis, options: ConnectOptions): Redis {
  if (options.subscriber !== true) {
    batchWrites(client);
    directScripts(client);
  }
  return client;
}

/** What ioredis keeps of a script defined with defineCommand (its Script object). */
interface DefinedScript {
  sha: string;
  numberOfKeys: number | null;
  keyPrefix: string;
  readOnly: boolean;
  Command: new (name: string, args: { flat(): unknown[] }, options: { replyEncoding: 'utf8' }) => ScriptCommand;
}
interface ScriptCommand { promise: Promise<unknown> }

const UTF8 = { replyEncoding: 'utf8' } as const;

/**
 * Scripts defined on `client` (defineCommand: the store's, the slots', rate-limiter-flexible's)
 * are sent as ioredis sends them, without the two copies of their arguments its generic path
 * makes. ioredis's Command takes its arguments through `args.flat()`, and V8's
 * Array.prototype.flat is the generic one (a property lookup per element): counted with
 * callgrind, 108,000-110,000 instructions per metered request on the Redis store (7 scripts,
 * about 14,000 each; 3% of the request's instructions), 4,400 once scripts skip it. Here the arguments are laid out flat once and handed
 * to the script's own Command (the same EVALSHA, its text instead of its SHA the first time
 * on each connection), with the same retry as ioredis's when Redis answers NOSCRIPT. Arguments
 * are flattened one level, as ioredis does (rate-limiter-flexible passes them as one array);
 * a call with a callback, or a script with a key prefix or read-only, takes ioredis's own path.
 */
function directScripts(client: RedisClient): void {
  const define = client.defineCommand;
  client.defineCommand = function (this: RedisClient, name: string, definition: { lua: string; numberOfKeys?: number; readOnly?: boolean }) {
    define.call(this, name, definition);
    const script = (this.scriptsSet as Record<string, DefinedScript>)[name];
    const own = (this as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>);
    const generic = own[name];
    if (script === undefined || generic === undefined || script.keyPrefix || script.readOnly || typeof script.numberOfKeys !== 'number') return;
    own[name] = function (this: RedisClient, ...args: unknown[]): Promise<unknown> {
      if (typeof args[args.length - 1] === 'function') return generic.apply(this, args);
      const list: unknown[] = [script.sha, script.numberOfKeys];
      for (const a of args) {
        if (Array.isArray(a)) for (const x of a) list.push(x);
        else list.push(a);
      }
      return sendScript(this, script, list);
    };
  };
}

function sendScript(client: RedisClient, script: DefinedScript, list: unknown[]): Promise<unknown> {
  // The command writes the script's text in place of its SHA when it is the first on its
  // connection: the retry starts again from the SHA.
  const again = (err: Error): Promise<unknown> => {
    if (!err.message.includes('NOSCRIPT')) throw err;
    const resend = list.slice();
    resend[0] = script.sha;
    return client.sendCommand(new script.Command('evalsha', { flat: () => resend }, UTF8) as never) as Promise<unknown>;
  };
  const command = new script.Command('evalsha', { flat: () => list }, UTF8);
  command.promise = command.promise.catch(again);
  return client.sendCommand(command as never) as Promise<unknown>;
}

/** What the commands a lost connection left unanswered fail with: sent, so their outcome is unknown. */
export const UNANSWERED = 'Connection lost before Redis answered';

/**
 * The commands in flight when `client`'s connection closes fail then, not at their timeout.
 * ioredis keeps them for a resend after the reconnect (which this client never does: they are
 * dropped there), so each would otherwise wait out the store's timeout; an auto-pipelined batch
 * used to be aborted on close, and this keeps that for every command. Its 'close' event comes a
 * tick after the connection closed and before any reconnect (50 ms at the soonest), while the
 * queue is still the closed connection's.
 */
function failUnansweredOnClose(client: Redis): void {
  const queue = client as unknown as { flushQueue(err: Error, options: { offlineQueue: boolean }): void };
  client.on('close', () => queue.flushQueue(new Error(UNANSWERED), { offlineQueue: false }));
}

/** Connections whose writes are batched already. */
const batching = new WeakSet<Redis>();

/**
 * Commands sent on `client` before the event loop's next check phase leave in one write: a
 * request's limits, slot and hold (or its release, token correction and usage record) reach
 * Redis together, one read there and one round trip. At the turn's first command the socket's
 * write is taken over: what ioredis writes (each command's RESP text) is kept, in order, and
 * setImmediate hands it to the socket as one string, in one write (behind any write still under
 * way). Commands keep their order, and each is still its own ioredis command (its own reply,
 * timeout and error). One string costs less than the same parts corked and written as a writev
 * (a queued write request per part, then an array of parts for the kernel): Node's native
 * Writev took about 61,000 instructions per metered request, the one write 2,000 (callgrind).
 * A part that is not a string (a command with a Buffer argument) has the batch written part
 * by part, corked, as before.
 *
 * This is what ioredis's enableAutoPipelining is for, without its cost: every batch it makes is
 * a Pipeline object that copies each defined script onto itself and defines an own accessor
 * (`length`), which gives the object a hidden class of its own in the old generation. From
 * there it keeps the batch, its commands and their replies alive through every young
 * collection until the next mark-compact: with the Redis store, about 26 KB promoted per
 * request at one connection, a scavenge every ~100 ms taking 5-7 ms instead of ~1, and a
 * mark-compact every few seconds (measured with --trace-gc-nvp; test/observe/young-garbage.test.ts).
 */
function batchWrites(client: Redis): void {
  if (batching.has(client)) return;
  batching.add(client);
  failUnansweredOnClose(client);
  const send = client.sendCommand;
  let held: Socket | undefined;
  let parts: Array<string | Buffer> = [];
  let text = true;
  const keep = (chunk: string | Buffer): boolean => {
    if (typeof chunk !== 'string') text = false;
    parts.push(chunk);
    return true;
  };
  const flush = (): void => {
    const socket = held!;
    const chunks = parts;
    held = undefined;
    parts = [];
    // The socket's own write again (the prototype's: the taken-over one was an own property).
    delete (socket as unknown as { write?: unknown }).write;
    // A socket closed meanwhile: its commands were failed by the close (failUnansweredOnClose).
    if (!socket.writable) return;
    if (text) {
      socket.write(chunks.length === 1 ? chunks[0]! : (chunks as string[]).join(''));
      return;
    }
    text = true;
    socket.cork();
    for (const c of chunks) socket.write(c);
    socket.uncork();
  };
  client.sendCommand = function (this: Redis, command, stream) {
    // A pipeline's commands (a Cluster's replica wait) are written by the pipeline itself, at once.
    if (held === undefined && stream === undefined && this.status === 'ready') {
      const socket = (this as unknown as { stream?: Socket }).stream;
      if (socket !== undefined && socket.writable) {
        (socket as unknown as { write: typeof keep }).write = keep;
        held = socket;
        setImmediate(flush);
      }
    }
    return send.call(this, command, stream);
  };
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
