// What is computed once per UTC day (lib/utc-day.ts) is what computing it afresh gives, for any
// sequence of moments: across midnight, back and forth in time, before 1970.

import t from 'tap';
import fc from 'fast-check';
import { DAY_MS, perUtcDay } from '../lib/utc-day.js';
import { windows } from '../lib/billing/meter.js';
import { budgetPeriods } from '../lib/auth/controls.js';
import { holds } from './property/arbitraries.js';

const dayOf = (now: number) => new Date(now).toISOString().slice(0, 10);

t.test('computed once for a day, afresh for another', async (t) => {
  let calls = 0;
  const day = perUtcDay((now) => { calls++; return dayOf(now); });
  const midnight = Date.UTC(2026, 10, 24);
  t.equal(day(midnight - 1), '2026-11-23');
  t.equal(day(midnight - DAY_MS), '2026-11-23', 'the first ms of the day');
  t.equal(calls, 1, 'one computation for the day');
  t.equal(day(midnight), '2026-11-24', 'the first ms of the next day');
  t.equal(day(midnight - 1), '2026-11-23', 'and back');
  t.equal(calls, 3);
  t.equal(day(-1), '1969-12-31', 'before the epoch');
});

t.test('any sequence of moments: windows() and budgetPeriods() as computed afresh', async (t) => {
  const moment = fc.oneof(
    fc.integer({ min: Date.UTC(1970, 0, 1) - 5 * DAY_MS, max: Date.UTC(2100, 0, 1) }),
    fc.integer({ min: -3, max: 3 }).chain((d) => fc.integer({ min: -2, max: 1 }).map((ms) => Date.UTC(2026, 10, 24) + d * DAY_MS + ms)),
  );
  await holds(t, 'day-cached windows', fc.property(fc.array(moment, { minLength: 1, maxLength: 30 }), (moments) => {
    for (const now of moments) {
      const iso = new Date(now).toISOString();
      const w = windows(new Date(now));
      if (w.day !== iso.slice(0, 10) || w.month !== iso.slice(0, 7)) throw new Error(`windows(${now}) = ${JSON.stringify(w)}`);
      w.day = 'changed by a caller';
      const p = budgetPeriods(now);
      if (p.day !== `d:${iso.slice(0, 10)}` || p.month !== `m:${iso.slice(0, 7)}`) throw new Error(`budgetPeriods(${now}) = ${JSON.stringify(p)}`);
      p.day = 'changed by a caller';
    }
  }), 300);
});
