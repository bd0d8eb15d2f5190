// One store interface, two implementations: `memory` (embedded; durable with a journal when
// `store.path` is set) and `redis` (shared by gateway instances). The store is authoritative
// for accounts, keys and sessions; the config only seeds what is absent.

import type { AccountConfig } from '../config/types.js';

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
  /** SHA-256 of the plaintext key, lowercase hex. The plaintext is never stored. */
  digest: string;
  created_at: number;
  /** Unix milliseconds, or null while valid. */
  revoked_at: number | null;
}

/** The largest balance or amount a store keeps: beyond it integer arithmetic is not exact. */
export const MAX_UNITS = Number.MAX_SAFE_INTEGER;

/**
 * Why a credit of `units` to `balance` must be refused, if it must (both safe integers). The
 * Redis store's credit script applies the same rule.
 */
export function creditRefusal(balance: number, units: number): 'below_zero' | 'above_max' | undefined {
  if (units < 0 && balance + units < 0) return 'below_zero';
  // Compared without forming the sum, which could round above MAX_UNITS.
  if (units > 0 && balance > MAX_UNITS - units) return 'above_max';
  return undefined;
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
}

/**
 * The outcome of a hold. Refused when available units (balance minus open, unexpired holds)
 * are below `units` (insufficient_credits), or when a quota is already used up:
 * requests_per_day counts settled requests of the day plus open holds; tokens_per_day and
 * units_per_month count settled usage. A refusal changes nothing.
 */
export type HoldResult =
  | { ok: true; available_units: number }
  | { ok: false; code: 'insufficient_credits'; available_units: number }
  | { ok: false; code: 'quota_exceeded'; quota_code: QuotaCode; available_units: number };

export interface Settlement {
  account: string;
  requestId: string;
  /** The actual cost in integer units (>= 0). */
  units: number;
  promptTokens: number;
  completionTokens: number;
  day: string;
  month: string;
}

export interface SettleResult {
  /** False when this request id was settled before: nothing changed, the first result stands. */
  applied: boolean;
  /** Units actually debited: `units`, or less if the balance could not cover it (never below 0). */
  charged_units: number;
  balance_units: number;
  available_units: number;
}

/**
 * One metered request, kept for usage reports and exports (CONTRACT section 8): written once,
 * after its debit, with the debited figures; kept at least `usage.retention_days`.
 */
export interface UsageRecord {
  request_id: string;
  /** Unix milliseconds when the request finished (the API shows it as ISO-8601). */
  at: number;
  account: string;
  /** The developer key's id; null for a dashboard JWT (sessions are not keys). */
  key_id: string | null;
  /** The catalog slug served. */
  model: string;
  /** The configured provider name of the target that answered (or was tried last). */
  provider: string;
  /** The replica the request went to (its URL), or null when none applies (echo). */
  target: string | null;
  /** The route path, e.g. /v1/chat/completions. */
  route: string;
  /** The HTTP status the client got (499: it left before any was sent). */
  status: number;
  prompt_tokens: number;
  /** Prompt tokens the upstream read from its prompt cache (part of prompt_tokens or not, as it reports). */
  cached_tokens: number;
  completion_tokens: number;
  /** Units debited. */
  units: number;
  usage_source: 'upstream' | 'counted' | 'none';
  duration_ms: number;
  /** Until the first byte of the answer's content; null when none was sent. */
  ttft_ms: number | null;
}

/** Totals of a set of records. */
export interface UsageSums { requests: number; prompt_tokens: number; completion_tokens: number; units: number }

export interface UsageReport extends UsageSums {
  by_model: Record<string, UsageSums>;
  /** Per key id; requests of dashboard sessions (key_id null) count in the totals only. */
  by_key: Record<string, UsageSums>;
}

/** Which records a page holds. Times are Unix ms; `since` inclusive, `until` exclusive. */
export interface UsageQuery {
  account?: string;
  keyId?: string;
  model?: string;
  since: number;
  until?: number;
  limit: number;
  /** From a previous page's next_cursor; undefined for the first page. */
  cursor?: string;
}

export interface UsagePage {
  records: UsageRecord[];
  /** Null on the last page (as of this read: records written later go to a new query). */
  next_cursor: string | null;
}

/** A revocation, seen by every instance sharing the store. */
export type Revocation = { kind: 'key'; digest: string } | { kind: 'session'; sid: string };

export interface Store {
  /** Creates an account (0 <= balance_units <= MAX_UNITS); false when one with that id exists (nothing changes then). */
  createAccount(account: { id: string; plan: string; balance_units: number }): Promise<boolean>;
  getAccount(id: string): Promise<AccountRecord | undefined>;
  /**
   * Adds `units` (negative deducts) to the balance, at most once per idempotency key and
   * account. Undefined when the account does not exist. A repeated key returns applied: false
   * and the current balance. A credit that would take the balance below 0 or above MAX_UNITS
   * is refused atomically (`refused` set, nothing changed, the key not used).
   */
  addCredits(accountId: string, units: number, idempotencyKey: string): Promise<CreditResult | undefined>;
  /**
   * For each plan named, one stored account on it (plan -> account id); plans no stored account
   * uses are absent. Answers from an index kept as accounts are created, never a scan of all keys.
   */
  accountsOnPlans(plans: readonly string[]): Promise<Map<string, string>>;
  /** Stores a new key; false when the account does not exist. */
  createKey(key: { id: string; account: string; digest: string }): Promise<boolean>;
  keyByDigest(digest: string): Promise<KeyRecord | undefined>;
  /** Revokes a key by its id; undefined when unknown. Revoking twice keeps the first time. */
  revokeKey(id: string): Promise<KeyRecord | undefined>;
  revokeSession(sid: string): Promise<void>;
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
  /** Drops a hold without charging (a request that failed before any output); no-op if none. */
  release(account: string, requestId: string): Promise<void>;
  /** Units held by open, unexpired holds, and the usage of the given windows. */
  accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }>;
  /**
   * Appends one usage record (memory: day files beside the journal; redis: hourly streams),
   * kept until `retention_days` after its time (./usage-records.ts, ./redis-usage.ts).
   */
  recordUsage(r: UsageRecord): Promise<void>;
  /** Totals of the records since `since` (Unix ms), for one account or all. */
  usageReport(account: string | undefined, since: number): Promise<UsageReport>;
  /** One page of records, oldest bucket first, each record once across pages. */
  usageRecords(q: UsageQuery): Promise<UsagePage>;

  // ---- stored responses (Responses API, store: true) -------------------------------------
  /** Keeps `value` as response `id` of `account` for `ttlMs`; each account sees only its own. */
  putResponse(account: string, id: string, value: string, ttlMs: number): Promise<void>;
  /** The value kept for `id` of `account`, unless expired or deleted. */
  getResponse(account: string, id: string): Promise<string | undefined>;
  /** Deletes response `id` of `account`; false when there was none. */
  deleteResponse(account: string, id: string): Promise<boolean>;

  /** Calls `listener` on every revocation, by this instance or (redis) any other one. */
  onRevoke(listener: (r: Revocation) => void): () => void;
  /** Resolves when the store answers; rejects when it is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
