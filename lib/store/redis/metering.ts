// Metering for the Redis store: holds, settlements and usage windows (usage records:
// ./records.ts). Their Lua scripts are in ./metering-scripts.ts.
//
// Key layout (P = the store's prefix; ID = the account id):
//   P{acct:ID}:holds            hash  requestId -> "units:expiresAtMs[:keyId[<tab>teamId]]" (open
//                                     holds), and their sums: '#u' units, '#n' count, '#k:<keyId>'
//                                     units by key, '#t:<teamId>' units by team (the team the key
//                                     named at the hold), '#e' at or before the earliest expiry (OPEN_HOLDS);
//                                     expired holds are purged by the first hold/settle after
//                                     '#e'; the key expires a minute after its longest hold would
//                                     ('#x': when, in the gateways' clock; only a later one sets it)
//   P{acct:ID}:settled          hash  requestId -> units charged by its settlement, or 'x' once it
//                                     was undone (tgUnsettle: refunded, or fenced before it landed)
//   P{acct:ID}:settled:at       zset  requestId scored by settle time (ms); entries older than
//                                     an hour are pruned (at most 100 per settle) from both keys,
//                                     and both expire 2 h after the account's last settlement
//   P{acct:ID}:usage:D:<day>    hash  requests, tokens, units of a UTC day ('YYYY-MM-DD'); 40 days
//                                     from the settlement that made it (its first request)
//   P{acct:ID}:usage:M:<month>  hash  the same for a UTC month ('YYYY-MM'); 400 days
//
// Teams (CONTRACT section 15; ./teams.ts): a team's budget and spend are fields of its account's
// hash (P{acct:ID}, t:<teamId>:bu/bp/sp/su), so the hold reads the key's team (its hash's tm) and
// holds the team's budget with the key's and the wallet in the same script, and the settle and
// the undo charge and give back the team the hold named, with no key of their own.
//
// Atomicity: hold and settle are one Lua script each, over keys of the account's hash tag only
// (like every other script of the store, so they run on a cluster too). A hold reads the sums of
// the open holds (purging expired ones once one may have expired), checks the balance and the
// quotas and adds the hold in one step, so concurrent holds from any number of instances can
// never together exceed the balance. A settle checks whether
// the request id was settled, debits, drops the hold, adds to both windows and remembers the id
// in one step, so it applies exactly once (within the hour the id is remembered).
//
// Time: scripts never read the Redis clock; callers pass Date.now(). Instances whose clocks
// disagree by more than a hold's TTL see each other's holds expire early or late. Numbers go
// into Redis only as strings the caller produced or as integers Redis computed (HINCRBY), never
// through Lua's number formatting, so every safe integer keeps its digits.
//
// Durability: a settlement is acknowledged once the Redis server has applied it; surviving a
// Redis crash then depends on the server's persistence (appendonly yes, appendfsync always for
// no loss at all).

import type { RedisClient } from './connect.js';
import type { ReplicaWait } from './wait.js';
import { METERING_SCRIPTS, type MeteringScripts } from './metering-scripts.js';
import { TEAM_ID, requireId, requireRequestId } from '../rules.js';
import type { BudgetPeriod, HoldRequest, HoldResult, QuotaCode, SettleResult, Settlement, UnsettleResult, UsageTotals } from '../types.js';

/**
 * Settled request ids are remembered this long: a repeated settle within it changes nothing.
 * A settle is repeated only by the request that made it, right after its first attempt failed
 * (a store fault, a timeout whose write may still land, a Cluster redirect): within seconds,
 * bounded by store.timeout_ms. An hour is ample, and what it costs is per request: at 1,000
 * requests a second, 3.6 million ids (in Redis, or in the memory store's heap) where 48 hours
 * kept 173 million.
 */
export const SETTLED_KEEP_MS = 3_600_000;
/** Holds keys outlive their longest hold by this much (they are purged by time, not by expiry). */
const HOLDS_GRACE_MS = 60_000;

const QUOTA_CODES: readonly string[] = ['requests_per_day', 'tokens_per_day', 'units_per_month'] satisfies QuotaCode[];

export class RedisMetering {
  readonly #redis: RedisClient & MeteringScripts;
  /** Settlements wait for replicas through it (store.wait_replicas); null: they do not. */
  readonly #wait: ReplicaWait | null;
  readonly #prefix: string;

  constructor(redis: RedisClient & MeteringScripts, prefix: string, wait: ReplicaWait | null = null) {
    this.#redis = redis;
    this.#wait = wait;
    this.#prefix = prefix;
  }

  async hold(h: HoldRequest): Promise<HoldResult | undefined> {
    requireId('account id', h.account);
    requireRequestId(h.requestId);
    const units = count(h.units, 'units');
    const ttl = Number(count(h.ttlMs, 'ttlMs'));
    const [day, month] = windowsOf(h.day, h.month);
    const now = Date.now();
    const acct = this.#acct(h.account);
    const k = keyArgs(h.key);
    const r = await this.#redis.tgHold(acct, `${acct}:holds`, `${acct}:usage:D:${day}`, `${acct}:usage:M:${month}`, keyHash(acct, k[0]),
      h.requestId, units, String(now + ttl), String(now),
      quota(h.quotas.requests_per_day, 'requests_per_day'), quota(h.quotas.tokens_per_day, 'tokens_per_day'),
      quota(h.quotas.units_per_month, 'units_per_month'), String(ttl + HOLDS_GRACE_MS), ...k, String(now + ttl + HOLDS_GRACE_MS));
    if (r === null) return undefined;
    if (Array.isArray(r) && r[1] === 'budget_exceeded') {
      const [, , available, remaining, period, scope] = tuple(r, 6);
      return {
        ok: false, code: 'budget_exceeded', available_units: Number(available), budget_remaining_units: Number(remaining),
        budget_period: period === '' ? null : period as BudgetPeriod, budget_scope: scope === 'team' ? 'team' : 'key',
      };
    }
    const [ok, code, available] = tuple(r, 3);
    const available_units = Number(available);
    // A success's second member is the team the hold counted against ('' for none).
    if (ok === 1) return typeof code === 'string' && code !== '' ? { ok: true, available_units, team: code } : { ok: true, available_units };
    if (code === 'insufficient_credits') return { ok: false, code, available_units };
    if (typeof code === 'string' && QUOTA_CODES.includes(code)) {
      return { ok: false, code: 'quota_exceeded', quota_code: code as QuotaCode, available_units };
    }
    throw new Error(`unexpected reply from Redis: ${JSON.stringify(r)}`);
  }

  async settle(s: Settlement): Promise<SettleResult | undefined> {
    requireId('account id', s.account);
    requireRequestId(s.requestId);
    const units = count(s.units, 'units');
    count(s.promptTokens, 'promptTokens');
    count(s.completionTokens, 'completionTokens');
    const tokens = count(s.promptTokens + s.completionTokens, 'promptTokens + completionTokens');
    const [day, month] = windowsOf(s.day, s.month);
    const now = Date.now();
    const acct = this.#acct(s.account);
    const k = keyArgs(s.key);
    const keys = [acct, `${acct}:holds`, `${acct}:settled`, `${acct}:settled:at`, `${acct}:usage:D:${day}`, `${acct}:usage:M:${month}`, keyHash(acct, k[0])] as const;
    const args = [s.requestId, units, tokens, String(now), String(SETTLED_KEEP_MS), String(SETTLED_KEEP_MS + 3600_000), ...k, teamArg(s.key)] as const;
    const r = this.#wait !== null
      ? await this.#wait.eval(METERING_SCRIPTS.tgSettle.lua, [...keys], [...args])
      : await this.#redis.tgSettle(...keys, ...args);
    if (r === null) return undefined;
    // 4 members; 8 with the key's budget and spend; 12 with its team's too ('' for none).
    const [applied, charged, balance, available, bu, bp, sp, su, tbu, tbp, tsp, tsu] = tuple(r, Array.isArray(r) && (r.length === 8 || r.length === 12) ? r.length : 4);
    const result: SettleResult = { applied: applied === 1, charged_units: Number(charged), balance_units: Number(balance), available_units: Number(available) };
    if (typeof sp === 'string' && sp !== '') result.key = { budget: budgetOf(bu, bp), spent: { period: sp, units: Number(su) } };
    if (typeof tsp === 'string' && tsp !== '') result.team = { id: s.key!.team!, budget: budgetOf(tbu, tbp), spent: { period: tsp, units: Number(tsu) } };
    return result;
  }

  async unsettle(s: Settlement): Promise<UnsettleResult | undefined> {
    requireId('account id', s.account);
    requireRequestId(s.requestId);
    count(s.units, 'units');
    const tokens = count(s.promptTokens + s.completionTokens, 'promptTokens + completionTokens');
    const [day, month] = windowsOf(s.day, s.month);
    const acct = this.#acct(s.account);
    const k = keyArgs(s.key);
    const keys = [acct, `${acct}:settled`, `${acct}:settled:at`, `${acct}:usage:D:${day}`, `${acct}:usage:M:${month}`, keyHash(acct, k[0])] as const;
    // Not waited for (store.wait_replicas), like holds and releases: an undo is never reported
    // to a client, and one no replica confirms must not stay queued for good (store/retry.ts).
    const r = await this.#redis.tgUnsettle(...keys, s.requestId, tokens, String(SETTLED_KEEP_MS + 3600_000), ...k, teamArg(s.key));
    if (r === null) return undefined;
    const [outcome, refunded] = tuple(r, 2);
    return { outcome: outcome === 2 ? 'refunded' : outcome === 1 ? 'fenced' : 'repeat', refunded_units: Number(refunded) };
  }

  async release(account: string, requestId: string): Promise<void> {
    requireId('account id', account);
    requireRequestId(requestId);
    await this.#redis.tgRelease(`${this.#acct(account)}:holds`, requestId);
  }

  async accountUsage(account: string, day: string, month: string): Promise<{ held_units: number; day: UsageTotals; month: UsageTotals }> {
    requireId('account id', account);
    const [d, m] = windowsOf(day, month);
    const acct = this.#acct(account);
    const r = await this.#redis.tgAccountUsage(`${acct}:holds`, `${acct}:usage:D:${d}`, `${acct}:usage:M:${m}`, String(Date.now()));
    const n = tuple(r, 7).map(Number);
    return {
      held_units: n[0] ?? 0,
      day: { requests: n[1] ?? 0, tokens: n[2] ?? 0, units: n[3] ?? 0 },
      month: { requests: n[4] ?? 0, tokens: n[5] ?? 0, units: n[6] ?? 0 },
    };
  }

  #acct(id: string): string { return `${this.#prefix}{acct:${id}}`; }
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const MONTH = /^\d{4}-\d{2}$/;

function windowsOf(day: string, month: string): [string, string] {
  if (typeof day !== 'string' || !DAY.test(day)) throw new TypeError("day must be 'YYYY-MM-DD'");
  if (typeof month !== 'string' || !MONTH.test(month)) throw new TypeError("month must be 'YYYY-MM'");
  return [day, month];
}

/** A non-negative safe integer, as the decimal string Redis gets. */
function count(n: number, what: string): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`${what} must be a non-negative safe integer`);
  return String(n);
}

function quota(n: number | null, what: string): string {
  return n === null ? '' : count(n, `quotas.${what}`);
}

/** A request's key id and budget periods as script arguments; '' for none. */
/**
 * The key's hash for a script, or with no key the account's own hash (which exists): a script
 * names only keys that exist, since on a cluster a slot in migration answers TRYAGAIN to a
 * script over keys of which some are missing. The script reads it only with a key id.
 */
function keyHash(acct: string, keyId: string): string {
  return keyId === '' ? acct : `${acct}:key:${keyId}`;
}

function keyArgs(key: HoldRequest['key']): [string, string, string, string] {
  if (key === undefined) return ['', '', '', ''];
  requireId('key id', key.id);
  return [key.id, key.periods.day, key.periods.week, key.periods.month];
}

/** The team a settlement names (the one its hold counted against), as a script argument; '' for none. */
function teamArg(key: Settlement['key']): string {
  const team = key?.team;
  if (team === undefined) return '';
  if (typeof team !== 'string' || !TEAM_ID.test(team)) throw new TypeError('team must be a team id');
  return team;
}

/** A budget as a settle script returns it: units and period, '' for none. */
function budgetOf(units: unknown, period: unknown): { units: number; period: BudgetPeriod } | null {
  return units === '' ? null : { units: Number(units), period: period === '' ? null : period as BudgetPeriod };
}

function tuple(reply: unknown, length: number): unknown[] {
  if (!Array.isArray(reply) || reply.length !== length) throw new Error(`unexpected reply from Redis: ${JSON.stringify(reply)}`);
  return reply;
}
