// An ID token issued in the future is refused (CONTRACT section 21; issue #40, info): the attack
// signed in with an ID token whose iat was a day ahead. Through `tollgate serve` and the test
// OpenID provider (test/helpers/oidc-provider.ts, its clock moved by iatOffsetS): more than 60 s
// ahead, the sign-in ends at /console/?sso=failed with no session cookie and no sign-in in the
// audit log; within 60 s (two clocks' skew) it signs in.

import t from 'tap';
import { ADMIN_TOKEN, ssoSignIn, startConsole } from '../helpers/console.js';

const rig = await startConsole(t);

const signInsOf = async (actor: string): Promise<number> => {
  const res = await fetch(`${rig.url}/admin/audit?limit=200`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const { events } = (await res.json()) as { events: Array<{ actor: string; action: string }> };
  return events.filter((e) => e.actor === actor && e.action.includes('sign-in')).length;
};

t.test('an ID token issued more than 60 s ahead signs nobody in', async (t) => {
  for (const [offset, email] of [[86_400, 'a-day-ahead@example.com'], [120, 'two-minutes-ahead@example.com'], [90, 'past-the-skew@example.com']] as const) {
    rig.op.iatOffsetS = offset;
    const redeemedBefore = rig.op.redeemed;
    const result = await ssoSignIn(rig, { sub: email, email, roles: ['tg-admin'] });
    t.same(result, { refused: '/console/?sso=failed' }, `iat ${offset} s ahead: the sign-in fails`);
    t.equal(rig.op.redeemed, redeemedBefore + 1, `iat ${offset} s ahead: the provider did issue the token (the gateway refused it)`);
    t.equal(await signInsOf(`sso:${email}`), 0, `iat ${offset} s ahead: no sign-in audited`);
  }
  t.same(rig.op.refusals, [], 'the provider refused nothing: PKCE, state and nonce were right');
});

t.test('within 60 s of skew, and on time, the sign-in works', async (t) => {
  for (const [offset, email] of [[0, 'on-time@example.com'], [30, 'half-a-minute-ahead@example.com'], [-30, 'half-a-minute-behind@example.com']] as const) {
    rig.op.iatOffsetS = offset;
    const result = await ssoSignIn(rig, { sub: email, email, roles: ['tg-admin'] });
    t.notOk('refused' in result, `iat ${offset} s: signed in`);
    if (!('refused' in result)) t.equal(result.role, 'admin');
    t.equal(await signInsOf(`sso:${email}`), 1, `iat ${offset} s: the sign-in is audited`);
  }
  rig.op.iatOffsetS = 0;
});
