// Stored responses as chains (CONTRACT section 16, lib/store/response-chains.ts), on the memory
// store and on a real Redis: a continuation stores only its own value and refers to the one it
// continues; reading walks the chain; the account's bytes are the sum of what is stored; a
// deleted response stays (unreadable) while later ones continue it, and is freed with the last
// of them; a continuation keeps its ancestors alive at least as long as itself; another
// account's ids are never found. A fast-check property drives random chains, deletions and sizes
// against a model of that behaviour.

import t from 'tap';
import fc from 'fast-check';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { MemoryResponses } from '../../lib/store/memory/responses.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import { ancestorExpiry } from '../../lib/store/response-chains.js';
import type { Store } from '../../lib/store/types.js';
import { startRedis, type TestRedis } from '../helpers/redis.js';

const DAY = 86_400_000;
const bytes = (s: string) => Buffer.byteLength(s);

interface Rig { store: Store; raw?: Redis; prefix?: string }

async function basics(t: any, { store }: Rig) {
  const a = 'acct-basics';
  const v1 = `{"one":"${'x'.repeat(5000)}"}`;
  const v2 = '{"two":"é"}';
  const v3 = '{"three":3}';
  await store.putResponse(a, 'r1', v1, null, DAY);
  await store.putResponse(a, 'r2', v2, 'r1', DAY);
  await store.putResponse(a, 'r3', v3, 'r2', DAY);
  t.equal(await store.responseBytes(a), bytes(v1) + bytes(v2) + bytes(v3), 'each value stored once: the account holds their sum');
  t.same(await store.responseChain(a, 'r3', 10), { values: [v1, v2, v3], accountBytes: bytes(v1) + bytes(v2) + bytes(v3) }, 'the chain, first first');
  t.same((await store.responseChain(a, 'r2', 10))!.values, [v1, v2]);
  t.equal(await store.getResponse(a, 'r2'), v2, 'GET: its own value only');
  t.equal(await store.responseChain(a, 'r3', 2), undefined, 'longer than maxDepth: not read');
  t.same((await store.responseChain(a, 'r3', 3))!.values.length, 3, 'exactly maxDepth: read');

  // Another account finds nothing, and changes nothing.
  t.equal(await store.getResponse('acct-other', 'r1'), undefined);
  t.equal(await store.responseChain('acct-other', 'r3', 10), undefined);
  t.equal(await store.deleteResponse('acct-other', 'r2'), false);
  t.equal(await store.responseBytes('acct-other'), 0);

  // A branch: two continuations of r2.
  await store.putResponse(a, 'r3b', '{"b":1}', 'r2', DAY);
  t.same((await store.responseChain(a, 'r3b', 10))!.values, [v1, v2, '{"b":1}']);

  // Deleting a middle response: gone for GET, chain and DELETE; later ones stay whole.
  t.equal(await store.deleteResponse(a, 'r2'), true);
  t.equal(await store.getResponse(a, 'r2'), undefined, 'deleted: GET finds nothing');
  t.equal(await store.responseChain(a, 'r2', 10), undefined, 'deleted: cannot be continued');
  t.equal(await store.deleteResponse(a, 'r2'), false, 'deleted twice: false');
  t.same((await store.responseChain(a, 'r3', 10))!.values, [v1, v2, v3], 'a later response still reads its whole conversation');
  const all = bytes(v1) + bytes(v2) + bytes(v3) + bytes('{"b":1}');
  t.equal(await store.responseBytes(a), all, 'the deleted part still counts while it is kept');
  // It is freed with the last response that continues it.
  t.equal(await store.deleteResponse(a, 'r3'), true);
  t.equal(await store.responseBytes(a), all - bytes(v3), 'r3 freed; r2 still continued by r3b');
  t.equal(await store.deleteResponse(a, 'r3b'), true);
  t.equal(await store.responseBytes(a), bytes(v1), 'r3b freed, and with it the deleted r2');
  t.equal(await store.getResponse(a, 'r1'), v1, 'r1 (not deleted) stays');
  t.equal(await store.deleteResponse(a, 'r1'), true);
  t.equal(await store.responseBytes(a), 0, 'nothing left');
}

async function expiry(t: any, { store, raw, prefix }: Rig) {
  const a = 'acct-expiry';
  await store.putResponse(a, 'e1', '{"e":1}', null, 150);
  await store.putResponse(a, 'e2', '{"e":2}', 'e1', 150);
  // A continuation with a long retention keeps its short-lived ancestors alive.
  await store.putResponse(a, 'e3', '{"e":3}', 'e2', DAY);
  if (raw !== undefined) {
    const ttl = await raw.pttl(`${prefix}{resp:${a}}:r:e1`);
    t.ok(ttl > DAY && ttl <= DAY + DAY / 8, `the first response's TTL moved up with its continuation (${ttl} ms)`);
  }
  await sleep(300);
  t.same((await store.responseChain(a, 'e3', 10))!.values, ['{"e":1}', '{"e":2}', '{"e":3}'], 'ancestors outlive their own TTL');
  t.equal(await store.getResponse(a, 'e1'), '{"e":1}');

  // Expired responses leave the account's bytes, and a deleted one goes with its last continuation.
  const b = 'acct-expiry-b';
  await store.putResponse(b, 'k1', '{"k":1}', null, DAY);
  await store.putResponse(b, 'k2', '{"k":22}', 'k1', 150);
  t.equal(await store.deleteResponse(b, 'k1'), true, 'k1 deleted while k2 continues it');
  t.equal(await store.responseBytes(b), 15);
  await sleep(300);
  t.equal(await store.getResponse(b, 'k2'), undefined, 'k2 expired');
  t.equal(await store.responseBytes(b), 0, 'k2 expired: it and the deleted k1 are freed');
  if (raw !== undefined) {
    t.equal(await raw.exists(`${prefix}{resp:${b}}:r:k1`), 0, 'the deleted record is gone from Redis');
  }
}

/** A model of the chains: what must be stored, readable, and counted. */
class Model {
  readonly entries = new Map<string, { value: string; parent: string | null; deleted: boolean }>();

  children(id: string): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.parent === id) n++;
    return n;
  }

  put(id: string, value: string, parent: string | null): void {
    this.entries.set(id, { value, parent, deleted: false });
  }

  delete(id: string): boolean {
    const e = this.entries.get(id);
    if (e === undefined || e.deleted) return false;
    e.deleted = true;
    let cur: string | null = id;
    while (cur !== null) {
      const c = this.entries.get(cur);
      if (c === undefined || !c.deleted || this.children(cur) > 0) break;
      this.entries.delete(cur);
      cur = c.parent;
    }
    return true;
  }

  chain(id: string): string[] | undefined {
    const e = this.entries.get(id);
    if (e === undefined || e.deleted) return undefined;
    const out: string[] = [];
    for (let c: string | null = id; c !== null; c = this.entries.get(c)!.parent) out.unshift(this.entries.get(c)!.value);
    return out;
  }

  get bytes(): number {
    let n = 0;
    for (const e of this.entries.values()) n += bytes(e.value);
    return n;
  }
}

type Op = { kind: 'put'; parent: number; size: number; wide: boolean } | { kind: 'delete'; pick: number };

const ops = fc.array(fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('put' as const), parent: fc.integer({ min: -1, max: 30 }), size: fc.integer({ min: 0, max: 3000 }), wide: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), pick: fc.nat(40) }) },
), { minLength: 1, maxLength: 30 });

async function property(t: any, { store }: Rig, runs: number) {
  let run = 0;
  await fc.assert(fc.asyncProperty(ops, async (list: Op[]) => {
    const account = `acct-prop-${run++}`;
    const model = new Model();
    const ids: string[] = [];
    let own = 0;
    for (const op of list) {
      if (op.kind === 'put') {
        // parent -1: a new conversation; else one of the ids so far that can still be continued.
        const open = ids.filter((id) => model.chain(id) !== undefined);
        const parent = op.parent < 0 || open.length === 0 ? null : open[op.parent % open.length]!;
        const id = `resp_${ids.length}`;
        const value = JSON.stringify({ id, text: (op.wide ? 'é€' : 'ab').repeat(op.size) });
        await store.putResponse(account, id, value, parent, DAY);
        model.put(id, value, parent);
        ids.push(id);
        own += bytes(value);
      } else if (ids.length > 0) {
        const id = ids[op.pick % ids.length]!;
        const deleted = await store.deleteResponse(account, id);
        if (deleted !== model.delete(id)) throw new Error(`delete ${id}: ${deleted}`);
      }
      const stored = await store.responseBytes(account);
      if (stored !== model.bytes) throw new Error(`stored ${stored} bytes, the model ${model.bytes}`);
      if (stored > own) throw new Error(`stored ${stored} bytes, more than the values put (${own})`);
    }
    for (const id of ids) {
      const want = model.chain(id);
      const got = await store.responseChain(account, id, 100);
      if (JSON.stringify(got?.values) !== JSON.stringify(want)) throw new Error(`chain of ${id}: ${JSON.stringify(got?.values)?.slice(0, 200)} != ${JSON.stringify(want)?.slice(0, 200)}`);
      if (got !== undefined && got.accountBytes !== model.bytes) throw new Error('chain: account bytes');
      const value = await store.getResponse(account, id);
      if (value !== (want === undefined ? undefined : want.at(-1))) throw new Error(`get ${id}`);
    }
  }), { numRuns: runs });
  t.pass(`${runs} random histories agree with the model`);
}

t.test('ancestorExpiry: the next multiple of an eighth of the TTL', async (t) => {
  t.equal(ancestorExpiry(1000, 800), 1100);
  t.equal(ancestorExpiry(1099, 800), 1100);
  t.equal(ancestorExpiry(1100, 800), 1200, 'strictly after');
  fc.assert(fc.property(fc.integer({ min: 0, max: 2 ** 45 }), fc.integer({ min: 1, max: 10 * DAY }), (at, ttl) => {
    const e = ancestorExpiry(at, ttl);
    return e > at && e <= at + Math.max(1, Math.floor(ttl / 8));
  }), { numRuns: 300 });
});

t.test('memory store', async (t) => {
  const store = await MemoryStore.open({ path: null, fsyncMs: 1000 });
  t.teardown(() => store.close());
  await t.test('chains', (t) => basics(t, { store }));
  await t.test('expiry', (t) => expiry(t, { store }));
  await t.test('property', (t) => property(t, { store }, 60));
});

t.test('memory: the expiry index stays within about twice the responses stored', async (t) => {
  // Deleted responses and moved expiries leave items in the heap until they come up; a flood of
  // create-and-delete must not grow it for the whole retention.
  const responses = new MemoryResponses();
  for (let i = 0; i < 5000; i++) {
    responses.put('acct', `r${i}`, '{"x":1}', i % 10 === 0 ? null : `r${i - 1}`, DAY);
    if (i % 10 === 9) for (let j = i; j > i - 10; j--) responses.delete('acct', `r${j}`);
  }
  t.equal(responses.bytes('acct'), 0, 'all deleted');
  t.ok(responses.scheduled <= 1024 + 20, `heap items: ${responses.scheduled}`);
});

t.test('redis store', async (t) => {
  const redis: TestRedis = await startRedis();
  t.teardown(() => redis.stop());
  const prefix = `tg-chains-${process.pid}:`;
  const store = await RedisStore.open({ url: redis.url, prefix });
  t.teardown(() => store.close());
  const raw = new Redis(redis.url);
  t.teardown(() => raw.quit());
  await t.test('chains', (t) => basics(t, { store, raw, prefix }));
  await t.test('expiry', (t) => expiry(t, { store, raw, prefix }));
  await t.test('property', (t) => property(t, { store, raw, prefix }, 40));
  // What the account keys hold is what was counted: the values, once each.
  const a = 'acct-redis-bytes';
  await store.putResponse(a, 'q1', `{"q":"${'z'.repeat(100_000)}"}`, null, DAY);
  for (let i = 2; i <= 16; i++) await store.putResponse(a, `q${i}`, `{"q":${i}}`, `q${i - 1}`, DAY);
  let held = 0;
  for (let i = 1; i <= 16; i++) held += await raw.hstrlen(`${prefix}{resp:${a}}:r:q${i}`, 'v');
  t.equal(held, await store.responseBytes(a), 'HSTRLEN of the values = the account bytes');
  t.ok(held < 100_200, `16 responses of one conversation hold about the first one's size (${held} bytes)`);
});
