// The store's Redis clients never stay given up (lib/store/redis-connect.ts). ioredis ends a
// client for good when a disconnect cuts its connect short; here that is done at once, on a
// plain server, the way its Sentinel failover detector does it mid-failover
// (test/store/sentinel-revive.test.ts has the real race): the client connects again and
// serves; a subscriber comes back subscribed, even one that was never ready before; a client
// retired on purpose stays closed.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { connect, keepSubscribed, retire, type RedisClient } from '../../lib/store/redis-connect.js';
import { startRedis } from '../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

function given(client: RedisClient): { ended: () => boolean; errors: string[] } {
  let ended = false;
  const errors: string[] = [];
  client.on('end', () => { ended = true; });
  client.on('error', (err: Error) => errors.push(err.message));
  return { ended: () => ended, errors };
}

async function until(check: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await sleep(20);
  }
  return false;
}

t.test('a client whose connect was cut short connects again and serves', async (t) => {
  const c = connect({ kind: 'url', url: redis.url }, { connectionName: 'tg-revive', commandTimeout: 1000, connectTimeout: 2000 });
  t.teardown(() => { retire(c); c.disconnect(); });
  const seen = given(c);
  c.disconnect(true); // still connecting: ioredis rejects the connect and gives the client up
  t.ok(await until(seen.ended, 2000), 'ioredis gave it up');
  t.ok(await until(() => c.status === 'ready', 5000), `ready again (status ${c.status})`);
  t.equal(await c.ping(), 'PONG', 'and it serves');
  t.ok(seen.errors.includes('Connection is closed.'), 'the give-up was reported as an error event');
});

t.test('a subscriber given up before it was ever ready comes back subscribed', async (t) => {
  const sub = connect({ kind: 'url', url: redis.url }, { connectionName: 'tg-revive-sub', connectTimeout: 2000, subscriber: true });
  t.teardown(() => { retire(sub); sub.disconnect(); });
  const seen = given(sub);
  const heard: string[] = [];
  sub.on('message', (_channel: string, text: string) => heard.push(text));
  const subscribed = keepSubscribed(sub, 'tg-revive-channel');
  sub.disconnect(true);
  t.ok(await until(seen.ended, 2000), 'ioredis gave it up, its queued SUBSCRIBE with it');
  t.ok(await until(() => subscribed().then(() => true, () => false), 5000), 'subscribed once it was back');
  const pub = new Redis(redis.url);
  t.teardown(() => pub.disconnect());
  t.equal(await pub.publish('tg-revive-channel', 'after'), 1, 'the server counts it as a subscriber');
  t.ok(await until(() => heard.includes('after'), 2000), 'and a message reaches it');
});

t.test('a subscriber that was ready is subscribed again by ioredis after a reconnect, once', async (t) => {
  const sub = connect({ kind: 'url', url: redis.url }, { connectionName: 'tg-resub', connectTimeout: 2000, subscriber: true });
  t.teardown(() => { retire(sub); sub.disconnect(); });
  const subscribed = keepSubscribed(sub, 'tg-resub-channel');
  await subscribed();
  const admin = new Redis(redis.url);
  t.teardown(() => admin.disconnect());
  await admin.client('KILL', 'TYPE', 'pubsub');
  t.ok(await until(async () => (await admin.pubsub('NUMSUB', 'tg-resub-channel'))[1] === 1, 5000), 'subscribed again after the connection was cut');
  t.equal(await admin.publish('tg-resub-channel', 'x'), 1, 'one subscription, not two');
});

t.test('a client retired on purpose stays closed', async (t) => {
  const c = connect({ kind: 'url', url: redis.url }, { connectionName: 'tg-retired', commandTimeout: 1000, connectTimeout: 2000 });
  const seen = given(c);
  await until(() => c.status === 'ready', 5000);
  retire(c);
  c.disconnect();
  t.ok(await until(seen.ended, 2000), 'ended');
  await sleep(300); // past the first reconnect delay (50 ms)
  t.equal(c.status, 'end', 'and not connected again');
});
