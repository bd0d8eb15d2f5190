// A console member's PATCH never widens a key's controls (CONTRACT section 21;
// lib/admin/narrowing.ts), over generated controls an admin set and generated PATCH bodies:
// whatever refuseWidening lets pass lets through no model, address, moment, spend or priority
// the key did not allow before (judged by the request path's own matchers:
// test/helpers/narrowing.ts), and what it refuses names a member of the body. A PATCH that
// restates the key's controls, or narrows each one, always passes.

import t from 'tap';
import fc from 'fast-check';
import { GatewayError } from '../../lib/errors.js';
import { cidrCovers, globCovers, refuseWidening } from '../../lib/admin/narrowing.js';
import type { QueuePriority } from '../../lib/config/types.js';
import type { KeyControls, KeyRecord } from '../../lib/store/types.js';
import { controls, patchBody, patched, toPatch, widening } from '../helpers/narrowing.js';
import { holds } from './arbitraries.js';

const plan = fc.constantFrom('high', 'normal', 'low') as fc.Arbitrary<QueuePriority>;

function keyWith(c: KeyControls): KeyRecord {
  return { id: 'key_1', account: 'acme', digest: '0'.repeat(64), created_at: 0, revoked_at: null, last4: null, controls: c, previous: null, last_used_at: null, spent: { period: 'n', units: 0 } };
}

t.test('whatever a member\'s PATCH may do narrows; what it may not is refused naming the member', async (t) => {
  let passed = 0;
  let refused = 0;
  await holds(t, 'member PATCH never widens', fc.property(controls, patchBody, plan, (before, body, p) => {
    const patch = toPatch(body);
    try {
      refuseWidening(keyWith(before), patch, p);
    } catch (err) {
      if (!(err instanceof GatewayError) || err.code !== 'permission_denied' || err.status !== 403) throw err;
      const root = (err.param ?? '').split(/[.[]/)[0]!;
      if (!Object.hasOwn(body, root)) throw new Error(`refused naming '${err.param}', which the body does not hold`);
      refused++;
      return;
    }
    passed++;
    const why = widening(before, patched(before, patch), p);
    if (why !== undefined) throw new Error(`a member's PATCH ${JSON.stringify(body)} widened ${JSON.stringify(before)}: ${why}`);
  }), 3000);
  t.ok(passed > 100 && refused > 100, `both outcomes were generated (${passed} passed, ${refused} refused)`);
});

t.test('a PATCH restating the key\'s controls, or narrowing each of them, passes', async (t) => {
  await holds(t, 'narrowing passes', fc.property(controls, plan, fc.boolean(), (before, p, narrower) => {
    const c = before;
    const body: Record<string, unknown> = {
      models: c.models === null ? ['a'] : narrower ? [c.models[0]] : c.models,
      allowed_ips: c.allowed_ips === null ? ['10.0.0.1/32'] : [c.allowed_ips[0]],
      budget: c.budget === null ? { units: 5, period: 'day' } : { units: narrower ? Math.floor(c.budget.units / 2) : c.budget.units, period: c.budget.period },
      limits: Object.fromEntries(Object.entries(c.limits).map(([k, v]) => [k, v === null ? 3 : narrower ? Math.max(1, v - 1) : v])),
      expires_at: new Date(c.expires_at === null ? 1_900_000_000_000 : narrower ? c.expires_at - 1000 : c.expires_at).toISOString(),
      priority: narrower ? 'low' : c.priority,
      team: c.team ?? 'team-a',
      name: 'mine',
    };
    refuseWidening(keyWith(before), toPatch(body), p);
  }), 1000);
});

t.test('glob and CIDR coverage', async (t) => {
  t.ok(globCovers('llama-*', 'llama-3-8b'));
  t.ok(globCovers('llama-*', 'llama-3*'), 'a narrower glob');
  t.ok(globCovers('*', 'anything*'));
  t.notOk(globCovers('llama-3*', 'llama-*'), 'a wider glob');
  t.notOk(globCovers('a*b', 'a*'), 'a* matches "ac", which a*b does not');
  t.notOk(globCovers('echo-small', 'echo-*'));
  t.ok(globCovers('echo.small', 'echo.small'), 'literal dots');
  t.notOk(globCovers('echo.small', 'echoXsmall'));
  t.ok(cidrCovers('10.0.0.0/8', '10.1.2.0/24'));
  t.ok(cidrCovers('10.0.0.0/8', '10.1.2.3'), 'an address');
  t.notOk(cidrCovers('10.0.0.0/16', '10.0.0.0/8'), 'a wider prefix');
  t.notOk(cidrCovers('10.0.0.0/8', '11.0.0.0/8'));
  t.notOk(cidrCovers('10.0.0.0/8', '2001:db8::/32'), 'another family');
  t.ok(cidrCovers('2001:db8::/32', '2001:db8:1::/48'));
  t.ok(cidrCovers('0.0.0.0/0', '192.168.1.1/32'));
});
