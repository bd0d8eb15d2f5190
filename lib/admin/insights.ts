// What the operator console reads besides single accounts and records (CONTRACT section 12):
// the account list, and usage totals per hour and the top accounts, keys and models, answered
// from the totals the stores keep as records are written (../store/usage-totals.ts), never by
// summing records.
//   GET /admin/accounts?limit=&cursor=&prefix=   {accounts:[account view], next_cursor}
//   GET /admin/usage/hourly?since=&until=&account=  {hours:[{hour, requests, errors,
//       prompt_tokens, completion_tokens, units}]}: every hour starting in [since, until),
//       zeros included; default the last 24 hours (the current hour last)
//   GET /admin/usage/top?by=account|key|model|team&since=&until=&limit=&account=  {by, rows:[{id,
//       requests, units}]}: units desc, then id
// Times are ISO-8601; a range spans at most 31 days. Every bad parameter is 400 naming it; an
// unknown account 404 account_not_found.

import { GatewayError, clip } from '../errors.js';
import { MAX_ACCOUNTS_PAGE, afterId } from '../store/account-pages.js';
import type { AccountRecord, HourTotals, Store, TopRow, TotalsDimension } from '../store/types.js';
import { DIMENSIONS, HOUR_MS, MAX_RANGE_MS } from '../store/usage-totals.js';

export const ACCOUNTS_DEFAULT_LIMIT = 100;
export const TOP_DEFAULT_LIMIT = 10;
export const TOP_MAX_LIMIT = 100;
const DEFAULT_RANGE_MS = 24 * HOUR_MS;

/** Query parameters: each read once, an empty or overlong value refused naming it. */
function params(url: string): (name: string) => string | undefined {
  const q = new URL(url, 'http://admin').searchParams;
  return (name) => {
    const v = q.get(name) ?? undefined;
    if (v === '') throw new GatewayError('invalid_value', `Invalid value for '${name}': must not be empty.`, { param: name });
    if (v !== undefined && v.length > 256) throw new GatewayError('invalid_value', `Invalid value for '${name}': at most 256 characters.`, { param: name });
    return v;
  };
}

function time(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const t = /^\d{4}-\d{2}-\d{2}/.test(text) ? Date.parse(text) : Number.NaN;
  if (!Number.isFinite(t) || t < 0) {
    throw new GatewayError('invalid_value', `Invalid value for '${name}': an ISO-8601 date or time, e.g. 2026-11-01T00:00:00Z.`, { param: name });
  }
  return t;
}

/** since/until (default: the 24 hours up to now, or to `until`), until after since, at most 31 days apart. */
function range(get: (name: string) => string | undefined, now: number): { since: number; until: number } {
  const sinceGiven = time(get('since'), 'since');
  const untilGiven = time(get('until'), 'until');
  // Up to the end of the current hour, so that the current hour is the last one shown.
  const until = untilGiven ?? (sinceGiven !== undefined && sinceGiven >= now ? sinceGiven + DEFAULT_RANGE_MS : now + 1);
  const since = sinceGiven ?? until - DEFAULT_RANGE_MS;
  if (until <= since) throw new GatewayError('invalid_value', "Invalid value for 'until': must be later than 'since'.", { param: 'until' });
  if (until - since > MAX_RANGE_MS) {
    throw new GatewayError('invalid_value', "Invalid value for 'since': the range from 'since' to 'until' spans at most 31 days.", { param: 'since' });
  }
  return { since, until };
}

function limit(text: string | undefined, fallback: number, max: number): number {
  if (text === undefined) return fallback;
  const range = `an integer from 1 to ${max}`;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text)) {
    throw new GatewayError('invalid_type', `Invalid type for 'limit': expected ${range}.`, { param: 'limit' });
  }
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > max) {
    throw new GatewayError('invalid_value', `Invalid value for 'limit': must be ${range}.`, { param: 'limit' });
  }
  return n;
}

async function knownAccount(store: Store, account: string | undefined): Promise<void> {
  if (account !== undefined && (await store.getAccount(account)) === undefined) {
    throw new GatewayError('account_not_found', `No account with id '${clip(account)}'.`);
  }
}

/** GET /admin/accounts: a page of accounts in id order, each as GET /admin/accounts/{id} shows it. */
export async function accountsPage<V>(store: Store, url: string, view: (a: AccountRecord) => Promise<V>): Promise<{ accounts: V[]; next_cursor: string | null }> {
  const get = params(url);
  const n = limit(get('limit'), ACCOUNTS_DEFAULT_LIMIT, MAX_ACCOUNTS_PAGE);
  const cursor = get('cursor');
  if (cursor !== undefined && afterId(cursor) === undefined) {
    throw new GatewayError('invalid_value', "Invalid value for 'cursor': pass a next_cursor of an earlier page, unchanged.", { param: 'cursor' });
  }
  const page = await store.listAccounts({ limit: n, cursor, prefix: get('prefix') });
  return { accounts: await Promise.all(page.accounts.map(view)), next_cursor: page.next_cursor };
}

/** GET /admin/usage/hourly */
export async function usageHourly(store: Store, url: string, now = Date.now()): Promise<{ hours: Array<Omit<HourTotals, 'hour'> & { hour: string }> }> {
  const get = params(url);
  const account = get('account');
  const { since, until } = range(get, now);
  await knownAccount(store, account);
  const hours = await store.usageHourly({ since, until, account });
  return { hours: hours.map((h) => ({ ...h, hour: new Date(h.hour).toISOString() })) };
}

/** GET /admin/usage/top */
export async function usageTop(store: Store, url: string, now = Date.now()): Promise<{ by: TotalsDimension; rows: TopRow[] }> {
  const get = params(url);
  const by = get('by');
  if (by === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'by'.", { param: 'by' });
  const dims = Object.keys(DIMENSIONS) as TotalsDimension[];
  if (!(dims as string[]).includes(by)) {
    throw new GatewayError('unsupported_value', `Unsupported value for 'by': ${clip(JSON.stringify(by))}. Supported values are: ${dims.map((d) => `'${d}'`).join(', ')}.`, { param: 'by' });
  }
  const n = limit(get('limit'), TOP_DEFAULT_LIMIT, TOP_MAX_LIMIT);
  const account = get('account');
  const { since, until } = range(get, now);
  await knownAccount(store, account);
  return { by: by as TotalsDimension, rows: await store.usageTop({ by: by as TotalsDimension, since, until, limit: n, account }) };
}
