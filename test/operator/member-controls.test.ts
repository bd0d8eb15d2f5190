// A console member may only narrow the controls an admin set on a key (CONTRACT section 21;
// issue #40 finding 6), through `tollgate serve` from a YAML file with SSO (the test OpenID
// provider), on the memory store with a path and on Redis. The attack's inputs, as a member of
// acme (plan priority `low`) signed in with SSO: take a key out of its team, move it to another,
// raise its priority, widen its models, addresses, budget and limits, lift its expiry; create a
// key above the plan's priority, or outside every team. Each is 403 permission_denied naming
// the field, the key unchanged and nothing audited; narrowing each is 200 and audited as the
// member's. An admin may still do everything. Then generated PATCH bodies
// (test/helpers/narrowing.ts): each answered 200 narrowed the key, each 403 left it as it was.

import t from 'tap';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN_TOKEN, ssoSignIn, startConsole, withSession, type ConsoleRig, type Signed } from '../helpers/console.js';
import { startRedis } from '../helpers/redis.js';
import { statusOf } from '../helpers/operator.js';
import { controls as controlsArb, patchBody, widening } from '../helpers/narrowing.js';
import { SEED, runs } from '../property/arbitraries.js';
import type { KeyControls } from '../../lib/store/types.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

let n = 0;
interface Answer { status: number; body: any; id: string }

async function call(url: string, who: Signed | 'admin', method: string, path: string, body?: unknown): Promise<Answer> {
  const id = `mc-${process.pid}-${++n}`;
  const auth = who === 'admin' ? { authorization: `Bearer ${ADMIN_TOKEN}` } : withSession(who, method);
  const res = await fetch(`${url}${path}`, {
    method, headers: { ...auth, 'x-request-id': id, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text), id };
}

/** The key's controls as the admin API lists them. */
function controlsOf(view: any): KeyControls {
  return {
    name: view.name, models: view.models, allowed_ips: view.allowed_ips, metadata: view.metadata ?? {},
    budget: view.budget.units === null ? null : { units: view.budget.units, period: view.budget.period },
    limits: view.limits, priority: view.priority, team: view.team, expires_at: view.expires_at === null ? null : Date.parse(view.expires_at),
    tags: view.tags, tags_locked: view.tags_locked, end_user_budget: view.end_user_budget,
  };
}

/** An admin's PATCH body setting exactly `c` (every control). */
function fullBody(c: KeyControls): Record<string, unknown> {
  return {
    models: c.models, allowed_ips: c.allowed_ips, budget: c.budget, limits: c.limits, priority: c.priority, team: c.team,
    expires_at: c.expires_at === null ? null : new Date(c.expires_at).toISOString(),
  };
}

async function audited(url: string): Promise<Map<string, any>> {
  const page = await call(url, 'admin', 'GET', '/admin/audit?limit=1000');
  return new Map(page.body.events.map((e: any) => [e.request_id, e]));
}

async function setup(t: any, store: Record<string, unknown>): Promise<{ rig: ConsoleRig; member: Signed }> {
  const rig = await startConsole(t, { store, plans: { free: { paid: false, priority: 'low' } } });
  t.equal(await statusOf(`${rig.url}/readyz`, 200), 200);
  for (const id of ['capped', 'team-a', 'team-b']) {
    t.equal((await call(rig.url, 'admin', 'POST', '/admin/accounts/acme/teams', { id, budget: { units: 500, period: 'day' } })).status, 201, `team ${id}`);
  }
  const member = await ssoSignIn(rig, { sub: 'alice', tenant: 'acme' });
  if ('refused' in member) throw new Error(`the member could not sign in: ${member.refused}`);
  t.equal(member.role, 'member');
  return { rig, member };
}

const EXPIRES = Date.parse('2030-01-01T00:00:00Z');
const LOCKED = {
  name: 'locked', team: 'capped', priority: 'low', models: ['echo-small'], allowed_ips: ['127.0.0.0/8'],
  budget: { units: 100, period: 'day' }, limits: { requests_per_minute: 10 }, expires_at: new Date(EXPIRES).toISOString(),
};

for (const [name, storeOf] of [
  ['memory', async (t: any) => { const dir = await mkdtemp(join(tmpdir(), 'tollgate-mc-')); t.teardown(() => rm(dir, { recursive: true, force: true })); return { kind: 'memory', path: dir }; }],
  ['redis', async () => ({ kind: 'redis', url: redis.url, prefix: `mc-${process.pid}-${++n}:` })],
] as const) {
  t.test(`${name}: a member may not lift what an admin set on a key; it may narrow it`, async (t) => {
    const { rig, member } = await setup(t, await storeOf(t));
    const url = rig.url;
    const key = await call(url, 'admin', 'POST', '/admin/accounts/acme/keys', LOCKED);
    t.equal(key.status, 201);
    const before = (await call(url, 'admin', 'GET', `/admin/keys/${key.body.id}`)).body;

    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ team: null }, 'team'],
      [{ team: 'team-a' }, 'team'],
      [{ priority: 'high' }, 'priority'],
      [{ priority: 'normal' }, 'priority'],
      [{ models: null }, 'models'],
      [{ models: ['echo-*'] }, 'models[0]'],
      [{ models: ['echo-small', 'other'] }, 'models[1]'],
      [{ allowed_ips: null }, 'allowed_ips'],
      [{ allowed_ips: ['0.0.0.0/0'] }, 'allowed_ips[0]'],
      [{ budget: null }, 'budget'],
      [{ budget: { units: 1_000_000, period: 'day' } }, 'budget.units'],
      [{ budget: { units: 100, period: 'month' } }, 'budget.period'],
      [{ limits: { requests_per_minute: 1000 } }, 'limits.requests_per_minute'],
      [{ limits: null }, 'limits.requests_per_minute'],
      [{ expires_at: null }, 'expires_at'],
      [{ expires_at: '2031-01-01T00:00:00Z' }, 'expires_at'],
      [{ name: 'fine', models: ['echo-small'], priority: 'high' }, 'priority'],
    ];
    const refusedIds: string[] = [];
    for (const [body, param] of refusals) {
      const r = await call(url, member, 'PATCH', `/admin/keys/${key.body.id}`, body);
      t.equal(r.status, 403, `${JSON.stringify(body)}: 403`);
      t.equal(r.body?.error?.code, 'permission_denied');
      t.equal(r.body?.error?.type, 'permission_error');
      t.equal(r.body?.error?.param, param, `names ${param}`);
      refusedIds.push(r.id);
    }
    t.strictSame((await call(url, 'admin', 'GET', `/admin/keys/${key.body.id}`)).body, before, 'the key is as the admin left it');

    // A member's new key: not above the plan's priority, not outside every team.
    const high = await call(url, member, 'POST', '/admin/accounts/acme/keys', { name: 'mine', team: 'capped', priority: 'high' });
    t.strictSame([high.status, high.body?.error?.code, high.body?.error?.param], [403, 'permission_denied', 'priority'], 'created above the plan\'s priority: refused');
    const loose = await call(url, member, 'POST', '/admin/accounts/acme/keys', { name: 'mine', models: ['echo-small'] });
    t.strictSame([loose.status, loose.body?.error?.code, loose.body?.error?.param], [403, 'permission_denied', 'team'], 'created outside every team: refused');
    refusedIds.push(high.id, loose.id);
    const mine = await call(url, member, 'POST', '/admin/accounts/acme/keys', { name: 'mine', team: 'team-b', priority: 'low', budget: { units: 10_000, period: null } });
    t.equal(mine.status, 201, 'a key within the plan and a team');
    t.equal((await call(url, 'admin', 'GET', '/admin/accounts/acme/keys')).body.keys.length, 2, 'no key came of the refusals');

    const narrow = await call(url, member, 'PATCH', `/admin/keys/${key.body.id}`, {
      name: 'narrowed', team: 'capped', priority: 'low', models: ['echo-small'], allowed_ips: ['127.0.0.1/32'],
      budget: { units: 40, period: 'day' }, limits: { requests_per_minute: 5, max_concurrent: 1 }, expires_at: '2029-06-01T00:00:00Z',
    });
    t.equal(narrow.status, 200, 'narrowing every control');
    t.strictSame([narrow.body.budget.units, narrow.body.limits.requests_per_minute, narrow.body.allowed_ips], [40, 5, ['127.0.0.1/32']]);

    const events = await audited(url);
    for (const id of refusedIds) t.notOk(events.has(id), `${id}: refused, not in the audit log`);
    t.match(events.get(narrow.id), { actor: 'alice', role: 'member', action: 'PATCH /admin/keys/{id}', target: key.body.id }, 'the narrowing is the member\'s, in the log');
    t.ok(events.has(mine.id));

    const lifted = await call(url, 'admin', 'PATCH', `/admin/keys/${key.body.id}`, { team: null, priority: 'high', models: null, allowed_ips: null, budget: null, expires_at: null });
    t.equal(lifted.status, 200, 'an admin may lift them all');
  });

  t.test(`${name}: generated PATCH bodies: each 200 narrowed the key, each 403 left it as it was`, async (t) => {
    const { rig, member } = await setup(t, await storeOf(t));
    const url = rig.url;
    const key = await call(url, 'admin', 'POST', '/admin/accounts/acme/keys', { name: 'subject', team: 'team-a' });
    t.equal(key.status, 201);
    const cases = fc.sample(fc.tuple(controlsArb, patchBody), { seed: SEED, numRuns: runs(25) });
    const seen = { ok: 0, refused: 0 };
    for (const [admin, body] of cases) {
      t.equal((await call(url, 'admin', 'PATCH', `/admin/keys/${key.body.id}`, fullBody(admin))).status, 200, 'the admin sets the key');
      const before = controlsOf((await call(url, 'admin', 'GET', `/admin/keys/${key.body.id}`)).body);
      const r = await call(url, member, 'PATCH', `/admin/keys/${key.body.id}`, body);
      const after = controlsOf((await call(url, 'admin', 'GET', `/admin/keys/${key.body.id}`)).body);
      if (r.status === 200) {
        seen.ok++;
        t.equal(widening(before, after, 'low'), undefined, `${JSON.stringify(body)} on ${JSON.stringify(fullBody(before))}: narrowed`);
      } else {
        seen.refused++;
        t.strictSame([r.status, r.body?.error?.code], [403, 'permission_denied'], `${JSON.stringify(body)}: refused`);
        t.strictSame(after, before, 'the key unchanged');
      }
    }
    t.ok(seen.ok > 0 && seen.refused > 0, `both outcomes (${seen.ok} narrowed, ${seen.refused} refused)`);
  });
}
