// Opens the batch store the config's store names (CONTRACT section 18): the memory store's
// (on disk under store.path when set) or Redis's, on the store's own connection; and gives
// each new state the store, and the gateway its one runner.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config/types.js';
import type { Metrics } from '../observe/metrics.js';
import type { GatewayState } from '../state.js';
import { MemoryBatchStore, type BatchStore } from '../store/batches.js';
import type { RedisClient } from '../store/redis/connect.js';
import { RedisBatchStore } from '../store/redis/batches.js';
import { BatchRunner } from './runner.js';

export type { BatchStore } from '../store/batches.js';
export type { BatchRunner } from './runner.js';

export async function openBatchStore(config: Config['store'], redis: RedisClient | null): Promise<BatchStore> {
  if (redis !== null) return new RedisBatchStore(redis, config.prefix);
  return MemoryBatchStore.open(config.path);
}

/**
 * Gives `state` (and its admin API) the batch store; the first time (no `runner` yet), starts
 * the runner (none while draining: `runner` null), which sends lines to `handler` and reads the gateway's state from `current`.
 */
export async function attachBatches(
  state: GatewayState, store: BatchStore, current: () => GatewayState | undefined, handler: (req: IncomingMessage, res: ServerResponse) => void,
  runner?: BatchRunner | null, metrics?: Metrics,
): Promise<BatchRunner | undefined> {
  state.batches = store;
  if (state.admin !== null) state.admin.batchStore = store;
  // Draining (null): no runner starts.
  if (runner !== undefined) return runner ?? undefined;
  const started = new BatchRunner({ store, state: current, handler, logger: state.logger, ...(metrics === undefined ? {} : { metrics }) });
  await started.start();
  return started;
}
