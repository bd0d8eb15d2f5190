// Opens the store the config names. It lives as long as the gateway: a reload that changes
// the `store` section is reported and needs a restart to take effect. Opening never waits for a
// Redis that is down: the gateway starts anyway and the store connects when Redis is back.

import type { Config } from '../config/types.js';
import { ConfigValueError } from '../config/value-error.js';
import type { Logger } from '../observe/log.js';
import { GuardedStore } from './guard.js';
import { MemoryStore } from './memory/store.js';
import type { RedisClient, RedisTopology } from './redis/connect.js';
import { RetryQueue } from './retry.js';
import type { Store } from './types.js';

export interface StoreHandle {
  /** The store as routes use it: faults reject with StoreUnavailableError, releases are retried. */
  store: Store;
  /** The command connection (redis), shared by rate limits and concurrency slots; else null. */
  redis: RedisClient | null;
  /** Releases waiting for the store (holds here, slots in limits/slots.ts). */
  retries: RetryQueue;
  /** Resolves true once the store is connected, or false after `ms` (never rejects). */
  connected(ms: number): Promise<boolean>;
  /** Calls `listener` each time the store (re)connects; returns the unsubscribe function. */
  onReady(listener: () => void): () => void;
  /** A last retry pass, then closes the store. */
  close(): Promise<void>;
}

/** `usageRetentionDays`: usage.retention_days, read when the store opens (a reload keeps the first). */
export async function openStore(config: Config['store'], logger?: Logger, usageRetentionDays?: number): Promise<StoreHandle> {
  const retries = new RetryQueue({ log: logger });
  if (config.kind === 'redis') {
    // Loaded only for a Redis store: the embedded store does without ioredis (and its memory).
    const [{ RedisStore }, { describeTopology }] = await Promise.all([import('./redis/store.js'), import('./redis/connect.js')]);
    const topology = topologyOf(config);
    const where = describeTopology(topology);
    const redis = new RedisStore({
      topology, prefix: config.prefix, commandTimeoutMs: config.timeout_ms,
      waitReplicas: config.wait_replicas, waitTimeoutMs: config.wait_timeout_ms, usageRetentionDays,
    });
    // Once per outage, not per reconnect attempt: the connection went, and it came back.
    let state: 'new' | 'up' | 'down' | 'closing' = 'new';
    redis.client.on('ready', () => {
      if (state === 'down') logger?.warn(where, 'store connection back');
      if (state !== 'closing') state = 'up';
    });
    redis.client.on('close', () => {
      if (state !== 'up') return;
      state = 'down';
      logger?.error(where, 'store connection lost: calls that need the store fail until it is back; reconnecting');
    });
    return {
      store: new GuardedStore(redis, retries, { settleWaitMs: config.settle_wait_ms }),
      redis: redis.client,
      retries,
      connected: (ms) => redis.ready(ms).then(() => true, () => false),
      onReady: (listener) => {
        redis.client.on('ready', listener);
        return () => { redis.client.off('ready', listener); };
      },
      close: async () => { await retries.close(); state = 'closing'; await redis.close(); },
    };
  }
  let memory: MemoryStore;
  try {
    memory = await MemoryStore.open({ path: config.path, fsyncMs: config.fsync_ms, usageRetentionDays });
  } catch (err) {
    // Only a store.path can fail to open: the folder, its files, or what they hold.
    const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
    throw new ConfigValueError('store.path', `cannot open the store in ${JSON.stringify(config.path)}: ${why}`, { cause: err });
  }
  return {
    store: new GuardedStore(memory, retries, { settleWaitMs: config.settle_wait_ms }),
    redis: null,
    retries,
    connected: async () => true,
    onReady: () => () => {},
    close: async () => { await retries.close(); await memory.close(); },
  };
}

export type { Store } from './types.js';

/** store.url, store.sentinel or store.cluster (the config allows one of them). */
export function topologyOf(config: Config['store']): RedisTopology {
  if (config.sentinel !== null) {
    return {
      kind: 'sentinel', name: config.sentinel.name, sentinels: config.sentinel.sentinels,
      password: config.password, sentinelPassword: config.sentinel.sentinel_password,
    };
  }
  if (config.cluster !== null) return { kind: 'cluster', nodes: config.cluster, password: config.password };
  // validateConfig sets url whenever neither sentinel nor cluster is given.
  return { kind: 'url', url: config.url ?? 'redis://127.0.0.1:6379' };
}
