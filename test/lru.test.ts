// entryBound (lib/lru.ts): a cache bounded by entry count evicts the least recently used entry
// past the bound, keeps TTLs working, and allocates nothing for the bound up front.

import t from 'tap';
import { LRUCache } from 'lru-cache';
import { entryBound } from '../lib/lru.js';

t.test('the bound evicts the least recently used entry, as max would', async (t) => {
  const cache = new LRUCache<string, number>(entryBound(3));
  for (const [k, v] of [['a', 1], ['b', 2], ['c', 3]] as const) cache.set(k, v);
  t.equal(cache.get('a'), 1, 'a is now the most recently used');
  cache.set('d', 4);
  t.same([...cache.keys()].sort(), ['a', 'c', 'd'], 'b, the least recently used, went');
  for (let i = 0; i < 1000; i++) cache.set(`k${i}`, i);
  t.equal(cache.size, 3);
});

t.test('TTLs still expire entries', async (t) => {
  let now = 1000;
  const cache = new LRUCache<string, number>({ ...entryBound(50_000), ttl: 100, ttlResolution: 0, perf: { now: () => now } });
  cache.set('x', 1);
  now += 50;
  t.equal(cache.get('x'), 1);
  now += 60;
  t.equal(cache.get('x'), undefined, 'expired after its TTL');
});

t.test('nothing is allocated for the bound until entries come', async (t) => {
  const before = process.memoryUsage().heapUsed;
  const caches = Array.from({ length: 20 }, () => new LRUCache<string, number>({ ...entryBound(50_000), ttl: 1000 }));
  const grown = process.memoryUsage().heapUsed - before;
  t.ok(caches.length === 20 && grown < 1_000_000, `20 caches of 50,000 entries cost ${grown} bytes of heap (with max: about 35 MB)`);
});
