// Opens the store the config names. It lives as long as the gateway: a reload that changes
// the `store` section is reported and needs a restart to take effect.

import type { Config } from '../config/types.js';
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import type { Store } from './types.js';

export async function openStore(config: Config['store']): Promise<Store> {
  if (config.kind === 'redis') return new RedisStore({ url: config.url, prefix: config.prefix });
  return MemoryStore.open({ path: config.path, fsyncMs: config.fsync_ms });
}

export type { Store } from './types.js';
