// Per-key controls every Store implementation must share (CONTRACT section 8): keys stored with
// their controls, listed, changed, rotated and touched; a key's budget held and debited in the
// same step as its account's wallet, per UTC period, never above the budget. Periods are passed
// in as the gateway computes them, so a period boundary is tested by passing the next period.
// Same factory contract as contract.ts.

import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { defaultControls, type BudgetPeriods, type HoldRequest, type KeyControls, type Quotas, type Revocation, type Store } from '../../lib/store/types.js';

export interface OpenedStore { store: Store; reopen?: () => Promise<Store> }

const NONE: Quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const digestOf = (name: string) => sha256Hex(`tg_key_${name}`);
const P1: BudgetPeriods = { day: 'd:2026-03-02', week: 'w:2026-03-02', month: 'm:2026-03' };
const P2: BudgetPeriods = { day: 'd:2026-03-03', week: 'w:2026-03-02', month: 'm:2026-03' };

function controls(over: Partial<KeyControls> = {}): KeyControls {
  return { ...defaultControls(), ...over };
}

export function keyContract(t: any, name: string, open: () => Promise<OpenedStore>): void {
  async function fresh(t: any): Promise<{ store: () => Store; reopen: (() => Promise<Store>) | undefined }> {
    const opened = await open();
    let current = opened.store;
    t.teardown(() => current.close());
    const reopen = opened.reopen;
    return { store: () => current, reopen: reopen === undefined ? undefined : async () => { current = await reopen(); return current; } };
  }
  const W = (() => { const d = new Date().toISOString(); return { day: d.slice(0, 10), month: d.slice(0, 7) }; })();
  const hold = (account: string, requestId: string, units: number, key?: string, periods: BudgetPeriods = P1): HoldRequest =>
    ({ account, requestId, units, ttlMs: 60_000, day: W.day, month: W.month, quotas: NONE, ...(key === undefined ? {} : { key: { id: key, periods } }) });
  const settle = (account: string, requestId: string, units: number, key?: string, periods: BudgetPeriods = P1) =>
    ({ account, requestId, units, promptTokens: 1, completionTokens: 1, day: W.day, month: W.month, ...(key === undefined ? {} : { key: { id: key, periods } }) });

  /** A store with account `acme` (wallet `wallet`) and one key `k` with `c`. */
  async function withKey(t: any, c: KeyControls, wallet = 1_000_000) {
    const h = await fresh(t);
    await h.store().createAccount({ id: 'acme', plan: 'pro', balance_units: wallet });
    const d = digestOf('k');
    const id = keyIdOf(d);
    t.equal(await h.store().createKey({ id, account: 'acme', digest: d, last4: 'abcd', controls: c }), true, 'key created');
    return { h, id, d };
  }

  t.test(`${name}: key controls contract`, async (t: any) => {
    const probe = await open();
    const reopenable = probe.reopen !== undefined;
    await probe.store.close();

    t.test('a key keeps the controls it was created with; listKeys shows live keys oldest first', async (t: any) => {
      const c = controls({
        name: 'ci', models: ['llama-*', 'echo-small'], expires_at: 1_900_000_000_000, budget: { units: 500, period: 'week' },
        limits: { requests_per_minute: 5, tokens_per_minute: null, max_concurrent: 2 }, priority: 'high', allowed_ips: ['10.0.0.0/8', '2001:db8::/32'],
        metadata: { team: 'search' },
      });
      const { h, id, d } = await withKey(t, c);
      const s = h.store();
      const k = (await s.keyByDigest(d))!;
      t.strictSame(k.controls, c);
      t.strictSame([k.id, k.account, k.digest, k.last4, k.previous, k.last_used_at, k.spent], [id, 'acme', d, 'abcd', null, null, { period: 'n', units: 0 }]);
      t.strictSame(await s.getKey(id), k, 'by id as by digest');
      const d2 = digestOf('k2');
      await new Promise((r) => setTimeout(r, 2));
      await s.createKey({ id: keyIdOf(d2), account: 'acme', digest: d2 });
      const d3 = digestOf('k3');
      await s.createKey({ id: keyIdOf(d3), account: 'acme', digest: d3 });
      await s.revokeKey(keyIdOf(d3));
      t.strictSame((await s.listKeys('acme'))!.map((x) => x.id), [id, keyIdOf(d2)], 'revoked keys are not listed');
      t.equal(await s.listKeys('nobody'), undefined, 'unknown account');
      t.equal(await s.getKey('key_nothing'), undefined);
    });

    t.test('updateKey replaces the named controls and announces the change', async (t: any) => {
      const { h, id, d } = await withKey(t, controls({ name: 'a', models: ['x'] }));
      const s = h.store();
      const heard: Revocation[] = [];
      const off = s.onRevoke((r) => heard.push(r));
      const u = await s.updateKey(id, { models: null, budget: { units: 7, period: 'day' } });
      off();
      t.strictSame(u!.controls, controls({ name: 'a', models: null, budget: { units: 7, period: 'day' } }));
      t.strictSame((await s.getKey(id))!.controls, u!.controls, 'stored');
      t.ok(heard.some((r) => r.kind === 'key-changed' && r.digest === d), 'key-changed announced');
      t.equal(await s.updateKey('key_nothing', { name: 'x' }), undefined, 'unknown key');
      await s.revokeKey(id);
      t.equal(await s.updateKey(id, { name: 'x' }), undefined, 'a revoked key is not changed');
    });

    t.test("a key's queue priority: set, changed, cleared (null: the plan's), kept apart from the other controls", async (t: any) => {
      const { h, id } = await withKey(t, controls({ name: 'q', limits: { requests_per_minute: 3, tokens_per_minute: null, max_concurrent: null } }));
      const s = h.store();
      t.equal((await s.getKey(id))!.controls.priority, null, 'none unless set: the plan\'s');
      const low = await s.updateKey(id, { priority: 'low' });
      t.strictSame(low!.controls, controls({ name: 'q', limits: { requests_per_minute: 3, tokens_per_minute: null, max_concurrent: null }, priority: 'low' }));
      await s.updateKey(id, { name: 'q2' });
      t.equal((await s.getKey(id))!.controls.priority, 'low', 'a PATCH of another member keeps it');
      await s.updateKey(id, { priority: 'high', limits: { max_concurrent: 2 } });
      const high = (await s.getKey(id))!;
      t.strictSame([high.controls.priority, high.controls.name, high.controls.limits], ['high', 'q2', { requests_per_minute: 3, tokens_per_minute: null, max_concurrent: 2 }]);
      const cleared = await s.updateKey(id, { priority: null });
      t.equal(cleared!.controls.priority, null, 'null gives the plan\'s back');
      t.strictSame((await s.getKey(id))!.controls, cleared!.controls, 'stored');
      t.equal((await s.listKeys('acme'))!.find((k) => k.id === id)!.controls.priority, null, 'listed so');
      await s.updateKey(id, { priority: 'normal' });
      t.equal((await s.keyWithAccount((await s.getKey(id))!.digest))!.key.controls.priority, 'normal', 'read with its account (the request path)');
      if (h.reopen !== undefined) {
        const again = await h.reopen();
        t.equal((await again.getKey(id))!.controls.priority, 'normal', 'survives reopening');
      }
    });

    t.test('rotateKey: a new digest for the same id; the old one is the previous until its time', async (t: any) => {
      const { h, id, d } = await withKey(t, controls({ name: 'r' }));
      const s = h.store();
      const n1 = digestOf('n1');
      const r = await s.rotateKey(id, n1, 'wxyz', 12345);
      t.strictSame([r!.id, r!.digest, r!.last4, r!.previous], [id, n1, 'wxyz', { digest: d, until: 12345 }]);
      const byNew = (await s.keyByDigest(n1))!;
      const byOld = (await s.keyByDigest(d))!;
      t.strictSame([byNew.id, byNew.digest, byNew.previous], [id, n1, { digest: d, until: 12345 }]);
      t.strictSame([byOld.id, byOld.digest, byOld.controls.name], [id, n1, 'r'], 'the old digest leads to the same key, whose digest is the new one');
      const n2 = digestOf('n2');
      await s.rotateKey(id, n2, 'qqqq', 99999);
      const old = await s.keyByDigest(d);
      t.ok(old === undefined || (old.digest !== d && old.previous?.digest !== d), 'a second rotation ends the first one\'s grace');
      t.strictSame((await s.keyByDigest(n1))!.previous, { digest: n1, until: 99999 });
      t.equal(await s.rotateKey(id, n2, 'qqqq', 1), undefined, 'a digest in use is refused');
      t.equal(await s.rotateKey('key_nothing', digestOf('n3'), 'aaaa', 1), undefined);
      const rev = await s.revokeKey(id);
      t.type(rev!.revoked_at, 'number');
      t.not((await s.keyByDigest(n1))!.revoked_at, null, 'revoked through every digest');
      t.equal(await s.rotateKey(id, digestOf('n4'), 'aaaa', 1), undefined, 'a revoked key is not rotated');
    });

    t.test('keyWithAccount reads what keyByDigest and getAccount read, in every state of a key', async (t: any) => {
      const { h, id, d } = await withKey(t, controls({ name: 'w', budget: { units: 100, period: 'day' } }), 5000);
      const s = h.store();
      const same = async (digest: string, what: string) => {
        const key = await s.keyByDigest(digest);
        const expected = key === undefined ? undefined : { key, account: await s.getAccount(key.account) };
        t.strictSame(await s.keyWithAccount(digest), expected, what);
        // Where the digest led before (a cached key looked up again), right or stale.
        t.strictSame(await s.keyWithAccount(digest, { id, account: 'acme' }), expected, `${what}, known`);
        t.strictSame(await s.keyWithAccount(digest, { id: keyIdOf(digestOf('other')), account: 'acme' }), expected, `${what}, known as another key`);
        t.strictSame(await s.keyWithAccount(digest, { id, account: 'elsewhere' }), expected, `${what}, known in another account`);
      };
      await same(d, 'a new key');
      t.equal((await s.keyWithAccount(d))!.account!.balance_units, 5000, 'with its account');
      t.equal(await s.keyWithAccount(digestOf('nobody')), undefined, 'an unknown digest');
      t.ok((await s.hold(hold('acme', 'kwa-1', 30, id)))!.ok);
      t.ok((await s.settle(settle('acme', 'kwa-1', 20, id))));
      await s.touchKeys([{ account: 'acme', id, at: 3000 }]);
      await same(d, 'after a settle (spent, balance) and a touch');
      t.equal((await s.keyWithAccount(d))!.account!.balance_units, 4980, 'the balance after the debit');
      await s.updateKey(id, { models: ['x-*'] });
      const n1 = digestOf('kwa-new');
      await s.rotateKey(id, n1, 'nnnn', 424242);
      await same(n1, 'by the new digest after a rotation');
      await same(d, 'by the previous digest in its grace');
      t.equal((await s.keyWithAccount(d))!.key.digest, n1, 'the previous digest leads to the key, whose digest is the new one');
      await s.revokeKey(id);
      await same(n1, 'revoked');
      t.type((await s.keyWithAccount(n1))!.key.revoked_at, 'number');
    });

    t.test("a successful hold records the key's use where the store says so; a refused one never", async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 50, period: 'day' } }));
      const s = h.store();
      t.equal(s.holdRecordsKeyUse, name === 'redis', 'Redis records it with the hold, the memory store does not');
      t.equal((await s.hold(hold('acme', 'lu-refused', 60, id)))!.ok, false, 'refused: above the budget');
      t.equal((await s.getKey(id))!.last_used_at, null, 'a refused hold records nothing');
      const before = Date.now();
      t.equal((await s.hold(hold('acme', 'lu-1', 5, id)))!.ok, true);
      t.equal((await s.hold(hold('acme', 'lu-none', 5)))!.ok, true, 'a hold without a key');
      const used = (await s.getKey(id))!.last_used_at;
      if (s.holdRecordsKeyUse) {
        t.ok(used !== null && used >= before && used <= Date.now(), `the hold's time: ${used}`);
        await s.touchKeys([{ account: 'acme', id, at: before - 1000 }]);
        t.equal((await s.getKey(id))!.last_used_at, used, 'an earlier touch does not win over it');
        await s.touchKeys([{ account: 'acme', id, at: used! + 1000 }]);
        t.equal((await s.hold(hold('acme', 'lu-2', 5, id)))!.ok, true);
        t.equal((await s.getKey(id))!.last_used_at, used! + 1000, 'nor an earlier hold over a later touch');
      } else {
        t.equal(used, null, 'not recorded by the hold');
      }
    });

    t.test('touchKeys keeps the latest time', async (t: any) => {
      const { h, id } = await withKey(t, controls());
      const s = h.store();
      await s.touchKeys([{ account: 'acme', id, at: 2000 }]);
      await s.touchKeys([{ account: 'acme', id, at: 1000 }, { account: 'acme', id: 'key_nothing', at: 5 }]);
      t.equal((await s.getKey(id))!.last_used_at, 2000);
    });

    t.test('concurrent holds never exceed a key budget; settles debit wallet and budget alike', async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 100, period: 'day' } }));
      const s = h.store();
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => s.hold(hold('acme', `b-${i}`, 7, id))));
      const won = results.map((r, i) => (r!.ok ? i : -1)).filter((i) => i >= 0);
      t.equal(won.length, 14, '14 holds of 7 fit a budget of 100');
      for (const r of results.filter((x) => !x!.ok)) {
        t.match(r, { ok: false, code: 'budget_exceeded', budget_remaining_units: 2, budget_period: 'day', available_units: 1_000_000 - 98 });
      }
      const settled = await Promise.all(won.map((i) => s.settle(settle('acme', `b-${i}`, 5, id))));
      t.ok(settled.every((x) => x!.applied && x!.charged_units === 5));
      t.strictSame((await s.getKey(id))!.spent, { period: P1.day, units: 70 }, 'spent = sum of debits');
      t.equal((await s.getAccount('acme'))!.balance_units, 1_000_000 - 70, 'the wallet paid the same');
      t.equal((await s.accountUsage('acme', W.day, W.month)).held_units, 0, 'budget and wallet holds released together');
      const more = await s.hold(hold('acme', 'b-more', 31, id));
      t.match(more, { ok: false, code: 'budget_exceeded', budget_remaining_units: 30 });
      t.match(await s.hold(hold('acme', 'b-fits', 30, id)), { ok: true });
      t.match(await s.hold(hold('acme', 'b-nokey', 500)), { ok: true }, 'a request without the key is not bound by its budget');
    });

    t.test('a settle never takes a budget past its units; a release gives the budget back', async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 10, period: null } }));
      const s = h.store();
      t.match(await s.hold(hold('acme', 'c1', 10, id)), { ok: true });
      t.match(await s.hold(hold('acme', 'c2', 1, id)), { ok: false, code: 'budget_exceeded', budget_remaining_units: 0, budget_period: null });
      await s.release('acme', 'c1');
      t.match(await s.hold(hold('acme', 'c2', 10, id)), { ok: true }, 'the released hold no longer counts');
      const r = await s.settle(settle('acme', 'c2', 25, id));
      t.equal(r!.charged_units, 10, 'charged what the budget had left, not 25');
      t.strictSame((await s.getKey(id))!.spent, { period: 'n', units: 10 });
      t.equal((await s.getAccount('acme'))!.balance_units, 1_000_000 - 10);
    });

    t.test("unsettle gives the key's budget back in the same period, never in another", async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 50, period: 'day' } }));
      const s = h.store();
      await s.settle(settle('acme', 'k1', 20, id, P1));
      await s.settle(settle('acme', 'k2', 15, id, P1));
      t.strictSame(await s.unsettle(settle('acme', 'k2', 15, id, P1)), { outcome: 'refunded', refunded_units: 15 });
      t.strictSame((await s.getKey(id))!.spent, { period: P1.day, units: 20 }, 'its spend is back');
      t.match(await s.hold(hold('acme', 'k3', 30, id, P1)), { ok: true }, 'the budget has it again');
      await s.release('acme', 'k3');
      await s.settle(settle('acme', 'k4', 10, id, P2));
      t.strictSame(await s.unsettle(settle('acme', 'k1', 20, id, P1)), { outcome: 'refunded', refunded_units: 20 });
      t.strictSame((await s.getKey(id))!.spent, { period: P2.day, units: 10 }, "a past period's refund leaves the new period's spend alone");
      t.equal((await s.getAccount('acme'))!.balance_units, 1_000_000 - 10, 'the wallet has both back');
    });

    t.test('a new period starts from 0; a late settle of a past period does not count in the new one', async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 50, period: 'day' } }));
      const s = h.store();
      t.match(await s.hold(hold('acme', 'p1', 50, id, P1)), { ok: true });
      t.match(await s.hold(hold('acme', 'p1-late', 10, id, P1)), { ok: false, code: 'budget_exceeded' });
      await s.settle(settle('acme', 'p1', 40, id, P1));
      t.match(await s.hold(hold('acme', 'p1-again', 11, id, P1)), { ok: false, code: 'budget_exceeded', budget_remaining_units: 10 });
      t.match(await s.hold(hold('acme', 'p1-old', 5, id, P1)), { ok: true }, 'a hold made before the boundary');
      t.match(await s.hold(hold('acme', 'p2', 45, id, P2)), { ok: true }, 'the next day starts from 0 (less what is still held)');
      await s.settle(settle('acme', 'p2', 20, id, P2));
      t.strictSame((await s.getKey(id))!.spent, { period: P2.day, units: 20 });
      await s.settle(settle('acme', 'p1-old', 1, id, P1));
      t.strictSame((await s.getKey(id))!.spent, { period: P2.day, units: 20 }, 'a spend of the past day is not counted in the new one');
      t.equal((await s.getAccount('acme'))!.balance_units, 1_000_000 - 61, 'the wallet paid all three');
      await s.updateKey(id, { budget: { units: 50, period: 'week' } });
      t.match(await s.hold(hold('acme', 'w', 50, id, P2)), { ok: true }, 'a new period kind starts afresh');
    });

    t.test('quotas, then the budget, then the wallet', async (t: any) => {
      const { h, id } = await withKey(t, controls({ budget: { units: 5, period: 'month' } }), 3);
      const s = h.store();
      t.match(await s.hold(hold('acme', 'o1', 6, id)), { ok: false, code: 'budget_exceeded', budget_remaining_units: 5 });
      t.match(await s.hold(hold('acme', 'o2', 4, id)), { ok: false, code: 'insufficient_credits', available_units: 3 });
      t.match(await s.hold({ ...hold('acme', 'o3', 6, id), quotas: { ...NONE, requests_per_day: 0 } }), { ok: false, code: 'quota_exceeded' });
    });

    if (reopenable) t.test('controls, spend, rotation and last use survive reopening', async (t: any) => {
      const { h, id, d } = await withKey(t, controls({ budget: { units: 100, period: 'month' }, models: ['a*'] }));
      let s = h.store();
      await s.hold(hold('acme', 'r1', 40, id));
      await s.settle(settle('acme', 'r1', 30, id));
      await s.updateKey(id, { name: 'kept' });
      await s.rotateKey(id, digestOf('new'), 'nnnn', 77777);
      await s.touchKeys([{ account: 'acme', id, at: 4242 }]);
      const before = await s.getKey(id);
      s = await h.reopen!();
      t.strictSame(await s.getKey(id), before);
      t.equal((await s.keyByDigest(d))!.id, id, 'the rotated-out digest still leads to the key');
      t.match(await s.hold(hold('acme', 'r2', 71, id)), { ok: false, code: 'budget_exceeded', budget_remaining_units: 70 });
    });
  });
}
