// A Redis fault at any step of an audited write leaves the write and its event, or neither
// (CONTRACT section 21), on a real redis-server paused with SIGSTOP: paused before the write's
// script is sent (its outbox named, nothing written), while the script is on its way (it runs
// when Redis resumes: the credit AND its event), after the write while its event is being moved
// to the log (the write is done; the next listing moves the event), and a move repeated after a
// fault (the event is listed once). An outbox found empty is forgotten once idle.

import t from 'tap';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { OUTBOX_KEEP_MS } from '../../../lib/store/redis/audit.js';
import { RedisStore } from '../../../lib/store/redis/store.js';
import type { AuditEvent } from '../../../lib/store/types.js';
import { startRedis } from '../../helpers/redis.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const inspect = new Redis(redis.url);
t.teardown(() => inspect.disconnect());

type Command = (...args: unknown[]) => Promise<unknown>;

/** Runs `before` ahead of the next call of `command` on the store's connection. */
function once(store: RedisStore, command: string, before: () => Promise<void> | void): void {
  const client = store.client as unknown as Record<string, Command>;
  const original = client[command]!;
  client[command] = async (...args: unknown[]) => {
    client[command] = original;
    await before();
    return original.apply(client, args);
  };
}

const event = (id: string): AuditEvent => ({ at: Date.now(), actor: 'admin-token', role: 'admin', action: 'POST /admin/accounts/{id}/credits', target: 'acme', ip: '127.0.0.1', request_id: id });

async function setup(t: any) {
  const prefix = `tg-audit-faults-${randomUUID()}:`;
  const store = await RedisStore.open({ url: redis.url, prefix, commandTimeoutMs: 300 });
  t.teardown(() => store.close());
  await store.createAccount({ id: 'acme', plan: 'free', balance_units: 0 });
  return { store, prefix };
}

async function listed(store: RedisStore): Promise<string[]> {
  return (await store.listAudit({ since: 0, limit: 100 })).events.map((e) => e.request_id);
}

/** Waits until the store answers again after a thaw (its connection may have been reset). */
async function answering(store: RedisStore): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try { await store.ping(); return; } catch (err) { if (Date.now() > deadline) throw err; }
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test('paused before the write is sent: the call fails, and neither the credit nor its event lands', async (t) => {
  const { store } = await setup(t);
  once(store, 'tgAddCredits', () => { redis.freeze(); throw new Error('the connection went before the script was sent'); });
  await t.rejects(store.addCredits('acme', 5, 'ik-1', event('before')));
  redis.thaw();
  await answering(store);
  t.equal((await store.getAccount('acme'))?.balance_units, 0, 'no credit');
  t.strictSame(await listed(store), [], 'no event');
});

t.test('paused with the write on its way: it times out, and once Redis resumes the credit and its event are both there', async (t) => {
  const { store } = await setup(t);
  once(store, 'tgAddCredits', () => { redis.freeze(); });
  await t.rejects(store.addCredits('acme', 5, 'ik-1', event('in-flight')), /timed out|timeout/i, 'the command times out');
  redis.thaw();
  await answering(store);
  t.equal((await store.getAccount('acme'))?.balance_units, 5, 'the script ran when Redis resumed');
  t.strictSame(await listed(store), ['in-flight'], 'and its event is in the log (moved by the listing)');
  const again = await store.addCredits('acme', 5, 'ik-1', event('retry'));
  t.strictSame([again?.applied, again?.balance_units], [false, 5], 'the client\'s retry after its 503 credits nothing more');
  t.strictSame(await listed(store), ['retry', 'in-flight'], 'and is recorded as a write of its own');
});

t.test('paused after the write, while its event is moved: the write is done, the next listing moves the event once', async (t) => {
  const { store, prefix } = await setup(t);
  once(store, 'xrange', () => { redis.freeze(); });
  const result = await store.addCredits('acme', 7, 'ik-1', event('moving'));
  t.equal(result?.applied, true, 'answered as done: its event is in the store');
  redis.thaw();
  await answering(store);
  t.equal(await inspect.xlen(`${prefix}{acct:acme}:audit`), 1, 'the event waits in the account\'s outbox');
  t.strictSame(await listed(store), ['moving']);
  t.equal(await inspect.xlen(`${prefix}{acct:acme}:audit`), 0, 'moved');
  t.strictSame(await listed(store), ['moving'], 'once');
});

t.test('a move repeated after a fault adds nothing', async (t) => {
  const { store, prefix } = await setup(t);
  once(store, 'xdel', () => { throw new Error('the connection went'); });
  t.equal((await store.addCredits('acme', 7, 'ik-1', event('moved-twice')))?.applied, true);
  t.equal(await inspect.xlen(`${prefix}{acct:acme}:audit`), 1, 'the entry stayed in the outbox after its move');
  t.strictSame(await listed(store), ['moved-twice'], 'moved again by the listing: listed once');
  t.equal(await inspect.xlen(`${prefix}{acct:acme}:audit`), 0);
});

t.test('an outbox found empty is forgotten once idle; one named recently is kept', async (t) => {
  const { store, prefix } = await setup(t);
  await store.addCredits('acme', 1, 'ik-1', event('one'));
  await store.revokeSession('sid-1', event('two'));
  const outboxes = `${prefix}{audit}:outboxes`;
  t.strictSame((await inspect.zrange(outboxes, 0, -1)).sort(), [`${prefix}{acct:acme}:audit`, `${prefix}{sess:sid-1}:audit`]);
  await inspect.zadd(outboxes, Date.now() - OUTBOX_KEEP_MS - 1000, `${prefix}{sess:sid-1}:audit`);
  t.strictSame(await listed(store), ['two', 'one']);
  t.strictSame(await inspect.zrange(outboxes, 0, -1), [`${prefix}{acct:acme}:audit`], 'the idle one is forgotten');
});
