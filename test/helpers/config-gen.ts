// Generated configs for property tests of the config path (CONTRACT section 11): a mix of
// valid and invalid values of the schema's fields, including values that only fail where the
// gateway runs (a store.path under /proc or naming a file, a tokenizer.json that is missing or
// not JSON). Every network address in them is closed (a port nothing listens on), so a config
// that starts serves with its store down, as CONTRACT section 9 allows.

import fc from 'fast-check';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const TINY_TOKENIZER = fileURLToPath(new URL('../fixtures/tokenizers/tiny-bpe/tokenizer.json', import.meta.url));

/** Paths the generated values point at; `dir` is a fresh folder per run. */
export interface GenPlaces {
  dir: string;
  /** A regular file (not a folder). */
  file: string;
  /** A file ending in .json that is not JSON. */
  notJson: string;
  /** A folder whose name ends in .json. */
  folderJson: string;
  /** A port nothing listens on. */
  closedPort: number;
}

type Obj = Record<string, unknown>;

/** [value, valid]: whether this part alone is one `check` accepts. */
type Part = [Obj | undefined, boolean];

const valid = (v: Obj | undefined): Part => [v, true];
const invalid = (v: Obj): Part => [v, false];

/** One of `options`; only the valid ones when `allValid`. */
function pick<T extends [unknown, boolean]>(allValid: boolean, options: T[]): fc.Arbitrary<T> {
  return fc.constantFrom(...(allValid ? options.filter((o) => o[1]) : options));
}

function storePart(p: GenPlaces, all: boolean): fc.Arbitrary<Part> {
  const closed = `127.0.0.1:${p.closedPort}`;
  const redis = { kind: 'redis', timeout_ms: 200 };
  return pick<Part>(all, [
    valid(undefined),
    valid({ kind: 'memory' }),
    valid({ kind: 'memory', path: join(p.dir, 'state') }),
    valid({ kind: 'memory', path: join(p.dir, 'a', 'b', 'state'), fsync_ms: 0 }),
    invalid({ kind: 'memory', path: p.file }),
    invalid({ kind: 'memory', path: join(p.file, 'state') }),
    invalid({ kind: 'memory', path: '/proc/tollgate-gen/state' }),
    valid({ ...redis, url: `redis://${closed}` }),
    valid({ ...redis, cluster: [closed] }),
    valid({ ...redis, sentinel: { name: 'm', sentinels: [closed] } }),
    valid({ ...redis, cluster: [closed], prefix: 'tg:', wait_replicas: 1 }),
    invalid({ ...redis, url: `redis://${closed}`, cluster: [closed] }),
    invalid({ kind: 'memory', sentinel: { name: 'm', sentinels: [closed] } }),
    invalid({ ...redis, cluster: [] }),
    invalid({ ...redis, url: `redis://:pa%ss@${closed}` }),
  ]);
}

function serverPart(p: GenPlaces, all: boolean): fc.Arbitrary<Part> {
  const base = { port: 0, drain_timeout_ms: 2000 };
  return pick<Part>(all, [
    valid(base),
    valid({ ...base, host: 'localhost' }),
    valid({ ...base, passthrough: `http://127.0.0.1:${p.closedPort}` }),
    invalid({ ...base, passthrough: 'ftp://example.com' }),
    invalid({ ...base, port: 70000 }),
    invalid({ ...base, prot: 1 }),
  ]);
}

function jwtPart(all: boolean): fc.Arbitrary<Part> {
  return pick<Part>(all, [
    valid(undefined),
    valid({ jwt: { secret: 'a-secret-of-some-length-0123456789' } }),
    invalid({ jwt: { secret: 'a-secret-of-some-length' } }), // 23 bytes: HS256 wants 32
    valid({ jwt: { jwks_url: 'http://127.0.0.1:9/jwks.json', issuer: 'me' } }),
    invalid({ jwt: { public_key: 'not a PEM key' } }),
    invalid({ jwt: { secret: 's', jwks_url: 'http://127.0.0.1:9/jwks.json' } }),
  ]);
}

/** admin.token: none, one long enough, too short, only whitespace (lib/config/secrets.ts). */
function adminPart(all: boolean): fc.Arbitrary<Part> {
  return pick<Part>(all, [
    valid(undefined),
    valid({ token: 'generated-admin-token-0123' }),
    valid({ token: '' }),
    invalid({ token: 'short-token' }),
    invalid({ token: ' '.repeat(20) }),
  ]);
}

function tokenizerPart(p: GenPlaces, all: boolean): fc.Arbitrary<[string, boolean]> {
  return pick<[string, boolean]>(all, [
    ['o200k_base', true],
    ['cl100k_base', true],
    [TINY_TOKENIZER, true],
    [join(p.dir, 'missing', 'tokenizer.json'), false],
    [p.notJson, false],
    [p.folderJson, false],
  ]);
}

function observePart(p: GenPlaces, all: boolean): fc.Arbitrary<Part> {
  return pick<Part>(all, [
    valid(undefined),
    valid({ otlp_endpoint: `http://127.0.0.1:${p.closedPort}` }),
    invalid({ otlp_endpoint: 'collector:4318' }),
  ]);
}

export interface GenConfig {
  config: Obj;
  /** True when every part is one `check` accepts. */
  valid: boolean;
}

/**
 * A config object and whether `check` must accept it: half of them valid in every part, the
 * others with any part valid or not.
 */
export function configArb(p: GenPlaces): fc.Arbitrary<GenConfig> {
  return fc.boolean().chain((all) => fc.record({
    store: storePart(p, all),
    server: serverPart(p, all),
    auth: jwtPart(all),
    admin: adminPart(all),
    tokenizer: tokenizerPart(p, all),
    defaultsTokenizer: fc.option(tokenizerPart(p, all), { nil: undefined }),
    observe: observePart(p, all),
    openai: fc.boolean(),
    badModel: all ? fc.constant(false) : fc.boolean(),
    badPlan: all ? fc.constant(false) : fc.boolean(),
    unknownTop: all ? fc.constant(false) : fc.boolean(),
  })).map((g) => {
    const providers: Obj = { echo: { kind: 'echo' } };
    if (g.openai) providers.up = { kind: 'openai', base_url: `http://127.0.0.1:${p.closedPort}/v1` };
    if (g.defaultsTokenizer !== undefined) (providers.echo as Obj).model_defaults = { tokenizer: g.defaultsTokenizer[0] };
    const models: Obj[] = [{ id: 'm', provider: 'echo', tokenizer: g.tokenizer[0] }];
    if (g.openai) models.push({ id: 'u', provider: 'up' });
    if (g.badModel) models.push({ id: 'x', provider: 'nowhere' });
    const config: Obj = {
      server: g.server[0],
      accounts: [{ id: 'demo', plan: g.badPlan ? 'gold' : 'free', keys: ['tg_demo_0000000000000000'] }],
      providers,
      models,
    };
    if (g.store[0] !== undefined) config.store = g.store[0];
    if (g.auth[0] !== undefined) config.auth = g.auth[0];
    if (g.admin[0] !== undefined) config.admin = g.admin[0];
    if (g.observe[0] !== undefined) config.observe = g.observe[0];
    if (g.unknownTop) config.extras = { a: 1 };
    const ok = g.store[1] && g.server[1] && g.auth[1] && g.admin[1] && g.tokenizer[1] && (g.defaultsTokenizer?.[1] ?? true) && g.observe[1] &&
      !g.badModel && !g.badPlan && !g.unknownTop;
    return { config, valid: ok };
  });
}
