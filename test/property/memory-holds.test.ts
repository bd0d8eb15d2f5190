// The memory store's open holds are kept with running totals per account (held units, holds per
// day, units per key) instead of being walked on every hold and settle. Whatever the sequence of
// holds, re-holds of the same request id, releases, settlements and expiries, what the metering
// reports must equal a plain walk over the holds that are still open: the wallet's available
// units, the requests_per_day count, a key's budget, heldUnits and keyHeldUnits.

import t from 'tap';
import fc from 'fast-check';
import { MemoryMetering } from '../../lib/store/memory/metering.js';
import type { AccountRecord, HoldRequest, Quotas } from '../../lib/store/types.js';

interface RefHold { account: string; rid: string; units: number; day: string; key: string | undefined; expires: number }

const DAYS = ['2026-11-22', '2026-11-23'];
const ACCOUNTS = ['a', 'b'];
const KEYS = [undefined, 'key_1', 'key_2'];
const PERIODS = { day: 'd:2026-11-23', week: 'w:2026-11-23', month: 'm:2026-11' };

type Op =
  | { op: 'hold'; account: number; rid: number; units: number; ttl: number; day: number; key: number; rpd: number | null; budget: number | null }
  | { op: 'release'; account: number; rid: number }
  | { op: 'settle'; account: number; rid: number; units: number }
  | { op: 'tick'; ms: number }
  | { op: 'read'; account: number; key: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    op: fc.constant('hold' as const), account: fc.nat(1), rid: fc.nat(7), units: fc.nat(40), ttl: fc.integer({ min: 1, max: 50 }),
    day: fc.nat(1), key: fc.nat(2), rpd: fc.option(fc.nat(6)), budget: fc.option(fc.nat(120)),
  }),
  fc.record({ op: fc.constant('release' as const), account: fc.nat(1), rid: fc.nat(7) }),
  fc.record({ op: fc.constant('settle' as const), account: fc.nat(1), rid: fc.nat(7), units: fc.nat(40) }),
  fc.record({ op: fc.constant('tick' as const), ms: fc.nat(30) }),
  fc.record({ op: fc.constant('read' as const), account: fc.nat(1), key: fc.nat(2) }),
);

t.test('running hold totals equal a walk over the open holds, through expiries, re-holds and releases', (t) => {
  const realNow = performance.now;
  let clock = 1000;
  // The metering reads the monotonic clock; the test drives it.
  performance.now = () => clock;
  t.teardown(() => { performance.now = realNow; });

  let checked = 0;
  fc.assert(fc.property(fc.array(op, { maxLength: 120 }), (ops) => {
    const m = new MemoryMetering();
    const accounts = new Map<string, AccountRecord>(ACCOUNTS.map((id) => [id, { id, plan: 'p', balance_units: 200, created_at: 0 }]));
    let ref: RefHold[] = [];
    const open = (account: string) => { ref = ref.filter((h) => h.expires > clock); return ref.filter((h) => h.account === account); };
    let seq = 0;
    const settled = new Set<string>();
    for (const o of ops) {
      if (o.op === 'tick') { clock += o.ms; continue; }
      const account = ACCOUNTS[o.account]!;
      const rec = accounts.get(account)!;
      if (o.op === 'read') {
        const key = KEYS[o.key];
        const held = open(account);
        if (m.heldUnits(account) !== held.reduce((s, h) => s + h.units, 0)) return false;
        if (key !== undefined && m.keyHeldUnits(account, key) !== held.filter((h) => h.key === key).reduce((s, h) => s + h.units, 0)) return false;
        continue;
      }
      const rid = `r${o.rid}`;
      if (o.op === 'release') {
        m.release(account, rid);
        ref = ref.filter((h) => !(h.account === account && h.rid === rid));
        continue;
      }
      if (o.op === 'settle') {
        const e = m.entry(rec, { account, requestId: `${rid}-${seq++}`, units: o.units, promptTokens: 1, completionTokens: 1, day: DAYS[1]!, month: '2026-11' });
        // A settlement of an open hold's request id releases it; a repeated one changes nothing.
        const first = !settled.has(`${account}/${rid}`);
        settled.add(`${account}/${rid}`);
        if (m.apply(rec, { ...e, rid }) !== first) return false;
        if (first) ref = ref.filter((h) => !(h.account === account && h.rid === rid));
        continue;
      }
      const day = DAYS[o.day]!;
      const key = KEYS[o.key];
      const quotas: Quotas = { requests_per_day: o.rpd, tokens_per_day: null, units_per_month: null };
      const h: HoldRequest = { account, requestId: rid, units: o.units, ttlMs: o.ttl, day, month: '2026-11', quotas, ...(key === undefined ? {} : { key: { id: key, periods: PERIODS } }) };
      const budget = key === undefined || o.budget === null ? undefined : { units: o.budget, spent: 0, period: 'day' as const };
      const got = m.hold(rec, h, budget);
      // The reference: the other open holds of the account, this request id's own left out.
      const others = open(account).filter((x) => x.rid !== rid);
      const heldUnits = others.reduce((s, x) => s + x.units, 0);
      const available = rec.balance_units - heldUnits;
      // The day's settled requests come from the usage windows, which both sides share.
      const settledToday = m.usage(account, day, '2026-11').day.requests;
      let want;
      if (o.rpd !== null && settledToday + others.filter((x) => x.day === day).length >= o.rpd) {
        want = { ok: false, code: 'quota_exceeded', quota_code: 'requests_per_day', available_units: available };
      } else if (budget !== undefined && budget.units - others.filter((x) => x.key === key).reduce((s, x) => s + x.units, 0) < o.units) {
        const remaining = budget.units - others.filter((x) => x.key === key).reduce((s, x) => s + x.units, 0);
        want = { ok: false, code: 'budget_exceeded', available_units: available, budget_remaining_units: Math.max(0, remaining), budget_period: 'day', budget_scope: 'key' };
      } else if (available < o.units) {
        want = { ok: false, code: 'insufficient_credits', available_units: available };
      } else {
        want = { ok: true, available_units: available - o.units };
        ref = ref.filter((x) => !(x.account === account && x.rid === rid));
        ref.push({ account, rid, units: o.units, day, key, expires: clock + o.ttl });
      }
      if (JSON.stringify(got) !== JSON.stringify(want)) return false;
    }
    checked++;
    return true;
  }), { numRuns: 400 });
  t.equal(checked, 400, 'every generated sequence agreed with the plain walk');
  t.end();
});
