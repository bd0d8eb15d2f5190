// Generators and the oracle for "a console member's PATCH never widens a key's controls"
// (CONTRACT section 21; lib/admin/narrowing.ts), shared by the property test on the rule itself
// (test/property/narrowing.test.ts) and the one through `tollgate serve`
// (test/operator/member-controls.test.ts). The oracle judges by what the request path lets
// through (its own model and address matchers): every model, address, moment, spend and
// priority the new controls allow, the old ones allow too.

import fc from 'fast-check';
import { ipMatcher, modelMatcher } from '../../lib/auth/controls.js';
import type { QueuePriority } from '../../lib/config/types.js';
import { applyPatch, defaultControls, type KeyControls, type KeyPatch } from '../../lib/store/types.js';

/** Few letters, so that patterns often overlap (`a*` covers `ab`, `a-*`, `a*b`). */
export const pattern = fc.array(fc.constantFrom('a', 'b', '-', '*'), { minLength: 1, maxLength: 4 }).map((c) => c.join(''));
const cidr = fc.oneof(
  fc.tuple(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 3 }), fc.constantFrom(8, 16, 24, 30, 32)).map(([a, b, p]) => `10.0.${a}.${b * 4}/${p}`),
  fc.constantFrom('0.0.0.0/0', '10.0.0.0/8', '192.168.0.0/16', '2001:db8::/32', '2001:db8::1/128', '::ffff:10.0.0.0/104'),
);
const units = fc.integer({ min: 0, max: 1000 });
const period = fc.constantFrom('day', 'week', 'month', null) as fc.Arbitrary<'day' | 'week' | 'month' | null>;
const limit = fc.option(fc.integer({ min: 1, max: 100 }), { nil: null });
const priority = fc.constantFrom('high', 'normal', 'low', null) as fc.Arbitrary<QueuePriority | null>;
const team = fc.constantFrom('team-a', 'team-b', null);
const expiry = fc.option(fc.integer({ min: 1_900_000_000_000, max: 1_900_000_100_000 }), { nil: null });
const list = <T>(a: fc.Arbitrary<T>) => fc.option(fc.array(a, { minLength: 1, maxLength: 3 }), { nil: null });

/** A key's controls as an admin may have set them. */
export const controls: fc.Arbitrary<KeyControls> = fc.record({
  models: list(pattern), allowed_ips: list(cidr), budget: fc.option(fc.record({ units, period }), { nil: null }),
  limits: fc.record({ requests_per_minute: limit, tokens_per_minute: limit, max_concurrent: limit }), priority, team, expires_at: expiry,
}).map((c) => ({ ...defaultControls(), ...c }));

const bodyValues = fc.record({
  name: fc.constantFrom('renamed', null), models: list(pattern), allowed_ips: list(cidr),
  budget: fc.option(fc.record({ units, period }), { nil: null }),
  limits: fc.option(fc.record({ requests_per_minute: limit, tokens_per_minute: limit, max_concurrent: limit }, { requiredKeys: [] }), { nil: null }),
  priority, team, expires_at: expiry.map((e) => (e === null ? null : new Date(e).toISOString())),
});

/** A PATCH body a member might send: one to three of the controls, any of their values (null included). */
export const patchBody: fc.Arbitrary<Record<string, unknown>> = fc.tuple(
  fc.subarray(['name', 'models', 'allowed_ips', 'budget', 'limits', 'priority', 'team', 'expires_at'] as const, { minLength: 1, maxLength: 3 }), bodyValues,
).map(([fields, values]) => Object.fromEntries(fields.map((f) => [f, values[f]])));

/** A body as the admin API reads it (readControls), for the rule's own test. */
export function toPatch(body: Record<string, unknown>): KeyPatch {
  const p: KeyPatch = {};
  for (const [k, v] of Object.entries(body)) {
    if (k === 'expires_at') p.expires_at = v === null ? null : Date.parse(v as string);
    else if (k === 'limits') p.limits = v === null ? { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null } : (v as KeyPatch['limits']);
    else (p as Record<string, unknown>)[k] = v;
  }
  return p;
}

const RANK: Record<QueuePriority, number> = { low: 0, normal: 1, high: 2 };
const SLUGS = ['a', 'b', 'ab', 'ba', 'a-b', 'aab', 'b-a', '-', 'a-', 'abba', '*', 'a*'];
const ADDRESSES = ['10.0.0.1', '10.0.1.4', '10.0.3.12', '10.1.0.1', '192.168.1.1', '8.8.8.8', '2001:db8::1', '2001:db8::2', '::ffff:10.0.0.1', '::ffff:10.0.2.8'];

/** Why `next` lets through something `before` did not (with the plan's priority `plan`), or undefined. */
export function widening(before: KeyControls, next: KeyControls, plan: QueuePriority): string | undefined {
  const m0 = modelMatcher(before.models);
  const m1 = modelMatcher(next.models);
  if (m0 !== null) {
    for (const s of SLUGS) if ((m1 === null || m1(s)) && !m0(s)) return `model ${s}`;
  }
  const i0 = ipMatcher(before.allowed_ips);
  const i1 = ipMatcher(next.allowed_ips);
  if (i0 !== null) {
    for (const a of ADDRESSES) if ((i1 === null || i1(a)) && !i0(a)) return `address ${a}`;
  }
  if (before.budget !== null) {
    if (next.budget === null) return 'budget lifted';
    if (next.budget.period !== before.budget.period || next.budget.units > before.budget.units) return 'budget widened';
  }
  for (const k of ['requests_per_minute', 'tokens_per_minute', 'max_concurrent'] as const) {
    const b = before.limits[k];
    const n = next.limits[k];
    if (b !== null && (n === null || n > b)) return `limits.${k}`;
  }
  if (before.expires_at !== null && (next.expires_at === null || next.expires_at > before.expires_at)) return 'expiry extended';
  if (RANK[next.priority ?? plan] > RANK[before.priority ?? plan]) return 'priority raised';
  if (before.team !== null && next.team !== before.team) return 'left its team';
  return undefined;
}

/** The controls after `patch` (as the stores apply it). */
export function patched(before: KeyControls, patch: KeyPatch): KeyControls {
  return applyPatch(before, patch);
}
