// Boundary: the config's secrets (CONTRACT section 21; lib/config/secrets.ts), generated. Values
// built from nothing, Unicode whitespace (spaces, tabs, line breaks, no-break space, U+2028,
// U+3000, the BOM), ASCII, two-, three- and four-byte characters and lone surrogates, at lengths
// around the bounds (16 characters, 32 bytes), set into every secret field. An oracle written
// from the rules (not from the code) says which lines `check` gives; validation must give
// exactly those. A few generated values go through `tollgate check` itself as YAML files (the
// text survives YAML and the same lines come out, exit 1 or 0). Then the SSO rule over every
// combination of admin.token, console.session_secret, console.oidc and console.enabled.

import t from 'tap';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import YAML from 'yaml';
import { ConfigError, validateConfig } from '../../lib/config/load.js';
import { BIN } from '../helpers/child.js';
import { holds, loneSurrogate } from './arbitraries.js';

const HINT = '(a random value, e.g. `openssl rand -hex 32`)';
const OIDC = { issuer: 'https://id.example.com', client_id: 'tollgate-console', redirect_url: 'https://gw.example.com/console/callback' };
const GOOD_TOKEN = 'a-good-admin-token-0123456789';
const NO_SESSION_KEY = 'console.session_secret: is required with console.oidc and no admin.token: console sessions are signed with it, never with the OIDC client secret';

// ---- the values --------------------------------------------------------------------------

const WHITESPACE = [' ', '\t', '\n', '\r', '\v', '\f', '\u00a0', '\u1680', '\u2003', '\u2028', '\u2029', '\u202f', '\u3000', '\ufeff'];
const space = fc.constantFrom(...WHITESPACE);
const visible = fc.oneof(
  fc.constantFrom('a', 'Z', '0', '-', '_', '$', '{', '}', '"', "'", '#', ':', '\\', '*'),
  fc.constantFrom('é', 'ß', '€', '中', '🔑', '\u200b', '\u0301'),
);
/** A length that lands near a bound often: 0-3, 14-17, 30-34, or anything up to 40. */
const length = fc.oneof(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 14, max: 17 }), fc.integer({ min: 7, max: 9 }), fc.integer({ min: 30, max: 34 }), fc.integer({ min: 0, max: 40 }));
const core = length.chain((n) => fc.array(fc.oneof({ weight: 6, arbitrary: visible }, { weight: 1, arbitrary: space }), { minLength: n, maxLength: n }).map((a) => a.join('')));
const edge = fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.array(space, { minLength: 1, maxLength: 3 }).map((a) => a.join('')) });
/** Secret values: empty, whitespace alone, or a body with maybe whitespace around it. */
const secret = fc.oneof(
  fc.constant(''),
  fc.array(space, { minLength: 1, maxLength: 40 }).map((a) => a.join('')),
  fc.tuple(edge, core, edge).map(([a, b, c]) => a + b + c),
  fc.tuple(core, loneSurrogate, core).map(([a, b, c]) => a + b + c),
);

// ---- the oracle: the rules as docs/config.md states them -----------------------------------

const onlyWhitespace = (v: string) => /^\s*$/u.test(v);
const edges = (v: string) => /^\s|\s$/u.test(v);
const chars = (v: string) => Array.from(v).length;
const bytes = (v: string) => Buffer.from(v, 'utf8').length;
const EMPTY = 'must not be empty or only whitespace (an unset environment variable?)';
const EDGES = 'must not begin or end with whitespace (a stray space or new line?)';

interface Field { name: string; path: string; config: (v: string) => Record<string, unknown>; expect: (v: string) => string[] }

/** The one line a secret with these rules gets, or none. */
function rule(path: string, v: string, r: { min16?: boolean; min32?: boolean; edges?: boolean; emptyMeans?: string }): string[] {
  if (v === '' && r.emptyMeans !== undefined) return [];
  if (onlyWhitespace(v)) return [v !== '' && r.emptyMeans !== undefined ? `${path}: must not be only whitespace (empty means ${r.emptyMeans})` : `${path}: ${EMPTY}`];
  if (r.edges === true && edges(v)) return [`${path}: ${EDGES}`];
  if (r.min16 === true && chars(v) < 16) return [`${path}: must be at least 16 characters ${HINT}`];
  if (r.min32 === true && bytes(v) < 32) return [`${path}: must be at least 32 bytes ${HINT}`];
  return [];
}

const FIELDS: Field[] = [
  { name: 'admin.token', path: 'admin.token', config: (v) => ({ admin: { token: v } }), expect: (v) => rule('admin.token', v, { min16: true, edges: true, emptyMeans: 'no admin token' }) },
  {
    name: 'a webhook secret', path: 'alerts.webhooks[0].secret',
    config: (v) => ({ alerts: { webhooks: [{ url: 'https://ops.example.com/h', secret: v }] } }),
    expect: (v) => rule('alerts.webhooks[0].secret', v, { min16: true, edges: true }),
  },
  {
    name: 'auth.jwt.secret', path: 'auth.jwt.secret', config: (v) => ({ auth: { jwt: { secret: v } } }),
    expect: (v) => [...(v === '' ? ['auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)'] : []), ...rule('auth.jwt.secret', v, { min32: true, edges: true })],
  },
  {
    name: 'console.session_secret', path: 'console.session_secret', config: (v) => ({ admin: { token: GOOD_TOKEN }, console: { session_secret: v } }),
    expect: (v) => rule('console.session_secret', v, { min32: true, edges: true }),
  },
  {
    name: 'console.oidc.client_secret', path: 'console.oidc.client_secret', config: (v) => ({ admin: { token: GOOD_TOKEN }, console: { oidc: { ...OIDC, client_secret: v } } }),
    expect: (v) => rule('console.oidc.client_secret', v, { edges: true }),
  },
  {
    name: 'a provider api_key', path: 'providers.up.api_key',
    config: (v) => ({ providers: { up: { kind: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key: v } }, models: [{ id: 'm', provider: 'up' }] }),
    // It is also an HTTP header value (cross-check.ts): Latin-1 without control characters.
    expect: (v) => [
      ...(/^[\t\x20-\x7e\x80-\xff]*$/.test(v) ? [] : ['providers.up.api_key: must not hold control characters (a new line, say) or characters beyond Latin-1: it is sent as an HTTP header']),
      ...rule('providers.up.api_key', v, { emptyMeans: 'no key' }),
    ],
  },
  { name: 'store.password', path: 'store.password', config: (v) => ({ store: { kind: 'redis', cluster: ['127.0.0.1:9'], password: v } }), expect: (v) => rule('store.password', v, {}) },
];

function problems(config: unknown): string[] {
  try {
    validateConfig(config);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

t.test('every secret field: exactly the lines the rules give', async (t) => {
  for (const f of FIELDS) {
    const seen = { accepted: 0, refused: 0 };
    await holds(t, f.name, fc.property(secret, (v) => {
      const got = problems(f.config(v));
      assert.deepEqual(got, f.expect(v), `${f.name} = ${JSON.stringify(v)}`);
      seen[got.length === 0 ? 'accepted' : 'refused']++;
    }), 400);
    // Both sides of the rules were reached (shrinking aside, 400 runs of this generator).
    t.ok(seen.accepted >= 40 && seen.refused >= 40, `${f.name}: ${seen.accepted} accepted, ${seen.refused} refused`);
  }
});

t.test('the bounds themselves, in every kind of character', async (t) => {
  for (const c of ['a', 'é', '€', '🔑']) {
    const at16 = c.repeat(16);
    const at15 = c.repeat(15);
    t.strictSame(problems({ admin: { token: at16 } }), [], `16 × ${c}: accepted`);
    t.strictSame(problems({ admin: { token: at15 } }), [`admin.token: must be at least 16 characters ${HINT}`], `15 × ${c}: refused`);
    const n = Math.ceil(32 / bytes(c));
    t.strictSame(problems({ auth: { jwt: { secret: c.repeat(n) } } }), [], `${n} × ${c} = ${bytes(c.repeat(n))} bytes: accepted`);
    const under = c.repeat(n - 1);
    t.strictSame(problems({ auth: { jwt: { secret: under } } }), bytes(under) < 32 ? [`auth.jwt.secret: must be at least 32 bytes ${HINT}`] : [], `${n - 1} × ${c} = ${bytes(under)} bytes`);
  }
});

t.test('generated values through `tollgate check`: the same lines from a YAML file', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-secrets-prop-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const check = (file: string) => new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, _out, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stderr });
    });
  });
  // A file holds UTF-8: no lone surrogate here.
  const fileSecret = secret.filter((v) => !/[\ud800-\udfff]/u.test(v));
  let n = 0;
  // Each run spawns a Node process: few runs.
  await holds(t, 'check agrees with the rules', fc.asyncProperty(fileSecret, fileSecret, async (token, hook) => {
    const config = { ...FIELDS[0]!.config(token), ...FIELDS[1]!.config(hook) };
    const file = join(dir, `g${n++}.yaml`);
    await writeFile(file, YAML.stringify(config));
    const want = [...FIELDS[0]!.expect(token), ...FIELDS[1]!.expect(hook)];
    const got = await check(file);
    assert.equal(got.code, want.length === 0 ? 0 : 1, `exit code for ${JSON.stringify(config)}: ${got.stderr}`);
    if (want.length > 0) assert.deepEqual(got.stderr.trimEnd().split('\n').sort(), want.sort(), JSON.stringify(config));
    assert.doesNotMatch(got.stderr, /^\s+at /m);
  }), 12);
});

t.test('an SSO console needs admin.token or console.session_secret, whatever else is set', async (t) => {
  const token = fc.constantFrom(undefined, null, '', GOOD_TOKEN);
  const session = fc.constantFrom(undefined, null, 'a-console-session-secret-0123456789');
  const enabled = fc.constantFrom(undefined, null, true, false);
  const oidc = fc.constantFrom(undefined, null, { ...OIDC }, { ...OIDC, client_secret: 'idp-secret' }, { ...OIDC, client_secret: null });
  await holds(t, 'the SSO rule', fc.property(token, session, enabled, oidc, (tok, sess, en, o) => {
    const c: Record<string, any> = { console: {} };
    if (tok !== undefined) c.admin = { token: tok };
    if (sess !== undefined) c.console.session_secret = sess;
    if (en !== undefined) c.console.enabled = en;
    if (o !== undefined) c.console.oidc = o;
    const got = problems(c);
    const signIn = (typeof tok === 'string' && tok !== '') || (o !== undefined && o !== null);
    const want = [
      ...(en === true && !signIn ? ['console.enabled: the console needs admin.token or console.oidc to sign anyone in'] : []),
      ...(o !== undefined && o !== null && en !== false && (tok === undefined || tok === null || tok === '') && (sess === undefined || sess === null) ? [NO_SESSION_KEY] : []),
    ];
    assert.deepEqual(got, want, JSON.stringify(c));
  }), 200);
});
