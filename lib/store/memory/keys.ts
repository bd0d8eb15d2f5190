// Accounts, credits, keys and sessions in the memory store: every call of the Store interface
// about them, for MemoryStore (./store.ts). Each checks and changes the tables (./tables.ts) in
// one synchronous step, so nothing can come in between, then waits for the journal.

import { keyIdOf } from '../digest.js';
import type { AccountConfig } from '../../config/types.js';
import { applyPatch, creditRefusal, requireId, seededKeys } from '../rules.js';
import { accountsCursor, checkAccountsQuery } from '../account-pages.js';
import type { AccountRecord, AccountsPage, AccountsQuery, AuditEvent, CreditResult, KeyControls, KeyPatch, KeyRecord, KeyWithAccount, NewKey } from '../types.js';
import { copyKey, type MemoryHost, type MemoryTables } from './tables.js';

const byId = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

const DIGEST = /^[0-9a-f]{64}$/;

function requireUnits(what: string, v: unknown): void {
  if (!Number.isSafeInteger(v)) throw new RangeError(`${what} must be a safe integer`);
}

export class MemoryKeys {
  readonly #t: MemoryTables;
  readonly #host: MemoryHost;

  constructor(tables: MemoryTables, host: MemoryHost) {
    this.#t = tables;
    this.#host = host;
  }

  /** Creates the account when absent; the pending write, or undefined when it exists. */
  #createAccount(a: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<void> | undefined {
    requireId('account id', a.id);
    requireId('plan', a.plan);
    requireUnits('balance_units', a.balance_units);
    if (a.balance_units < 0) throw new RangeError('balance_units must not be negative');
    if (this.#t.accounts.has(a.id)) return undefined;
    return this.#host.change({ op: 'account', id: a.id, plan: a.plan, balance_units: a.balance_units, created_at: Date.now() }, audit);
  }

  /** Creates the key when its account exists and its digest and id are new; the pending write. */
  #createKey(k: NewKey, audit?: AuditEvent): Promise<void> | undefined {
    requireId('key id', k.id);
    requireId('account id', k.account);
    if (typeof k.digest !== 'string' || !DIGEST.test(k.digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    if (!this.#t.accounts.has(k.account) || this.#t.digests.has(k.digest) || this.#t.keys.has(k.id)) return undefined;
    this.#t.requireTeam(k.account, k.controls?.team);
    return this.#host.change({
      op: 'key', id: k.id, account: k.account, digest: k.digest, created_at: Date.now(), last4: k.last4 ?? null,
      ...(k.controls === undefined ? {} : { controls: k.controls }),
    }, audit);
  }

  async createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> {
    await this.#host.begin();
    const written = this.#createAccount(account, audit);
    await (written ?? this.#host.settled());
    return written !== undefined;
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    await this.#host.begin();
    const a = this.#t.accounts.get(id);
    const copy = a === undefined ? undefined : { ...a };
    await this.#host.settled();
    return copy;
  }

  async addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    await this.#host.begin();
    requireUnits('units', units);
    requireId('idempotency key', idempotencyKey);
    const account = this.#t.accounts.get(accountId);
    if (account === undefined) {
      await this.#host.settled();
      return undefined;
    }
    if (this.#t.credits.get(accountId)?.has(idempotencyKey) === true) {
      const balance = account.balance_units;
      await this.#host.audited(audit);
      return { applied: false, balance_units: balance };
    }
    // Checked and applied in one synchronous step: no other change can come in between.
    const refused = creditRefusal(account.balance_units, units);
    if (refused !== undefined) {
      await this.#host.settled();
      return { applied: false, balance_units: account.balance_units, refused };
    }
    const written = this.#host.change({ op: 'credit', account: accountId, units, ik: idempotencyKey }, audit);
    const balance = account.balance_units;
    await written;
    return { applied: true, balance_units: balance };
  }

  async accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> {
    await this.#host.begin();
    const found = new Map<string, string>();
    for (const plan of plans) {
      const id = this.#t.planUser.get(plan);
      if (id !== undefined) found.set(plan, id);
    }
    await this.#host.settled();
    return found;
  }

  async listAccounts(q: AccountsQuery): Promise<AccountsPage> {
    const { after } = checkAccountsQuery(q);
    await this.#host.begin();
    const ids = (this.#t.sortedIds ??= [...this.#t.accounts.keys()].sort(byId));
    const prefix = q.prefix ?? '';
    const start = after !== undefined && after >= prefix ? after : prefix;
    // The first id after `start` (or at it, when it is the prefix and no cursor passed it).
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const id = ids[mid]!;
      if (id < start || (id === start && start === after)) lo = mid + 1;
      else hi = mid;
    }
    const accounts: AccountRecord[] = [];
    let i = lo;
    for (; i < ids.length && accounts.length < q.limit; i++) {
      if (!ids[i]!.startsWith(prefix)) break;
      accounts.push({ ...this.#t.accounts.get(ids[i]!)! });
    }
    const more = i < ids.length && ids[i]!.startsWith(prefix) && accounts.length > 0;
    await this.#host.settled();
    return { accounts, next_cursor: more ? accountsCursor(accounts[accounts.length - 1]!.id) : null };
  }

  async createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> {
    await this.#host.begin();
    const written = this.#createKey(key, audit);
    await (written ?? this.#host.settled());
    return written !== undefined;
  }

  async keyByDigest(digest: string): Promise<KeyRecord | undefined> {
    await this.#host.begin();
    const copy = copyKey(this.#t.keys.get(this.#t.digests.get(digest) ?? ''));
    await this.#host.settled();
    return copy;
  }


  async keyWithAccount(digest: string): Promise<KeyWithAccount | undefined> {
    await this.#host.begin();
    const key = copyKey(this.#t.keys.get(this.#t.digests.get(digest) ?? ''));
    const a = key === undefined ? undefined : this.#t.accounts.get(key.account);
    const team = key?.controls.team == null ? undefined : this.#t.teams.get(key.controls.team);
    const teamCopy = team === undefined || team.account !== key!.account ? undefined : structuredClone(team);
    await this.#host.settled();
    if (key === undefined) return undefined;
    return { key, account: a === undefined ? undefined : { ...a }, ...(teamCopy === undefined ? {} : { team: teamCopy }) };
  }

  async getKey(id: string): Promise<KeyRecord | undefined> {
    await this.#host.begin();
    const copy = copyKey(this.#t.keys.get(id));
    await this.#host.settled();
    return copy;
  }

  async listKeys(account: string): Promise<KeyRecord[] | undefined> {
    await this.#host.begin();
    const list = this.#t.accounts.has(account)
      ? [...this.#t.accountKeys.get(account) ?? []].map((id) => this.#t.keys.get(id)!).filter((k) => k.revoked_at === null)
        .sort((a, b) => a.created_at - b.created_at).map((k) => copyKey(k)!)
      : undefined;
    await this.#host.settled();
    return list;
  }

  async updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    await this.#host.begin();
    const key = this.#t.keys.get(id);
    if (key === undefined || key.revoked_at !== null) {
      await this.#host.settled();
      return undefined;
    }
    // Checked against the controls this very change replaces (nothing can come in between).
    check?.(copyKey(key)!);
    this.#t.requireTeam(key.account, patch.team);
    const controls: KeyControls = applyPatch(key.controls, patch);
    const written = this.#host.change({ op: 'keyupdate', id, controls }, audit);
    const copy = copyKey(key)!;
    this.#host.notifyKey(key, 'key-changed');
    await written;
    return copy;
  }


  async rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    await this.#host.begin();
    if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    requireUnits('previousUntil', previousUntil);
    const key = this.#t.keys.get(id);
    if (key === undefined || key.revoked_at !== null || this.#t.digests.has(digest)) {
      await this.#host.settled();
      return undefined;
    }
    const before = copyKey(key)!;
    const written = this.#host.change({ op: 'rotate', id, digest, last4, until: previousUntil }, audit);
    const copy = copyKey(key)!;
    // The digests whose cached state is now wrong: the one rotated out, and one whose grace ended.
    this.#host.notifyKey(before, 'key-changed');
    await written;
    return copy;
  }

  async touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> {
    await this.#host.begin();
    const known = uses.filter((u) => this.#t.keys.has(u.id) && Number.isSafeInteger(u.at)).map((u): [string, number] => [u.id, u.at]);
    if (known.length === 0) return this.#host.settled();
    await this.#host.change({ op: 'used', uses: known });
  }

  async revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    await this.#host.begin();
    const key = this.#t.keys.get(id);
    if (key === undefined || key.revoked_at !== null) {
      const copy = copyKey(key);
      // Revoking twice keeps the first time, and is answered as done: audited.
      await (key === undefined ? this.#host.settled() : this.#host.audited(audit));
      return copy;
    }
    const written = this.#host.change({ op: 'revoke', id, at: Date.now() }, audit);
    const copy = copyKey(key);
    // Tell listeners at once: dropping a key from a cache early is always safe.
    this.#host.notifyKey(key, 'key');
    await written;
    return copy;
  }

  async revokeSession(sid: string, audit?: AuditEvent): Promise<void> {
    await this.#host.begin();
    requireId('session id', sid);
    if (this.#t.sessions.has(sid)) return this.#host.audited(audit);
    const written = this.#host.change({ op: 'session', sid }, audit);
    this.#host.notify({ kind: 'session', sid });
    await written;
  }

  async isSessionRevoked(sid: string): Promise<boolean> {
    await this.#host.begin();
    const revoked = this.#t.sessions.has(sid);
    await this.#host.settled();
    return revoked;
  }

  async seed(accounts: readonly AccountConfig[]): Promise<void> {
    await this.#host.begin();
    // All checks and changes happen in one synchronous pass; then one wait for the writes.
    const writes: Array<Promise<void> | undefined> = [];
    for (const a of accounts) {
      writes.push(this.#createAccount({ id: a.id, plan: a.plan, balance_units: a.wallet_units }));
      for (const key of seededKeys(a)) writes.push(this.#createKey({ id: keyIdOf(key.digest), account: a.id, ...key }));
    }
    await Promise.all([...writes, this.#host.settled()]);
  }
}
