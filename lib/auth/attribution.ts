// Spend attribution (CONTRACT section 20): a request's tags (`x-tollgate-tags: a,b`, with its
// key's tags) and its end user (`x-tollgate-end-user`, else the body's `user`), checked once
// where every metered route is admitted (../pipeline/admit.ts). The header wins over the body
// when both name an end user: it is the operator's channel (a proxy in front of the gateway
// sets it), the body the client's.

import { GatewayError } from '../errors.js';

/** At most this many distinct tags on a request, and on a key. */
export const MAX_TAGS = 8;
/** A tag: 1-64 of lowercase letters, digits and . _ : - */
export const TAG = /^[a-z0-9._:-]{1,64}$/;
export const MAX_END_USER = 128;
/** The group usage totals count end users past their bound under (../store/usage-totals.ts OTHER). */
export const OTHER_END_USERS = '(other)';
export const TAGS_HEADER = 'x-tollgate-tags';
export const END_USER_HEADER = 'x-tollgate-end-user';
// Printable: no C0 or C1 control characters, no DEL.
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;

const invalid = (param: string, what: string) => new GatewayError('invalid_value', `Invalid value for '${param}': ${what}.`, { param });

/** The distinct tags of a comma-separated list (a header's value), or 400 naming `param`. */
export function parseTags(value: string, param: string): string[] {
  const out: string[] = [];
  for (const raw of value.split(',')) {
    const tag = raw.trim();
    if (!TAG.test(tag)) throw invalid(param, `a comma-separated list of at most ${MAX_TAGS} tags, each 1-64 of a-z 0-9 . _ : -`);
    if (!out.includes(tag)) out.push(tag);
    if (out.length > MAX_TAGS) throw invalid(param, `at most ${MAX_TAGS} distinct tags`);
  }
  return out;
}

/** A key's tags as the admin API takes them: a list of tags (null: none), or 400 naming `param`. */
export function readKeyTags(v: unknown, param: string): string[] {
  if (v === null) return [];
  if (!Array.isArray(v)) throw new GatewayError('invalid_type', `Invalid type for '${param}': expected an array of tags (or null).`, { param });
  if (v.length > MAX_TAGS) throw invalid(param, `at most ${MAX_TAGS} tags`);
  const out: string[] = [];
  v.forEach((t, i) => {
    if (typeof t !== 'string' || !TAG.test(t)) throw invalid(`${param}[${i}]`, 'a tag of 1-64 of a-z 0-9 . _ : -');
    if (!out.includes(t)) out.push(t);
  });
  return out;
}

/** An end user id: 1-128 printable characters, or 400 naming `param`. */
export function checkEndUser(v: string, param: string): string {
  if (v.length === 0 || v.length > MAX_END_USER || CONTROL_CHARS.test(v)) throw invalid(param, `1 to ${MAX_END_USER} printable characters`);
  if (v === OTHER_END_USERS) throw invalid(param, `'${OTHER_END_USERS}' is reserved: usage counts end users past its bound under it`);
  return v;
}

/** What a request is attributed to. */
export interface Attribution { tags: string[]; endUser: string | null }

/** A key's tag controls as the request path reads them. */
export interface KeyTags { tags: readonly string[]; tagsLocked: boolean }

/**
 * A request's attribution from its headers and its body's `user` (undefined: none sent):
 * the key's tags first, then the request's (none when the key's are locked), each once.
 */
export function attributionOf(headers: Record<string, string | string[] | undefined>, user: unknown, key: KeyTags | undefined): Attribution {
  const rawTags = headers[TAGS_HEADER];
  // Node joins repeated headers of unknown names with ', ': read as one list.
  const requested = rawTags === undefined ? [] : parseTags(Array.isArray(rawTags) ? rawTags.join(',') : rawTags, TAGS_HEADER);
  let tags: string[] = requested;
  if (key !== undefined && (key.tags.length > 0 || key.tagsLocked)) {
    tags = [...key.tags];
    if (!key.tagsLocked) for (const t of requested) if (!tags.includes(t)) tags.push(t);
  }
  const header = headers[END_USER_HEADER];
  let endUser: string | null = null;
  if (header !== undefined) {
    endUser = checkEndUser(Array.isArray(header) ? header.join(', ') : header, END_USER_HEADER);
  } else if (user !== undefined && user !== null) {
    if (typeof user !== 'string') throw new GatewayError('invalid_type', "Invalid type for 'user': expected a string.", { param: 'user' });
    endUser = checkEndUser(user, 'user');
  }
  return { tags, endUser };
}

/** A JSON body's `user` member (undefined: none, or not an object). */
export function userOf(body: unknown): unknown {
  return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>).user : undefined;
}
