// Pages of accounts (Store.listAccounts): in ascending id order, `limit` at a time. A page's
// next_cursor is its last id (base64url, so it survives a query string as typed); the next page
// starts after it, so accounts created meanwhile show up once, in their place, or not at all.

import type { AccountsQuery } from './types.js';

/** Pages hold at most this many accounts. */
export const MAX_ACCOUNTS_PAGE = 1000;

const CURSOR = /^[A-Za-z0-9_-]{1,1400}$/;

export function accountsCursor(lastId: string): string {
  return Buffer.from(lastId, 'utf8').toString('base64url');
}

/** The id a cursor continues after; undefined when `text` is not a cursor of accountsCursor's. */
export function afterId(text: string): string | undefined {
  if (!CURSOR.test(text)) return undefined;
  const id = Buffer.from(text, 'base64url').toString('utf8');
  return id !== '' && accountsCursor(id) === text ? id : undefined;
}

/** Refuses a query the stores do not answer (a bug of the caller: the admin API checks first). */
export function checkAccountsQuery(q: AccountsQuery): { after: string | undefined } {
  if (!Number.isSafeInteger(q.limit) || q.limit < 1 || q.limit > MAX_ACCOUNTS_PAGE) throw new RangeError(`limit must be an integer from 1 to ${MAX_ACCOUNTS_PAGE}`);
  if (q.prefix !== undefined && typeof q.prefix !== 'string') throw new TypeError('prefix must be a string');
  if (q.cursor === undefined) return { after: undefined };
  const after = afterId(q.cursor);
  if (after === undefined) throw new RangeError('not an accounts cursor');
  return { after };
}
