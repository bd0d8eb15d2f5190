// One store interface, two implementations: `memory` (embedded; durable with a journal when
// `store.path` is set; ./memory/) and `redis` (shared by gateway instances; ./redis/). The store
// is authoritative for accounts, keys and sessions; the config only seeds what is absent.
// This file is the interface and its records; the rules both stores apply, and a key's controls
// (their shape and rules), are ./rules.ts, and the usage records, reports and totals reads
// ./usage-types.ts, both re-exported here so callers outside the store import one module.

import type { AccountConfig } from '../config/types.js';
import type { ResponseChain } from './response-chains.js';
import type { BudgetPeriod, BudgetPeriods, KeyControls, KeyPatch, TeamPatch, TeamRecord, TeamSettings } from './rules.js';
import type { AlertOutbox } from './alerts.js';
import type { EndUserLedger } from './end-users.js';
import type { HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from './usage-types.js';

export {
  KEY_PRIORITIES, MAX_UNITS, TEAM_ID, TeamNotFoundError, addSpend, applyPatch, applyTeamPatch, creditRefusal, defaultControls, defaultTeamSettings,
  periodId, requireId, requireRequestId, seededKeys, spentIn,
} from './rules.js';
export type { EndUserHold, EndUserHoldResult, EndUserLedger, EndUserSettlement } from './end-users.js';
export type { BudgetPeriod, BudgetPeriods, KeyControls, KeyLimits, KeyPatch, TeamPatch, TeamRecord, TeamSettings } from './rules.js';
export type {
  HourTotals, HourlyQuery, TopQuery, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport, UsageSums,
} from './usage-types.js';

export interface AccountRecord {
  id: string;
  plan: string;
  /** Wallet balance in integer units. */
  balance_units: number;
  /** Unix milliseconds. */
  created_at: number;
}

export interface KeyRecord {
  /** Public id (safe to show and log), e.g. key_<16 hex>. */
  id: string;
  account: string;
  /** SHA-256 of the current plaintext key, lowercase hex. The plaintext is never stored. */
  digest: string;
  created_at: number;
  /** Unix milliseconds, or null while valid. */
  revoked_at: number | null;
  /** The last 4 characters of the plaintext (null when the store was given only a digest). */
  last4: string | null;
  controls: KeyControls;
  /** The digest a rotation replaced, usable until `until` (Unix ms). */
  previous: { digest: string; until: number } | null;
  /** Unix ms of the last request seen (written coalesced, so up to a few seconds late). */
  last_used_at: number | null;
  /** Units spent in period `period` (see spentIn). */
  spent: { period: string; units: number };
}

/** A key's record as createKey takes it. */
export interface NewKey {
  id: string;
  account: string;
  digest: string;
  last4?: string | null;
  controls?: KeyControls;
}

export interface CreditResult {
  /** False when this idempotency key was used before, or the credit was refused: nothing changed. */
  applied: boolean;
  balance_units: number;
  /**
   * Set when the credit was refused and nothing changed (the idempotency key stays unused):
   * `below_zero` for a deduction larger than the balance, `above_max` for a credit that would
   * take the balance above MAX_UNITS.
   */
  refused?: 'below_zero' | 'above_max';
}

/** Request, token and unit totals of one window (a UTC day or month). */
export interface UsageTotals {
  requests: number;
  tokens: number;
  units: number;
}

export type QuotaCode = 'requests_per_day' | 'tokens_per_day' | 'units_per_month';

export interface Quotas {
  requests_per_day: number | null;
  tokens_per_day: number | null;
  units_per_month: number | null;
}

/** A worst-case reservation made before calling the upstream. */
export interface HoldRequest {
  account: string;
  /** The request's id: holds and settlements are keyed by it. */
  requestId: string;
  /** Worst-case cost in integer units (>= 0). */
  units: number;
  /** The hold expires after this long unless settled or released (a crashed instance's holds). */
  ttlMs: number;
  /** UTC windows the request falls in: 'YYYY-MM-DD' and 'YYYY-MM'. */
  day: string;
  month: string;
  /** The plan's quotas; null = unlimited. */
  quotas: Quotas;
  /**
   * The developer key making the request: its budget, and its team's (the team the key names
   * in the store at the hold, CONTRACT section 15), are held with the wallet, in the same step.
   */
  key?: { id: string; periods: BudgetPeriods };
}

/**
 * The outcome of a hold. Refused when available units (balance minus open, unexpired holds)
 * are below `units` (insufficient_credits), or when a quota is already used up:
 * requests_per_day counts settled requests of the day plus open holds; tokens_per_day and
 * units_per_month count settled usage. With a key whose budget cannot cover `units` (its units
 * minus its spend this period minus its open holds): budget_exceeded. Quotas come first, then
 * the budget, then the wallet. A refusal changes nothing.
 */
export type HoldResult =
  /** `team`: the team whose budget the hold counts against (its settlement names it). */
  | { ok: true; available_units: number; team?: string }
  | { ok: false; code: 'insufficient_credits'; available_units: number }
  | { ok: false; code: 'quota_exceeded'; quota_code: QuotaCode; available_units: number }
  | {
    ok: false; code: 'budget_exceeded'; available_units: number; budget_remaining_units: number; budget_period: BudgetPeriod;
    /** Which budget refused: the key's is checked before its team's. */
    budget_scope: 'key' | 'team';
  };

export interface Settlement {
  account: string;
  requestId: string;
  /** The actual cost in integer units (>= 0). */
  units: number;
  promptTokens: number;
  completionTokens: number;
  day: string;
  month: string;
  /**
   * The key of the request, with the periods of its hold: its spend is added in the same step;
   * `team`, the team its hold counted against (HoldResult), likewise.
   */
  key?: { id: string; periods: BudgetPeriods; team?: string };
}

export interface SettleResult {
  /** False when this request id was settled before: nothing changed, the first result stands. */
  applied: boolean;
  /**
   * Units actually debited: `units`, or less if the balance could not cover it (never below 0).
   * For a repeat, what the first settlement debited (0 once it was undone: see unsettle).
   */
  charged_units: number;
  balance_units: number;
  available_units: number;
  /**
   * With a key, when applied: its budget and its spend after this settlement, as the store
   * holds them (alerts compare them with the charge to see a threshold crossed: ../alerts/).
   */
  key?: { budget: { units: number; period: BudgetPeriod } | null; spent: { period: string; units: number } };
  /**
   * With a team (Settlement.key.team, while its account still has it), when applied: the team's
   * budget and spend after this settlement, read in the same step, as for `key`.
   */
  team?: { id: string; budget: { units: number; period: BudgetPeriod } | null; spent: { period: string; units: number } };
}

/**
 * The outcome of undoing a request's settlement (Store.unsettle): `refunded`, it had landed and
 * what it debited is given back; `fenced`, it had not, and now never will; `repeat`, it was
 * undone before. Either way the request id now counts as settled, with nothing debited.
 */
export interface UnsettleResult {
  outcome: 'refunded' | 'fenced' | 'repeat';
  /** Units given back to the balance (0 unless refunded). */
  refunded_units: number;
}

/** A page of accounts in id order; `cursor` from a previous page's next_cursor. */
export interface AccountsQuery { limit: number; cursor?: string; prefix?: string }

export interface AccountsPage { accounts: AccountRecord[]; next_cursor: string | null }

/**
 * A revocation or a change of a key's controls, seen by every instance sharing the store:
 * caches drop what they hold for the digest.
 */
/**
 * What a store announces to this instance's listeners: a key revoked or changed (its controls or
 * digest), a session revoked; or `missed`: announcements of a span may have been lost (the
 * store's subscription was re-established), so what was learnt before may be out of date.
 */
export type Revocation = { kind: 'key'; digest: string } | { kind: 'session'; sid: string } | { kind: 'key-changed'; digest: string } | { kind: 'missed' };

export interface KeyWithAccount {
  key: KeyRecord;
  account: AccountRecord | undefined;
  /** The team the key names, read with it (undefined: none, or not in the key's account). */
  team?: TeamRecord;
}

/** What creating a team came to. */
export type TeamCreated = 'created' | 'team_exists' | 'account_not_found';
/** What deleting a team came to: `in_use` while live keys name it (nothing changed). */
export type TeamDeleted = 'deleted' | 'in_use' | 'not_found';

/** Where a digest led when it was last looked up: its key's id and account. */
export interface KnownKey {
  id: string;
  account: string;
}

/**
 * One write through the admin API or the console (CONTRACT section 12): who (`actor`: the
 * SSO subject or "admin-token"), in which role, what (`action`: "METHOD route", e.g.
 * "POST /admin/accounts/{id}/credits"), on what (`target`: the account or key id, or ""),
 * when (Unix ms), from which address, and the request's id.
 */
export interface AuditEvent {
  at: number;
  actor: string;
  role: string;
  action: string;
  target: string;
  ip: string;
  request_id: string;
}

export interface AuditQuery {
  /** Only events at or after this time (Unix ms). */
  since: number;
  /** 1 to 1000. */
  limit: number;
  /** A next_cursor of an earlier page of the same query. */
  cursor?: string;
}

/** One page of the audit log, newest first; next_cursor null on the last page. */
export interface AuditPage { events: AuditEvent[]; next_cursor: string | null }

/**
 * The writes of the admin API and the console take their audit event (CONTRACT sections 12 and
 * 21): the store records it in the same step as the write (memory: the same journal entry;
 * Redis: the same script, in the write's own slot: ./redis/audit.ts), so that a fault leaves
 * both or neither. It is recorded when the write is answered as done, a write that changed
 * nothing but counts as done included (a repeated credit, a second revocation), and never for
 * a refusal (false, undefined, a refused credit, TeamNotFoundError, a team in use). A write
 * made of several steps (a key's creation or rotation on Redis) records it with the step that
 * makes the write visible.
 */
export interface Store {
  /** Creates an account (0 <= balance_units <= MAX_UNITS); false when one with that id exists (nothing changes then). */
  createAccount(account: { id: string; plan: string; balance_units: number }, audit?: AuditEvent): Promise<boolean>;
  getAccount(id: string): Promise<AccountRecord | undefined>;
  /**
   * Adds `units` (negative deducts) to the balance, at most once per idempotency key and
   * account. Undefined when the account does not exist. A repeated key returns applied: false
   * and the current balance. A credit that would take the balance below 0 or above MAX_UNITS
   * is refused atomically (`refused` set, nothing changed, the key not used).
   */
  addCredits(accountId: string, units: number, idempotencyKey: string, audit?: AuditEvent): Promise<CreditResult | undefined>;
  /**
   * For each plan named, one stored account on it (plan -> account id); plans no stored account
   * uses are absent. Answers from an index kept as accounts are created, never a scan of all keys.
   */
  accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>>;
  /** Stores a new key; false when the account does not exist; TeamNotFoundError when its team is not the account's. */
  createKey(key: NewKey, audit?: AuditEvent): Promise<boolean>;
  /** The key whose current digest, or previous digest (rotation; check `previous.until`), this is. */
  keyByDigest(digest: string): Promise<KeyRecord | undefined>;
  /**
   * keyByDigest and the key's account (undefined when the account does not exist), read
   * together: what authenticating a key needs. On Redis two round trips: the digest's index,
   * then the key and its account together (they share a slot). With `known` (the key id and
   * account the digest led to before: a cached key looked up again), Redis reads the index and
   * the key with its account at once, one round trip, and falls back to the two when the index
   * no longer leads there.
   */
  keyWithAccount(digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined>;
  getKey(id: string): Promise<KeyRecord | undefined>;
  /** The account's keys that are not revoked, oldest first; undefined when the account does not exist. */
  listKeys(account: string): Promise<KeyRecord[] | undefined>;
  /**
   * Replaces the given controls of a live key; undefined when unknown or revoked. Announced as
   * key-changed. TeamNotFoundError (nothing changed) when `patch.team` is not of its account.
   * `check`, when given, sees the key as the patch will find it (its controls at the moment the
   * patch applies, also when another PATCH races it) and may throw to refuse the patch, which
   * then changes nothing: a console member's PATCH may only narrow (../admin/narrowing.ts).
   */
  updateKey(id: string, patch: KeyPatch, audit?: AuditEvent, check?: (current: KeyRecord) => void): Promise<KeyRecord | undefined>;
  /**
   * Gives a live key a new digest; the current one stays usable until `previousUntil` (a
   * previous digest still in its grace is dropped at once). Undefined when unknown or revoked,
   * or when the digest is taken.
   */
  rotateKey(id: string, digest: string, last4: string, previousUntil: number, audit?: AuditEvent): Promise<KeyRecord | undefined>;
  /**
   * Whether a hold with a key (HoldRequest.key) that succeeds records the key's last use, at
   * the hold's time, as touchKeys would: the caller then need not touch the key for it. Redis:
   * yes (in the hold's own script). The memory store: no (its holds are not journaled).
   */
  readonly holdRecordsKeyUse: boolean;
  /** Records when keys were last used (coalesced by the caller); a later time only ever wins. */
  touchKeys(uses: ReadonlyArray<{ account: string; id: string; at: number }>): Promise<void>;
  // ---- teams (CONTRACT section 15) ---------------------------------------------------------
  /** Creates team `id` in `account`; team ids are unique across the store. */
  createTeam(account: string, id: string, settings: TeamSettings, audit?: AuditEvent): Promise<TeamCreated>;
  getTeam(id: string): Promise<TeamRecord | undefined>;
  /** The account's teams, oldest first; undefined when the account does not exist. */
  listTeams(account: string): Promise<TeamRecord[] | undefined>;
  /** Changes the members `patch` names (a budget change keeps what the period spent); undefined when unknown. */
  updateTeam(id: string, patch: TeamPatch, audit?: AuditEvent): Promise<TeamRecord | undefined>;
  /** Deletes a team no live key names. */
  deleteTeam(id: string, audit?: AuditEvent): Promise<TeamDeleted>;
  /** Revokes a key by its id; undefined when unknown. Revoking twice keeps the first time. */
  revokeKey(id: string, audit?: AuditEvent): Promise<KeyRecord | undefined>;
  revokeSession(sid: string, audit?: AuditEvent): Promise<void>;
  isSessionRevoked(sid: string): Promise<boolean>;
  /**
   * Seeds accounts and their keys from the config: each is created when absent and never
   * overwritten (the store is authoritative once it has them).
   */
  seed(accounts: readonly AccountConfig[]): Promise<void>;
  // ---- metering ------------------------------------------------------------------------
  /** Reserves worst-case units atomically with the quota checks; undefined for an unknown account. */
  hold(h: HoldRequest): Promise<HoldResult | undefined>;
  /**
   * Debits the actual cost once per request id, releases its hold (if still open), and adds the
   * request to the day's and month's usage (requests + 1, tokens = prompt + completion,
   * units = charged). A repeated request id changes nothing and returns applied: false with the
   * current balances. Durable before it resolves.
   */
  settle(s: Settlement): Promise<SettleResult | undefined>;
  /**
   * Undoes the settlement `s` (the same one that was sent to settle()), whether or not it
   * landed, in one atomic step: one that landed is given back (its charge to the balance and
   * the key's spend in the same period, its request, tokens and units taken out of the usage
   * windows); one that did not is fenced (the request id is marked settled with nothing, so the
   * settlement, should it still arrive, applies nothing). For a request answered 503 after its
   * settle's outcome stayed unknown: a 503 is never debited. Idempotent; undefined for an
   * unknown account. The hold is left to release().
   */
  unsettle(s: Settlement): Promise<UnsettleResult | undefined>;
  /** Drops a hold without charging (a request that failed before any output); no-op if none. */
  release(account: string, requestId: string): Promise<void>;
  /** The budgets of keys' end users (CONTRACT section 20, ./end-users.ts). */
  readonly endUsers: EndUserLedger;
  /** Units held by open, unexpired holds, and the usage of the given windows. */
  accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }>;
  /**
   * Appends one usage record (memory: day files beside the journal; redis: hourly streams),
   * kept until `retention_days` after its time (./usage-records.ts, ./memory/usage-files.ts, ./redis/records.ts).
   * `writeId`, unique to this record: a write repeated with the same id after a failure whose
   * outcome was unknown appends nothing if the first one landed (both stores remember write ids
   * for WRITE_MARK_MS, a few minutes). The record's usage totals (usageHourly, usageTop) are
   * counted with it, in the same step: once.
   */
  recordUsage(r: UsageRecord, writeId?: string): Promise<void>;
  /**
   * Totals of the records since `since` (Unix ms), for one account or all: from the totals for
   * every whole hour, and from the records for the part of since's hour after it (./usage-report.ts).
   */
  usageReport(account: string | undefined, since: number): Promise<UsageReport>;
  /** One page of records, oldest bucket first, each record once across pages. */
  usageRecords(q: UsageQuery): Promise<UsagePage>;
  /**
   * Totals of every hour starting in [since, until) (at most 31 days), zeros included, oldest
   * first: kept as records are written (each record counted once, also when its write is
   * repeated with the same writeId), never summed from records at read time.
   */
  usageHourly(q: HourlyQuery): Promise<HourTotals[]>;
  /** The `limit` ids with the most units over the hours of [since, until) (units desc, then id asc). */
  usageTop(q: TopQuery): Promise<TopRow[]>;
  /**
   * Sums of the totals kept as records are written, never of records read (rows by day, then
   * values). RangeError for a range the totals do not answer (see checkTotalsQuery).
   */
  usageTotals(q: TotalsQuery): Promise<TotalsRow[]>;
  /** Usage records this store has read back so far (pages, exports, reports' partial hours, counts on open). */
  usageRecordsRead(): number;
  /** Accounts in id order (byte order), `limit` at a time, optionally those whose id starts with `prefix`. */
  listAccounts(q: AccountsQuery): Promise<AccountsPage>;

  // ---- stored responses (Responses API, store: true): chains, see ./response-chains.ts ----
  /**
   * Keeps `value` (the response's own part) as response `id` of `account` for `ttlMs`,
   * continuing response `parent` (null: none), whose ancestors then live at least as long. Each
   * account sees only its own.
   */
  putResponse(account: string, id: string, value: string, parent: string | null, ttlMs: number): Promise<void>;
  /** The value kept for `id` of `account`, unless expired or deleted. */
  getResponse(account: string, id: string): Promise<string | undefined>;
  /**
   * The values of `id`'s conversation, first response first, and the account's stored bytes;
   * undefined when `id` is unknown, expired or deleted, or an ancestor is missing, or the chain
   * has more than `maxDepth` responses.
   */
  responseChain(account: string, id: string, maxDepth: number): Promise<ResponseChain | undefined>;
  /** Bytes the account's stored responses hold (./response-chains.ts). */
  responseBytes(account: string): Promise<number>;
  /** Deletes response `id` of `account`; false when there was none (or it was deleted). */
  deleteResponse(account: string, id: string): Promise<boolean>;

  /** The alerts outbox (./alerts.ts): events, their deliveries and leases, wallet.low flags. */
  readonly alerts: AlertOutbox;
  // ---- audit log (CONTRACT section 12): ./memory/audit.ts, ./redis/audit.ts ----------
  /**
   * Appends one event with no store write of its own (a sign-in, a config check or reload):
   * durable before it resolves (memory with a path: in the journal).
   */
  appendAudit(e: AuditEvent): Promise<void>;
  /** One page of events, newest first. A cursor this store did not give is a RangeError. */
  listAudit(q: AuditQuery): Promise<AuditPage>;

  /** Calls `listener` on every revocation, by this instance or (redis) any other one. */
  onRevoke(listener: (r: Revocation) => void): () => void;
  /** Resolves when the store answers; rejects when it is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
