// The shared store: accounts, keys and revocations in Redis, so every gateway instance sees
// the same balances and revocations.
//
// Key layout (P = the configured prefix, default "tollgate:"; nothing outside it is touched):
//   P{acct:ID}            hash   id, plan, balance_units, created_at
//   P{acct:ID}:credits    set    idempotency keys of credits applied to that account
//   P{key:DIGEST}         hash   id, account, digest, created_at[, revoked_at]
//   P{keyid:ID}           string the digest of key ID (revocation is by id, lookup by digest)
//   P{sess:SID}           string revocation time of session SID
//   P{plan:NAME}          set    ids of accounts created on plan NAME (see accountsOnPlans)
//   P{acct:A}:key:ID      hash   key ID's controls and state, in its account's slot so the
//                                metering scripts read and charge its budget atomically with the
//                                wallet: account, digest (current), created_at, last4, c (the
//                                controls but the budget, JSON, as created), c:MEMBER (a control
//                                a PATCH set since, JSON; see "Changes of controls"), bu/bp
//                                (budget units/period), sp/su (spend: period id, units), pd/pu
//                                (digest a rotation replaced, valid until), lu (last used), ra
//                                (revoked at)
//   P{acct:A}:keys        set    ids of A's keys (for listing)
//   channel P + "revocations"  pub/sub: {"from": <instance id>, "r": <Revocation>}
//   metering (holds, settlements, usage windows): see metering.ts
//   usage records (P{usage:HOUR}, P{usage:index}): see records.ts
//   stored responses (P{resp:ACCOUNT}:...): see responses.ts
//
// Atomicity and Redis Cluster: every mutation is one Lua script, and every script touches keys
// of one `{...}` hash tag only, so the same scripts work on a cluster. A script's keys all begin
// with the same string up to and including the tag's closing brace (`P{acct:ID}` and
// `P{acct:ID}:credits`), so they hash alike whatever the prefix or the ID contain. While a
// cluster slot migrates, a script runs only if every key it names exists on the node, and fails
// mid-way (its earlier writes applied) if it touches a key it emptied itself: scripts therefore
// delete fields and keys only as their last access to that key (see metering.ts).
//
// Two operations span two tags and run as atomic steps in a safe order:
// - createKey: (1) EXISTS P{acct:ID}. Accounts are never deleted, so once it exists it stays.
//   (2) claim the index P{keyid:ID} -> DIGEST (set if absent). (3) create the record
//   P{key:DIGEST} if absent. The index is written before the record, so a usable key is always
//   revocable by id; a crash between (2) and (3) leaves an index that points at no record,
//   which revokeKey treats as unknown and a retry (or the next seed) completes. If the record
//   turns out to belong to another id, the index just claimed is removed again.
// - revokeKey: (1) GET P{keyid:ID}. An index is removed only while its digest's record carries
//   another id, so one that names a record of this id stays; and (2) the revoke script checks
//   that the record carries this id before it sets revoked_at (only if unset) and publishes.
// - createAccount: (1) SADD the id to P{plan:NAME}, (2) create P{acct:ID} if absent. An account
//   is always in its plan's index; an id there whose account is on another plan (a seed of an
//   existing account) is removed when accountsOnPlans meets it, one whose account does not
//   exist (yet: a creation in progress, or a crash between the steps) is skipped.
// Idempotency keys are kept for good (the set grows with the account's credits).
//
// Keys: a key's record lives in its account's hash (above); P{key:DIGEST} only leads a digest to
// its id and account. createKey writes the account-side hash BEFORE the digest record, so a key
// is never usable without its controls. A digest record with no account-side hash is a key from
// before per-key controls: it has none. A rotation adds the new digest's record, then moves
// digest -> pd in the account-side hash (one script), then points P{keyid:ID} at the new digest.
// Whether a digest is valid is decided by the account-side hash alone (its digest, or pd before
// pu), and revocation sets ra there before the digest record's revoked_at.
//
// Changes of controls (PATCH): each member a PATCH names is a field of its own (c:name,
// c:limits.max_concurrent, ...; the budget is bu/bp), written by one script that first checks
// the key is live (a digest, no ra): the merge happens in Redis, so two PATCHes racing from any
// instances both land, member by member, as if one ran after the other, and neither touches
// what a rotation or a revocation wrote. A reader takes `c`, then the c:MEMBER fields over it
// (see storedControls). No JSON is decoded in Lua: its cjson keeps 14 digits of a number.
// A record of members patched this way (a team's, later) takes the same fields and helpers.
//
// Revocations: the script that records a revocation also publishes it, so a revocation is
// announced if and only if it was newly recorded. This instance's listeners are called directly
// (before revokeKey/revokeSession resolve); messages from the subscription that carry this
// instance's id are ignored, so each listener hears each revocation exactly once. Pub/sub is
// fire-and-forget: an instance whose subscriber connection is down at that moment misses it,
// and so does this instance when the script applied but its reply was lost (the call rejected).
// When the subscriber connects again, listeners hear `missed` (see Revocation).
//
// Topologies (./connect.ts): one server, a Sentinel-managed primary, or a Cluster; the
// same scripts and keys on each. With waitReplicas (store.wait_replicas), settlements, credits
// and revocations are reported only once that many replicas have them (./wait.ts).
//
// Failure: every command is bounded by `commandTimeoutMs` (store.timeout_ms), and fails at once
// while the connection is down, before the first connect too: there is no offline queue, so a
// command the caller has seen fail is never sent later (a queued hold would otherwise land after
// its request got a 503 and lock credits for its TTL). ioredis reconnects by itself, with
// backoff, and the scripts are sent again (EVAL) on each new connection, so the store recovers
// without help. A store created while Redis is down is usable at once: its calls fail fast
// until Redis answers (`ready()` waits for that).
// A rejected command may still have been applied; retrying is safe (no script applies anything
// twice), though the retry may then answer "already there" (false, applied: false).

import { randomUUID } from 'node:crypto';
import { keyIdOf, sha256Hex } from '../../auth/keys.js';
import type { AccountConfig } from '../../config/types.js';
import { connect, keepSubscribed, retire, type RedisClient, type RedisTopology } from './connect.js';
import { METERING_SCRIPTS, RedisMetering, type MeteringScripts } from './metering.js';
import { ReplicaWait } from './wait.js';
import { RedisResponses } from './responses.js';
import type { ResponseChain } from '../response-chains.js';
import { RedisUsage, USAGE_SCRIPTS, type UsageScripts } from './records.js';
import { defaultControls, requireId, seededKeys, toControls } from '../rules.js';
import type {
  AccountRecord, CreditResult, HoldRequest, HoldResult, KeyControls, KeyPatch, KeyRecord, KeyWithAccount, KnownKey, NewKey, Revocation,
  SettleResult, Settlement, Store, UnsettleResult, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageTotals,
} from '../types.js';

export interface RedisStoreOptions {
  /** One Redis; ignored when `topology` is given. */
  url?: string;
  /** Where Redis is: one server, Sentinel or Cluster (./connect.ts). */
  topology?: RedisTopology;
  /** Replicas that must acknowledge each settlement, credit and revocation (WAIT); default 0. */
  waitReplicas?: number;
  /** How long that WAIT may take, in ms; below commandTimeoutMs (default: half of it). */
  waitTimeoutMs?: number;
  /** Prepended to every key and to the channel; default "tollgate:". */
  prefix?: string;
  /** Upper bound on each command, in ms; default 1000. */
  commandTimeoutMs?: number;
  /** Connection errors (ioredis emits them while reconnecting); ignored by default. */
  onError?: (err: Error) => void;
  /** Usage records are kept this many days after their time; default 90. */
  usageRetentionDays?: number;
}

type Reply = Promise<unknown>;

/** The Lua scripts, registered with defineCommand (EVALSHA, falling back to EVAL). */
interface Scripts extends MeteringScripts, UsageScripts {
  tgCreateAccount(acct: string, id: string, plan: string, balance: string, now: string): Reply;
  tgAddCredits(acct: string, credits: string, units: string, idempotencyKey: string): Reply;
  tgClaimKeyId(index: string, digest: string): Reply;
  tgReleaseKeyId(index: string, digest: string): Reply;
  tgCreateKey(record: string, id: string, account: string, digest: string, now: string): Reply;
  tgRevokeKey(record: string, id: string, now: string, channel: string, message: string): Reply;
  tgRevokeSession(session: string, now: string, channel: string, message: string): Reply;
  tgKeyInit(hash: string, set: string, id: string, account: string, digest: string, createdAt: string, last4: string, controls: string, bu: string, bp: string): Reply;
  tgKeyPatch(hash: string, channel: string, instance: string, pairs: string, ...fields: string[]): Reply;
  tgKeyRotate(hash: string, digest: string, last4: string, until: string, channel: string, m1: string, m2: string): Reply;
  tgKeyRevoke(hash: string, now: string): Reply;
  tgKeyTouch(hash: string, at: string): Reply;
  tgKeyAndAccount(hash: string, acct: string): Reply;
}

const SCRIPTS: Record<Exclude<keyof Scripts, keyof MeteringScripts | keyof UsageScripts>, { keys: number; lua: string }> = {
  // 1 created, 0 exists (unchanged).
  tgCreateAccount: { keys: 1, lua: `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'plan', ARGV[2], 'balance_units', ARGV[3], 'created_at', ARGV[4])
return 1` },
  // nil: no account; {applied, balance}: 1 applied, 0 key used before, -1 refused (below 0),
  // -2 refused (above 2^53-1); a refusal changes nothing and leaves the key unused (the rule
  // of creditRefusal in ../rules.ts). Balance and units are at most 2^53-1 in size, so the Lua
  // doubles are exact, and a sum that rounds can only round to above the limit, never below.
  // HINCRBY runs before SADD: if it fails, nothing changed. (The balance goes back as Redis
  // gave it, text or an integer reply: Lua's tostring keeps only 14 digits.)
  tgAddCredits: { keys: 2, lua: `
local current = redis.call('HGET', KEYS[1], 'balance_units')
if current == false then return false end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return {0, current} end
local balance, units = tonumber(current), tonumber(ARGV[1])
if units < 0 and balance + units < 0 then return {-1, current} end
if units > 0 and balance + units > 9007199254740991 then return {-2, current} end
local after = redis.call('HINCRBY', KEYS[1], 'balance_units', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return {1, after}` },
  // 1 claimed, 0 already this digest's, -1 taken by another digest.
  tgClaimKeyId: { keys: 1, lua: `
local cur = redis.call('GET', KEYS[1])
if cur == false then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
if cur == ARGV[1] then return 0 end
return -1` },
  tgReleaseKeyId: { keys: 1, lua: `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0` },
  // 1 created, 0 exists with this id, -1 exists with another id.
  tgCreateKey: { keys: 1, lua: `
local cur = redis.call('HGET', KEYS[1], 'id')
if cur == false then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'account', ARGV[2], 'digest', ARGV[3], 'created_at', ARGV[4])
  return 1
end
if cur == ARGV[1] then return 0 end
return -1` },
  // nil: unknown (or another id's record); {newly, id, account, digest, created_at, revoked_at}.
  tgRevokeKey: { keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'id', 'account', 'digest', 'created_at', 'revoked_at')
if r[1] ~= ARGV[1] then return false end
local newly = 0
if r[5] == false then
  redis.call('HSET', KEYS[1], 'revoked_at', ARGV[2])
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  r[5] = ARGV[2]
  newly = 1
end
return {newly, r[1], r[2], r[3], r[4], r[5]}` },
  // A key's hash and its account's (one slot), read at once: {fields, values, ...} twice.
  tgKeyAndAccount: { keys: 2, lua: `return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}` },
  // 1 created, 0 exists (unchanged). Adds the id to the account's key set either way.
  tgKeyInit: { keys: 2, lua: `
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'account', ARGV[2], 'digest', ARGV[3], 'created_at', ARGV[4], 'last4', ARGV[5], 'c', ARGV[6], 'sp', 'n', 'su', '0')
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'bu', ARGV[7], 'bp', ARGV[8]) end
return 1` },
  // A PATCH, merged here (see "Changes of controls" above): ARGV[3] field/value pairs to set
  // (ARGV[4..]), then fields to delete. Announced for the digest and the rotated-out one the
  // hash names now (a rotation may have run since the caller read the key). The hash after the
  // change (HGETALL), or nil when unknown or revoked.
  tgKeyPatch: { keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'digest', 'ra', 'pd')
if r[1] == false or r[2] ~= false then return false end
local last = 3 + 2 * tonumber(ARGV[3])
if last > 3 then redis.call('HSET', KEYS[1], unpack(ARGV, 4, last)) end
if #ARGV > last then redis.call('HDEL', KEYS[1], unpack(ARGV, last + 1)) end
redis.call('PUBLISH', ARGV[1], cjson.encode({ from = ARGV[2], r = { kind = 'key-changed', digest = r[1] } }))
if r[3] then redis.call('PUBLISH', ARGV[1], cjson.encode({ from = ARGV[2], r = { kind = 'key-changed', digest = r[3] } })) end
return redis.call('HGETALL', KEYS[1])` },
  // {1, digest rotated out, previous digest dropped or ''}, or 0 when unknown or revoked.
  tgKeyRotate: { keys: 1, lua: `
local r = redis.call('HMGET', KEYS[1], 'digest', 'ra', 'pd')
if r[1] == false or r[2] ~= false then return 0 end
redis.call('HSET', KEYS[1], 'pd', r[1], 'pu', ARGV[3], 'digest', ARGV[1], 'last4', ARGV[2])
redis.call('PUBLISH', ARGV[4], ARGV[5])
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[4], ARGV[6]) end
return {1, r[1], r[3] or ''}` },
  // The revocation time (the first one stands), or false for no such hash.
  tgKeyRevoke: { keys: 1, lua: `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local at = redis.call('HGET', KEYS[1], 'ra')
if at then return at end
redis.call('HSET', KEYS[1], 'ra', ARGV[1])
return ARGV[1]` },
  tgKeyTouch: { keys: 1, lua: `
local lu = redis.call('HMGET', KEYS[1], 'account', 'lu')
if lu[1] == false then return 0 end
local was = tonumber(lu[2] or '')
if was == nil or was < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'lu', ARGV[1]) end
return 1` },
  // 1 newly revoked, 0 already.
  tgRevokeSession: { keys: 1, lua: `
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0` },
};

interface Message { from: string; r: Revocation }

export class RedisStore implements Store {
  readonly prefix: string;
  readonly #redis: RedisClient & Scripts;
  readonly #sub: RedisClient;
  /** Waited writes (store.wait_replicas > 0), on connections of their own; else null. */
  readonly #wait: ReplicaWait | null;
  readonly #channel: string;
  /** Tells this instance's own messages apart from other instances'. */
  readonly #instance = randomUUID();
  readonly #listeners = new Set<(r: Revocation) => void>();
  /** The revocation channel's subscription: its latest attempt (see keepSubscribed). */
  readonly #subscribed: () => Promise<void>;
  readonly #timeout: number;
  readonly #metering: RedisMetering;
  readonly #responses: RedisResponses;
  readonly #usage: RedisUsage;
  /** Rejects on close(), so ready() cannot wait on a connection that will never come. */
  readonly #closing: Promise<never>;
  #markClosed: (err: Error) => void = () => {};
  #closed = false;

  constructor(options: RedisStoreOptions) {
    this.prefix = options.prefix ?? 'tollgate:';
    this.#channel = `${this.prefix}revocations`;
    const timeout = options.commandTimeoutMs ?? 1000;
    this.#timeout = timeout;
    this.#closing = new Promise<never>((_, reject) => { this.#markClosed = reject; });
    this.#closing.catch(() => {});
    const onError = options.onError ?? (() => {});
    const topology: RedisTopology = options.topology ?? { kind: 'url', url: options.url ?? 'redis://127.0.0.1:6379' };
    const connectTimeout = Math.max(2 * timeout, 2000);
    const waitReplicas = options.waitReplicas ?? 0;
    if (!Number.isSafeInteger(waitReplicas) || waitReplicas < 0) throw new RangeError('waitReplicas must be a non-negative integer');
    // Commands never queue: they fail at once while the connection is down, and are never
    // resent after a reconnect (the caller has seen them fail).
    const redis = connect(topology, { connectionName: 'tollgate', commandTimeout: timeout, connectTimeout });
    redis.on('error', onError);
    for (const [name, s] of [...Object.entries(SCRIPTS), ...Object.entries(METERING_SCRIPTS), ...Object.entries(USAGE_SCRIPTS)]) {
      redis.defineCommand(name, { numberOfKeys: s.keys, lua: s.lua });
    }
    this.#redis = redis as RedisClient & Scripts;
    if (waitReplicas > 0) {
      const waitMs = options.waitTimeoutMs ?? Math.max(1, Math.floor(timeout / 2));
      const durable = Array.from({ length: WAIT_CONNECTIONS }, () => {
        const c = connect(topology, { connectionName: 'tollgate-wait', commandTimeout: timeout, connectTimeout });
        c.on('error', onError);
        return c;
      });
      this.#wait = new ReplicaWait(durable, waitReplicas, waitMs, timeout);
    } else {
      this.#wait = null;
    }
    this.#metering = new RedisMetering(this.#redis, this.prefix, this.#wait);
    this.#usage = new RedisUsage(this.#redis, this.prefix, options.usageRetentionDays);
    this.#responses = new RedisResponses(this.#redis, this.prefix);

    // A subscriber connection runs no other command. Its SUBSCRIBE waits for the first connect
    // however long that takes; ioredis subscribes again after every reconnect.
    this.#sub = connect(topology, { connectionName: 'tollgate-sub', connectTimeout, subscriber: true });
    this.#sub.on('error', onError);
    this.#sub.on('message', (channel: string, text: string) => {
      if (channel !== this.#channel) return;
      const m = parseMessage(text);
      if (m !== undefined && m.from !== this.#instance) this.#emit(m.r);
    });
    this.#subscribed = keepSubscribed(this.#sub, this.#channel); // a failure is surfaced by ready()
    // A subscription re-established after a cut may have missed announcements meanwhile.
    let connected = false;
    this.#sub.on('ready', () => {
      if (connected) this.#emit({ kind: 'missed' });
      connected = true;
    });
  }

  /** The command connection, for other shared state of the same deployment (rate limits). */
  get client(): RedisClient {
    return this.#redis;
  }

  /**
   * Opens a store and waits until it is connected and hears other instances' revocations;
   * rejects (and closes it) when that takes longer than the connect timeout.
   */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const store = new RedisStore(options);
    try {
      await store.ready(Math.max(2 * store.#timeout, 2000));
    } catch (err) {
      await store.close();
      throw err;
    }
    return store;
  }

  /**
   * Resolves once subscribed to revocations and the command connection answers. Waits for a
   * Redis that is down to come back, for at most `ms` when given; rejects on close().
   */
  async ready(ms?: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const undo: Array<() => void> = [];
    const ends: Array<Promise<never>> = [this.#closing];
    if (ms !== undefined) {
      ends.push(new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`Redis did not answer within ${ms} ms`)), ms);
      }));
    }
    const connected = async (client: RedisClient) => {
      if (client.status === 'ready') return;
      await Promise.race([new Promise<void>((resolve) => { undo.push(() => client.off('ready', resolve)); client.once('ready', resolve); }), ...ends]);
    };
    try {
      await Promise.race([this.#subscribed(), ...ends]);
      await connected(this.#redis);
      await this.ping();
      for (const c of this.#wait?.clients ?? []) {
        await connected(c);
        await c.ping();
      }
    } finally {
      clearTimeout(timer);
      for (const u of undo) u();
    }
  }

  async createAccount(account: { id: string; plan: string; balance_units: number }): Promise<boolean> {
    requireId('account id', account.id);
    requireId('plan', account.plan);
    const balance = integer(account.balance_units, 'balance_units');
    if (account.balance_units < 0) throw new RangeError('balance_units must not be negative');
    // The plan index first: an account that exists is always found in it (see the header).
    await this.#redis.sadd(this.#plan(account.plan), account.id);
    const r = await this.#redis.tgCreateAccount(this.#acct(account.id), account.id, account.plan, balance, String(Date.now()));
    return r === 1;
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    return accountRecord(await this.#redis.hgetall(this.#acct(id)));
  }

  async addCredits(accountId: string, units: number, idempotencyKey: string): Promise<CreditResult | undefined> {
    requireId('idempotency key', idempotencyKey);
    const acct = this.#acct(accountId);
    const keys = [acct, `${acct}:credits`];
    const args = [integer(units, 'units'), idempotencyKey];
    const r = this.#wait !== null
      ? await this.#wait.eval(SCRIPTS.tgAddCredits.lua, keys, args)
      : await this.#redis.tgAddCredits(keys[0]!, keys[1]!, args[0]!, args[1]!);
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

  async createKey(key: NewKey): Promise<boolean> {
    requireId('key id', key.id);
    requireId('account id', key.account);
    if (typeof key.digest !== 'string' || !DIGEST.test(key.digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    // Four atomic steps in this order; see the header for why the order is safe.
    if ((await this.#redis.exists(this.#acct(key.account))) !== 1) return false;
    const index = this.#keyId(key.id);
    const claimed = await this.#redis.tgClaimKeyId(index, key.digest);
    if (claimed === -1) return false;
    const now = String(Date.now());
    if (claimed === 1) {
      // Only the request that claimed the id writes its controls (a seed repeating an existing
      // key never touches them).
      await this.#initKey(key.id, key.account, key.digest, now, key.last4 ?? null, key.controls ?? defaultControls());
    } else {
      // The id was this digest's already: a key from before per-key controls gets its hash.
      const h = await this.#redis.hgetall(this.#key(key.digest));
      if (h.account === key.account) await this.#initKey(key.id, key.account, key.digest, h.created_at ?? now, key.last4 ?? null, defaultControls());
    }
    const created = await this.#redis.tgCreateKey(this.#key(key.digest), key.id, key.account, key.digest, now);
    if (created === -1 && claimed === 1) await this.#redis.tgReleaseKeyId(index, key.digest);
    return created === 1;
  }

  #initKey(id: string, account: string, digest: string, createdAt: string, last4: string | null, c: KeyControls): Promise<unknown> {
    const acct = this.#acct(account);
    return this.#redis.tgKeyInit(`${acct}:key:${id}`, `${acct}:keys`, id, account, digest, createdAt, last4 ?? '',
      controlsJson(c), c.budget === null ? '' : integer(c.budget.units, 'budget.units'), c.budget?.period ?? '');
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
        this.#redis.tgKeyAndAccount(`${acct}:key:${known.id}`, acct) as Promise<[string[], string[]]>,
      ]);
      if (index.id === known.id && index.account === known.account) {
        return { key: indexedKey(digest, index, hashOf(both[0])), account: accountRecord(hashOf(both[1])) };
      }
      h = index;
    } else {
      h = await this.#redis.hgetall(this.#key(digest));
    }
    if (h.id === undefined || h.account === undefined) return undefined;
    const acct = this.#acct(h.account);
    const [k, a] = await this.#redis.tgKeyAndAccount(`${acct}:key:${h.id}`, acct) as [string[], string[]];
    return { key: indexedKey(digest, h, hashOf(k)), account: accountRecord(hashOf(a)) };
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
    await this.#redis.tgKeyRevoke(`${this.#acct(k.account)}:key:${k.id}`, revokedAt);
    return false;
  }

  /**
   * One script merges the patch into the stored controls (never a read here and a write of the
   * whole controls there, which lost one of two racing PATCHes): see "Changes of controls".
   */
  async updateKey(id: string, patch: KeyPatch): Promise<KeyRecord | undefined> {
    const { set, del } = patchFields(patch);
    const k = await this.getKey(id);
    if (k === undefined || k.revoked_at !== null || !(await this.#ensureKey(k))) return undefined;
    const reply = await this.#redis.tgKeyPatch(`${this.#acct(k.account)}:key:${id}`, this.#channel, this.#instance, String(set.length / 2), ...set, ...del);
    if (reply === null) return undefined;
    const updated = keyRecord(id, hashOf(reply as string[]), undefined);
    this.#emit({ kind: 'key-changed', digest: updated.digest });
    if (updated.previous !== null) this.#emit({ kind: 'key-changed', digest: updated.previous.digest });
    return updated;
  }

  async rotateKey(id: string, digest: string, last4: string, previousUntil: number): Promise<KeyRecord | undefined> {
    if (typeof digest !== 'string' || !DIGEST.test(digest)) throw new TypeError('digest must be 64 lowercase hex digits');
    const k = await this.getKey(id);
    if (k === undefined || k.revoked_at !== null || !(await this.#ensureKey(k))) return undefined;
    // The new digest's record first: until the account-side hash names it, it is not valid.
    const created = await this.#redis.tgCreateKey(this.#key(digest), id, k.account, digest, String(Date.now()));
    if (created !== 1) return undefined;
    const previous = k.previous?.digest;
    const r = await this.#redis.tgKeyRotate(`${this.#acct(k.account)}:key:${id}`, digest, last4, integer(previousUntil, 'previousUntil'),
      this.#channel, this.#message({ kind: 'key-changed', digest: k.digest }),
      previous === undefined ? '' : this.#message({ kind: 'key-changed', digest: previous }));
    if (r === 0 || r === null) return undefined;
    this.#emit({ kind: 'key-changed', digest: k.digest });
    if (previous !== undefined) this.#emit({ kind: 'key-changed', digest: previous });
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

  async revokeKey(id: string): Promise<KeyRecord | undefined> {
    const digest = await this.#redis.get(this.#keyId(id));
    if (digest === null) return undefined;
    const before = await this.keyByDigest(digest);
    if (before === undefined || before.id !== id) return undefined;
    // The account-side hash first: it alone decides whether a digest is valid. With
    // wait_replicas, both writes are confirmed by the replicas before the answer.
    const keyRecord = `${this.#acct(before.account)}:key:${id}`;
    const now = String(Date.now());
    const at = this.#wait !== null
      ? await this.#wait.eval(SCRIPTS.tgKeyRevoke.lua, [keyRecord], [now])
      : await this.#redis.tgKeyRevoke(keyRecord, now);
    const args = [id, String(Date.now()), this.#channel, this.#message({ kind: 'key', digest })] as const;
    const r = this.#wait !== null
      ? await this.#wait.eval(SCRIPTS.tgRevokeKey.lua, [this.#key(digest)], [...args])
      : await this.#redis.tgRevokeKey(this.#key(digest), ...args);
    if (r === null) return undefined;
    if (at === null || at === undefined) {
      // No account-side hash at first (a key from before per-key controls): a PATCH or rotation
      // may have created one since, without the revocation (see #ensureKey). It stands there too.
      const [, , , , , revokedAt] = tuple(r, 6);
      if (this.#wait !== null) await this.#wait.eval(SCRIPTS.tgKeyRevoke.lua, [keyRecord], [String(revokedAt)]);
      else await this.#redis.tgKeyRevoke(keyRecord, String(revokedAt));
    }
    const [newly, , , , , revoked] = tuple(r, 6);
    if (newly === 1) this.#emit({ kind: 'key', digest });
    const previous = before.previous?.digest;
    if (previous !== undefined && newly === 1) {
      await this.#redis.publish(this.#channel, this.#message({ kind: 'key', digest: previous }));
      this.#emit({ kind: 'key', digest: previous });
    }
    return { ...before, revoked_at: at === null || at === undefined ? Number(revoked) : Number(at) };
  }

  async revokeSession(sid: string): Promise<void> {
    requireId('session id', sid);
    const args = [String(Date.now()), this.#channel, this.#message({ kind: 'session', sid })] as const;
    const r = this.#wait !== null
      ? await this.#wait.eval(SCRIPTS.tgRevokeSession.lua, [this.#sess(sid)], [...args])
      : await this.#redis.tgRevokeSession(this.#sess(sid), ...args);
    if (r === 1) this.#emit({ kind: 'session', sid });
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

  // Metering: one script per call, all keys in the account's slot (see metering.ts).
  hold(h: HoldRequest): Promise<HoldResult | undefined> { return this.#metering.hold(h); }
  settle(s: Settlement): Promise<SettleResult | undefined> { return this.#metering.settle(s); }
  unsettle(s: Settlement): Promise<UnsettleResult | undefined> { return this.#metering.unsettle(s); }
  release(account: string, requestId: string): Promise<void> { return this.#metering.release(account, requestId); }
  accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    return this.#metering.accountUsage(account, day, month);
  }
  recordUsage(r: UsageRecord, writeId?: string): Promise<void> { return this.#usage.record(r, writeId); }
  usageReport(account: string | undefined, since: number): Promise<UsageReport> { return this.#usage.report(account, since); }
  usageRecords(q: UsageQuery): Promise<UsagePage> { return this.#usage.page(q); }
  putResponse(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void> {
    return this.#responses.put(account, id, value, parent, ttlMs);
  }
  getResponse(account: string, id: string): Promise<string | undefined> { return this.#responses.get(account, id); }
  responseChain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined> { return this.#responses.chain(account, id, maxDepth); }
  responseBytes(account: string): Promise<number> { return this.#responses.bytes(account); }
  deleteResponse(account: string, id: string): Promise<boolean> { return this.#responses.delete(account, id); }

  onRevoke(listener: (r: Revocation) => void): () => void {
    const wrapped = (r: Revocation) => listener(r);
    this.#listeners.add(wrapped);
    return () => { this.#listeners.delete(wrapped); };
  }

  async ping(): Promise<void> {
    await this.#redis.ping();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#listeners.clear();
    this.#markClosed(new Error('the store is closed'));
    await Promise.all([
      quit(this.#redis, this.#timeout), quit(this.#sub, this.#timeout),
      ...(this.#wait?.clients ?? []).map((c) => quit(c, this.#timeout)),
    ]);
  }

  #acct(id: string): string { return `${this.prefix}{acct:${id}}`; }
  #key(digest: string): string { return `${this.prefix}{key:${digest}}`; }
  #keyId(id: string): string { return `${this.prefix}{keyid:${id}}`; }
  #sess(sid: string): string { return `${this.prefix}{sess:${sid}}`; }
  #plan(name: string): string { return `${this.prefix}{plan:${name}}`; }

  #message(r: Revocation): string {
    const m: Message = { from: this.#instance, r };
    return JSON.stringify(m);
  }

  #emit(r: Revocation): void {
    for (const l of [...this.#listeners]) {
      try {
        l(r);
      } catch {
        // One listener's failure must not keep the others from hearing the revocation.
      }
    }
  }
}

/** QUIT, or drop the connection when it is down or Redis does not answer in time. */
async function quit(redis: RedisClient, ms: number): Promise<void> {
  retire(redis);
  if (redis.status === 'ready') {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error('QUIT timed out')), ms); });
    try {
      await Promise.race([redis.quit(), late]);
      // QUIT leaves a Sentinel client's failover detector (its sentinel connections) running.
      redis.disconnect();
      return;
    } catch {
      // fall through
    } finally {
      clearTimeout(timer);
    }
  }
  redis.disconnect();
}

const DIGEST = /^[0-9a-f]{64}$/;
/** Connections for waited writes (store.wait_replicas): each WAIT blocks its own until confirmed. */
const WAIT_CONNECTIONS = 4;

function integer(n: number, what: string): string {
  if (!Number.isSafeInteger(n)) throw new RangeError(`${what} must be a safe integer`);
  return String(n);
}

function tuple(reply: unknown, length: number): unknown[] {
  if (!Array.isArray(reply) || reply.length !== length) throw new Error(`unexpected reply from Redis: ${JSON.stringify(reply)}`);
  return reply;
}

/** The controls but the budget (which the scripts keep in bu/bp), as stored in `c`. */
function controlsJson(c: KeyControls): string {
  const { budget: _budget, ...rest } = c;
  return JSON.stringify(rest);
}

/** The field a patched member is kept in: c:name, c:limits.max_concurrent (see the header). */
const MEMBER = 'c:';

/**
 * A patch as the fields tgKeyPatch sets (field, JSON value, ...) and deletes: each member it
 * names, null included (a null field overrides what `c` holds), each limit on its own, and
 * the budget as bu/bp (deleted when null).
 */
export function patchFields(patch: KeyPatch): { set: string[]; del: string[] } {
  const set: string[] = [];
  const del: string[] = [];
  for (const [member, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    if (member === 'budget') {
      const b = value as KeyControls['budget'];
      if (b === null) del.push('bu', 'bp');
      else set.push('bu', integer(b.units, 'budget.units'), 'bp', b.period ?? '');
    } else if (member === 'limits') {
      for (const [name, limit] of Object.entries(value as Partial<KeyControls['limits']>)) {
        if (limit !== undefined) set.push(`${MEMBER}limits.${name}`, JSON.stringify(limit));
      }
    } else {
      set.push(`${MEMBER}${member}`, JSON.stringify(value));
    }
  }
  return { set, del };
}

/**
 * The controls (but the budget) a key's hash holds: `c` as created, with the c:MEMBER fields
 * of later PATCHes over it. Throws on a field that is not JSON.
 */
function storedControls(k: Record<string, string>): Record<string, unknown> {
  const c = JSON.parse(k.c ?? '') as Record<string, unknown>;
  if (typeof c !== 'object' || c === null) throw new TypeError('stored controls are not an object');
  const limits: Record<string, unknown> = { ...(c.limits as object) };
  for (const field of Object.keys(k)) {
    if (!field.startsWith(MEMBER)) continue;
    const member = field.slice(MEMBER.length);
    const value: unknown = JSON.parse(k[field]!);
    if (LIMIT_MEMBERS.has(member)) limits[member.slice(7)] = value;
    else if (KEY_MEMBERS.has(member)) c[member] = value;
  }
  return { ...c, limits };
}

const KEY_MEMBERS: ReadonlySet<string> = new Set(['name', 'models', 'expires_at', 'allowed_ips', 'metadata']);
const LIMIT_MEMBERS: ReadonlySet<string> = new Set(['limits.requests_per_minute', 'limits.tokens_per_minute', 'limits.max_concurrent']);

/** A key's record from its account-side hash; `revokedAt` from its digest record, if known. */
function keyRecord(id: string, k: Record<string, string>, revokedAt: string | undefined): KeyRecord {
  let parsed: unknown;
  try { parsed = storedControls(k); } catch { parsed = undefined; }
  const bu = k.bu === undefined ? null : Number(k.bu);
  const period = k.bp === 'day' || k.bp === 'week' || k.bp === 'month' ? k.bp : null;
  // Unreadable controls would be a key without restrictions: refuse it rather than serve it so.
  const controls = toControls({ ...(parsed as object), budget: bu === null ? null : { units: bu, period } });
  const ra = k.ra ?? revokedAt;
  return {
    id, account: k.account!, digest: k.digest!, created_at: Number(k.created_at),
    revoked_at: ra === undefined ? (controls === null ? 0 : null) : Number(ra),
    last4: k.last4 === undefined || k.last4 === '' ? null : k.last4,
    controls: controls ?? defaultControls(),
    previous: k.pd === undefined ? null : { digest: k.pd, until: Number(k.pu) },
    last_used_at: k.lu === undefined ? null : Number(k.lu),
    spent: { period: k.sp ?? 'n', units: Number(k.su ?? '0') },
  };
}

/** The key a digest's index entry `h` names, from the key's own hash `k`. */
function indexedKey(digest: string, h: Record<string, string>, k: Record<string, string>): KeyRecord {
  if (k.account === undefined) {
    // A key from before per-key controls: it has none.
    return {
      id: h.id!, account: h.account!, digest: h.digest ?? digest, created_at: Number(h.created_at),
      revoked_at: h.revoked_at === undefined ? null : Number(h.revoked_at), last4: null, controls: defaultControls(),
      previous: null, last_used_at: null, spent: { period: 'n', units: 0 },
    };
  }
  return keyRecord(h.id!, k, h.revoked_at);
}

function accountRecord(h: Record<string, string>): AccountRecord | undefined {
  if (h.id === undefined) return undefined;
  return { id: h.id, plan: h.plan ?? '', balance_units: Number(h.balance_units), created_at: Number(h.created_at) };
}

/** An HGETALL's reply inside a script (fields and values in turn) as ioredis's hgetall gives it. */
function hashOf(flat: readonly string[]): Record<string, string> {
  const h: Record<string, string> = Object.create(null);
  for (let i = 0; i + 1 < flat.length; i += 2) h[flat[i]!] = flat[i + 1]!;
  return h;
}

function parseMessage(text: string): Message | undefined {
  let m: unknown;
  try { m = JSON.parse(text); } catch { return undefined; }
  if (typeof m !== 'object' || m === null) return undefined;
  const { from, r } = m as { from?: unknown; r?: { kind?: unknown; digest?: unknown; sid?: unknown } };
  if (typeof from !== 'string' || typeof r !== 'object' || r === null) return undefined;
  if (r.kind === 'key' && typeof r.digest === 'string') return { from, r: { kind: 'key', digest: r.digest } };
  if (r.kind === 'session' && typeof r.sid === 'string') return { from, r: { kind: 'session', sid: r.sid } };
  if (r.kind === 'key-changed' && typeof r.digest === 'string') return { from, r: { kind: 'key-changed', digest: r.digest } };
  return undefined;
}
