// The writes of the admin API and the console record their audit event in the same step as the
// write (CONTRACT section 21), on every store: the memory store (in the same journal entry),
// Redis and a Redis Cluster (in the write's own slot, then moved to the log; no script of two
// slots). Each implementation's test file calls auditContract() with a factory as for
// storeContract (./contract.ts). Checked here: each write records exactly its event when it is
// answered as done (a repeated credit and a second revocation included), nothing when it is
// refused; an updateKey check that throws changes and records nothing; the events outlive a
// reopen.

import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import { defaultControls, type AuditEvent, type Store } from '../../lib/store/types.js';
import type { OpenedStore } from './contract.js';

let seq = 0;
/** An event whose request id names the write, so that a test can tell which writes were recorded. */
function event(name: string): AuditEvent {
  return { at: Date.now(), actor: 'admin-token', role: 'admin', action: `TEST ${name}`, target: '', ip: '127.0.0.1', request_id: `${name}#${++seq}` };
}

/** Every event of the log, oldest first, by the write each names. */
async function recorded(store: Store): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await store.listAudit({ since: 0, limit: 1000, cursor });
    out.push(...page.events.map((e) => e.request_id.split('#')[0]!));
    if (page.next_cursor === null) return out.reverse();
    cursor = page.next_cursor;
  }
}

export function auditContract(t: any, name: string, open: () => Promise<OpenedStore>): void {
  t.test(`${name}: every write records its event with it, and a refusal none`, async (t: any) => {
    const opened = await open();
    let store = opened.store;
    t.teardown(() => store.close());
    const want: string[] = [];
    const done = (label: string) => { want.push(label); return event(label); };

    t.equal(await store.createAccount({ id: 'acme', plan: 'free', balance_units: 10 }, done('account')), true);
    t.equal(await store.createAccount({ id: 'acme', plan: 'free', balance_units: 10 }, event('account-again')), false, 'an existing account: refused');
    t.equal((await store.addCredits('acme', 5, 'ik-1', done('credit')))?.applied, true);
    const repeat = await store.addCredits('acme', 5, 'ik-1', done('credit-repeat'));
    t.strictSame([repeat?.applied, repeat?.balance_units], [false, 15], 'a repeated idempotency key changes nothing, and is recorded');
    t.equal((await store.addCredits('acme', -100, 'ik-2', event('credit-refused')))?.refused, 'below_zero');
    t.equal(await store.addCredits('nobody', 5, 'ik-3', event('credit-nobody')), undefined);

    const digest = sha256Hex(`tg_audit_${name}`);
    const id = keyIdOf(digest);
    t.equal(await store.createKey({ id, account: 'acme', digest, last4: 'abcd', controls: defaultControls() }, done('key')), true);
    t.equal(await store.createKey({ id, account: 'acme', digest, last4: 'abcd' }, event('key-again')), false, 'the same key again: refused');
    await t.rejects(store.createKey({ id: keyIdOf(sha256Hex('x')), account: 'acme', digest: sha256Hex('x'), controls: { ...defaultControls(), team: 'none-such' } }, event('key-team')),
      { name: 'TeamNotFoundError' });
    t.equal((await store.updateKey(id, { name: 'renamed' }, done('patch')))?.controls.name, 'renamed');
    t.equal(await store.updateKey('key_none', { name: 'x' }, event('patch-nobody')), undefined);
    await t.rejects(store.updateKey(id, { name: 'refused' }, event('patch-checked'), () => { throw new RangeError('refused by the check'); }), RangeError);
    t.equal((await store.getKey(id))?.controls.name, 'renamed', 'a check that throws changes nothing');
    let seen: string | null | undefined;
    t.ok(await store.updateKey(id, { name: 'checked' }, done('patch-check-passed'), (k) => { seen = k.controls.name; }));
    t.equal(seen, 'renamed', 'the check sees the controls the patch replaces');

    t.equal(await store.createTeam('acme', 'team-a', { name: null, budget: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, models: null }, done('team')), 'created');
    t.equal(await store.createTeam('acme', 'team-a', { name: null, budget: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, models: null }, event('team-again')), 'team_exists');
    t.ok(await store.updateTeam('team-a', { name: 'A' }, done('team-patch')));
    t.equal(await store.updateTeam('team-none', { name: 'A' }, event('team-patch-nobody')), undefined);
    t.ok(await store.updateKey(id, { team: 'team-a' }, done('key-to-team')));
    t.equal(await store.deleteTeam('team-a', event('team-delete-in-use')), 'in_use', 'a team in use: refused');
    t.ok(await store.updateKey(id, { team: null }, done('key-from-team')));
    t.equal(await store.deleteTeam('team-a', done('team-delete')), 'deleted');
    t.equal(await store.deleteTeam('team-a', event('team-delete-again')), 'not_found');

    const rotated = sha256Hex(`tg_audit_${name}_rotated`);
    t.equal((await store.rotateKey(id, rotated, 'efgh', Date.now() + 60_000, done('rotate')))?.digest, rotated);
    t.equal(await store.rotateKey('key_none', sha256Hex('y'), 'yyyy', Date.now(), event('rotate-nobody')), undefined);
    t.ok(await store.revokeKey(id, done('revoke')));
    t.ok(await store.revokeKey(id, done('revoke-again')), 'a second revocation is answered as done: recorded');
    t.equal(await store.revokeKey('key_none', event('revoke-nobody')), undefined);
    await store.revokeSession('sid-1', done('session'));
    await store.revokeSession('sid-1', done('session-again'));
    await store.appendAudit(done('sign-in'));

    t.strictSame(await recorded(store), want, 'exactly the writes answered as done, each once, in order');
    if (opened.reopen !== undefined) {
      store = await opened.reopen();
      t.strictSame(await recorded(store), want, 'the same after a reopen');
    }
  });
}
