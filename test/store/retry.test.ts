// The retry queue behind releases of holds and slots: a write that fails is retried until it
// lands, in order, with bounded memory, and logged once per outage, not once per write.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { RetryQueue } from '../../lib/store/retry.js';

/** A store that is down until told otherwise, recording the writes that landed. */
function fakeStore() {
  const s = {
    down: true,
    calls: 0,
    landed: [] as string[],
    write: (name: string) => async () => {
      s.calls++;
      if (s.down) throw new Error('connection refused');
      s.landed.push(name);
    },
  };
  return s;
}

function logs() {
  const lines: string[] = [];
  return { lines, log: { warn: (_f: unknown, msg: string) => lines.push(`warn ${msg}`), info: (_f: unknown, msg: string) => lines.push(`info ${msg}`) } };
}

t.test('failed writes are retried until they land, oldest first; the outage is logged once', async (t) => {
  const store = fakeStore();
  const { lines, log } = logs();
  const q = new RetryQueue({ minDelayMs: 5, maxDelayMs: 20, log });
  t.teardown(() => q.close());
  for (const name of ['a', 'b', 'c']) await q.run(name, store.write(name));
  t.equal(q.size, 3, 'kept while the store is down');
  await sleep(100);
  t.equal(q.size, 3);
  t.ok(store.calls < 3 + 20, `a pass stops at the first failure (${store.calls} calls)`);
  store.down = false;
  for (let i = 0; i < 100 && q.size > 0; i++) await sleep(5);
  t.equal(q.size, 0);
  t.strictSame(store.landed, ['a', 'b', 'c'], 'each landed once, in order');
  t.strictSame(lines, ['warn store unreachable: releases of holds and slots are retried until they land', 'info store reachable again: every deferred release landed']);
  await q.run('d', store.write('d'));
  t.strictSame(store.landed, ['a', 'b', 'c', 'd'], 'a write while the store is up lands at once');
  t.equal(lines.length, 2);
});

t.test('memory is bounded: past max the oldest writes are dropped, said once', async (t) => {
  const store = fakeStore();
  const { lines, log } = logs();
  const q = new RetryQueue({ max: 3, minDelayMs: 5, maxDelayMs: 10, log });
  t.teardown(() => q.close());
  for (let i = 0; i < 6; i++) await q.run(`w${i}`, store.write(`w${i}`));
  t.equal(q.size, 3);
  t.equal(lines.filter((l) => l.includes('dropped')).length, 1);
  store.down = false;
  for (let i = 0; i < 100 && q.size > 0; i++) await sleep(5);
  t.strictSame(store.landed, ['w3', 'w4', 'w5'], 'the newest three landed');
});

t.test('the same key keeps one write; a bad argument is no outage', async (t) => {
  const store = fakeStore();
  const q = new RetryQueue({ minDelayMs: 5 });
  t.teardown(() => q.close());
  await q.run('k', store.write('first'));
  await q.run('k', store.write('second'));
  t.equal(q.size, 1);
  await t.rejects(q.run('bad', async () => { throw new TypeError('request id must be a non-empty string'); }), TypeError);
  t.equal(q.size, 1, 'not kept for retry');
  store.down = false;
  for (let i = 0; i < 100 && q.size > 0; i++) await sleep(5);
  t.strictSame(store.landed, ['second']);
});

t.test('close() makes a last pass, then drops the rest and retries nothing more', async (t) => {
  const store = fakeStore();
  const q = new RetryQueue({ minDelayMs: 5 });
  await q.run('a', store.write('a'));
  await q.close();
  t.equal(q.size, 0);
  const calls = store.calls;
  store.down = false;
  await sleep(50);
  t.equal(store.calls, calls, 'no retry after close');
  await q.run('b', store.write('b'));
  t.strictSame(store.landed, ['b'], 'a direct write still runs');
});
