// One path, one decision (CONTRACT section 21): a request's path is normalised here, once, and
// that path both decides what the request is (metered /v1, /admin, the console, the ops paths,
// passthrough or the host app) and is the path the request is sent on with. Before, the
// dispatch matched the raw path while the passthrough's proxy (http-proxy-3, a WHATWG URL)
// resolved it: `/./v1/chat/completions` was "not /v1" to one and /v1 to the other, and the
// model server answered it unmetered.
//
// The rules (RFC 3986 sections 5.2.4 and 6.2.2):
// - the path must begin with '/' (an absolute-form `http://host/...` or `*` target is refused);
// - repeated slashes are one; `.` and `..` segments are resolved (above the root stays at root);
// - a percent-encoded unreserved character (`%76` is `v`, `%31` is `1`) is decoded, as a model
//   server decodes it before routing;
// - refused 400 invalid_value: an encoded `\` or `.` (%5C %2E, either case), a raw `\` (a
//   WHATWG URL reads it as `/`), a `#` (a fragment never belongs in a request, and a WHATWG URL
//   drops what follows), a control character or space;
// - an encoded `/` (%2F) stays as it is in a path the gateway serves itself, where it can only
//   be part of an id (the official SDKs send `GET /v1/models/Qwen%2FQwen2.5-7B`), and is refused
//   in a path that leaves the gateway (checkOutbound: the passthrough, the host app), whose
//   server would decode it into a separator the decision never saw. So is a `%` not followed by
//   two hex digits: a path holding one is decoded not at all (`%2%65` must never become `%2e`),
//   and may only be one of the gateway's own (its routes answer 404 for what they cannot read).
// The result is a fixed point: normalising it again, or reading it as a WHATWG URL does, gives
// the same segments. The common path (no dot segment, '//', '%', '\' or '#') costs one scan of
// its characters and no allocation.

import { GatewayError, clip } from '../errors.js';

const SLASH = 0x2f;
const DOT = 0x2e;
const PERCENT = 0x25;
const BACKSLASH = 0x5c;
const HASH = 0x23;

/** The request target's path, normalised; throws 400 invalid_value for a path it refuses. */
export function normalisePath(raw: string): string {
  return isPlain(raw) ? raw : normaliseSlow(raw);
}

/** The request target (path and query) with its path normalised; the same string when nothing changed. */
export function normaliseTarget(url: string): string {
  const q = url.indexOf('?');
  if (q === -1) return normalisePath(url);
  const raw = url.slice(0, q);
  const path = normalisePath(raw);
  return path === raw ? url : path + url.slice(q);
}

/** True when `raw` is already normal: begins with '/', holds no character to look at twice, no '//' and no '.' or '..' segment. */
function isPlain(raw: string): boolean {
  if (raw.charCodeAt(0) !== SLASH) return false;
  let segmentStart = 1;
  for (let i = 1; i <= raw.length; i++) {
    const c = i === raw.length ? SLASH : raw.charCodeAt(i);
    if (c === SLASH) {
      const n = i - segmentStart;
      // An empty segment (a '//') or one of only dots ('.', '..').
      if (i < raw.length && n === 0) return false;
      if ((n === 1 || n === 2) && raw.charCodeAt(segmentStart) === DOT && raw.charCodeAt(i - 1) === DOT) return false;
      segmentStart = i + 1;
    } else if (c === PERCENT || c === BACKSLASH || c === HASH || c <= 0x20 || c === 0x7f) {
      return false;
    }
  }
  return true;
}

const ENCODED = "an encoded '.' or '\\' (%2E, %5C) is not accepted; send the path as it is meant";

/**
 * Refuses (400 invalid_value) a normalised path that is about to leave the gateway (to the
 * passthrough or the host app) with an encoded '/', or a '%' that begins no triplet, in it.
 */
export function checkOutbound(path: string): void {
  for (let i = path.indexOf('%'); i !== -1; i = path.indexOf('%', i + 1)) {
    const hi = hex(path.charCodeAt(i + 1));
    const lo = hex(path.charCodeAt(i + 2));
    if (hi === -1 || lo === -1) refuse(path, "a '%' must be followed by two hex digits");
    if (hi * 16 + lo === SLASH) refuse(path, "an encoded '/' (%2F) is accepted only in the gateway's own paths (an id: /v1/models/org%2Fname); send the path as it is meant");
  }
}

function refuse(raw: string, why: string): never {
  throw new GatewayError('invalid_value', `The request path ${JSON.stringify(clip(raw, 200))} is refused: ${why}.`);
}

function normaliseSlow(raw: string): string {
  if (raw.charCodeAt(0) !== SLASH) refuse(raw, "a request's path must begin with '/'");
  check(raw);
  // Dots are resolved before decoding, and the same segments result either way: a decoded
  // unreserved character is never a '/' or a '.'.
  const parts = raw.split('/');
  const out: string[] = [];
  for (let i = 1; i < parts.length; i++) {
    const seg = parts[i]!;
    if (seg === '' || seg === '.') continue;
    if (seg === '..') out.pop();
    else out.push(seg);
  }
  // A path that ended in '/', '/.' or '/..' names a folder: it keeps its trailing slash.
  const last = parts[parts.length - 1]!;
  const trailing = out.length > 0 && (last === '' || last === '.' || last === '..');
  return decodeUnreserved(`/${out.join('/')}${trailing ? '/' : ''}`);
}

/** Refuses what the module header lists: '\\', '#', controls and space, an encoded '\\' or '.'. */
function check(raw: string): void {
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (c === BACKSLASH) refuse(raw, "it holds a '\\'");
    if (c === HASH) refuse(raw, "it holds a '#'");
    if (c <= 0x20 || c === 0x7f) refuse(raw, 'it holds a control character or space');
    if (c !== PERCENT) continue;
    const hi = hex(raw.charCodeAt(i + 1));
    const lo = hex(raw.charCodeAt(i + 2));
    if (hi !== -1 && lo !== -1 && (hi * 16 + lo === BACKSLASH || hi * 16 + lo === DOT)) refuse(raw, ENCODED);
  }
}

/** Decodes percent-encoded unreserved characters; nothing at all in a path with a '%' that begins no triplet (`%2%65` must not become `%2e`). */
function decodeUnreserved(path: string): string {
  if (path.indexOf('%') === -1) return path;
  let out = '';
  let from = 0;
  for (let i = path.indexOf('%'); i !== -1; i = path.indexOf('%', i + 1)) {
    const hi = hex(path.charCodeAt(i + 1));
    const lo = hex(path.charCodeAt(i + 2));
    if (hi === -1 || lo === -1) return path;
    const byte = hi * 16 + lo;
    if (isUnreserved(byte)) {
      out += path.slice(from, i) + String.fromCharCode(byte);
      from = i + 3;
    }
    i += 2;
  }
  return from === 0 ? path : out + path.slice(from);
}

function hex(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  const l = c | 0x20;
  if (l >= 0x61 && l <= 0x66) return l - 0x61 + 10;
  return -1;
}

/** RFC 3986 unreserved, but '.': ALPHA, DIGIT, '-', '_', '~' (an encoded '.' is refused before). */
function isUnreserved(b: number): boolean {
  const l = b | 0x20;
  return (l >= 0x61 && l <= 0x7a) || (b >= 0x30 && b <= 0x39) || b === 0x2d || b === 0x5f || b === 0x7e;
}
