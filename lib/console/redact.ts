// The effective config as the console's Config page shows it (CONTRACT section 12): every
// secret replaced by "***" — tokens, passwords, API keys, client secrets, account keys and
// their digests, every header value (they carry credentials), and in any URL its user:password
// part (a Redis URL may hold one), every query value, every `;` matrix parameter and its fragment (an API key or token may
// ride there), and every path segment that looks like a token (TOKEN_SEGMENT: some hosted
// gateways put an account key in the path); an alert webhook's URL shows only its scheme, host and
// port (Slack- and Discord-style webhooks carry their secret in the path).

const SECRET_KEYS = new Set(['token', 'secret', 'client_secret', 'session_secret', 'password', 'sentinel_password', 'api_key', 'keys', 'key_sha256']);
const HEADER_MAPS = new Set(['headers', 'otlp_headers']);
const MASK = '***';
const SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;
/** A path segment of 24 or more URL-safe characters holding both a letter and a digit: a key, a
 * token or an account id, not a word like `deployments` or a model like `gpt-4o-mini-2024-07-18`. */
const TOKEN_SEGMENT = /^(?=[^/]*[A-Za-z])(?=[^/]*[0-9])[A-Za-z0-9._~%-]{24,}$/;

/** `a=1&b` -> `a=***&***`: each value masked, the names kept (a bare member is masked whole). */
function maskQuery(q: string): string {
  return q.split('&').map((m) => {
    if (m === '') return m;
    const eq = m.indexOf('=');
    return eq < 0 ? MASK : `${m.slice(0, eq + 1)}${MASK}`;
  }).join('&');
}

function redactUrl(v: string): string {
  const m = SCHEME.exec(v);
  if (m === null) return v;
  // scheme://user:pass@host... -> scheme://***@host...: everything up to the last @ goes (a
  // password may hold any character; an @ in the path or query only masks more than needed).
  const at = v.lastIndexOf('@');
  let out = at < m[0].length ? v : `${m[0]}${MASK}${v.slice(at)}`;
  const hash = out.indexOf('#', m[0].length);
  if (hash >= 0) out = `${out.slice(0, hash)}#${MASK}`;
  // Matrix parameters (`/v1;key=...`), read by some servers as a query: their values go too.
  const slash = out.indexOf('/', m[0].length);
  if (slash >= 0) {
    const stop = out.slice(slash).search(/[?#]/);
    const end = stop < 0 ? out.length : slash + stop;
    const path = out.slice(slash, end).replace(/;[^/]*/g, `;${MASK}`).split('/').map((seg) => (TOKEN_SEGMENT.test(seg) ? MASK : seg)).join('/');
    out = `${out.slice(0, slash)}${path}${out.slice(end)}`;
  }
  const q = out.indexOf('?', m[0].length);
  if (q >= 0) {
    const end = out.indexOf('#', q);
    out = end < 0 ? `${out.slice(0, q + 1)}${maskQuery(out.slice(q + 1))}` : `${out.slice(0, q + 1)}${maskQuery(out.slice(q + 1, end))}${out.slice(end)}`;
  }
  return out;
}

/** An alert webhook's URL: scheme://host[:port]/*** (its path, query and user info hidden). */
function redactWebhookUrl(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  try {
    const u = new URL(v);
    return `${u.protocol}//${u.host}/${MASK}`;
  } catch {
    return MASK;
  }
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
  if (key === 'webhooks' && Array.isArray(value)) {
    return value.map((w) => {
      const shown = redactConfig(w);
      return typeof w === 'object' && w !== null && 'url' in w ? { ...(shown as object), url: redactWebhookUrl((w as { url: unknown }).url) } : shown;
    });
  }
  if (typeof value === 'string') return redactUrl(value);
  if (Array.isArray(value)) return value.map((v) => redactConfig(v));
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactConfig(v, k)]));
  }
  return value;
}
