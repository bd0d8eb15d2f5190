// Settlements and their undoing (Store.unsettle: a settle whose outcome stayed unknown past
// store.settle_wait_ms, its request answered 503), in any order and repeated, on both stores:
// each request id is debited at most once, an undone one is given back exactly and never
// applies again, and the wallet, the usage windows and what each call reported agree with a
// model that knows which settlements stand.

import t from 'tap';
import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { RedisStore } from '../../lib/store/redis/store.js';
import type { Settlement, Store } from '../../lib/store/types.js';
import { startRedis } from '../helpers/redis.js';

const WALLET = 500;
const DAY = new Date().toISOString().slice(0, 10);

type Op = { op: 'settle' | 'unsettle'; rid: number; units: number; tokens: number };

const ops = fc.array(fc.record({
  op: fc.constantFrom('settle' as const, 'unsettle' as const),
  rid: fc.nat(5),
  units: fc.nat(150),
  tokens: fc.nat(20),
}), { maxLength: 40 });

/** Runs `list` against a fresh account of `store`; false at the first disagreement with the model. */
async function agrees(store: Store, account: string, list: Op[]): Promise<boolean> {
  await store.createAccount({ id: account, plan: 'free', balance_units: WALLET });
  // Per request id: the settlement first sent (its figures stand for every later call), what it charged, whether undone.
  const model = new Map<number, { s: Settlement; charged: number | undefined; undone: boolean }>();
  let balance = WALLET;
  for (const o of list) {
    let m = model.get(o.rid);
    if (m === undefined) {
      m = { s: { account, requestId: `r${o.rid}`, units: o.units, promptTokens: o.tokens, completionTokens: 1, day: DAY, month: DAY.slice(0, 7) }, charged: undefined, undone: false };
      model.set(o.rid, m);
    }
    if (o.op === 'settle') {
      const r = await store.settle(m.s);
      if (r === undefined) return false;
      if (m.charged === undefined && !m.undone) {
        const charged = Math.min(m.s.units, balance);
        if (!r.applied || r.charged_units !== charged) return false;
        m.charged = charged;
        balance -= charged;
      } else if (r.applied || r.charged_units !== (m.undone ? 0 : m.charged)) {
        return false;
      }
    } else {
      const r = await store.unsettle(m.s);
      const expected = m.undone ? 'repeat' : m.charged === undefined ? 'fenced' : 'refunded';
      if (r?.outcome !== expected || r.refunded_units !== (expected === 'refunded' ? m.charged : 0)) return false;
      if (expected === 'refunded') balance += m.charged!;
      m.undone = true;
    }
    if ((await store.getAccount(account))?.balance_units !== balance) return false;
  }
  const standing = [...model.values()].filter((m) => m.charged !== undefined && !m.undone);
  const usage = await store.accountUsage(account, DAY, DAY.slice(0, 7));
  return usage.day.requests === standing.length &&
    usage.day.units === standing.reduce((a, m) => a + m.charged!, 0) &&
    usage.day.tokens === standing.reduce((a, m) => a + m.s.promptTokens + 1, 0) &&
    WALLET - balance === usage.day.units;
}

t.test('memory store: settles and unsettles in any order agree with the model', async (t) => {
  const store = new MemoryStore({ path: null, fsyncMs: 1000 });
  t.teardown(() => store.close());
  let n = 0;
  await fc.assert(fc.asyncProperty(ops, (list) => agrees(store, `m${n++}`, list)), { numRuns: 200 });
  t.pass(`${n} sequences`);
});

t.test('redis store: the same', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const store = new RedisStore({ url: redis.url, prefix: `unsettle-${randomUUID()}:` });
  t.teardown(() => store.close());
  await store.ready();
  let n = 0;
  await fc.assert(fc.asyncProperty(ops, (list) => agrees(store, `r${n++}`, list)), { numRuns: 60 });
  t.pass(`${n} sequences`);
});
