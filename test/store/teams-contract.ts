// Teams (CONTRACT section 15) as every Store implementation must keep them: records, a key's
// team, and a team's budget held with the key's and the wallet in one step, its spend kept
// exact by settle, unsettle and release. Each implementation's test file calls teamsContract()
// next to storeContract(), with the same kind of factory (./contract.ts).

import { budgetPeriods } from '../../lib/auth/controls.js';
import { keyIdOf, sha256Hex } from '../../lib/store/digest.js';
import {
  TeamNotFoundError, defaultControls, defaultTeamSettings, type HoldRequest, type KeyControls, type Store, type TeamSettings,
} from '../../lib/store/types.js';
import type { OpenedStore } from './contract.js';

const NONE = { requests_per_day: null, tokens_per_day: null, units_per_month: null };

function digestOf(name: string): string { return sha256Hex(`tg_team_${name}`); }

export function teamsContract(t: any, name: string, open: () => Promise<OpenedStore>): void {
  async function fresh(t: any): Promise<{ store: () => Store; reopen: (() => Promise<Store>) | undefined }> {
    const opened = await open();
    let current = opened.store;
    t.teardown(() => current.close());
    const reopen = opened.reopen;
    return { store: () => current, reopen: reopen === undefined ? undefined : async () => { current = await reopen(); return current; } };
  }
  const periods = () => budgetPeriods(Date.now());
  const day = () => new Date().toISOString().slice(0, 10);
  const hold = (account: string, requestId: string, units: number, keyId: string): HoldRequest => ({
    account, requestId, units, ttlMs: 60_000, day: day(), month: day().slice(0, 7), quotas: NONE, key: { id: keyId, periods: periods() },
  });
  const settings = (over: Partial<TeamSettings> = {}): TeamSettings => ({ ...defaultTeamSettings(), ...over });
  const key = async (s: Store, account: string, n: string, over: Partial<KeyControls> = {}): Promise<string> => {
    const d = digestOf(`${account}-${n}`);
    t.equal(await s.createKey({ id: keyIdOf(d), account, digest: d, controls: { ...defaultControls(), ...over } }), true);
    return keyIdOf(d);
  };

  t.test(`${name}: teams contract`, async (t: any) => {
    t.test('create, read, list, update, delete', async (t: any) => {
      const s = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createAccount({ id: 'b', plan: 'free', balance_units: 1000 });
      t.equal(await s.createTeam('a', 'red', settings({ name: 'Red', budget: { units: 100, period: 'month' }, models: ['echo-*'] })), 'created');
      t.equal(await s.createTeam('a', 'red', settings()), 'team_exists', 'the same id again');
      t.equal(await s.createTeam('b', 'red', settings()), 'team_exists', 'team ids are unique across accounts');
      t.equal(await s.createTeam('nobody', 'green', settings()), 'account_not_found');
      t.equal(await s.getTeam('green'), undefined, 'nothing made for an unknown account');
      // The list is oldest first, ties by id: let the clock move so 'blue' is younger than 'red'.
      for (const at = Date.now(); Date.now() <= at;) await new Promise((r) => setTimeout(r, 1));
      t.equal(await s.createTeam('a', 'blue', settings({ limits: { requests_per_minute: 5, tokens_per_minute: null, max_concurrent: 2 } })), 'created');
      const red = await s.getTeam('red');
      t.match(red, { id: 'red', account: 'a', name: 'Red', budget: { units: 100, period: 'month' }, models: ['echo-*'], spent: { period: 'n', units: 0 } });
      t.type(red!.created_at, 'number');
      t.strictSame((await s.listTeams('a'))!.map((x) => x.id), ['red', 'blue'], 'oldest first');
      t.strictSame(await s.listTeams('b'), []);
      t.equal(await s.listTeams('nobody'), undefined);

      const patched = await s.updateTeam('blue', { name: 'Blue', limits: { tokens_per_minute: 1000 } });
      t.match(patched, { id: 'blue', name: 'Blue', limits: { requests_per_minute: 5, tokens_per_minute: 1000, max_concurrent: 2 } }, 'limits change member by member');
      t.match(await s.getTeam('blue'), { name: 'Blue', limits: { requests_per_minute: 5, tokens_per_minute: 1000, max_concurrent: 2 } });
      t.match(await s.updateTeam('blue', { limits: { requests_per_minute: null }, models: null, budget: null }), { limits: { requests_per_minute: null, tokens_per_minute: 1000 }, budget: null });
      t.equal(await s.updateTeam('nope', { name: 'x' }), undefined);

      t.equal(await s.deleteTeam('blue'), 'deleted');
      t.equal(await s.getTeam('blue'), undefined);
      t.equal(await s.deleteTeam('blue'), 'not_found');
      t.equal(await s.createTeam('b', 'blue', settings()), 'created', 'a deleted id is free again, in any account');
      t.strictSame((await s.listTeams('a'))!.map((x) => x.id), ['red']);
    });

    t.test("a key's team: only of its own account; a team in use is not deleted", async (t: any) => {
      const s = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createAccount({ id: 'b', plan: 'free', balance_units: 1000 });
      await s.createTeam('a', 'red', settings());
      await s.createTeam('b', 'other', settings());
      const d = digestOf('bad');
      await t.rejects(s.createKey({ id: keyIdOf(d), account: 'a', digest: d, controls: { ...defaultControls(), team: 'other' } }), TeamNotFoundError);
      await t.rejects(s.createKey({ id: keyIdOf(d), account: 'a', digest: d, controls: { ...defaultControls(), team: 'ghost' } }), TeamNotFoundError);
      t.equal(await s.keyByDigest(d), undefined, 'a refused key is not stored');
      t.equal(await s.createKey({ id: keyIdOf(d), account: 'a', digest: d }), true, 'its digest and id are free for a key without the team');

      const k = await key(s, 'a', 'k', { team: 'red' });
      t.equal((await s.getKey(k))!.controls.team, 'red');
      const found = await s.keyWithAccount(digestOf('a-k'));
      t.match(found, { key: { id: k }, account: { id: 'a' }, team: { id: 'red', account: 'a' } }, 'the key is read with its team');
      t.equal((await s.keyWithAccount(d))!.team, undefined, 'a key without a team reads none');

      await t.rejects(s.updateKey(k, { team: 'other', name: 'renamed' }), TeamNotFoundError, "another account's team");
      t.match(await s.getKey(k), { controls: { team: 'red', name: null } }, 'a refused PATCH changes nothing');
      t.equal(await s.deleteTeam('red'), 'in_use', 'a live key names it');
      t.ok(await s.getTeam('red'), 'still there');
      t.match(await s.updateKey(k, { team: null }), { controls: { team: null } });
      t.equal(await s.deleteTeam('red'), 'deleted', 'no live key names it now');
      await t.rejects(s.updateKey(k, { team: 'red' }), TeamNotFoundError, 'a deleted team cannot be given');
      await s.createTeam('a', 'red2', settings());
      t.match(await s.updateKey(k, { team: 'red2' }), { controls: { team: 'red2' } });
      await s.revokeKey(k);
      t.equal(await s.deleteTeam('red2'), 'deleted', 'a revoked key does not hold its team');
    });

    t.test('a team budget is held with the key budget and the wallet: key first, then team, then wallet', async (t: any) => {
      const s = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createTeam('a', 'red', settings({ budget: { units: 100, period: 'day' } }));
      const k1 = await key(s, 'a', 'k1', { team: 'red', budget: { units: 60, period: null } });
      const k2 = await key(s, 'a', 'k2', { team: 'red' });
      const k3 = await key(s, 'a', 'k3');

      t.match(await s.hold(hold('a', 'r1', 50, k1)), { ok: true, available_units: 950, team: 'red' });
      t.match(await s.hold(hold('a', 'r2', 20, k1)), { ok: false, code: 'budget_exceeded', budget_scope: 'key', budget_remaining_units: 10, budget_period: null },
        'the key budget refuses first');
      t.match(await s.hold(hold('a', 'r3', 60, k2)), { ok: false, code: 'budget_exceeded', budget_scope: 'team', budget_remaining_units: 50, budget_period: 'day' },
        "the team's open holds count against another key of the team");
      const ok = await s.hold(hold('a', 'r4', 50, k2));
      t.match(ok, { ok: true, team: 'red' });
      t.match(await s.hold(hold('a', 'r5', 1, k2)), { ok: false, budget_scope: 'team', budget_remaining_units: 0 });
      const free = await s.hold(hold('a', 'r6', 900, k3));
      t.match(free, { ok: true, available_units: 0 }, 'a key without a team is bounded by the wallet only');
      t.equal((free as { team?: string }).team, undefined);
      await s.release('a', 'r6');

      // Settled below the hold: the team's spend is what was charged, exactly once.
      const p = periods();
      t.match(await s.settle({ account: 'a', requestId: 'r1', units: 30, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k1, periods: p, team: 'red' } }),
        { applied: true, charged_units: 30, balance_units: 970 });
      t.match(await s.settle({ account: 'a', requestId: 'r1', units: 30, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k1, periods: p, team: 'red' } }),
        { applied: false, charged_units: 30, balance_units: 970 }, 'a repeat changes nothing');
      t.match(await s.getTeam('red'), { spent: { period: p.day, units: 30 } });
      t.match(await s.getKey(k1), { spent: { period: 'n', units: 30 } });
      // r4 still holds 50 of the team's 100, 30 are spent: 20 left.
      t.match(await s.hold(hold('a', 'r7', 21, k2)), { ok: false, budget_scope: 'team', budget_remaining_units: 20 });
      await s.release('a', 'r4');
      t.match(await s.hold(hold('a', 'r7', 70, k2)), { ok: true, team: 'red' }, 'a released hold frees the team budget');
      t.match(await s.hold(hold('a', 'r8', 1, k2)), { ok: false, budget_scope: 'team', budget_remaining_units: 0 });

      // A settlement above what the team has left is capped at it: the team never overspends.
      t.match(await s.settle({ account: 'a', requestId: 'r7', units: 500, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k2, periods: p, team: 'red' } }),
        { applied: true, charged_units: 70, balance_units: 900 });
      t.match(await s.getTeam('red'), { spent: { period: p.day, units: 100 } });

      // Undone: the team's spend gives back what was charged.
      t.match(await s.unsettle({ account: 'a', requestId: 'r7', units: 500, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k2, periods: p, team: 'red' } }),
        { outcome: 'refunded', refunded_units: 70 });
      t.match(await s.getTeam('red'), { spent: { period: p.day, units: 30 } });
      t.equal((await s.getAccount('a'))!.balance_units, 970);

      // A budget change keeps what the period spent.
      t.match(await s.updateTeam('red', { budget: { units: 40, period: 'day' } }), { budget: { units: 40, period: 'day' }, spent: { period: p.day, units: 30 } });
      t.match(await s.hold(hold('a', 'r9', 11, k2)), { ok: false, budget_scope: 'team', budget_remaining_units: 10 });
      t.match(await s.hold(hold('a', 'r9', 10, k2)), { ok: true });
      await s.release('a', 'r9');
      // Without a budget the team bounds nothing; its spend is still counted, as a key's is, in
      // the period that never resets.
      await s.updateTeam('red', { budget: null });
      t.match(await s.hold(hold('a', 'r10', 500, k2)), { ok: true, team: 'red' });
      await s.settle({ account: 'a', requestId: 'r10', units: 5, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k2, periods: p, team: 'red' } });
      t.match(await s.getTeam('red'), { budget: null, spent: { period: 'n', units: 5 } });
    });

    t.test("a settlement returns the team's budget and spend after it, read in the same step (alerts compare them)", async (t: any) => {
      const s = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createTeam('a', 'red', settings({ budget: { units: 100, period: 'day' } }));
      await s.createTeam('a', 'gone', settings({ budget: { units: 100, period: 'day' } }));
      const k1 = await key(s, 'a', 'k1', { team: 'red', budget: { units: 500, period: 'month' } });
      const k2 = await key(s, 'a', 'k2', { team: 'red' });
      const p = periods();
      const settle = (rid: string, units: number, keyId: string, team?: string) => s.settle({
        account: 'a', requestId: rid, units, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7),
        key: { id: keyId, periods: p, ...(team === undefined ? {} : { team }) },
      });
      await s.hold(hold('a', 's1', 40, k1));
      const first = await settle('s1', 40, k1, 'red');
      t.strictSame(first!.team, { id: 'red', budget: { units: 100, period: 'day' }, spent: { period: p.day, units: 40 } });
      t.strictSame(first!.key, { budget: { units: 500, period: 'month' }, spent: { period: p.month, units: 40 } }, "the key's beside it");
      await s.hold(hold('a', 's2', 60, k2));
      t.strictSame((await settle('s2', 90, k2, 'red'))!.team, { id: 'red', budget: { units: 100, period: 'day' }, spent: { period: p.day, units: 100 } },
        "another key of the team, settled above its hold: the team's spend, capped at its budget (60 of the 90 charged)");
      t.equal((await settle('s2', 90, k2, 'red'))!.team, undefined, 'a repeat: no team part');
      t.equal((await settle('s3', 5, k2))!.team, undefined, 'a settlement naming no team (its hold counted against none): none');
      await s.updateTeam('red', { budget: null });
      t.strictSame((await settle('s4', 0, k2, 'red'))!.team, { id: 'red', budget: null, spent: { period: 'n', units: 0 } },
        'a team without a budget: its spend in the period that never resets');
      const k3 = await key(s, 'a', 'k3', { team: 'gone' });
      await s.hold(hold('a', 's5', 10, k3));
      await s.revokeKey(k3);
      t.equal(await s.deleteTeam('gone'), 'deleted');
      const late = await settle('s5', 10, k3, 'gone');
      t.match(late, { applied: true, charged_units: 10 });
      t.equal(late!.team, undefined, 'the team deleted since the hold: no team part');
    });

    t.test('a hold counts against the team the key names at the hold; its settlement pays that team', async (t: any) => {
      const s = (await fresh(t)).store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createTeam('a', 'red', settings({ budget: { units: 100, period: 'month' } }));
      await s.createTeam('a', 'blue', settings({ budget: { units: 100, period: 'month' } }));
      const k = await key(s, 'a', 'k', { team: 'red' });
      const p = periods();
      t.match(await s.hold(hold('a', 'm1', 80, k)), { ok: true, team: 'red' });
      await s.updateKey(k, { team: 'blue' });
      t.match(await s.hold(hold('a', 'm2', 90, k)), { ok: true, team: 'blue' }, 'the new team, whose budget is untouched');
      await s.settle({ account: 'a', requestId: 'm1', units: 10, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k, periods: p, team: 'red' } });
      t.match(await s.getTeam('red'), { spent: { units: 10 } });
      t.match(await s.getTeam('blue'), { spent: { units: 0 } });
      // Releasing the other hold frees blue's budget, not red's.
      await s.release('a', 'm2');
      t.match(await s.hold(hold('a', 'm3', 100, k)), { ok: true, team: 'blue' });
    });

    t.test('teams and their spend survive a restart', async (t: any) => {
      const h = await fresh(t);
      if (h.reopen === undefined) { t.pass('this store does not reopen'); return; }
      let s = h.store();
      await s.createAccount({ id: 'a', plan: 'free', balance_units: 1000 });
      await s.createTeam('a', 'red', settings({ name: 'Red', budget: { units: 100, period: 'week' } }));
      await s.createTeam('a', 'gone', settings());
      const k = await key(s, 'a', 'k', { team: 'red' });
      const p = periods();
      await s.hold(hold('a', 's1', 40, k));
      await s.settle({ account: 'a', requestId: 's1', units: 25, promptTokens: 1, completionTokens: 1, day: day(), month: day().slice(0, 7), key: { id: k, periods: p, team: 'red' } });
      await s.updateTeam('red', { limits: { max_concurrent: 3 } });
      await s.deleteTeam('gone');
      s = await h.reopen();
      t.match(await s.getTeam('red'), { name: 'Red', budget: { units: 100, period: 'week' }, limits: { max_concurrent: 3 }, spent: { period: p.week, units: 25 } });
      t.equal(await s.getTeam('gone'), undefined);
      t.equal((await s.getKey(k))!.controls.team, 'red');
      t.match(await s.hold(hold('a', 's2', 76, k)), { ok: false, budget_scope: 'team', budget_remaining_units: 75 });
    });
  });
}
