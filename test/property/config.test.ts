// Boundary 5: YAML configs. Generated config objects (valid-ish with odd values) and YAML
// text, fed to validateConfig / parseConfig in process and, a few of them, to
// `node bin/tollgate.js check --config FILE` as an operator runs it. Each is either
// accepted (and then a gateway starts on it) or refused with lines `path.to.field: message`
// naming what is wrong; never another error, a stack trace or a crash.

import t from 'tap';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import fc from 'fast-check';
import pino from 'pino';
import YAML from 'yaml';
import { ConfigError, parseConfig, validateConfig } from '../../lib/config/load.js';
import { createGateway } from '../../lib/gateway.js';
import { BIN } from '../helpers/child.js';
import { holds, oddString, oddValue, RawNumber } from './arbitraries.js';

const run = promisify(execFile);
/** `path.to.field: message` on one line (a key may itself be odd; the message may not be empty). */
const LINE = /^[^\r\n]+: [^\r\n]*\S[^\r\n]*$/;
const STACK = /\n\s+at |\bat [\w.<>]+ \(/;

let dir: string;
t.before(async () => { dir = await mkdtemp(join(tmpdir(), 'tollgate-props-config-')); });
t.teardown(() => rm(dir, { recursive: true, force: true }));

/** Either a config, or the problems of a ConfigError: anything else thrown fails the property. */
function verdict(fn: () => unknown): { ok: true; config: any } | { ok: false; problems: string[] } {
  try {
    return { ok: true, config: fn() };
  } catch (err) {
    assert.ok(err instanceof ConfigError, `only a ConfigError, got ${(err as Error)?.constructor?.name}: ${(err as Error)?.message}`);
    assert.ok(err.problems.length > 0, 'at least one problem');
    for (const p of err.problems) assert.match(p, LINE, `a problem is one line "path: message": ${JSON.stringify(p)}`);
    return { ok: false, problems: err.problems };
  }
}

// ---- generated config objects ------------------------------------------------------------

/** Odd values as a YAML or JSON parser would give them (raw JSON numbers read as numbers). */
const odd = oddValue.map((v) => (v instanceof RawNumber ? JSON.parse(v.text) as unknown : v));
const count = fc.oneof(fc.integer({ min: 0, max: 100000 }), fc.constantFrom(0, 1, 2 ** 31, 2 ** 53 - 1, 2 ** 53, 1e300, -1, 1.5, '8', null));
const slug = fc.stringMatching(/^[a-z][a-z0-9._-]{0,10}$/);
const nullableCount = fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 1e6 }));

/** A config that CONTRACT section 3 accepts, built consistently (references resolve). */
const validConfig = fc.record({
  service: fc.record({ name: fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,10}$/), key_prefix: fc.constantFrom('tg', 'sk', 'Key9') }),
  server: fc.record({ host: fc.constantFrom('127.0.0.1', '::1', 'localhost'), port: fc.integer({ min: 0, max: 65535 }), max_body_bytes: fc.integer({ min: 1, max: 2 ** 31 }), sse_keepalive_ms: fc.integer({ min: 1, max: 1e6 }), watch_config: fc.boolean(), passthrough: fc.constantFrom(null, 'http://127.0.0.1:9', 'https://example.com/app') }, { requiredKeys: [] }),
  admin: fc.record({ token: fc.constantFrom(null, 'admin-token-0123456789', '${TOLLGATE_ADMIN_TOKEN:-}') }),
  plans: fc.record({
    free: fc.record({ paid: fc.constant(false), requests_per_minute: nullableCount, max_concurrent: nullableCount, quotas: fc.record({ requests_per_day: nullableCount, units_per_month: nullableCount }, { requiredKeys: [] }) }, { requiredKeys: [] }),
    pro: fc.record({ paid: fc.constant(true), tokens_per_minute: nullableCount }, { requiredKeys: [] }),
  }),
  accounts: fc.uniqueArray(slug, { maxLength: 3 }).chain((ids) => fc.tuple(...ids.map((id) => fc.record({ id: fc.constant(id), plan: fc.constantFrom('free', 'pro'), wallet_units: fc.integer({ min: 0, max: 1e12 }) })))),
  upstream: fc.record({ kind: fc.constantFrom('openai', 'anthropic'), base_url: fc.constantFrom('http://127.0.0.1:9/v1', 'https://api.example.com'), timeout_ms: fc.integer({ min: 1, max: 1e6 }), api_key: fc.constantFrom('', 'sk-1', '${UPSTREAM_KEY:-}'), headers: fc.dictionary(fc.stringMatching(/^x-[a-z]{1,6}$/), fc.string({ maxLength: 6 }), { maxKeys: 2 }) }),
  models: fc.uniqueArray(slug.filter((id) => id !== 'auto'), { minLength: 1, maxLength: 3 }).chain((ids) => fc.tuple(...ids.map((id) => fc.record({
    id: fc.constant(id), provider: fc.constantFrom('echo', 'up'), context_window: fc.integer({ min: 2048, max: 200000 }), max_output_tokens: fc.integer({ min: 1, max: 2048 }),
    vision: fc.boolean(), max_images: fc.integer({ min: 0, max: 4 }), tokenizer: fc.constantFrom('o200k_base', 'cl100k_base'),
    price: fc.record({ input_per_mtok: fc.integer({ min: 0, max: 1e6 }), output_per_mtok: fc.integer({ min: 0, max: 1e6 }) }),
  })))),
  block: fc.array(fc.constantFrom('secret', '\\bpassword\\b', '\\p{L}{40}', '[0-9]{16}'), { maxLength: 2 }),
}).map((v) => ({
  service: v.service,
  server: v.server,
  admin: v.admin,
  plans: v.plans,
  accounts: v.accounts.map((a) => ({ ...a, keys: [`${v.service.key_prefix}_${a.id}`] })),
  providers: { echo: { kind: 'echo' }, up: v.upstream },
  models: v.models.map(({ vision, max_images, ...m }) => ({ ...m, supports_vision: vision, max_images: vision ? max_images : 0 })),
  routing: { auto: v.models.slice(0, 2).map((m) => m.id) },
  content_policy: { block: v.block },
}));

/** Where a config can be made odd: a value anywhere replaced, a key removed or added. */
const mutation = fc.record({
  kind: fc.constantFrom('set', 'set', 'delete', 'add'),
  pick: fc.nat(),
  // Strings with line breaks await a fix of their own (see 'hostile YAML' below).
  value: fc.oneof(odd, count, oddString.filter((s) => s.length < 40), fc.constantFrom('__proto__', 'constructor')).filter((v) => typeof v !== 'string' || !/[\r\n]/.test(v)),
  // Keys with line breaks await a fix of their own (see the end of this file).
  key: fc.oneof(fc.constantFrom('typo', 'Port', '__proto__', 'constructor', 'a b', ''), fc.string({ maxLength: 6 }).filter((k) => !/[\r\n]/.test(k))),
});

/** Every path (as keys) in a value, objects and arrays alike. */
function paths(v: unknown, at: string[] = []): string[][] {
  if (v === null || typeof v !== 'object') return [at];
  const out: string[][] = at.length === 0 ? [] : [at];
  for (const [k, c] of Object.entries(v)) out.push(...paths(c, [...at, k]));
  return out;
}

function mutate(config: any, m: { kind: string; pick: number; value: unknown; key: string }): void {
  const all = paths(config);
  const keys = all[m.pick % all.length]!;
  let at = config;
  for (const k of keys.slice(0, -1)) at = at[k];
  const last = keys.at(-1)!;
  if (m.kind === 'set') at[last] = m.value;
  else if (m.kind === 'delete') { if (Array.isArray(at)) at.splice(Number(last), 1); else delete at[last]; }
  else {
    const target = at[last] !== null && typeof at[last] === 'object' && !Array.isArray(at[last]) ? at[last] : at;
    if (!Array.isArray(target)) Object.defineProperty(target, m.key, { value: m.value, enumerable: true, writable: true, configurable: true });
  }
}

const configObject = fc.tuple(validConfig, fc.array(mutation, { maxLength: 2 })).map(([generated, ms]) => {
  const c = structuredClone(generated); // generated values are reused while shrinking: never mutate them
  for (const m of ms) mutate(c, m);
  return { config: c, mutated: ms.length > 0 };
});

/**
 * An accepted config must serve: a gateway starts on it (the memory store, purely in
 * memory, so that nothing outside the process is needed) and closes again.
 */
async function starts(config: any): Promise<void> {
  const inMemory = { ...config, store: { ...(config.store ?? {}), kind: 'memory', path: null } };
  const gateway = createGateway(inMemory, { logger: pino({ level: 'silent' }) });
  try {
    await gateway.ready;
  } finally {
    await gateway.close();
  }
}

t.test('generated config objects: accepted and served, or refused with path: message lines', async (t) => {
  await holds(t, 'config objects', fc.asyncProperty(configObject, async ({ config, mutated }) => {
    const v = verdict(() => validateConfig(config));
    if (!mutated) assert.ok(v.ok, `a valid config is accepted: ${v.ok ? '' : v.problems.join('; ')}`);
    if (v.ok) await starts(config);
  }), 100);
});

/** Known leaves of a valid config, and the fields a change there may be reported at. */
const LEAVES: Array<[string[], string[]]> = [
  [['server', 'port'], []], [['server', 'max_body_bytes'], []], [['server', 'passthrough'], []],
  [['service', 'name'], []], [['service', 'key_prefix'], ['accounts[0].keys[0]']],
  [['accounts', '0', 'plan'], []], [['accounts', '0', 'wallet_units'], []], [['accounts', '0', 'id'], []],
  [['providers', 'up', 'base_url'], []], [['providers', 'up', 'kind'], ['providers.up.base_url']], [['providers', 'up', 'timeout_ms'], []],
  [['models', '0', 'provider'], []], [['models', '0', 'context_window'], ['models[0].max_output_tokens']],
  [['models', '0', 'price', 'input_per_mtok'], []], [['models', '0', 'supports_vision'], ['models[0].max_images']],
  [['models', '1', 'max_images'], []], [['routing', 'auto', '0'], []], [['content_policy', 'block', '0'], []],
];

function pathOf(keys: string[]): string {
  return keys.reduce((p, k) => (/^\d+$/.test(k) ? `${p}[${k}]` : p === '' ? k : `${p}.${k}`), '');
}

function base(): any {
  return {
    service: { name: 'tollgate', key_prefix: 'tg' },
    server: { port: 8080, max_body_bytes: 1000, passthrough: null },
    accounts: [{ id: 'demo', plan: 'free', wallet_units: 10, keys: ['tg_demo_1'] }],
    providers: { echo: { kind: 'echo' }, up: { kind: 'openai', base_url: 'http://127.0.0.1:9/v1', timeout_ms: 100 } },
    models: [{ id: 'small', provider: 'echo', context_window: 8192, max_output_tokens: 1024, supports_vision: true, max_images: 1, price: { input_per_mtok: 1 } }, { id: 'big', provider: 'up', max_images: 0 }],
    routing: { auto: ['small'] },
    content_policy: { block: ['secret'] },
  };
}

t.test('one field made odd: refused only by naming that field (or one that depends on it)', async (t) => {
  // Values with line breaks await a fix of their own (see 'hostile YAML' below).
  const noBreaks = (v: unknown) => typeof v !== 'string' || !/[\r\n]/.test(v);
  const change = fc.tuple(fc.constantFrom(...LEAVES), fc.oneof(odd, count, oddString.filter((s) => s.length < 50)).filter(noBreaks));
  await holds(t, 'single odd field', fc.property(change, ([[keys, dependents], value]) => {
    const c = base();
    let at = c;
    for (const k of keys.slice(0, -1)) at = at[k];
    at[keys.at(-1)!] = value;
    const v = verdict(() => validateConfig(c));
    if (v.ok) return;
    const named = [pathOf(keys), ...dependents];
    for (const p of v.problems) assert.ok(named.some((n) => p.startsWith(`${n}: `) || p.startsWith(`${n}.`) || p.startsWith(`${n}[`)), `problem "${p}" names ${named.join(' or ')}`);
  }), 300);
});

// ---- YAML text -------------------------------------------------------------------------------

/** YAML-ish text without aliases or complex keys (those await their fixes; see below). */
const yamlChar = fc.constantFrom(...'abc01: -[]{},#"\'\n\n  \t!|>%@`~=&?.$_'.split(''));
const garbageYaml = fc.oneof(
  fc.array(yamlChar, { maxLength: 60 }).map((a) => a.join('')).filter((s) => !/[*?]/.test(s)),
  fc.string({ maxLength: 40 }).filter((s) => !/[*?]/.test(s)),
  configObject.map((o) => YAML.stringify(o.config)),
  fc.constantFrom('', '---', '--- !!map\n', 'models: !!str 1', 'a: !!binary aGk=', '%YAML 1.1\n---\nx: 1', 'server: {port: .inf}', 'accounts: [{id: a, plan: free, wallet_units: 0x10}]', '\t- x', '[1, 2'),
);

t.test('YAML text: a config, or path: message lines', async (t) => {
  await holds(t, 'yaml text', fc.property(garbageYaml, (text) => { verdict(() => parseConfig(text, {})); }), 400);
});

t.test('tollgate check as a child process: exit 0, or exit 1 with path: message lines, never a stack trace', async (t) => {
  let n = 0;
  await holds(t, 'tollgate check', fc.asyncProperty(garbageYaml, async (text) => {
    const file = join(dir, `c${n++}.yaml`);
    await writeFile(file, text);
    const out = await run(process.execPath, [BIN, 'check', '--config', file]).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: any) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
    );
    assert.doesNotMatch(out.stderr + out.stdout, STACK, 'no stack trace');
    const inProcess = verdict(() => parseConfig(text, process.env));
    if (out.code === 0) {
      assert.ok(inProcess.ok, 'check agrees with the config loader');
      assert.match(out.stdout, new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: ok`));
    } else {
      assert.equal(out.code, 1, `exit 1 on a bad config: ${out.stderr}`);
      const lines = out.stderr.trimEnd().split('\n');
      for (const l of lines) assert.match(l, LINE, `stderr line is "path: message": ${JSON.stringify(l)}`);
      assert.ok(!inProcess.ok && inProcess.problems.every((p) => lines.includes(p)), 'every problem, as the loader found them');
    }
  }), 3);
});

// Awaits the config fix (CONTRACT section 10: "`check` ... refuses YAML alias bombs with a
// `path: message` line"; section 9: amounts exact). Today: an alias to an anchor that is
// not set, or too many aliases, throws a ReferenceError out of parseConfig (check prints
// its stack trace); a key or a value with a line break makes a problem span two lines; a
// complex (collection) key prints Node's warning on check's stderr; wallet_units past
// 2^53-1 are accepted, already rounded; an auth.jwt public_key that is not a PEM key (or a
// jwks_url that is not a URL) passes check, and then the gateway cannot start.
const hostileYaml = fc.oneof(
  fc.tuple(fc.constantFrom('server', 'models', 'accounts', 'x'), fc.stringMatching(/^[a-z]{1,6}$/)).map(([k, a]) => `${k}: *${a}\n`),
  fc.integer({ min: 2, max: 12 }).map((n) => `a: &a [x, x]\n${Array.from({ length: n }, (_, i) => `b${i}: &b${i} [${Array(12).fill(i === 0 ? '*a' : `*b${i - 1}`).join(', ')}]`).join('\n')}\n`),
  fc.tuple(fc.constantFrom('service', 'server', 'store'), fc.constantFrom('"a\\nb"', '"x\\ry"', '"\\u2028"')).map(([s, k]) => `${s}:\n  ${k}: 1\n`),
  fc.constantFrom('? [a]\n: 1\n', 'server:\n  ? {port: 1}\n  : 2\n'),
  fc.constantFrom('accounts: [{id: a, plan: "x\\ny"}]\n', 'routing: {auto: ["a\\rb"]}\n', 'providers: {e: {kind: echo}}\nmodels: [{id: m, provider: "e\\n"}]\n'),
  fc.constantFrom('9007199254740993', '1e300', '18446744073709551616').map((n) => `accounts: [{id: a, plan: free, wallet_units: ${n}}]\n`),
  fc.constantFrom('auth: {jwt: {public_key: "not a pem"}}\n', 'auth: {jwt: {jwks_url: "not a url"}}\n', 'auth: {jwt: {public_key: "-----BEGIN PUBLIC KEY-----\\nAAAA\\n-----END PUBLIC KEY-----"}}\n'),
);

t.test('hostile YAML: refused with one-line path: message problems, amounts exact', async (t) => {
  await holds(t, 'hostile yaml', fc.asyncProperty(hostileYaml, async (text) => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    let v: ReturnType<typeof verdict>;
    try {
      v = verdict(() => parseConfig(text, {}));
    } finally {
      process.off('warning', onWarning);
    }
    assert.deepEqual(warnings, [], 'no process warning');
    if (!v.ok) return;
    for (const a of v.config.accounts) assert.ok(Number.isSafeInteger(a.wallet_units), `wallet_units ${a.wallet_units} accepted exactly`);
    await starts(v.config); // what check accepts, serve must start on
  }), 40);
  const file = join(dir, 'alias.yaml');
  await writeFile(file, 'server: *nowhere\n');
  const out = await run(process.execPath, [BIN, 'check', '--config', file]).catch((e: any) => e);
  t.equal(out.code, 1, 'tollgate check exits 1');
  t.notMatch(String(out.stderr), STACK, 'no stack trace');
  t.match(String(out.stderr), /^server: .+\n$/, 'one line naming the field');
});
