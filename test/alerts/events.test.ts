// The rules of lib/alerts/events.ts and ./deliver.ts as values, and detection's promise on the
// request path: a settlement that crosses nothing makes no store call.

import t from 'tap';
import fc from 'fast-check';
import { createHmac } from 'node:crypto';
import { Alerts } from '../../lib/alerts/alerts.js';
import { FIRST_DELAY_MS, JITTER, MAX_DELAY_MS, RETRY_WINDOW_MS, afterAttempt, retryDelay, signature } from '../../lib/alerts/deliver.js';
import { crossedThresholds, eventId, thresholdEvent } from '../../lib/alerts/events.js';
import { validateConfig } from '../../lib/config/load.js';
import type { AlertOutbox } from '../../lib/store/alerts.js';
import type { Store } from '../../lib/store/types.js';
import { holds } from '../property/arbitraries.js';

t.test('crossedThresholds: exactly those with before < t% <= after, in integers', async (t) => {
  t.strictSame(crossedThresholds([50, 80, 100], 100, 40, 50), [50]);
  t.strictSame(crossedThresholds([100, 50, 80], 100, 0, 100), [50, 80, 100]);
  t.strictSame(crossedThresholds([50], 100, 50, 60), [], 'at the mark before: crossed already');
  t.strictSame(crossedThresholds([50], 3, 1, 2), [50], '1.5 units is 50% of 3: crossed between 1 and 2');
  t.strictSame(crossedThresholds([50], 0, 0, 10), [], 'a budget of 0 has no thresholds');
  t.strictSame(crossedThresholds([100], Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER - 1, Number.MAX_SAFE_INTEGER), [100], 'exact at 2^53-1');
  await holds(t, 'crossings split across steps add up to the crossing of the whole', fc.property(
    fc.uniqueArray(fc.integer({ min: 1, max: 100 }), { maxLength: 10 }),
    fc.integer({ min: 1, max: 1_000_000 }),
    fc.array(fc.integer({ min: 0, max: 300_000 }), { maxLength: 20 }),
    (thresholds, units, steps) => {
      let spent = 0;
      const seen: number[] = [];
      for (const s of steps) {
        seen.push(...crossedThresholds(thresholds, units, spent, spent + s));
        spent += s;
      }
      const whole = crossedThresholds(thresholds, units, 0, spent);
      return JSON.stringify([...seen].sort((a, b) => a - b)) === JSON.stringify(whole) && new Set(seen).size === seen.length &&
        whole.every((th) => th * units <= spent * 100);
    },
  ), 300);
});

t.test('event ids: the same crossing makes the same id; another budget version, period or threshold another', async (t) => {
  const scope = { account: 'a', key_id: 'key_1' };
  const b = { units: 100, period: 'month' as const };
  const id = thresholdEvent(scope, b, 'm:2026-11', 50, 55, 1).id;
  t.equal(thresholdEvent(scope, b, 'm:2026-11', 50, 60, 999).id, id, 'not the spend nor the time');
  const others = [
    thresholdEvent(scope, { units: 101, period: 'month' }, 'm:2026-11', 50, 55, 1).id,
    thresholdEvent(scope, { units: 100, period: 'day' }, 'm:2026-11', 50, 55, 1).id,
    thresholdEvent(scope, b, 'm:2026-12', 50, 55, 1).id,
    thresholdEvent(scope, b, 'm:2026-11', 80, 85, 1).id,
    thresholdEvent({ account: 'a', key_id: 'key_2' }, b, 'm:2026-11', 50, 55, 1).id,
    thresholdEvent({ account: 'a', team: 'key_1' }, b, 'm:2026-11', 50, 55, 1).id,
  ];
  t.equal(new Set([id, ...others]).size, 7);
  t.not(eventId('a', 'bc'), eventId('ab', 'c'), 'parts are delimited');
  const team = thresholdEvent({ account: 'a', team: 'core' }, b, 'm:2026-11', 80, 85, 1);
  t.strictSame(team.subject, { account: 'a', team: 'core' });
  t.equal(team.data.scope, 'team');
  const crossedBy = thresholdEvent({ account: 'a', team: 'core', key_id: 'key_1' }, b, 'm:2026-11', 80, 85, 1);
  t.strictSame(crossedBy.subject, { account: 'a', team: 'core', key_id: 'key_1' }, 'a team\'s event names the key whose request crossed');
  t.equal(crossedBy.id, team.id, 'but its id is the team\'s: whichever key crosses, one event');
  t.equal(crossedBy.data.scope, 'team');
});

t.test('the signature is the hex HMAC-SHA256 of the exact body bytes', async (t) => {
  const body = JSON.stringify({ id: 'evt_1', text: 'é ✓' });
  t.equal(signature('s3cret', body), `sha256=${createHmac('sha256', 's3cret').update(Buffer.from(body, 'utf8')).digest('hex')}`);
  t.not(signature('s3cret', body), signature('s3cret', `${body} `));
});

t.test('the retry schedule: doubling from 30 s to an hour, jitter within 20%, 24 hours then failed', async (t) => {
  t.strictSame([1, 2, 3, 4, 5, 6, 7, 8, 9, 40].map((n) => retryDelay(n, 0.5)), [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600].map((s) => s * 1000));
  t.equal(retryDelay(1, 0), FIRST_DELAY_MS * (1 - JITTER));
  t.ok(retryDelay(20, 0.999999) <= MAX_DELAY_MS * (1 + JITTER));
  const d = { webhook: 'http://h', state: 'pending' as const, attempts: 0, last_status: null, next_at: 0 };
  t.match(afterAttempt(d, 0, 204, 5, 0.5), { state: 'delivered', attempts: 1, last_status: 204 });
  t.match(afterAttempt(d, 0, 500, 5, 0.5), { state: 'pending', attempts: 1, last_status: 500, next_at: 5 + FIRST_DELAY_MS });
  t.match(afterAttempt(d, 0, 302, 5, 0.5), { state: 'pending', last_status: 302 }, 'a redirect is not a delivery');
  t.match(afterAttempt(d, 0, null, RETRY_WINDOW_MS - 1000, 0.5), { state: 'failed', attempts: 1, last_status: null }, 'no retry after 24 hours');
});

/** A store whose every call is counted (only the outbox and settle's result matter here). */
function countingStore(): { store: Store; calls: string[] } {
  const calls: string[] = [];
  const alerts: AlertOutbox = {
    append: async () => { calls.push('append'); return true; },
    due: async () => { calls.push('due'); return []; },
    get: async () => { calls.push('get'); return undefined; },
    lease: async () => { calls.push('lease'); return true; },
    unlease: async () => { calls.push('unlease'); },
    update: async () => { calls.push('update'); },
    list: async () => { calls.push('list'); return { alerts: [], next_cursor: null }; },
    armWallet: async (_a, armed) => { calls.push(`arm:${armed}`); return !armed; },
    expiringKeys: async () => { calls.push('expiring'); return []; },
  };
  return { store: { alerts } as unknown as Store, calls };
}

t.test('detection of a team\'s budget from the settlement\'s team part: its own crossings, its own period', async (t) => {
  const appended: any[] = [];
  const { store, calls } = countingStore();
  (store.alerts as any).append = async (e: any) => { calls.push('append'); appended.push(e); return true; };
  const alerts = new Alerts(store, undefined, { background: false });
  alerts.configure(validateConfig({ alerts: { webhooks: [{ url: 'http://127.0.0.1:9/h', secret: 'events-webhook-secret' }] } }).alerts);
  const periods = { day: 'd:2026-11-27', week: 'w:2026-11-23', month: 'm:2026-11' };
  const settle = (charged: number, keySpent: number, teamSpent: number, teamPeriod = 'd:2026-11-27') => ({
    applied: true, charged_units: charged, balance_units: 1000, available_units: 1000,
    key: { budget: null, spent: { period: 'n', units: keySpent } },
    team: { id: 'core', budget: { units: 200, period: 'day' as const }, spent: { period: teamPeriod, units: teamSpent } },
  });
  alerts.settled('a', 'key_1', periods, settle(50, 50, 90));
  await alerts.flush();
  t.strictSame(calls, [], 'the team at 45%: nothing (the key has no budget)');
  alerts.settled('a', 'key_2', periods, settle(80, 80, 170));
  await alerts.flush();
  t.strictSame(appended.map((e) => [e.data.threshold, e.data.scope, e.subject]), [
    [50, 'team', { account: 'a', team: 'core', key_id: 'key_2' }],
    [80, 'team', { account: 'a', team: 'core', key_id: 'key_2' }],
  ], '90 -> 170 of 200: 50% and 80%, named after the key whose request crossed');
  t.ok(appended.every((e) => e.data.period === 'day' && e.data.period_id === 'd:2026-11-27' && e.data.spent_units === 170 && e.data.budget_units === 200));
  appended.length = 0;
  alerts.settled('a', 'key_1', periods, settle(40, 90, 210, 'd:2026-11-28'));
  await alerts.flush();
  t.strictSame(appended, [], 'a team spend of another period than the hold\'s: not compared');
  alerts.settled('a', 'key_1', periods, { ...settle(40, 90, 210), key: undefined as any });
  await alerts.flush();
  t.strictSame(appended.map((e) => e.data.threshold), [100], 'the team part alone is enough (a key with no spend of its own)');
});

t.test('detection on the request path: only a crossing calls the store', async (t) => {
  const { store, calls } = countingStore();
  const alerts = new Alerts(store, undefined, { background: false });
  const config = validateConfig({ alerts: { wallet_low_units: 500, webhooks: [{ url: 'http://127.0.0.1:9/h', secret: 'events-webhook-secret' }] } }).alerts;
  alerts.configure(config);
  const periods = { day: 'd:2026-11-27', week: 'w:2026-11-23', month: 'm:2026-11' };
  const settle = (charged: number, spent: number, available: number) => ({
    applied: true, charged_units: charged, balance_units: available, available_units: available,
    key: { budget: { units: 100, period: 'month' as const }, spent: { period: 'm:2026-11', units: spent } },
  });
  alerts.settled('a', 'key_1', periods, settle(10, 10, 900));
  alerts.settled('a', 'key_1', periods, settle(10, 20, 890));
  await alerts.flush();
  t.strictSame(calls, ['arm:true'], 'the first settlement above the mark arms the flag once; nothing else');
  calls.length = 0;
  for (let s = 30; s <= 40; s += 10) alerts.settled('a', 'key_1', periods, settle(10, s, 880));
  await alerts.flush();
  t.strictSame(calls, [], 'requests that cross nothing make no store call');
  alerts.settled('a', 'key_1', periods, settle(15, 55, 870));
  await alerts.flush();
  t.strictSame(calls, ['append'], '50% crossed: one append');
  calls.length = 0;
  alerts.settled('a', 'key_1', periods, settle(10, 65, 400));
  await alerts.flush();
  t.strictSame(calls, ['arm:false', 'append'], 'below the mark: the flag is disarmed, and it was armed: the event');
  calls.length = 0;
  alerts.settled('a', 'key_1', periods, settle(1, 66, 390));
  alerts.settled('a', 'key_1', periods, settle(1, 67, 380));
  await alerts.flush();
  t.strictSame(calls, [], 'still below: known disarmed, no store call');
  alerts.settled('a', 'key_1', { ...periods, month: 'm:2026-12' }, settle(1, 68, 380));
  await alerts.flush();
  t.strictSame(calls, [], 'a spend of another period than the hold\'s (the period turned): not compared');
  alerts.settled('a', 'key_1', periods, { ...settle(50, 100, 380), applied: false });
  await alerts.flush();
  t.strictSame(calls, [], 'a repeated settlement: nothing');
});

t.test('the wallet flag is set again after 5 minutes on one side (another instance may have changed it)', async (t) => {
  const { store, calls } = countingStore();
  let now = Date.UTC(2026, 10, 27);
  const alerts = new Alerts(store, undefined, { background: false, clock: { now: () => now } });
  alerts.configure(validateConfig({ alerts: { wallet_low_units: 500, webhooks: [{ url: 'http://127.0.0.1:9/h', secret: 'events-webhook-secret', events: ['wallet.low'] }] } }).alerts);
  const settle = (available: number) => ({ applied: true, charged_units: 1, balance_units: available, available_units: available });
  alerts.settled('a', undefined, undefined, settle(900));
  now += 4 * 60_000;
  alerts.settled('a', undefined, undefined, settle(899));
  await alerts.flush();
  t.strictSame(calls, ['arm:true'], 'once within 5 minutes');
  now += 2 * 60_000;
  alerts.settled('a', undefined, undefined, settle(898));
  alerts.settled('a', undefined, undefined, settle(897));
  await alerts.flush();
  t.strictSame(calls, ['arm:true', 'arm:true'], 'again after 5 minutes, once');
  alerts.settled('b', undefined, undefined, settle(100));
  await alerts.flush();
  t.strictSame(calls.slice(2), ['arm:false', 'append'], 'per account');
});
