// The effective config as the console's Config page shows it (CONTRACT section 12): every
// secret replaced by "***" — tokens, passwords, API keys, client secrets, account keys and
// their digests, every header value (they carry credentials), and the user:password part of
// any URL (a Redis URL may hold one).

const SECRET_KEYS = new Set(['token', 'secret', 'client_secret', 'session_secret', 'password', 'sentinel_password', 'api_key', 'keys', 'key_sha256']);
const HEADER_MAPS = new Set(['headers', 'otlp_headers']);
const MASK = '***';

function redactUrl(v: string): string {
  // scheme://user:pass@host... -> scheme://***@host...: everything up to the last @ goes (a
  // password may hold any character; an @ in the path only masks more than needed).
  const m = /^[a-z][a-z0-9+.-]*:\/\//i.exec(v);
  if (m === null) return v;
  const at = v.lastIndexOf('@');
  return at < m[0].length ? v : `${m[0]}${MASK}${v.slice(at)}`;
}

export function redactConfig(value: unknown, key = ''): unknown {
  if (SECRET_KEYS.has(key)) {
    if (value === null || value === undefined) return value;
    if (Array.isArray(value)) return value.map(() => MASK);
    return MASK;
  }
  if (HEADER_MAPS.has(key) && typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return Object.fromEntries(Object.keys(value).map((k) => [k, MASK]));
  }
  if (typeof value === 'string') return redactUrl(value);
  if (Array.isArray(value)) return value.map((v) => redactConfig(v));
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactConfig(v, k)]));
  }
  return value;
}
