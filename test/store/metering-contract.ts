// The metering behaviour every Store implementation must share: holds, settlements, releases,
// quotas, usage windows and usage records, as specified by the doc comments of
// lib/store/types.ts. Each implementation's test file calls meteringContract() next to
// storeContract(), with the same kind of factory (see contract.ts):
//
// `open()` returns a new store that shares no data with any other call; `reopen()`, when given,
// closes that store and opens a new one on the same data (a restart). The suite closes
// whichever store it holds last when each subtest ends.
//
// Conventions the suite relies on (all from the spec):
// - available_units is balance minus open, unexpired holds; after a successful hold it includes
//   that hold.
// - Day and month windows are the current UTC ones (and the next ones as "other windows"), so
//   that a store pruning old windows keeps them.
// - Request ids are unique across accounts within a subtest, so a store may key holds and
//   settlements by request id alone or per account.
// - Open holds are not asserted across a reopen (the memory store drops them on restart, which
//   is the same as their TTL expiring).

import { setTimeout as sleep } from 'node:timers/promises';
import type { HoldRequest, Quotas, Store, UsageRecord } from '../../lib/store/types.js';

export interface OpenedStore { store: Store; reopen?: () => Promise<Store> }

const NONE: Quotas = { requests_per_day: null, tokens_per_day: null, units_per_month: null };
const ZERO = { requests: 0, tokens: 0, units: 0 };

function windows(): { day: string; month: string; otherDay: string; otherMonth: string } {
  const now = new Date();
  const day = now.toISOString().slice(0, 10);
  const next = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1));
  const nextMonth = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
  return { day, month: day.slice(0, 7), otherDay: next.toISOString().slice(0, 10), otherMonth: nextMonth.toISOString().slice(0, 7) };
}

function record(over: Partial<UsageRecord> & { request_id: string; account: string; at: number }): UsageRecord {
  return {
    key_id: 'key_0123456789abcdef', team: null, model: 'echo-small', provider: 'local', target: 'http://127.0.0.1:9/v1', route: '/v1/chat/completions',
    status: 200, prompt_tokens: 10, cached_tokens: 0, completion_tokens: 5, units: 15, usage_source: 'upstream',
    duration_ms: 12, ttft_ms: 3, queue_ms: 0, tags: [], end_user: null, ...over,
  };
}

export function meteringContract(t: any, name: string, open: () => Promise<OpenedStore>): void {
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

  const W = windows();
  /** A hold request with defaults: today's windows, one minute, no quotas. */
  const req = (account: string, requestId: string, units: number, over: Partial<HoldRequest> = {}): HoldRequest =>
    ({ account, requestId, units, ttlMs: 60_000, day: W.day, month: W.month, quotas: NONE, ...over });
  const settlement = (account: string, requestId: string, units: number, promptTokens = 0, completionTokens = 0,
    over: { day?: string; month?: string } = {}) =>
    ({ account, requestId, units, promptTokens, completionTokens, day: W.day, month: W.month, ...over });

  t.test(`${name}: metering contract`, async (t: any) => {
    const probe = await open();
    const reopenable = probe.reopen !== undefined;
    await probe.store.close();

    t.test('hold reserves units', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      t.strictSame(await s.hold(req('acme', 'h1', 300)), { ok: true, available_units: 700 }, 'available is balance minus open holds, this one included');
      t.strictSame(await s.hold(req('acme', 'h2', 200)), { ok: true, available_units: 500 }, 'a second hold sees the first');
      t.strictSame(await s.hold(req('acme', 'h3', 0)), { ok: true, available_units: 500 }, 'a hold of 0 units is allowed');
      t.equal((await s.getAccount('acme')).balance_units, 1000, 'a hold does not debit the balance');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 500, day: ZERO, month: ZERO }, 'held_units counts open holds; no usage yet');
      t.equal(await s.hold(req('nobody', 'h4', 1)), undefined, 'unknown account');
    });

    t.test('insufficient credits', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      t.strictSame(await s.hold(req('acme', 'h1', 60)), { ok: true, available_units: 40 });
      t.strictSame(await s.hold(req('acme', 'h2', 50)), { ok: false, code: 'insufficient_credits', available_units: 40 }, 'refused when available < units');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 60, day: ZERO, month: ZERO }, 'nothing held after a refusal');
      t.strictSame(await s.hold(req('acme', 'h3', 40)), { ok: true, available_units: 0 }, 'exactly the available units is allowed');
      t.strictSame(await s.hold(req('acme', 'h4', 1)), { ok: false, code: 'insufficient_credits', available_units: 0 });
      t.equal((await s.getAccount('acme')).balance_units, 100);

      await s.createAccount({ id: 'broke', plan: 'free', balance_units: 0 });
      t.strictSame(await s.hold(req('broke', 'h5', 1)), { ok: false, code: 'insufficient_credits', available_units: 0 }, 'an empty wallet');
      t.strictSame(await s.hold(req('broke', 'h6', 0)), { ok: true, available_units: 0 }, 'but a free request is held');
    });

    t.test('concurrent holds never overdraw, and settle exactly', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const N = 10;
      const K = 17;
      const initial = K * N + (N - 1);
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: initial });
      const results: any[] = await Promise.all(Array.from({ length: 50 }, (_, i) => s.hold(req('acme', `race-${i}`, N))));
      const won = results.map((r, i) => (r.ok ? i : -1)).filter((i) => i >= 0);
      t.equal(won.length, K, `exactly ${K} of 50 concurrent holds succeed`);
      t.ok(results.every((r) => r.available_units >= 0), 'available is never negative');
      t.ok(results.filter((r) => !r.ok).every((r) => r.code === 'insufficient_credits' && r.available_units < N), 'the others are refused for credits');
      t.equal((await s.accountUsage('acme', W.day, W.month)).held_units, K * N);

      const actual = won.map(() => Math.floor(Math.random() * (N + 1)));
      const settled: any[] = await Promise.all(won.map((i, j) => s.settle(settlement('acme', `race-${i}`, actual[j], 1, 2))));
      t.ok(settled.every((r) => r.applied === true), 'every settlement applies');
      t.strictSame(settled.map((r) => r.charged_units), actual, 'each charges its actual cost');
      const total = actual.reduce((a, b) => a + b, 0);
      t.equal((await s.getAccount('acme')).balance_units, initial - total, 'final balance = initial - sum(charged)');
      t.equal(Math.min(...settled.map((r) => r.balance_units)), initial - total, 'the last settlement sees the final balance');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), {
        held_units: 0,
        day: { requests: K, tokens: 3 * K, units: total },
        month: { requests: K, tokens: 3 * K, units: total },
      }, 'every hold is released and every request counted');
    });

    t.test('settle debits once and counts usage', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      await s.hold(req('acme', 'r1', 300));
      await s.hold(req('acme', 'r2', 100));
      t.strictSame(await s.settle(settlement('acme', 'r1', 120, 40, 60)), { applied: true, charged_units: 120, balance_units: 880, available_units: 780 }, 'debits the actual cost and releases its hold');
      const usage = { requests: 1, tokens: 100, units: 120 };
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 100, day: usage, month: usage }, 'requests + 1, tokens = prompt + completion, units = charged');

      const again = await s.settle(settlement('acme', 'r1', 500, 1000, 1000));
      t.equal(again.applied, false, 'a repeated request id is not applied');
      t.equal(again.balance_units, 880, 'and returns the current balance');
      t.equal(again.available_units, 780, 'and the current available units');
      t.type(again.charged_units, 'number');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 100, day: usage, month: usage }, 'nothing changed');
      t.equal((await s.getAccount('acme')).balance_units, 880);

      t.equal(await s.settle(settlement('nobody', 'r9', 1)), undefined, 'unknown account');
    });

    t.test('concurrent settles of one request id apply once', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      await s.hold(req('acme', 'once', 100));
      const results: any[] = await Promise.all(Array.from({ length: 20 }, () => s.settle(settlement('acme', 'once', 70, 5, 5))));
      t.equal(results.filter((r) => r.applied).length, 1, '20 parallel settles of one id apply once');
      t.equal(results.find((r) => r.applied).charged_units, 70);
      t.strictSame(results.map((r) => r.balance_units), Array(20).fill(930), 'each sees the balance with the debit applied');
      const usage = { requests: 1, tokens: 10, units: 70 };
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 0, day: usage, month: usage });
    });

    t.test('unsettle: a settlement that landed is given back, one that did not is fenced; once', async (t: any) => {
      const h = await fresh(t);
      const s: any = h.store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      await s.hold(req('acme', 'kept', 100));
      await s.settle(settlement('acme', 'kept', 30, 3, 4));
      await s.hold(req('acme', 'u1', 300));
      const first = settlement('acme', 'u1', 120, 40, 60);
      await s.settle(first);
      t.equal((await s.getAccount('acme')).balance_units, 850);
      t.strictSame(await s.unsettle(first), { outcome: 'refunded', refunded_units: 120 }, 'a settlement that landed is given back');
      t.equal((await s.getAccount('acme')).balance_units, 970, 'its charge is back in the balance');
      const usage = { requests: 1, tokens: 7, units: 30 };
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 0, day: usage, month: usage }, 'its request, tokens and units are out of both windows');
      t.strictSame(await s.unsettle(first), { outcome: 'repeat', refunded_units: 0 }, 'undone once');
      t.equal((await s.getAccount('acme')).balance_units, 970);
      t.strictSame(await s.settle(first), { applied: false, charged_units: 0, balance_units: 970, available_units: 970 },
        'a settlement arriving after it applies nothing, and reports nothing debited');

      await s.hold(req('acme', 'u2', 200));
      const never = settlement('acme', 'u2', 50, 5, 5);
      t.strictSame(await s.unsettle(never), { outcome: 'fenced', refunded_units: 0 }, 'a settlement that did not land is fenced');
      t.equal((await s.accountUsage('acme', W.day, W.month)).held_units, 200, 'its hold is left to release()');
      t.strictSame(await s.settle(never), { applied: false, charged_units: 0, balance_units: 970, available_units: 770 }, 'and never applies after it');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 200, day: usage, month: usage }, 'nothing counted');
      t.strictSame(await s.unsettle(never), { outcome: 'repeat', refunded_units: 0 });
      await s.release('acme', 'u2');
      t.equal((await s.getAccount('acme')).balance_units, 970);

      t.equal(await s.unsettle(settlement('nobody', 'u3', 1)), undefined, 'unknown account');
      await t.rejects(s.unsettle(settlement('acme', '', 1)), TypeError, 'a bad request id is refused');
      if (h.reopen !== undefined) {
        const r: any = await h.reopen();
        t.equal((await r.getAccount('acme')).balance_units, 970, 'a refund survives reopening');
        t.strictSame((await r.accountUsage('acme', W.day, W.month)).day, usage);
        t.strictSame(await r.settle(first), { applied: false, charged_units: 0, balance_units: 970, available_units: 970 }, 'so does the fence of a refunded id');
        t.strictSame(await r.settle(never), { applied: false, charged_units: 0, balance_units: 970, available_units: 970 }, 'and of a fenced one');
        t.strictSame(await r.unsettle(first), { outcome: 'repeat', refunded_units: 0 });
      }
    });

    t.test('a repeated settle reports what the first one charged', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      t.match(await s.settle(settlement('acme', 'r1', 80)), { applied: true, charged_units: 80 });
      t.strictSame(await s.settle(settlement('acme', 'r1', 80)), { applied: false, charged_units: 80, balance_units: 20, available_units: 20 });
      t.match(await s.settle(settlement('acme', 'r2', 80)), { applied: true, charged_units: 20 }, 'capped at the balance');
      t.strictSame(await s.settle(settlement('acme', 'r2', 80)), { applied: false, charged_units: 20, balance_units: 0, available_units: 0 }, 'and so reported again');
    });

    t.test('settle without a hold, after expiry, and above the balance', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      t.strictSame(await s.settle(settlement('acme', 'no-hold', 30, 3, 4)), { applied: true, charged_units: 30, balance_units: 70, available_units: 70 }, 'a settle without a prior hold charges');

      t.strictSame(await s.hold(req('acme', 'short', 50, { ttlMs: 50 })), { ok: true, available_units: 20 });
      await sleep(150);
      t.strictSame(await s.settle(settlement('acme', 'short', 20)), { applied: true, charged_units: 20, balance_units: 50, available_units: 50 }, 'a settle after the hold expired charges');

      await s.hold(req('acme', 'big', 50));
      t.strictSame(await s.settle(settlement('acme', 'big', 80, 1, 1)), { applied: true, charged_units: 50, balance_units: 0, available_units: 0 }, 'a cost above the balance charges only the balance');
      t.equal((await s.getAccount('acme')).balance_units, 0, 'the balance is never driven below 0');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), {
        held_units: 0,
        day: { requests: 3, tokens: 9, units: 100 },
        month: { requests: 3, tokens: 9, units: 100 },
      }, 'usage counts the units charged');
      t.strictSame(await s.settle(settlement('acme', 'empty', 5)), { applied: true, charged_units: 0, balance_units: 0, available_units: 0 }, 'an empty wallet is charged nothing');
    });

    t.test('release', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      await s.hold(req('acme', 'r1', 60));
      t.equal(await s.release('acme', 'r1'), undefined, 'release resolves');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 0, day: ZERO, month: ZERO }, 'frees the hold, counts no usage');
      t.equal((await s.getAccount('acme')).balance_units, 100, 'charges nothing');
      t.strictSame(await s.hold(req('acme', 'r2', 100)), { ok: true, available_units: 0 }, 'the released units are available again');
      await s.release('acme', 'unknown');
      await s.release('nobody', 'r2');
      t.equal((await s.accountUsage('acme', W.day, W.month)).held_units, 100, 'releasing an unknown id changes nothing');

      await s.release('acme', 'r2');
      t.strictSame(await s.settle(settlement('acme', 'r1', 25, 1, 1)), { applied: true, charged_units: 25, balance_units: 75, available_units: 75 }, 'a settle after a release still charges');
      await s.hold(req('acme', 'r3', 10));
      await s.settle(settlement('acme', 'r3', 10));
      await s.release('acme', 'r3');
      await s.release('acme', 'r1');
      t.equal((await s.getAccount('acme')).balance_units, 65, 'a release after a settle changes nothing');
      const usage = { requests: 2, tokens: 2, units: 35 };
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 0, day: usage, month: usage });
    });

    t.test("ids are refused alike by every store: empty, not a string, a request id beginning with '#'", async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      for (const rid of ['', '#u', '#k:key_1', 7]) {
        await t.rejects(s.hold(req('acme', rid as string, 1)), TypeError, `hold, request id ${JSON.stringify(rid)}`);
        await t.rejects(s.settle(settlement('acme', rid as string, 1)), TypeError, `settle, request id ${JSON.stringify(rid)}`);
        await t.rejects(s.release('acme', rid), TypeError, `release, request id ${JSON.stringify(rid)}`);
      }
      await t.rejects(s.hold(req('', 'r1', 1)), TypeError, 'hold, empty account id');
      await t.rejects(s.release('', 'r1'), TypeError, 'release, empty account id');
      t.strictSame(await s.hold(req('acme', 'u#1', 1)), { ok: true, available_units: 99 }, "a '#' further in is an id like any other");
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 1, day: ZERO, month: ZERO }, 'nothing else held');
    });

    t.test('holds expire', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 100 });
      await s.hold(req('acme', 'long', 10));
      t.strictSame(await s.hold(req('acme', 'short', 90, { ttlMs: 50 })), { ok: true, available_units: 0 });
      t.equal((await s.hold(req('acme', 'refused', 1))).ok, false, 'the short hold counts while open');
      await sleep(150);
      t.equal((await s.accountUsage('acme', W.day, W.month)).held_units, 10, 'an expired hold stops counting');
      t.strictSame(await s.hold(req('acme', 'after', 90)), { ok: true, available_units: 0 }, 'its units are available again');
    });

    t.test('quota: requests per day', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      const quotas = { ...NONE, requests_per_day: 2 };
      t.strictSame(await s.hold(req('acme', 'q1', 100, { quotas })), { ok: true, available_units: 900 });
      t.strictSame(await s.hold(req('acme', 'q2', 100, { quotas })), { ok: true, available_units: 800 });
      t.strictSame(await s.hold(req('acme', 'q3', 100, { quotas })), { ok: false, code: 'quota_exceeded', quota_code: 'requests_per_day', available_units: 800 }, 'open holds count; the refusal carries available_units');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), { held_units: 200, day: ZERO, month: ZERO }, 'a refused hold consumes nothing');
      await s.release('acme', 'q1');
      t.strictSame(await s.hold(req('acme', 'q3', 100, { quotas })), { ok: true, available_units: 800 }, 'a released hold no longer counts');
      await s.settle(settlement('acme', 'q2', 10));
      t.equal((await s.hold(req('acme', 'q4', 100, { quotas }))).quota_code, 'requests_per_day', 'a settled request counts');
      await s.settle(settlement('acme', 'q3', 10));
      t.equal((await s.hold(req('acme', 'q5', 100, { quotas }))).quota_code, 'requests_per_day', 'two settled requests use up the day');
      t.strictSame(await s.hold(req('acme', 'q6', 100, { quotas, day: W.otherDay })), { ok: true, available_units: 880 }, 'another day is independent');
      t.equal((await s.hold(req('acme', 'q7', 100))).ok, true, 'null quotas are unlimited');
      t.strictSame(await s.hold(req('acme', 'q8', 0, { quotas: { ...NONE, requests_per_day: 0 } })), { ok: false, code: 'quota_exceeded', quota_code: 'requests_per_day', available_units: 780 }, 'a zero quota refuses everything');
    });

    t.test('quota: tokens per day', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      const quotas = { ...NONE, tokens_per_day: 100 };
      await s.hold(req('acme', 't1', 10, { quotas }));
      await s.hold(req('acme', 't2', 10, { quotas }));
      t.equal((await s.hold(req('acme', 't3', 10, { quotas }))).ok, true, 'open holds do not count tokens');
      await s.settle(settlement('acme', 't1', 10, 30, 30));
      t.equal((await s.hold(req('acme', 't4', 10, { quotas }))).ok, true, '60 of 100 tokens used: ok');
      await s.settle(settlement('acme', 't2', 10, 20, 20));
      const before = await s.accountUsage('acme', W.day, W.month);
      t.strictSame(await s.hold(req('acme', 't5', 10, { quotas })), { ok: false, code: 'quota_exceeded', quota_code: 'tokens_per_day', available_units: 1000 - 20 - 20 }, 'refused once used >= limit');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), before, 'a refused hold consumes nothing');
      t.equal((await s.hold(req('acme', 't6', 10, { quotas, day: W.otherDay }))).ok, true, 'another day is independent');
      t.equal((await s.hold(req('acme', 't7', 10, { quotas: { ...NONE, tokens_per_day: 101 } }))).ok, true, 'below a higher limit: ok');
    });

    t.test('quota: units per month', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      const quotas = { ...NONE, units_per_month: 50 };
      t.equal((await s.hold(req('acme', 'u1', 500, { quotas }))).ok, true, 'the hold itself is not checked against the quota');
      await s.settle(settlement('acme', 'u1', 30));
      t.equal((await s.hold(req('acme', 'u2', 10, { quotas }))).ok, true, '30 of 50 units used: ok');
      await s.settle(settlement('acme', 'u2', 20));
      t.strictSame(await s.hold(req('acme', 'u3', 10, { quotas })), { ok: false, code: 'quota_exceeded', quota_code: 'units_per_month', available_units: 950 }, 'refused once used >= limit');
      t.strictSame(await s.accountUsage('acme', W.day, W.month), {
        held_units: 0, day: { requests: 2, tokens: 0, units: 50 }, month: { requests: 2, tokens: 0, units: 50 },
      }, 'a refused hold consumes nothing');
      t.equal((await s.hold(req('acme', 'u4', 10, { quotas, month: W.otherMonth }))).ok, true, 'another month is independent');
    });

    t.test('usage windows are separate per day, month and account', async (t: any) => {
      const s: any = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'pro', balance_units: 1000 });
      await s.createAccount({ id: 'b', plan: 'pro', balance_units: 1000 });
      await s.settle(settlement('a', 'w1', 10, 1, 2));
      await s.settle(settlement('a', 'w2', 20, 3, 4, { day: W.otherDay }));
      await s.settle(settlement('a', 'w3', 40, 5, 6, { day: W.otherDay, month: W.otherMonth }));
      await s.settle(settlement('b', 'w4', 80, 7, 8));
      t.strictSame(await s.accountUsage('a', W.day, W.month), {
        held_units: 0, day: { requests: 1, tokens: 3, units: 10 }, month: { requests: 2, tokens: 10, units: 30 },
      });
      t.strictSame(await s.accountUsage('a', W.otherDay, W.otherMonth), {
        held_units: 0, day: { requests: 2, tokens: 18, units: 60 }, month: { requests: 1, tokens: 11, units: 40 },
      });
      t.strictSame(await s.accountUsage('a', '1999-01-01', '1999-01'), { held_units: 0, day: ZERO, month: ZERO }, 'unknown windows are zeros');
      t.strictSame(await s.accountUsage('b', W.day, W.month), {
        held_units: 0, day: { requests: 1, tokens: 15, units: 80 }, month: { requests: 1, tokens: 15, units: 80 },
      }, 'accounts are independent');
    });

    t.test('usage records and reports', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const old = Date.now() - 3_600_000;
      await s.recordUsage(record({ request_id: 'old-1', account: 'a', at: old }));
      await s.recordUsage(record({ request_id: 'old-2', account: 'b', at: old + 1 }));
      await sleep(20);
      const since = Date.now();
      await s.recordUsage(record({ request_id: 'n1', account: 'a', at: since, model: 'm1', prompt_tokens: 1, completion_tokens: 2, units: 3 }));
      await s.recordUsage(record({ request_id: 'n2', account: 'a', at: since + 5, model: 'm2', prompt_tokens: 10, completion_tokens: 20, units: 30, team: 'red' }));
      await s.recordUsage(record({ request_id: 'n3', account: 'b', at: since + 6, model: 'm1', prompt_tokens: 100, completion_tokens: 200, units: 300, team: 'blue' }));
      await s.recordUsage(record({ request_id: 'n4', account: 'a', at: since + 7, model: 'm1', prompt_tokens: 1000, completion_tokens: 2000, units: 3000, status: 502, usage_source: 'none', ttft_ms: null, key_id: null }));
      await s.recordUsage(record({ request_id: 'late', account: 'a', at: since - 10, model: 'm1' }));

      t.strictSame(await s.usageReport('a', since), {
        requests: 3, prompt_tokens: 1011, completion_tokens: 2022, units: 3033,
        by_model: {
          m1: { requests: 2, prompt_tokens: 1001, completion_tokens: 2002, units: 3003 },
          m2: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 },
        },
        by_key: { key_0123456789abcdef: { requests: 2, prompt_tokens: 11, completion_tokens: 22, units: 33 } },
        by_team: { red: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 } },
      }, 'one account since a time: records before it (by `at`) are excluded; a session\'s record (key_id null) is in no by_key entry');
      t.strictSame(await s.usageReport(undefined, since), {
        requests: 4, prompt_tokens: 1111, completion_tokens: 2222, units: 3333,
        by_model: {
          m1: { requests: 3, prompt_tokens: 1101, completion_tokens: 2202, units: 3303 },
          m2: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 },
        },
        by_key: { key_0123456789abcdef: { requests: 3, prompt_tokens: 111, completion_tokens: 222, units: 333 } },
        by_team: { blue: { requests: 1, prompt_tokens: 100, completion_tokens: 200, units: 300 }, red: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 } },
      }, 'all accounts (a record without a team is in no by_team entry)');
      t.strictSame(await s.usageReport(undefined, old), {
        requests: 7, prompt_tokens: 1141, completion_tokens: 2237, units: 3378,
        by_model: {
          'echo-small': { requests: 2, prompt_tokens: 20, completion_tokens: 10, units: 30 },
          m1: { requests: 4, prompt_tokens: 1111, completion_tokens: 2207, units: 3318 },
          m2: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 },
        },
        by_key: { key_0123456789abcdef: { requests: 6, prompt_tokens: 141, completion_tokens: 237, units: 378 } },
        by_team: { blue: { requests: 1, prompt_tokens: 100, completion_tokens: 200, units: 300 }, red: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 30 } },
      }, 'everything since the oldest');
      t.strictSame(await s.usageReport('nobody', 0), { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0, by_model: {}, by_key: {}, by_team: {} }, 'an empty report');
      t.strictSame(await s.usageReport(undefined, Date.now() + 60_000), { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0, by_model: {}, by_key: {}, by_team: {} }, 'nothing in the future');
    });

    t.test('a wallet of 2^53-1 units holds, settles and is credited exactly', async (t: any) => {
      const s: any = (await fresh(t)).store();
      const MAX = Number.MAX_SAFE_INTEGER;
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 70 });
      t.equal((await s.addCredits('acme', MAX, 'overflow')).refused, 'above_max', 'a credit past 2^53-1 is refused');
      t.strictSame(await s.addCredits('acme', MAX - 70, 'fill'), { applied: true, balance_units: MAX });
      t.strictSame(await s.hold(req('acme', 'm1', MAX)), { ok: true, available_units: 0 }, 'the whole wallet can be held');
      t.strictSame(await s.hold(req('acme', 'm2', 1)), { ok: false, code: 'insufficient_credits', available_units: 0 });
      const settled = await s.settle(settlement('acme', 'm1', MAX - 1));
      t.strictSame(settled, { applied: true, charged_units: MAX - 1, balance_units: 1, available_units: 1 }, 'debited to the unit');
      t.strictSame(await s.addCredits('acme', -1, 'last'), { applied: true, balance_units: 0 });
      t.equal((await s.getAccount('acme')).balance_units, 0);
    });

    if (reopenable) t.test('settlements, usage and records survive reopening', async (t: any) => {
      const h = await fresh(t);
      if (h.reopen === undefined) throw new Error('open() gave reopen() once but not now');
      let s: any = h.store();
      await s.createAccount({ id: 'acme', plan: 'pro', balance_units: 1000 });
      await s.hold(req('acme', 'd1', 200));
      await s.settle(settlement('acme', 'd1', 150, 10, 20));
      await s.settle(settlement('acme', 'd2', 50, 1, 2, { day: W.otherDay }));
      await s.hold(req('acme', 'd3', 100));
      await s.release('acme', 'd3');
      const at = Date.now();
      await s.recordUsage(record({ request_id: 'd1', account: 'acme', at, model: 'm1', prompt_tokens: 10, completion_tokens: 20, units: 150 }));

      s = await h.reopen();
      t.equal((await s.getAccount('acme')).balance_units, 800, 'settled debits survive');
      const usage = await s.accountUsage('acme', W.day, W.month);
      t.strictSame(usage.day, { requests: 1, tokens: 30, units: 150 }, 'day usage survives');
      t.strictSame(usage.month, { requests: 2, tokens: 33, units: 200 }, 'month usage survives');
      t.strictSame((await s.accountUsage('acme', W.otherDay, W.month)).day, { requests: 1, tokens: 3, units: 50 });
      const again = await s.settle(settlement('acme', 'd1', 150, 10, 20));
      t.equal(again.applied, false, 'settled request ids survive: a repeated settle is not applied');
      t.equal(again.balance_units, 800);
      t.strictSame(await s.usageReport('acme', at), {
        requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 150,
        by_model: { m1: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 150 } },
        by_key: { key_0123456789abcdef: { requests: 1, prompt_tokens: 10, completion_tokens: 20, units: 150 } },
        by_team: {},
      }, 'usage records survive');

      t.equal((await s.settle(settlement('acme', 'd4', 5))).applied, true, 'new settlements apply');
      await s.recordUsage(record({ request_id: 'd4', account: 'acme', at, model: 'm1', prompt_tokens: 0, completion_tokens: 0, units: 5 }));
      s = await h.reopen();
      t.equal((await s.getAccount('acme')).balance_units, 795, 'and survive the next reopen');
      t.equal((await s.settle(settlement('acme', 'd4', 5))).applied, false);
      t.equal((await s.settle(settlement('acme', 'd2', 50))).applied, false);
      t.equal((await s.usageReport(undefined, 0)).requests, 2, 'records are kept across reopens');
    });
  });
}
