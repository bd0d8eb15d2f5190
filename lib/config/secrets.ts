// The config's secrets, checked before anything is signed or compared with them (CONTRACT
// section 21): `check`, `serve` and every reload refuse a secret that is empty or only
// whitespace (an unset `${VAR}` is empty), one that begins or ends with whitespace (a stray
// new line from a secret file: the client never sends it), an admin token or webhook secret
// under 16 characters, an HMAC key (auth.jwt.secret, console.session_secret) under 32 bytes,
// and an SSO console with no key of its own to sign sessions with: the OIDC client secret is
// the identity provider's, known to its administrators, and never signs anything here.
//
// Two empty values keep the meaning CONTRACT section 3 gives them: an empty admin.token is no
// token (/admin off: the bundled config's `${TOLLGATE_ADMIN_TOKEN:-}` left unset), and an empty
// provider api_key sends no key. Neither is ever used as a key.
//
// Like cross-check.ts, this reads the data whether or not the schema accepted it, and only the
// values that are strings (the schema names the rest).

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const obj = (v: unknown): Obj => (isObj(v) ? v : {});

/** The least an admin token and a webhook secret hold, in characters (code points). */
export const MIN_TOKEN_CHARS = 16;
/** The least an HMAC key (HS256's auth.jwt.secret, console.session_secret) holds, in UTF-8 bytes: SHA-256's size. */
export const MIN_KEY_BYTES = 32;

/** How a secret is judged: its least length, and what an empty value means. */
interface Rule {
  /** At least this many characters (code points). */
  chars?: number;
  /** At least this many UTF-8 bytes. */
  bytes?: number;
  /** An empty value is allowed: it means "not set" (admin.token) or "no key" (api_key). */
  emptyMeans?: string;
  /** Leading or trailing whitespace is refused (values compared with what a client sends, or HMAC keys). */
  edges?: boolean;
}

const HINT = 'a random value, e.g. `openssl rand -hex 32`';
const TOKEN: Rule = { chars: MIN_TOKEN_CHARS, edges: true };
const HMAC_KEY: Rule = { bytes: MIN_KEY_BYTES, edges: true };

/** Why `value` cannot be the secret at `path`, or undefined when it can (or is not a string: the schema's business). */
export function secretProblem(path: string, value: unknown, rule: Rule): string | undefined {
  if (typeof value !== 'string') return undefined;
  if (value === '' && rule.emptyMeans !== undefined) return undefined;
  if (value.trim() === '') {
    return value !== '' && rule.emptyMeans !== undefined
      ? `${path}: must not be only whitespace (empty means ${rule.emptyMeans})`
      : `${path}: must not be empty or only whitespace (an unset environment variable?)`;
  }
  if (rule.edges === true && value !== value.trim()) return `${path}: must not begin or end with whitespace (a stray space or new line?)`;
  if (rule.chars !== undefined && [...value].length < rule.chars) return `${path}: must be at least ${rule.chars} characters (${HINT})`;
  if (rule.bytes !== undefined && Buffer.byteLength(value, 'utf8') < rule.bytes) return `${path}: must be at least ${rule.bytes} bytes (${HINT})`;
  return undefined;
}

/** Every secret problem of a (possibly schema-invalid) config, as `path: message`. */
export function secretProblems(data: unknown): string[] {
  const c = obj(data);
  const admin = obj(c.admin);
  const con = obj(c.console);
  const oidc = con.oidc;
  const store = obj(c.store);
  const found = [
    secretProblem('admin.token', admin.token, { ...TOKEN, emptyMeans: 'no admin token' }),
    secretProblem('console.session_secret', con.session_secret, HMAC_KEY),
    secretProblem('console.oidc.client_secret', obj(oidc).client_secret, { edges: true }),
    secretProblem('auth.jwt.secret', obj(obj(c.auth).jwt).secret, HMAC_KEY),
    secretProblem('store.password', store.password, {}),
    secretProblem('store.sentinel.sentinel_password', obj(store.sentinel).sentinel_password, {}),
  ];
  for (const [name, p] of Object.entries(obj(c.providers))) {
    found.push(secretProblem(`providers.${name}.api_key`, obj(p).api_key, { emptyMeans: 'no key' }));
  }
  const hooks = obj(c.alerts).webhooks;
  if (Array.isArray(hooks)) hooks.forEach((w, i) => found.push(secretProblem(`alerts.webhooks[${i}].secret`, obj(w).secret, TOKEN)));

  // Sessions are signed with console.session_secret, else admin.token (lib/console/session.ts).
  const given = (v: unknown) => typeof v === 'string' && v !== '';
  if (isObj(oidc) && con.enabled !== false && !given(admin.token) && !given(con.session_secret)) {
    found.push('console.session_secret: is required with console.oidc and no admin.token: console sessions are signed with it, never with the OIDC client secret');
  }
  return found.filter((p): p is string => p !== undefined);
}
