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
//   P{team:ID}            string "<ms>|<account>": the account of team ID (teams.ts; a team's
//                                fields are t:ID:<member> in its account's hash, and a key's
//                                team is tm in the key's hash)
//   P{accounts}           zset   every account id, score 0 (listAccounts pages it by id: ZRANGEBYLEX)
//   P{accounts}:filled    string set once the ids of accounts from before the zset were added
//   P{audit}              stream the audit log; P{audit}:outboxes, P{audit}:moved and each
//                                slot's outbox (P{acct:ID}:audit, P{sess:SID}:audit, ...): see audit.ts
//   P{acct:A}:key:ID      hash   key ID's controls and state, in its account's slot so the
//                                metering scripts read and charge its budget atomically with the
//                                wallet: account, digest (current), created_at, last4, c (the
//                                controls but the budget, JSON, as created), c:MEMBER (a control
//                                a PATCH set since, JSON; see "Changes of controls" in ./keys.ts),
//                                bu/bp (budget units/period), sp/su (spend: period id, units), pd/pu
//                                (digest a rotation replaced, valid until), lu (last used), ra
//                                (revoked at)
//   P{acct:A}:keys        set    ids of A's keys (for listing)
//   channel P + "revocations"  pub/sub: {"from": <instance id>, "r": <Revocation>} (./revocations.ts)
//   metering (holds, settlements, usage windows): see metering.ts
//   usage records (P{usage:HOUR}, P{usage:index}): see records.ts; their totals per hour
//   (P{usage:HOUR}:t:COLUMN[:GROUP], and the hour's count P{usage:HOUR}:t#V): see
//   totals-hours.ts; per day (P{usage:day:DAY}:...): see totals.ts
//   stored responses (P{resp:ACCOUNT}:...): see responses.ts
//   the alerts outbox (P{alerts}:..., P{acct:ID}:walarm): see alerts.ts
//
// Atomicity and Redis Cluster: every mutation is one Lua script, and every script touches keys
// of one `{...}` hash tag only, so the same scripts work on a cluster. A script's keys all begin
// with the same string up to and including the tag's closing brace (`P{acct:ID}` and
// `P{acct:ID}:credits`), so they hash alike whatever the prefix or the ID contain. While a
// cluster slot migrates, a script runs only if every key it names exists on the node, and fails
// mid-way (its earlier writes applied) if it touches a key it emptied itself: scripts therefore
// delete fields and keys only as their last access to that key (see metering.ts).
//
// The calls are split by what they touch: accounts, keys and sessions ./keys.ts (their Lua:
// ./scripts.ts), revocation announcements ./revocations.ts, metering ./metering.ts, usage records
// ./records.ts, stored responses ./responses.ts. This file opens the connections, registers the
// scripts and hands each call to its part.
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

import type { AccountConfig } from '../../config/types.js';
import { connect, retire, type RedisClient, type RedisTopology } from './connect.js';
import { RedisKeys } from './keys.js';
import { RedisMetering } from './metering.js';
import { METERING_SCRIPTS } from './metering-scripts.js';
import { ReplicaWait } from './wait.js';
import { RedisResponses } from './responses.js';
import { AUDIT_SCRIPTS, RedisAudit, type AuditScripts } from './audit.js';
import { RedisRevocations } from './revocations.js';
import type { ResponseChain } from '../response-chains.js';
import { RedisUsage, USAGE_SCRIPTS } from './records.js';
import { END_USER_SCRIPTS, RedisEndUsers, type EndUserScripts } from './end-users.js';
import { TOTALS_SCRIPTS } from './totals.js';
import { HOUR_SCRIPTS } from './totals-hours.js';
import { SCRIPTS, type Scripts } from './scripts.js';
import { RedisTeams } from './teams.js';
import { ALERT_KEYED_SCRIPTS, ALERT_SCRIPTS, RedisAlerts, type AlertScripts } from './alerts.js';
import type {
  AccountRecord, AuditEvent, AuditPage, AuditQuery, CreditResult, HoldRequest, HoldResult, KeyPatch, KeyRecord, KeyWithAccount, KnownKey, NewKey, Revocation,
  SettleResult, Settlement, Store, TeamCreated, TeamDeleted, TeamPatch, TeamRecord, TeamSettings, UnsettleResult, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageTotals,
  AccountsPage, AccountsQuery, HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow,
} from '../types.js';
import { checkRange, checkTop, checkTotalsQuery } from '../usage-totals.js';

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

export class RedisStore implements Store {
  readonly prefix: string;
  readonly #redis: RedisClient & Scripts;
  /** Waited writes (store.wait_replicas > 0), on connections of their own; else null. */
  readonly #wait: ReplicaWait | null;
  /** The revocation channel, its subscriber connection and this instance's listeners. */
  readonly #revocations: RedisRevocations;
  readonly #timeout: number;
  readonly #keys: RedisKeys;
  readonly #teams: RedisTeams;
  readonly #metering: RedisMetering;
  readonly #responses: RedisResponses;
  readonly #audit: RedisAudit;
  readonly #usage: RedisUsage;
  readonly endUsers: RedisEndUsers;
  readonly #onError: (err: Error) => void;
  /** Rejects on close(), so ready() cannot wait on a connection that will never come. */
  readonly #closing: Promise<never>;
  #markClosed: (err: Error) => void = () => {};
  #closed = false;

  constructor(options: RedisStoreOptions) {
    this.prefix = options.prefix ?? 'tollgate:';
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
    for (const [name, s] of [
      ...Object.entries(SCRIPTS), ...Object.entries(METERING_SCRIPTS), ...Object.entries(USAGE_SCRIPTS), ...Object.entries(ALERT_SCRIPTS), ...Object.entries(TOTALS_SCRIPTS),
      ...Object.entries(AUDIT_SCRIPTS), ...Object.entries(END_USER_SCRIPTS),
    ]) {
      redis.defineCommand(name, { numberOfKeys: s.keys, lua: s.lua });
    }
    // Scripts called with their count of keys first (a read's hours vary).
    for (const [name, s] of [...Object.entries(HOUR_SCRIPTS), ...Object.entries(ALERT_KEYED_SCRIPTS)]) redis.defineCommand(name, { lua: s.lua });
    this.#redis = redis as RedisClient & Scripts;
    this.#onError = onError;
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
    // On a Cluster each hour is its own slot: a script reads one hour's totals at a time.
    this.#usage = new RedisUsage(this.#redis, this.prefix, options.usageRetentionDays, topology.kind === 'cluster' ? 1 : 24);
    this.#responses = new RedisResponses(this.#redis, this.prefix);
    this.endUsers = new RedisEndUsers(this.#redis as unknown as RedisClient & EndUserScripts, this.prefix);
    this.#audit = new RedisAudit(this.#redis as unknown as RedisClient & AuditScripts, this.prefix, this.#wait);
    this.#revocations = new RedisRevocations(this.prefix, topology, connectTimeout, onError);
    this.#keys = new RedisKeys(this.#redis, this.prefix, this.#wait, this.#revocations, this.#audit);
    this.#teams = new RedisTeams(this.#redis, this.prefix, this.#keys, this.#revocations, this.#audit);
    this.alerts = new RedisAlerts(this.#redis as unknown as RedisClient & AlertScripts, this.prefix, (id) => this.#keys.getKey(id));
  }

  /** The alerts outbox (./alerts.ts). */
  readonly alerts: RedisAlerts;

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
      await Promise.race([this.#revocations.subscribed(), ...ends]);
      await connected(this.#redis);
      await this.ping();
      this.#usage.wholeInBackground(this.#onError);
      for (const c of this.#wait?.clients ?? []) {
        await connected(c);
        await c.ping();
      }
    } finally {
      clearTimeout(timer);
      for (const u of undo) u();
    }
  }

  // Accounts, keys and sessions: see keys.ts.
  createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean> { return this.#keys.createAccount(account, audit); }
  getAccount(id: string): Promise<AccountRecord | undefined> { return this.#keys.getAccount(id); }
  addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined> {
    return this.#keys.addCredits(accountId, units, idempotencyKey, audit);
  }
  accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>> { return this.#keys.accountsOnPlans(plans); }
  listAccounts(q: AccountsQuery): Promise<AccountsPage> { return this.#keys.listAccounts(q); }
  async createKey(key: NewKey, audit?: AuditEvent): Promise<boolean> {
    const created = await this.#keys.createKey(key, audit);
    // Keys that expire are indexed for the key.expiring sweep (./alerts.ts).
    const at = key.controls?.expires_at ?? null;
    if (created && at !== null) await this.alerts.indexExpiry(key.account, key.id, at);
    return created;
  }
  keyByDigest(digest: string): Promise<KeyRecord | undefined> { return this.#keys.keyByDigest(digest); }
  keyWithAccount(digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined> { return this.#keys.keyWithAccount(digest, known); }
  getKey(id: string): Promise<KeyRecord | undefined> { return this.#keys.getKey(id); }
  listKeys(account: string): Promise<KeyRecord[] | undefined> { return this.#keys.listKeys(account); }
  async updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined> {
    const key = await this.#keys.updateKey(id, patch, audit, check);
    if (key !== undefined && patch.expires_at !== undefined) await this.alerts.indexExpiry(key.account, key.id, key.controls.expires_at);
    return key;
  }
  rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined> {
    return this.#keys.rotateKey(id, digest, last4, previousUntil, audit);
  }

  // Teams: see teams.ts.
  createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated> { return this.#teams.createTeam(account, id, settings, audit); }
  getTeam(id: string): Promise<TeamRecord | undefined> { return this.#teams.getTeam(id); }
  listTeams(account: string): Promise<TeamRecord[] | undefined> { return this.#teams.listTeams(account); }
  updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined> { return this.#teams.updateTeam(id, patch, audit); }
  deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted> { return this.#teams.deleteTeam(id, audit); }

  /** The hold script records the key's last use (see tgHold in metering.ts). */
  readonly holdRecordsKeyUse = true;

  touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void> { return this.#keys.touchKeys(uses); }
  revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined> { return this.#keys.revokeKey(id, audit); }
  revokeSession(sid: string, audit?: AuditEvent): Promise<void> { return this.#keys.revokeSession(sid, audit); }
  isSessionRevoked(sid: string): Promise<boolean> { return this.#keys.isSessionRevoked(sid); }
  seed(accounts: readonly AccountConfig[]): Promise<void> { return this.#keys.seed(accounts); }

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
  async usageRecords(q: UsageQuery): Promise<UsagePage> {
    // A key's records all carry its account: the hours without that account's key are skipped.
    const keyAccount = q.keyId !== undefined && q.account === undefined ? (await this.#keys.getKey(q.keyId))?.account : undefined;
    return this.#usage.page(q, keyAccount);
  }
  async usageHourly(q: HourlyQuery): Promise<HourTotals[]> {
    checkRange(q.since, q.until);
    return this.#usage.hourly(q.since, q.until, q.account);
  }
  async usageTop(q: TopQuery): Promise<TopRow[]> {
    checkRange(q.since, q.until);
    checkTop(q.by, q.limit);
    return this.#usage.top(q.by, q.since, q.until, q.limit, q.account);
  }
  async usageTotals(q: TotalsQuery): Promise<TotalsRow[]> {
    checkTotalsQuery(q);
    return this.#usage.totals(q);
  }
  usageRecordsRead(): number { return this.#usage.reads.n; }
  putResponse(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void> {
    return this.#responses.put(account, id, value, parent, ttlMs);
  }
  getResponse(account: string, id: string): Promise<string | undefined> { return this.#responses.get(account, id); }
  responseChain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined> { return this.#responses.chain(account, id, maxDepth); }
  responseBytes(account: string): Promise<number> { return this.#responses.bytes(account); }
  deleteResponse(account: string, id: string): Promise<boolean> { return this.#responses.delete(account, id); }

  appendAudit(e: AuditEvent): Promise<void> { return this.#audit.append(e); }
  listAudit(q: AuditQuery): Promise<AuditPage> { return this.#audit.list(q); }

  onRevoke(listener: (r: Revocation) => void): () => void {
    return this.#revocations.listen(listener);
  }

  async ping(): Promise<void> {
    await this.#redis.ping();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#revocations.clear();
    this.#markClosed(new Error('the store is closed'));
    await Promise.all([
      quit(this.#redis, this.#timeout), quit(this.#revocations.sub, this.#timeout),
      ...(this.#wait?.clients ?? []).map((c) => quit(c, this.#timeout)),
    ]);
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

/** Connections for waited writes (store.wait_replicas): each WAIT blocks its own until confirmed. */
const WAIT_CONNECTIONS = 4;
