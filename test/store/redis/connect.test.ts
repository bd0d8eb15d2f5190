// The store's Redis clients never stay given up (lib/store/redis/connect.ts). ioredis ends a
// client for good when a disconnect cuts its connect short; here that is done at once, on a
// plain server, the way its Sentinel failover detector does it mid-failover
// (test/store/sentinel-revive.test.ts has the real race): the client connects again and
// serves; a subscriber comes back subscribed, even one that was never ready before; a client
// retired on purpose stays closed. And how it sends: a loop turn's commands in one write, in
// order, each with its own reply; commands a lost connection left unanswered fail then; a
// script defined on the client goes out without ioredis's generic copies of its arguments,
// with ioredis's own behaviour (its text first on each connection, NOSCRIPT retried).

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { UNANSWERED, connect, keepSubscribed, retire, type RedisClient } from '../../../lib/store/redis/connect.js';
import { startRedis } from '../../helpers/redis.js';
import { readsAt, socketWrites, storeClient } from '../../helpers/store-client.js';

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


t.test('commands sent in one turn of the event loop leave in one write, each with its own reply', async (t) => {
  const { client: c, admin } = await storeClient(t, redis.url, 'tg-batch', 1000);
  await c.del('tg-batch:n', 'tg-batch:h');
  // The socket's own writes, counted on the client's side (Redis may read separate writes at once).
  const writes = socketWrites(c);
  const before = await readsAt(admin);
  writes.count = 0;
  // Sent from one synchronous stretch and from a microtask after it: one batch, as long as
  // nothing waits for I/O between.
  const sent: Array<Promise<unknown>> = [];
  for (let i = 0; i < 10; i++) sent.push(c.incr('tg-batch:n'));
  sent.push(c.hset('tg-batch:h', 'a', '1'));
  sent.push(c.call('NOSUCHCOMMAND').then(() => 'answered', (err: Error) => `refused: ${err.message.split(' ')[0]}`));
  sent.push(c.eval('return redis.call("HGET", KEYS[1], "a")', 1, 'tg-batch:h'));
  await Promise.resolve();
  sent.push(c.incr('tg-batch:n'));
  const replies = await Promise.all(sent);
  t.equal(writes.count, 1, 'the fourteen commands are one write on the socket');
  const after = await readsAt(admin);
  t.same(replies.slice(0, 10), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'in the order sent');
  t.same(replies.slice(10), [1, 'refused: ERR', '1', 11], 'a refused command fails alone');
  t.equal(after - before - 1, 1, 'one read at the server for the fourteen commands');

  // Two turns of the loop apart: two writes.
  writes.count = 0;
  const a = c.incr('tg-batch:n');
  await new Promise((resolve) => setImmediate(resolve));
  const b = c.incr('tg-batch:n');
  t.same(await Promise.all([a, b]), [12, 13]);
  t.equal(writes.count, 2, 'commands a turn apart are two writes');
});

t.test('a connection cut while a batch is held back: its commands fail at once, and the next connection batches again', async (t) => {
  const { client: c, admin } = await storeClient(t, redis.url, 'tg-batch-cut');
  await c.set('tg-batch-cut', '0');
  // Written into the held-back batch, then the socket goes before it is sent.
  const lost = [c.incr('tg-batch-cut'), c.incr('tg-batch-cut')].map((p) => p.then(() => 'answered', (err: Error) => err.message));
  const cut = Date.now();
  (c as unknown as { stream: { destroy(): void } }).stream.destroy();
  const outcomes = await Promise.all(lost);
  t.same(outcomes, [UNANSWERED, UNANSWERED], 'both failed');
  t.ok(Date.now() - cut < 1000, `when the connection closed, not at the 3 s timeout (${Date.now() - cut} ms)`);
  t.equal(await admin.get('tg-batch-cut'), '0', 'and neither was applied');
  t.ok(await until(() => c.status === 'ready', 5000), 'connected again');
  const before = await readsAt(admin);
  t.same(await Promise.all([c.incr('tg-batch-cut'), c.incr('tg-batch-cut'), c.get('tg-batch-cut')]), [1, 2, '2'], 'the new connection serves');
  t.equal(await readsAt(admin) - before - 1, 1, 'in one write again');
});

t.test('commands in flight when the connection is lost fail then, not at their timeout; the client serves again', async (t) => {
  const { client: c, admin } = await storeClient(t, redis.url, 'tg-inflight-cut');
  // WAIT for a replica this server does not have: sent, and unanswered for 2 s.
  const pending = c.wait(1, 2000).then(() => 'answered', (err: Error) => err.message);
  const blocked = await until(async () => /cmd=wait/.test(await admin.client('LIST') as string), 1000);
  t.ok(blocked, 'the WAIT reached the server and blocks there');
  const cut = Date.now();
  await admin.client('KILL', 'USER', 'default', 'SKIPME', 'yes');
  t.equal(await pending, UNANSWERED, 'it fails as unanswered');
  t.ok(Date.now() - cut < 1000, `when the connection closed, not at the 3 s timeout (${Date.now() - cut} ms)`);
  t.ok(await until(() => c.status === 'ready', 5000), 'connected again');
  t.equal(await c.ping(), 'PONG', 'and serves');
});

t.test('a defined script: no Array.prototype.flat, arguments as ioredis sends them, NOSCRIPT retried', async (t) => {
  const { client: c, admin } = await storeClient(t, redis.url, 'tg-script');
  type Scripted = Redis & { tgEcho(...args: unknown[]): Promise<unknown> };
  c.defineCommand('tgEcho', { numberOfKeys: 1, lua: 'return {KEYS[1], unpack(ARGV)}' });
  const s = c as Scripted;
  const flat = Array.prototype.flat;
  let flats = 0;
  // Only a flat of these calls' own arguments counts: other work of the process (timers, other
  // clients) may flatten arrays of its own meanwhile.
  const ours = (v: unknown): boolean => v === 'tg-script:k' || (Array.isArray(v) && v.some(ours));
  Array.prototype.flat = function (this: unknown[], ...a: unknown[]) { if (this.some(ours)) flats++; return flat.apply(this, a as []); } as typeof flat;
  let first: unknown, spread: unknown;
  try {
    first = await s.tgEcho('tg-script:k', 'a', 7, '');
    // rate-limiter-flexible's way: one array, flattened one level.
    spread = await s.tgEcho(['tg-script:k', 'b', 12]);
  } finally {
    Array.prototype.flat = flat;
  }
  t.same(first, ['tg-script:k', 'a', '7', ''], 'keys and arguments, numbers as text');
  t.same(spread, ['tg-script:k', 'b', '12'], 'an array argument flattened one level');
  t.equal(flats, 0, 'no generic flat on the way');
  const calls = async () => {
    const info = await admin.info('commandstats');
    const n = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
    return { eval: n('eval'), evalsha: n('evalsha') };
  };
  const before = await calls();
  t.same(await s.tgEcho('tg-script:k', 'c'), ['tg-script:k', 'c']);
  const after = await calls();
  t.same([after.eval - before.eval, after.evalsha - before.evalsha], [0, 1], 'by its SHA once loaded on the connection');
  await admin.script('FLUSH');
  t.same(await s.tgEcho('tg-script:k', 'd'), ['tg-script:k', 'd'], 'the script forgotten by Redis: NOSCRIPT, sent again, answered');
  const errors = await s.tgEcho('tg-script:k').then(() => 'answered', (err: Error) => err.message);
  t.equal(errors, 'answered', 'and later calls are answered too');
  const broken = c as Redis & { tgBroken(...args: unknown[]): Promise<unknown> };
  c.defineCommand('tgBroken', { numberOfKeys: 0, lua: "return redis.call('NOSUCHCOMMAND')" });
  t.match(await broken.tgBroken().then(() => 'answered', (err: Error) => err.message), /Unknown Redis command|unknown command/i, 'a script error fails its call');
});
