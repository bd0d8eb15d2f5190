// The store's own Redis client (lib/store/redis/connect.ts) for tests that look at how it talks
// to Redis: ready before the test goes on, its error events expected (tests cut its connection),
// retired and closed at teardown; a plain client beside it to look at the server; and a count of
// the writes its socket makes.

import { Redis } from 'ioredis';
import { connect, retire } from '../../lib/store/redis/connect.js';

export async function storeClient(t: any, url: string, name: string, commandTimeout = 3000): Promise<{ client: Redis; admin: Redis }> {
  const client = connect({ kind: 'url', url }, { connectionName: name, commandTimeout, connectTimeout: 2000 }) as Redis;
  t.teardown(() => { retire(client); client.disconnect(); });
  client.on('error', () => undefined);
  const admin = new Redis(url);
  t.teardown(() => admin.disconnect());
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return { client, admin };
}

/** Counts the writes the socket of `client`'s current connection makes from now on. */
export function socketWrites(client: Redis): { count: number } {
  const socket = (client as unknown as { stream: Record<string, (...a: unknown[]) => unknown> }).stream;
  const counter = { count: 0 };
  for (const name of ['_write', '_writev']) {
    const own = socket[name]!;
    socket[name] = function (this: unknown, ...a: unknown[]) { counter.count++; return own.apply(this, a); };
  }
  return counter;
}

/** Redis's read events so far (one INFO: it counts one read of its own), i.e. round trips served. */
export async function readsAt(client: Redis): Promise<number> {
  return Number(/total_reads_processed:(\d+)/.exec(await client.info('stats'))![1]);
}
