// Self-service for the holder of a key (CONTRACT section 15): GET /v1/key, the calling key as
// the admin API's key list shows it (never its plaintext) with what is left of its budget, and
// GET /v1/usage?since=&until=, its own usage records summed by UTC day and model. A holder
// sees its own key and nothing else: the key id comes from the credential, never from the
// request. A dashboard session is not a key: 404 key_not_found on both.
//
// GET /v1/usage reads the key's totals per UTC day and model, kept as its records are written
// (Store.usageTotals, ../store/usage-totals.ts: column key+model), never the records (CONTRACT
// section 21): one read per day of the range at most, whatever the key's history holds.
//
// Neither is metered (no hold, no charge, no usage record); each spends one request of the
// key's and the plan's requests_per_minute before it reads anything (Limits.spend), so a
// holder polling them is bounded like any other caller, and one over its limit gets the usual
// 429 with Retry-After and x-ratelimit-* headers.

import { budgetPeriods, budgetResetsAt } from '../auth/controls.js';
import type { Principal } from '../auth/principal.js';
import { bearer } from '../auth/bearer.js';
import { GatewayError, StoreUnavailableError } from '../errors.js';
import { sendJson } from '../http/respond.js';
import { authenticateMetered } from '../pipeline/admit.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import { periodId, spentIn, type KeyRecord } from '../store/types.js';
import { DAY_MS } from '../utc-day.js';
import { TAG, checkEndUser } from '../auth/attribution.js';

/** Days GET /v1/usage covers when `since` is not given (ending at `until`, today by default). */
export const DEFAULT_USAGE_DAYS = 30;
/** The most days one GET /v1/usage covers (fewer when usage.retention_days is shorter). */
export const MAX_USAGE_DAYS = 366;

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

/**
 * Authenticates the caller as a key (its limits' gate first), then spends one request of its
 * requests_per_minute: a 429 when that was spent already. Returns the key's id.
 */
async function callingKey({ state, ctx, req }: Exchange): Promise<{ principal: Principal; keyId: string }> {
  const principal = await authenticateMetered(state, req.headers.authorization, req);
  ctx.principal = principal;
  const spent = await state.limits.spend(principal);
  ctx.rateHeaders = spent.headers;
  if (spent.refusal !== undefined) throw spent.refusal;
  const keyId = principal.key?.id;
  if (keyId === undefined) {
    // A config key served from the config while the store is down (store.on_error: open)
    // carries no controls, and its record cannot be read now either. Any other credential
    // without a key is a dashboard session.
    if (bearer(req.headers.authorization)?.startsWith(`${state.config.service.key_prefix}_`) === true) {
      throw new StoreUnavailableError(new Error('the key record is not readable while the store is down'));
    }
    throw new GatewayError('key_not_found',
      'This credential is a dashboard session, not an API key: GET /v1/key and GET /v1/usage describe the API key that calls them.');
  }
  return { principal, keyId };
}

/** GET /v1/key: the calling key, its controls and what its budget has left this period. */
export async function serveKey(x: Exchange): Promise<void> {
  const { state, ctx, res } = x;
  const { principal, keyId } = await callingKey(x);
  const record = await state.store.getKey(keyId);
  // Revoked (or gone) since the credential was cached: as the next request will be told.
  if (record === undefined || record.revoked_at !== null || record.account !== principal.accountId) {
    throw new GatewayError('invalid_api_key', 'Invalid API key. Send "Authorization: Bearer <key>" with a valid key.');
  }
  sendJson(res, 200, JSON.stringify(keySelfView(record, Date.now())), answerHeaders(ctx));
}

/**
 * A key as its holder sees it: no plaintext, digest, hint, address list or metadata (those are
 * the operator's). `budget` is null for a key without one; `remaining_units` is its units less
 * what the current period has spent (settled debits; requests in flight are not counted).
 */
export function keySelfView(record: KeyRecord, now: number): Record<string, unknown> {
  const c = record.controls;
  let budget: Record<string, unknown> | null = null;
  if (c.budget !== null) {
    const period = c.budget.period;
    const spent = spentIn(record.spent.period, record.spent.units, periodId(period, budgetPeriods(now)));
    budget = {
      units: c.budget.units, period, spent_units: spent,
      remaining_units: Math.max(0, c.budget.units - spent),
      resets_at: budgetResetsAt(period, now),
    };
  }
  return {
    id: record.id,
    name: c.name,
    account: record.account,
    team: c.team,
    models: c.models,
    expires_at: c.expires_at === null ? null : new Date(c.expires_at).toISOString(),
    budget,
    limits: c.limits,
  };
}

/** One row of GET /v1/usage. */
export interface UsageRow { date: string; model: string; requests: number; prompt_tokens: number; completion_tokens: number; units: number }

/** The query of GET /v1/usage, as Unix ms: `since` inclusive, `until` exclusive (the day after the `until` date). */
export interface UsageRange { since: number; until: number }

const badParam = (param: string, what: string) => new GatewayError('invalid_value', `Invalid value for '${param}': ${what}.`, { param });

/** A UTC date YYYY-MM-DD as the Unix ms of its midnight; undefined when not a real date. */
function utcDate(text: string): number | undefined {
  if (!DATE.test(text)) return undefined;
  const ms = Date.parse(`${text}T00:00:00Z`);
  // Date.parse rolls 2026-02-31 over to March: refuse a day the month does not have.
  if (!Number.isFinite(ms) || new Date(ms).toISOString().slice(0, 10) !== text) return undefined;
  return ms;
}

/**
 * Reads `since` and `until` from a query string (other parameters are ignored). Each is a UTC
 * date YYYY-MM-DD, given at most once; `until` defaults to today, `since` to the
 * DEFAULT_USAGE_DAYS days ending at `until` (fewer when the retention is shorter); the range
 * is at most `retentionDays` days (records older than that are gone), and at most
 * MAX_USAGE_DAYS. 400 invalid_value naming the parameter otherwise.
 */
export function usageRange(query: string, retention: number, now: number): UsageRange {
  const retentionDays = Math.min(retention, MAX_USAGE_DAYS);
  const params = new URLSearchParams(query);
  const date = (name: 'since' | 'until'): number | undefined => {
    const all = params.getAll(name);
    if (all.length === 0) return undefined;
    if (all.length > 1) throw badParam(name, 'give it at most once');
    const ms = utcDate(all[0]!);
    if (ms === undefined) throw badParam(name, 'a UTC date YYYY-MM-DD, e.g. 2026-11-01');
    return ms;
  };
  const sinceGiven = date('since');
  const untilGiven = date('until');
  const until = untilGiven ?? now - (((now % DAY_MS) + DAY_MS) % DAY_MS);
  const since = sinceGiven ?? until - (Math.min(DEFAULT_USAGE_DAYS, retentionDays) - 1) * DAY_MS;
  if (since > until) {
    throw untilGiven === undefined
      ? badParam('since', "must not be after 'until' (today, UTC, when not given)")
      : badParam('until', "must not be before 'since'");
  }
  const days = (until - since) / DAY_MS + 1;
  if (days > retentionDays) {
    const why = retentionDays < retention ? '' : ' (usage.retention_days)';
    throw badParam(sinceGiven === undefined ? 'until' : 'since', `the range covers at most ${retentionDays} days${why}, this one ${days}`);
  }
  return { since, until: until + DAY_MS };
}

/** Usage of one tag or one end user (CONTRACT section 20). */
export interface AttributionFilter { tag?: string; end_user?: string }

/** `tag=` or `end_user=` of GET /v1/usage (one of them), checked as a request's are. */
function attributionFilter(params: URLSearchParams): AttributionFilter {
  const tag = params.get('tag');
  const endUser = params.get('end_user');
  if (tag !== null && endUser !== null) throw badParam('end_user', "filter by 'tag' or by 'end_user', not both");
  if (tag !== null) {
    if (!TAG.test(tag)) throw badParam('tag', 'one tag: 1-64 of a-z 0-9 . _ : -');
    return { tag };
  }
  if (endUser !== null) return { end_user: checkEndUser(endUser, 'end_user') };
  return {};
}

/** GET /v1/usage: the calling key's usage records in the range, summed by UTC day and model (of one tag or end user: ?tag=, ?end_user=). */
export async function serveUsage(x: Exchange): Promise<void> {
  const { state, ctx, req, res } = x;
  const { principal, keyId } = await callingKey(x);
  const url = req.url ?? '';
  const q = url.indexOf('?');
  const query = q === -1 ? '' : url.slice(q + 1);
  const range = usageRange(query, state.config.usage.retention_days, Date.now());
  const data = await usageRows(state, principal.accountId, keyId, range, attributionFilter(new URLSearchParams(query)));
  sendJson(res, 200, JSON.stringify({ data }), answerHeaders(ctx));
}

/** The key's totals in the range, per UTC day and model: rows by date, then model. */
export async function usageRows(state: GatewayState, account: string, keyId: string, range: UsageRange, filter: AttributionFilter = {}): Promise<UsageRow[]> {
  // A range before 1970 (until=1970-01-01 and the 30 days before it) holds nothing.
  const since = Math.max(0, range.since);
  const until = Math.max(since, range.until);
  const rows = await state.store.usageTotals({ by: ['model'], account, key: keyId, since, until, daily: true, ...filter });
  return rows.map((r) => ({
    date: new Date(r.day!).toISOString().slice(0, 10), model: r.values[0]!, requests: r.requests,
    prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, units: r.units,
  }));
}
