// Accounts, keys and sessions in Redis (the key layout is in ./store.ts's header; the Lua is in
// ./scripts.ts): every call of the Store interface about them, for RedisStore (./store.ts).
//
// Two operations span two tags and run as atomic steps in a safe order:
// - createKey: (1) EXISTS P{acct:ID}. Accounts are never deleted, so once it exists it stays.
//   (2) claim the index P{keyid:ID} -> DIGEST (set if absent). (3) create the record
//   P{key:DIGEST} if absent, marked `own` (valid only once (4) has run). (4) create the key's
//   account-side hash (below), with the write's audit event (./audit.ts): the step that makes
//   the key exist, listed and usable. The index is written before the record, so a usable key
//   is always revocable by id; a crash before (4) leaves an index and a record that lead to no
//   key (revokeKey and getKey treat it as unknown; a retry, or the next seed, completes it). If
//   the record turns out to belong to another id, the index just claimed is removed again.
// - revokeKey: (1) GET P{keyid:ID}. An index is removed only while its digest's record carries
//   another id, so one that names a record of this id stays; and (2) the revoke script checks
//   that the record carries this id before it sets revoked_at (only if unset) and publishes.
// - createAccount: (1) SADD the id to P{plan:NAME}, (2) create P{acct:ID} if absent. An account
//   is always in its plan's index; an id there whose account is on another plan (a seed of an
//   existing account) is removed when accountsOnPlans meets it, one whose account does not
//   exist (yet: a creation in progress, or a crash between the steps) is skipped.
// Idempotency keys are kept for good (the set grows with the account's credits).
//
// Keys: a key's record lives in its account's hash (the key layout in ./store.ts); P{key:DIGEST}
// only leads a digest to its id and account. A key is never usable without its controls: a
// digest record marked `own` is nothing until its account-side hash exists; one not so marked
// and without an account-side hash is a key from before per-key controls, which has none (such
// records were written after the hash). A rotation adds the new digest's record, then moves
// digest -> pd in the account-side hash (one script), then points P{keyid:ID} at the new digest.
// Whether a digest is valid is decided by the account-side hash alone (its digest, or pd before
// pu), and revocation sets ra there before the digest record's revoked_at.
//
// Changes of controls (PATCH): each member a PATCH names is a field of its own (c:name,
// c:limits.max_concurrent, ...; the budget is bu/bp), written by one script that first checks
// the key is live (a digest, no ra): the merge happens in Redis, so two PATCHes racing from any
// instances both land, member by member, as if one ran after the other, and neither touches
// what a rotation or a revocation wrote. Each PATCH counts in the hash's field v; a PATCH
// checked against the key as read (a member's: it may only narrow) applies only while v is what
// was read, else the key is read and checked again.
//
// Audit (CONTRACT section 21): each write of the admin API records its event in the script of
// the step that makes it visible (./audit.ts): the account's creation, a credit, the key's
// account-side hash (creation), its PATCH, its rotation, its revocation (on the account-side
// hash; on the digest record for a key without one), a session's revocation. A reader takes `c`, then the c:MEMBER fields over it
// (see storedControls). No JSON is decoded in Lua: its cjson keeps 14 digits of a number.
// A member a key's `c` lacks (priority, in controls written before keys had one) reads as its
// default (toControls in ../rules.ts).
// A record of members patched this way (a team's, later) takes the same fields and helpers.

import { keyIdOf } from '../digest.js';
import type { AccountConfig } from '../../config/types.js';
import { Cluster } from 'ioredis';
import type { RedisClient } from './connect.js';
import { outboxOf, type RedisAudit } from './audit.js';
import type { RedisRevocations } from './revocations.js';
import { SCRIPTS, type Scripts } from './scripts.js';
import type { ReplicaWait } from './wait.js';
import { TeamNotFoundError, defaultControls, requireId, seededKeys } from '../rules.js';
import { accountsCursor, checkAccountsQuery } from '../account-pages.js';
import type { AccountRecord, AccountsPage, AccountsQuery, AuditEvent, CreditResult, KeyControls, KeyPatch, KeyRecord, KeyWithAccount, KnownKey, NewKey } from '../types.js';
import { accountRecord, controlsJson, found, hashOf, indexedKey, integer, keyRecord, patchFields, teamId, tuple, type KeyAndAccount } from './key-records.js';

/** The account, key and session calls of one RedisStore, on its command connection. */
export class RedisKeys {
  readonly prefix: string;
  readonly #redis: RedisClient & Scripts;
  /** Waited writes (store.wait_replicas > 0), on connections of their own; else null. */
  readonly #wait: ReplicaWait | null;
  readonly #revocations: RedisRevocations;
  readonly #audit: RedisAudit;
  /** The id index filled from the plan indexes (#fillAccountIds), once per store. */
  #filled: Promise<void> | null = null;

  constructor(redis: RedisClient & Scripts, prefix: string, wait: ReplicaWait | null, revocations: RedisRevocations, audit: RedisAudit) {
    this.#redis = redis;
    this.prefix = prefix;
    this.#wait = wait;
    this.#revocations = revocations;
    this.#audit = audit;
  }

  async createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> {
    requireId('account id', account.id);
    requireId('plan', account.plan);
    const balance = integer(account.balance_units, 'balance_units');
    if (account.balance_units < 0) throw new RangeError('balance_units must not be negative');
    // The plan index first: an account that exists is always found in it (see the header).
    await this.#redis.sadd(this.#plan(account.plan), account.id);
    // And the id index (listAccounts), for the same reason.
    await this.#redis.zadd(this.#accountIds(), 0, account.id);
    const acct = this.#acct(account.id);
    const outbox = outboxOf(acct);
    const r = await this.#audit.around(outbox, audit, (event) => this.#redis.tgCreateAccount(acct, outbox, event, account.id, account.plan, balance, String(Date.now())));
    return r === 1;
  }

  /**
   * A page of accounts from the id index: ids after the cursor (or from the prefix), then their
   * hashes. An id whose account does not exist (a creation in progress) is passed over.
   */
  async listAccounts(q: AccountsQuery): Promise<AccountsPage> {
    const { after } = checkAccountsQuery(q);
    await (this.#filled ??= this.#fillAccountIds().catch((e: unknown) => { this.#filled = null; throw e; }));
    const prefix = q.prefix ?? '';
    const min = after !== undefined && after >= prefix ? `(${after}` : prefix === '' ? '-' : `[${prefix}`;
    const ids = (await this.#redis.zrangebylex(this.#accountIds(), min, '+', 'LIMIT', 0, q.limit + 1)).filter((id) => id.startsWith(prefix));
    const page = ids.slice(0, q.limit);
    const records = await Promise.all(page.map((id) => this.getAccount(id)));
    const accounts = records.filter((a): a is AccountRecord => a !== undefined);
    return { accounts, next_cursor: ids.length > q.limit ? accountsCursor(page[page.length - 1]!) : null };
  }

  /**
   * Accounts created by a version before the id index are in their plan's index only: the first
   * listAccounts of a store (ever: a marker beside the index says it was done) adds the ids of
   * every plan index to it, scanning each primary for P{plan:*}. An id whose account does not
   * exist is passed over when listed, as in the plan indexes.
   */
  async #fillAccountIds(): Promise<void> {
    const marker = `${this.#accountIds()}:filled`;
    if ((await this.#redis.exists(marker)) === 1) return;
    const nodes = this.#redis instanceof Cluster ? this.#redis.nodes('master') : [this.#redis];
    const pattern = `${this.prefix.replace(/[*?[\]\\]/g, '\\$&')}{plan:*`;
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        cursor = next;
        for (const key of keys) {
          let inner = '0';
          do {
            const [after, ids] = await this.#redis.sscan(key, inner, 'COUNT', 1000);
            inner = after;
            if (ids.length > 0) await this.#redis.zadd(this.#accountIds(), ...ids.flatMap((id) => [0, id]));
          } while (inner !== '0');
        }
      } while (cursor !== '0');
    }
    await this.#redis.set(marker, '1');
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    return accountRecord(await this.#redis.hgetall(this.#acct(id)));
  }

  async addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    requireId('idempotency key', idempotencyKey);
    const acct = this.#acct(accountId);
    const outbox = outboxOf(acct);
    const amount = integer(units, 'units');
    const r = await this.#audit.around(outbox, audit, (event) => (this.#wait !== null
      ? this.#wait.eval(SCRIPTS.tgAddCredits.lua, [acct, `${acct}:credits`, outbox], [event, amount, idempotencyKey])
      : this.#redis.tgAddCredits(acct, `${acct}:credits`, outbox, event, amount, idempotencyKey)));
    if (r === null) return undefined;
    const [applied, balance] = tuple(r, 2);
    const result: CreditResult = { applied: applied === 1, balance_units: Number(balance) };
    if (applied === -1) result.refused = 'below_zero';
    if (applied === -2) result.refused = 'above_max';
    return result;
  }

  async accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    for (const plan of new Set(plans)) {
      const id = await this.#accountOnPlan(plan);
      if (id !== undefined) found.set(plan, id);
    }
    return found;
  }

  /** The first id in the plan's index whose account is on that plan; drops ids of other plans. */
  async #accountOnPlan(plan: string): Promise<string | undefined> {
    const index = this.#plan(plan);
    let cursor = '0';
    do {
      const [next, ids] = await this.#redis.sscan(index, cursor, 'COUNT', 100);
      cursor = next;
      for (const id of ids) {
        const actual = await this.#redis.hget(this.#acct(id), 'plan');
        if (actual === plan) return id;
        // Accounts never change plan, so an id on another plan never belongs here.
        if (actual !== null) await this.#redis.srem(index, id);
      }
    } while (cursor !== '0');
    return undefined;
  }

  async createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> {
    requireId('key id', key.id);
    requireId('account id', key.account);
    if (typeof key.digest !== 'string' || !DIGEST.test(key.digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    // Four atomic steps in this order; see the header for why the order is safe.
    if ((await this.#redis.exists(this.#acct(key.account))) !== 1) return false;
    const index = this.#keyId(key.id);
    const claimed = await this.#redis.tgClaimKeyId(index, key.digest);
    if (claimed === -1) return false;
    const now = String(Date.now());
    const record = this.#key(key.digest);
    const created = await this.#redis.tgCreateKey(record, key.id, key.account, key.digest, now, '1');
    if (created === -1) {
      if (claimed === 1) await this.#redis.tgReleaseKeyId(index, key.digest);
      return false;
    }
    if (created === 1) {
      // Only the request that created the record writes the key's controls (a seed repeating
      // an existing key never touches them).
      const init = await this.#initKey(key.id, key.account, key.digest, now, key.last4 ?? null, key.controls ?? defaultControls(), audit);
      if (init === -2) {
        await this.#redis.tgDropKeyRecord(record, key.id);
        if (claimed === 1) await this.#redis.tgReleaseKeyId(index, key.digest);
        throw new TeamNotFoundError(key.controls!.team!);
      }
      return true;
    }
    // The record was there: a key from before per-key controls gets its hash, and one whose
    // creation stopped before its hash (a crash, a fault) gets the one asked for now.
    const h = await this.#redis.hgetall(record);
    if (h.account === key.account) {
      const resumed = h.own === '1';
      const init = await this.#initKey(key.id, key.account, key.digest, h.created_at ?? now, key.last4 ?? null,
        resumed ? key.controls ?? defaultControls() : defaultControls(), resumed ? audit : undefined);
      if (resumed && init === -2) throw new TeamNotFoundError(key.controls!.team!);
      return resumed && init === 1;
    }
    return false;
  }

  #initKey(id: string, account: string, digest: string, createdAt: string, last4: string | null, c: KeyControls, audit?: AuditEvent): Promise<unknown> {
    const acct = this.#acct(account);
    const outbox = outboxOf(acct);
    return this.#audit.around(outbox, audit, (event) => this.#redis.tgKeyInit(`${acct}:key:${id}`, `${acct}:keys`, acct, outbox, event, id, account, digest, createdAt, last4 ?? '',
      controlsJson(c), c.budget === null ? '' : integer(c.budget.units, 'budget.units'), c.budget?.period ?? '', teamId(c.team ?? null)));
  }

  async keyByDigest(digest: string): Promise<KeyRecord | undefined> {
    const h = await this.#redis.hgetall(this.#key(digest));
    if (h.id === undefined || h.account === undefined) return undefined;
    return indexedKey(digest, h, await this.#redis.hgetall(`${this.#acct(h.account)}:key:${h.id}`));
  }

  async keyWithAccount(digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined> {
    let h: Record<string, string>;
    if (known !== undefined) {
      // Sent together: the index and the key's hash (which alone decides whether the digest
      // is valid) are read in either order, as on a cluster, where they are on two nodes.
      const acct = this.#acct(known.account);
      const [index, both] = await Promise.all([
        this.#redis.hgetall(this.#key(digest)),
        this.#redis.tgKeyAndAccount(`${acct}:key:${known.id}`, acct) as Promise<KeyAndAccount>,
      ]);
      if (index.id === known.id && index.account === known.account) return found(indexedKey(digest, index, hashOf(both[0])), both);
      h = index;
    } else {
      h = await this.#redis.hgetall(this.#key(digest));
    }
    if (h.id === undefined || h.account === undefined) return undefined;
    const acct = this.#acct(h.account);
    const both = await this.#redis.tgKeyAndAccount(`${acct}:key:${h.id}`, acct) as KeyAndAccount;
    return found(indexedKey(digest, h, hashOf(both[0])), both);
  }

  async getKey(id: string): Promise<KeyRecord | undefined> {
    const digest = await this.#redis.get(this.#keyId(id));
    if (digest === null) return undefined;
    const k = await this.keyByDigest(digest);
    return k?.id === id ? k : undefined;
  }

  async listKeys(account: string): Promise<KeyRecord[] | undefined> {
    const acct = this.#acct(account);
    if ((await this.#redis.exists(acct)) !== 1) return undefined;
    const ids = await this.#redis.smembers(`${acct}:keys`);
    const hashes = await Promise.all(ids.map((id) => this.#redis.hgetall(`${acct}:key:${id}`)));
    const keys: KeyRecord[] = [];
    ids.forEach((id, i) => {
      const h = hashes[i]!;
      if (h.account !== undefined && h.ra === undefined) keys.push(keyRecord(id, h, undefined));
    });
    return keys.sort((a, b) => a.created_at - b.created_at || (a.id < b.id ? -1 : 1));
  }

  /**
   * The key's account-side hash exists (a key from before per-key controls gets one now); false
   * when the key turns out revoked. Until it has the hash, such a key's revocation is on its
   * digest record only: one that ran after `k` was read would be missing from the new hash (the
   * key listed, patched, rotated to a working plaintext), so its time is copied over. A
   * revocation still under way finishes the copy itself (revokeKey).
   */
  async #ensureKey(k: KeyRecord): Promise<boolean> {
    if ((await this.#initKey(k.id, k.account, k.digest, String(k.created_at), k.last4, k.controls)) !== 1) return true;
    const revokedAt = await this.#redis.hget(this.#key(k.digest), 'revoked_at');
    if (revokedAt === null) return true;
    const acct = this.#acct(k.account);
    await this.#redis.tgKeyRevoke(`${acct}:key:${k.id}`, outboxOf(acct), '', revokedAt);
    return false;
  }

  /**
   * One script merges the patch into the stored controls (never a read here and a write of the
   * whole controls there, which lost one of two racing PATCHes): see "Changes of controls".
   */
  async updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    const { set, del } = patchFields(patch);
    const team = patch.team === undefined ? '' : patch.team === null ? '-' : teamId(patch.team);
    for (let attempt = 0; attempt < CHECKED_PATCH_TRIES; attempt++) {
      // With a check, the version is read before the key: a change in between fails the patch's
      // version test, never passes it with controls the check did not see.
      const version = check === undefined ? '' : await this.#version(id);
      const k = await this.getKey(id);
      if (k === undefined || k.revoked_at !== null || !(await this.#ensureKey(k))) return undefined;
      check?.(k);
      const acct = this.#acct(k.account);
      const outbox = outboxOf(acct);
      const reply = await this.#audit.around(outbox, audit, (event) => this.#redis.tgKeyPatch(`${acct}:key:${id}`, acct, outbox, event,
        this.#revocations.channel, this.#revocations.instance, team, version ?? '0', String(set.length / 2), ...set, ...del));
      if (reply === -3) continue;
      if (reply === -2) throw new TeamNotFoundError(team);
      if (reply === null) return undefined;
      const updated = keyRecord(id, hashOf(reply as string[]), undefined);
      this.#revocations.emit({ kind: 'key-changed', digest: updated.digest });
      if (updated.previous !== null) this.#revocations.emit({ kind: 'key-changed', digest: updated.previous.digest });
      return updated;
    }
    throw new Error(`key ${id} kept changing while a checked PATCH was applied`);
  }

  /** The version (PATCH count) of key `id`'s account-side hash: '0' for none yet, undefined for no key. */
  async #version(id: string): Promise<string | undefined> {
    const digest = await this.#redis.get(this.#keyId(id));
    const account = digest === null ? null : await this.#redis.hget(this.#key(digest), 'account');
    if (account === null) return undefined;
    return (await this.#redis.hget(`${this.#acct(account)}:key:${id}`, 'v')) ?? '0';
  }

  async rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    const k = await this.getKey(id);
    if (k === undefined || k.revoked_at !== null || !(await this.#ensureKey(k))) return undefined;
    // The new digest's record first: until the account-side hash names it, it is not valid.
    const created = await this.#redis.tgCreateKey(this.#key(digest), id, k.account, digest, String(Date.now()), '1');
    if (created !== 1) return undefined;
    const previous = k.previous?.digest;
    const acct = this.#acct(k.account);
    const outbox = outboxOf(acct);
    const until = integer(previousUntil, 'previousUntil');
    const r = await this.#audit.around(outbox, audit, (event) => this.#redis.tgKeyRotate(`${acct}:key:${id}`, outbox, event, digest, last4, until,
      this.#revocations.channel, this.#revocations.message({ kind: 'key-changed', digest: k.digest }),
      previous === undefined ? '' : this.#revocations.message({ kind: 'key-changed', digest: previous })));
    if (r === 0 || r === null) return undefined;
    this.#revocations.emit({ kind: 'key-changed', digest: k.digest });
    if (previous !== undefined) this.#revocations.emit({ kind: 'key-changed', digest: previous });
    await this.#redis.set(this.#keyId(id), digest);
    const [, , dropped] = tuple(r, 3);
    if (typeof dropped === 'string' && dropped !== '') await this.#redis.del(this.#key(dropped));
    return { ...k, digest, last4, previous: { digest: k.digest, until: previousUntil } };
  }

  /** The hold script records the key's last use (see tgHold in metering.ts). */
  readonly holdRecordsKeyUse = true;

  async touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> {
    await Promise.all(uses.map((u) => this.#redis.tgKeyTouch(`${this.#acct(u.account)}:key:${u.id}`, integer(u.at, 'at'))));
  }

  async revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    const digest = await this.#redis.get(this.#keyId(id));
    if (digest === null) return undefined;
    const before = await this.keyByDigest(digest);
    if (before === undefined || before.id !== id) return undefined;
    // The account-side hash first: it alone decides whether a digest is valid. With
    // wait_replicas, both writes are confirmed by the replicas before the answer. The audit
    // event goes with it; a key without one records it with its digest record's revocation.
    const acct = this.#acct(before.account);
    const keyRecord = `${acct}:key:${id}`;
    const outbox = outboxOf(acct);
    const now = String(Date.now());
    const at = await this.#audit.around(outbox, audit, (event) => (this.#wait !== null
      ? this.#wait.eval(SCRIPTS.tgKeyRevoke.lua, [keyRecord, outbox], [event, now])
      : this.#redis.tgKeyRevoke(keyRecord, outbox, event, now)));
    const hashless = at === null || at === undefined;
    const record = this.#key(digest);
    const recordOutbox = outboxOf(record);
    const args = [id, String(Date.now()), this.#revocations.channel, this.#revocations.message({ kind: 'key', digest })] as const;
    const r = await this.#audit.around(recordOutbox, hashless ? audit : undefined, (event) => (this.#wait !== null
      ? this.#wait.eval(SCRIPTS.tgRevokeKey.lua, [record, recordOutbox], [event, ...args])
      : this.#redis.tgRevokeKey(record, recordOutbox, event, ...args)));
    if (r === null) return undefined;
    if (hashless) {
      // No account-side hash at first (a key from before per-key controls): a PATCH or rotation
      // may have created one since, without the revocation (see #ensureKey). It stands there too.
      const [, , , , , revokedAt] = tuple(r, 6);
      if (this.#wait !== null) await this.#wait.eval(SCRIPTS.tgKeyRevoke.lua, [keyRecord, outbox], ['', String(revokedAt)]);
      else await this.#redis.tgKeyRevoke(keyRecord, outbox, '', String(revokedAt));
    }
    const [newly, , , , , revoked] = tuple(r, 6);
    if (newly === 1) this.#revocations.emit({ kind: 'key', digest });
    const previous = before.previous?.digest;
    if (previous !== undefined && newly === 1) {
      await this.#redis.publish(this.#revocations.channel, this.#revocations.message({ kind: 'key', digest: previous }));
      this.#revocations.emit({ kind: 'key', digest: previous });
    }
    return { ...before, revoked_at: at === null || at === undefined ? Number(revoked) : Number(at) };
  }

  async revokeSession(sid: string, audit?: AuditEvent): Promise<void> {
    requireId('session id', sid);
    const sess = this.#sess(sid);
    const outbox = outboxOf(sess);
    const args = [String(Date.now()), this.#revocations.channel, this.#revocations.message({ kind: 'session', sid })] as const;
    const r = await this.#audit.around(outbox, audit, (event) => (this.#wait !== null
      ? this.#wait.eval(SCRIPTS.tgRevokeSession.lua, [sess, outbox], [event, ...args])
      : this.#redis.tgRevokeSession(sess, outbox, event, ...args)));
    if (r === 1) this.#revocations.emit({ kind: 'session', sid });
  }

  async isSessionRevoked(sid: string): Promise<boolean> {
    return (await this.#redis.exists(this.#sess(sid))) === 1;
  }

  async seed(accounts: readonly AccountConfig[]): Promise<void> {
    // Create-if-absent all the way down: existing accounts and keys are never changed.
    for (const a of accounts) {
      await this.createAccount({ id: a.id, plan: a.plan, balance_units: a.wallet_units });
      await Promise.all(seededKeys(a).map((key) => this.createKey({ id: keyIdOf(key.digest), account: a.id, ...key })));
    }
  }

  #acct(id: string): string { return `${this.prefix}{acct:${id}}`; }
  #key(digest: string): string { return `${this.prefix}{key:${digest}}`; }
  #keyId(id: string): string { return `${this.prefix}{keyid:${id}}`; }
  #sess(sid: string): string { return `${this.prefix}{sess:${sid}}`; }
  #plan(name: string): string { return `${this.prefix}{plan:${name}}`; }
  #accountIds(): string { return `${this.prefix}{accounts}`; }
}

const DIGEST = /^[0-9a-f]{64}$/;

/** A checked PATCH (updateKey's `check`) reads and checks the key again at most this often when other changes keep landing first. */
const CHECKED_PATCH_TRIES = 16;
