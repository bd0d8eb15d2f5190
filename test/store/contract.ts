// The behaviour every Store implementation must share (memory, durable memory, redis). Each
// implementation's test file calls storeContract() with a factory for a fresh, empty store.
//
// The factory contract: `open()` returns a new store that shares no data with any other call;
// `reopen()`, when given, closes that store and opens a new one on the same data (a restart).
// The suite closes whichever store it holds last when each subtest ends. All subtests nest
// under one `<name>: store contract` test, which first opens (and closes) one store to learn
// whether reopen() is offered.

import { setTimeout as sleep } from 'node:timers/promises';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import type { Revocation, Store } from '../../lib/store/types.js';

export interface OpenedStore { store: Store; reopen?: () => Promise<Store> }

/** Polls `cond` until true (revocations may reach listeners asynchronously, e.g. redis pub/sub). */
async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

function digestOf(name: string): string { return sha256Hex(`tg_test_${name}`); }

export function storeContract(t: any, name: string, open: () => Promise<OpenedStore>): void {
  /** Opens a fresh store for one subtest and closes it when the subtest ends. */
  async function fresh(t: any): Promise<{ store: () => Store; reopen: (() => Promise<Store>) | undefined }> {
    const opened = await open();
    let current = opened.store;
    t.teardown(() => current.close());
    const reopen = opened.reopen;
    return {
      store: () => current,
      reopen: reopen === undefined ? undefined : async () => { current = await reopen(); return current; },
    };
  }

  t.test(`${name}: store contract`, async (t: any) => {
    // Whether the implementation can restart is known once a store is open.
    const probe = await open();
    const reopenable = probe.reopen !== undefined;
    await probe.store.close();

    t.test('accounts', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const before = Date.now();
      t.equal(await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 }), true, 'created');
      const after = Date.now();
      const got = await s.getAccount('acme');
      t.strictSame(Object.keys(got).sort(), ['balance_units', 'created_at', 'id', 'plan']);
      t.equal(got.id, 'acme');
      t.equal(got.plan, 'pro');
      t.equal(got.balance_units, 1000);
      t.type(got.created_at, 'number');
      t.ok(got.created_at >= before && got.created_at <= after, 'created_at is the creation time');

      t.equal(await s.createAccount({ id: 'acme', plan: 'free', balance_units: 5 }), false, 'duplicate id is refused');
      t.strictSame(await s.getAccount('acme'), got, 'and the account is unchanged');
      t.equal(await s.getAccount('nobody'), undefined, 'unknown account');

      t.equal(await s.createAccount({ id: 'zero', plan: 'free', balance_units: 0 }), true);
      t.equal((await s.getAccount('zero')).balance_units, 0);

      got.balance_units = 1;
      got.plan = 'hacked';
      t.equal((await s.getAccount('acme')).balance_units, 1000, 'a returned record is a copy');
      t.equal((await s.getAccount('acme')).plan, 'pro');
    });

    t.test('credits', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      t.strictSame(await s.addCredits('acme', 500, 'top-up-1'), { applied: true, balance_units: 1500 }, 'positive');
      t.strictSame(await s.addCredits('acme', -200, 'charge-1'), { applied: true, balance_units: 1300 }, 'negative deducts');
      t.strictSame(await s.addCredits('acme', 500, 'top-up-1'), { applied: false, balance_units: 1300 }, 'same key: not applied again');
      t.strictSame(await s.addCredits('acme', -999, 'charge-1'), { applied: false, balance_units: 1300 }, 'same key, other amount: still not applied');
      t.equal((await s.getAccount('acme')).balance_units, 1300);

      t.equal(await s.addCredits('ghost', 5, 'k1'), undefined, 'unknown account');
      await s.createAccount({ id: 'ghost', plan: 'free', balance_units: 0 });
      t.strictSame(await s.addCredits('ghost', 5, 'k1'), { applied: true, balance_units: 5 }, 'a credit refused for an unknown account did not use up its key');
    });

    t.test('idempotency keys are per account', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 0 });
      await s.createAccount({ id: 'b', plan: 'free', balance_units: 100 });
      t.strictSame(await s.addCredits('a', 10, 'shared'), { applied: true, balance_units: 10 });
      t.strictSame(await s.addCredits('b', 10, 'shared'), { applied: true, balance_units: 110 });
      t.strictSame(await s.addCredits('a', 10, 'shared'), { applied: false, balance_units: 10 });
      t.strictSame(await s.addCredits('b', 10, 'shared'), { applied: false, balance_units: 110 });
    });

    t.test('concurrent credits', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      const same = await Promise.all(Array.from({ length: 20 }, () => s.addCredits('acme', 7, 'once')));
      t.equal(same.filter((r) => r.applied).length, 1, '20 parallel calls with one key apply once');
      t.strictSame(same.map((r) => r.balance_units), Array(20).fill(1007), 'each sees the balance with the credit applied');
      t.equal((await s.getAccount('acme')).balance_units, 1007);

      const distinct = await Promise.all(Array.from({ length: 20 }, (_, i) => s.addCredits('acme', -(i + 1), `charge-${i}`)));
      t.equal(distinct.filter((r) => r.applied).length, 20, '20 parallel calls with distinct keys all apply');
      t.equal((await s.getAccount('acme')).balance_units, 1007 - 210);
      t.equal(Math.min(...distinct.map((r) => r.balance_units)), 1007 - 210, 'the last one to apply sees the final balance');
    });

    t.test('a credit never takes a balance below 0 nor above 2^53-1; a refusal changes nothing', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const MAX = Number.MAX_SAFE_INTEGER;
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      t.strictSame(await s.addCredits('acme', -101, 'too-much'), { applied: false, balance_units: 100, refused: 'below_zero' }, 'a deduction beyond the balance is refused');
      t.equal((await s.getAccount('acme')).balance_units, 100, 'nothing changed');
      t.strictSame(await s.addCredits('acme', -100, 'too-much'), { applied: true, balance_units: 0 }, 'the refused key was not used up: it applies to an amount that fits, down to exactly 0');
      t.strictSame(await s.addCredits('acme', -1, 'from-zero'), { applied: false, balance_units: 0, refused: 'below_zero' });
      t.strictSame(await s.addCredits('acme', -MAX, 'max-deduct'), { applied: false, balance_units: 0, refused: 'below_zero' });

      await s.createAccount({ id: 'rich', plan: 'pro', balance_units: 70 });
      t.strictSame(await s.addCredits('rich', MAX, 'overflow'), { applied: false, balance_units: 70, refused: 'above_max' }, '70 + (2^53-1) is refused');
      t.equal((await s.getAccount('rich')).balance_units, 70, 'nothing changed (no precision lost)');
      t.strictSame(await s.addCredits('rich', MAX - 70, 'overflow'), { applied: true, balance_units: MAX }, 'up to exactly 2^53-1, with the refused key');
      t.strictSame(await s.addCredits('rich', 1, 'one-more'), { applied: false, balance_units: MAX, refused: 'above_max' });
      t.strictSame(await s.addCredits('rich', -MAX, 'all-of-it'), { applied: true, balance_units: 0 }, 'and back down exactly');
      t.strictSame(await s.addCredits('rich', MAX - 70, 'overflow'), { applied: false, balance_units: 0 }, 'an applied key stays used');

      await s.createAccount({ id: 'full', plan: 'pro', balance_units: MAX });
      t.equal((await s.getAccount('full')).balance_units, MAX, 'an account may start at 2^53-1');
      t.strictSame(await s.addCredits('full', 1, 'k'), { applied: false, balance_units: MAX, refused: 'above_max' });
      await t.rejects(s.createAccount({ id: 'neg', plan: 'pro', balance_units: -1 }), RangeError, 'a negative opening balance is a caller error');
      await t.rejects(s.createAccount({ id: 'big', plan: 'pro', balance_units: MAX + 1 }), RangeError, 'so is one above 2^53-1');
      t.equal(await s.getAccount('neg'), undefined);
      t.equal(await s.getAccount('big'), undefined);
    });

    t.test('concurrent deductions never overdraw: check and change are one step', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      const results = await Promise.all(Array.from({ length: 25 }, (_, i) => s.addCredits('acme', -10, `d-${i}`)));
      t.equal(results.filter((r) => r.applied).length, 10, 'exactly ten deductions of 10 fit in 100');
      t.equal(results.filter((r) => r.refused === 'below_zero').length, 15, 'the rest are refused');
      t.equal((await s.getAccount('acme')).balance_units, 0);
      const refusedKey = results.findIndex((r) => r.refused !== undefined);
      await s.addCredits('acme', 10, 'refill');
      t.strictSame(await s.addCredits('acme', -10, `d-${refusedKey}`), { applied: true, balance_units: 0 }, 'a refused key applies later');
    });

    t.test('accountsOnPlans names one stored account per plan in use', async (t: any) => {
      const h = await fresh(t);
      let s: any = h.store();
      t.strictSame(await s.accountsOnPlans(['free', 'pro']), new Map(), 'no accounts, no plans in use');
      await s.createAccount({ id: 'a1', plan: 'free', balance_units: 0 });
      await s.createAccount({ id: 'a2', plan: 'free', balance_units: 0 });
      await s.seed([{ id: 'p1', plan: 'pro', wallet_units: 5, keys: [], key_sha256: [] }]);
      // Re-creating (or re-seeding) an existing account on another plan changes neither it nor the answer.
      t.equal(await s.createAccount({ id: 'a1', plan: 'gold', balance_units: 0 }), false);
      await s.seed([{ id: 'a2', plan: 'gold', wallet_units: 0, keys: [], key_sha256: [] }]);

      const check = async (what: string) => {
        const found: Map<string, string> = await s.accountsOnPlans(['free', 'pro', 'gold', 'none', 'toString']);
        t.strictSame([...found.keys()].sort(), ['free', 'pro'], `${what}: exactly the plans in use`);
        t.ok(['a1', 'a2'].includes(found.get('free')!), `${what}: an account on free`);
        t.equal(found.get('pro'), 'p1', `${what}: the account on pro`);
      };
      await check('live');
      t.strictSame(await s.accountsOnPlans([]), new Map(), 'no plans asked, none answered');
      if (h.reopen !== undefined) {
        s = await h.reopen();
        await check('after reopening');
      }
    });

    t.test('keys', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const d = digestOf('k1');
      t.equal(await s.createKey({ id: keyIdOf(d), account: 'nobody', digest: d }), false, 'unknown account');
      t.equal(await s.keyByDigest(d), undefined, 'nothing was stored');

      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
      const before = Date.now();
      t.equal(await s.createKey({ id: keyIdOf(d), account: 'acme', digest: d }), true);
      const after = Date.now();
      const k = await s.keyByDigest(d);
      t.strictSame(Object.keys(k).sort(), ['account', 'controls', 'created_at', 'digest', 'id', 'last4', 'last_used_at', 'previous', 'revoked_at', 'spent']);
      t.strictSame(k.controls, { name: null, models: null, expires_at: null, budget: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, priority: null, allowed_ips: null, metadata: {}, team: null, tags: [], tags_locked: false, end_user_budget: null }, 'a key created without controls has none');
      t.strictSame([k.last4, k.last_used_at, k.previous, k.spent], [null, null, null, { period: 'n', units: 0 }]);
      t.equal(k.id, keyIdOf(d));
      t.equal(k.account, 'acme');
      t.equal(k.digest, d);
      t.equal(k.revoked_at, null);
      t.ok(k.created_at >= before && k.created_at <= after, 'created_at is the creation time');
      t.equal(await s.keyByDigest(digestOf('other')), undefined, 'unknown digest');

      k.revoked_at = 1;
      t.equal((await s.keyByDigest(d)).revoked_at, null, 'a returned record is a copy');
    });

    t.test('revoking keys', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
      const d1 = digestOf('r1');
      const d2 = digestOf('r2');
      await s.createKey({ id: keyIdOf(d1), account: 'acme', digest: d1 });
      await s.createKey({ id: keyIdOf(d2), account: 'acme', digest: d2 });

      const before = Date.now();
      const r = await s.revokeKey(keyIdOf(d1));
      const after = Date.now();
      t.equal(r.id, keyIdOf(d1));
      t.equal(r.digest, d1);
      t.equal(r.account, 'acme');
      t.type(r.revoked_at, 'number');
      t.ok(r.revoked_at >= before && r.revoked_at <= after, 'revoked_at is the revocation time');
      t.strictSame(await s.keyByDigest(d1), r, 'the stored key shows the revocation');
      t.equal((await s.keyByDigest(d2)).revoked_at, null, 'other keys are untouched');

      await sleep(15);
      const again = await s.revokeKey(keyIdOf(d1));
      t.equal(again.revoked_at, r.revoked_at, 'revoking twice keeps the first time');
      t.equal((await s.keyByDigest(d1)).revoked_at, r.revoked_at);
      t.equal(await s.revokeKey('key_0000000000000000'), undefined, 'unknown id');
    });

    t.test('sessions', async (t: any) => {
      const s: any = (await fresh(t)).store();
      t.equal(await s.isSessionRevoked('sid-1'), false);
      await s.revokeSession('sid-1');
      t.equal(await s.isSessionRevoked('sid-1'), true);
      t.equal(await s.isSessionRevoked('sid-2'), false, 'other sessions are untouched');
      await s.revokeSession('sid-1');
      t.equal(await s.isSessionRevoked('sid-1'), true, 'revoking twice is harmless');
    });

    t.test('seed', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 5 });
      const [k1, k2, k3] = ['tg_seed_1', 'tg_seed_2', 'tg_seed_3'];
      const d3 = sha256Hex(k3);
      const accounts = [
        { id: 'acme', plan: 'free', wallet_units: 999, keys: [k1], key_sha256: [] },
        { id: 'new', plan: 'free', wallet_units: 100, keys: [k2], key_sha256: [d3.toUpperCase()] },
      ];
      await s.seed(accounts);

      const acme = await s.getAccount('acme');
      t.equal(acme.plan, 'pro', 'an existing account keeps its plan');
      t.equal(acme.balance_units, 5, 'and its balance');
      const created = await s.getAccount('new');
      t.equal(created.plan, 'free', 'an absent account is created');
      t.equal(created.balance_units, 100, 'with the configured wallet');

      for (const [digest, account, what] of [
        [sha256Hex(k1), 'acme', 'a plaintext key of an existing account'],
        [sha256Hex(k2), 'new', 'a plaintext key'],
        [d3, 'new', 'a key_sha256 digest, lowercased'],
      ]) {
        const k = await s.keyByDigest(digest);
        t.ok(k, `${what} is created`);
        t.equal(k.id, keyIdOf(digest));
        t.equal(k.account, account);
        t.equal(k.digest, digest);
        t.equal(k.revoked_at, null);
      }
      t.equal(await s.keyByDigest(d3.toUpperCase()), undefined, 'digests are stored lowercase');

      // The store is authoritative once it has them: seeding again changes nothing.
      await s.addCredits('new', -40, 'spend');
      const revoked = await s.revokeKey(keyIdOf(sha256Hex(k2)));
      await s.seed([{ ...accounts[1], plan: 'pro', wallet_units: 1 }]);
      t.equal((await s.getAccount('new')).balance_units, 60, 'reseeding keeps the balance');
      t.equal((await s.getAccount('new')).plan, 'free', 'and the plan');
      t.equal((await s.keyByDigest(sha256Hex(k2))).revoked_at, revoked.revoked_at, 'and a revoked key stays revoked');
      await s.seed([]);
      t.equal((await s.getAccount('acme')).balance_units, 5, 'an empty seed changes nothing');
    });

    t.test('onRevoke', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 0 });
      const [d1, d2] = [digestOf('l1'), digestOf('l2')];
      await s.createKey({ id: keyIdOf(d1), account: 'acme', digest: d1 });
      await s.createKey({ id: keyIdOf(d2), account: 'acme', digest: d2 });
      const a: Revocation[] = [];
      const b: Revocation[] = [];
      const offA = s.onRevoke((r: Revocation) => a.push(r));
      const offB = s.onRevoke((r: Revocation) => b.push(r));
      t.type(offA, 'function', 'onRevoke returns an unsubscribe function');

      await s.revokeKey(keyIdOf(d1));
      await until(() => a.length >= 1 && b.length >= 1, 'the key revocation');
      t.strictSame(a, [{ kind: 'key', digest: d1 }], 'a key revocation carries the digest');
      await s.revokeSession('sid-9');
      await until(() => a.length >= 2 && b.length >= 2, 'the session revocation');
      t.strictSame(a, [{ kind: 'key', digest: d1 }, { kind: 'session', sid: 'sid-9' }], 'a session revocation carries the sid');
      t.strictSame(b, a, 'every listener hears every revocation');

      // Nothing for an unknown key; nothing once unsubscribed. `b` hearing a later marker proves
      // that earlier events, if any, would have arrived.
      offA();
      await s.revokeKey('key_ffffffffffffffff');
      await s.revokeKey(keyIdOf(d2));
      await s.revokeSession('marker');
      await until(() => b.some((r) => r.kind === 'session' && r.sid === 'marker'), 'the marker');
      t.strictSame(b.slice(2), [{ kind: 'key', digest: d2 }, { kind: 'session', sid: 'marker' }], 'no event for an unknown key');
      t.equal(a.length, 2, 'an unsubscribed listener hears nothing more');
      offB();
      offA();
    });

    t.test('ping', async (t: any) => {
      const s: any = (await fresh(t)).store();
      t.equal(await s.ping(), undefined, 'ping resolves');
    });

    t.test('opened stores are independent', async (t: any) => {
      const s1: any = (await fresh(t)).store();
      const s2: any = (await fresh(t)).store();
      await s1.createAccount({ id: 'acme', plan: 'pro', balance_units: 1 });
      t.equal(await s2.getAccount('acme'), undefined);
    });

    // Only for implementations that can restart (not the purely in-memory one).
    if (reopenable) t.test('acknowledged writes survive reopening', async (t: any) => {
      const h = await fresh(t);
      if (h.reopen === undefined) throw new Error('open() gave reopen() once but not now');
      let s: any = h.store();
      const [d1, d2, d3] = [digestOf('p1'), digestOf('p2'), digestOf('p3')];
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      await s.createAccount({ id: 'demo', plan: 'free', balance_units: 0 });
      await s.addCredits('acme', 250, 'c1');
      await s.addCredits('acme', -50, 'c2');
      await s.addCredits('demo', 9, 'c1');
      await s.createKey({ id: keyIdOf(d1), account: 'acme', digest: d1 });
      await s.createKey({ id: keyIdOf(d2), account: 'demo', digest: d2 });
      const revoked = await s.revokeKey(keyIdOf(d1));
      await s.revokeSession('sid-x');
      await s.seed([{ id: 'seeded', plan: 'free', wallet_units: 77, keys: [], key_sha256: [d3] }]);
      const acmeBefore = await s.getAccount('acme');

      s = await h.reopen();
      t.strictSame(await s.getAccount('acme'), acmeBefore, 'accounts survive with their balance and creation time');
      t.equal((await s.getAccount('demo')).balance_units, 9);
      t.equal((await s.getAccount('seeded')).balance_units, 77, 'seeded accounts survive');
      t.strictSame(await s.keyByDigest(d1), revoked, 'a revoked key stays revoked');
      t.equal((await s.keyByDigest(d2)).revoked_at, null);
      t.equal((await s.keyByDigest(d2)).account, 'demo');
      t.equal((await s.keyByDigest(d3)).account, 'seeded', 'seeded keys survive');
      t.equal(await s.isSessionRevoked('sid-x'), true, 'session revocations survive');
      t.equal(await s.isSessionRevoked('sid-y'), false);
      t.strictSame(await s.addCredits('acme', 250, 'c1'), { applied: false, balance_units: 1200 }, 'idempotency keys survive');
      t.strictSame(await s.addCredits('demo', 9, 'c1'), { applied: false, balance_units: 9 });
      t.strictSame(await s.addCredits('acme', 1, 'c3'), { applied: true, balance_units: 1201 }, 'new writes apply');
      t.equal(await s.createAccount({ id: 'acme', plan: 'free', balance_units: 0 }), false);

      s = await h.reopen();
      t.equal((await s.getAccount('acme')).balance_units, 1201, 'writes after a reopen survive the next one');
      t.strictSame(await s.addCredits('acme', 1, 'c3'), { applied: false, balance_units: 1201 });
    });
  });
}
