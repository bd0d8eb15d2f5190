// `tollgate check` lists every problem at once, schema and cross-references together; refuses
// YAML alias bombs and broken YAML with `path: message` lines (never a stack trace); caps every
// integer but prices at 2^53-1; and warns, exit 0, about a price no wallet can ever pay, as
// `serve` does in its start-up log (CONTRACT sections 2, 3, 9 and 10).

import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configWarnings } from '../../lib/config/cross-check.js';
import { ConfigError, parseConfig, validateConfig } from '../../lib/config/load.js';
import { BIN, serveChild } from '../helpers/child.js';

const MAX = Number.MAX_SAFE_INTEGER;

const dir = await mkdtemp(join(tmpdir(), 'tollgate-check2-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

interface Run { code: number | null; stdout: string; stderr: string }

async function check(name: string, text: string): Promise<Run & { file: string }> {
  const file = join(dir, name);
  await writeFile(file, text);
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ file, code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

function problems(f: () => unknown): string[] {
  try {
    f();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('accepted');
}

const sorted = (lines: string[]) => [...lines].sort();

t.test('schema and cross-reference problems are listed together', async (t) => {
  const text =
    'server:\n  prot: 1\n  port: 99999\n' +
    'accounts:\n  - {id: a, plan: gold, wallet_units: -1, keys: [sk_1]}\n' +
    'providers:\n  up: {kind: openai}\n  bad: {kind: grpc}\n' +
    'models:\n  - {id: m, provider: nowhere, context_window: 0}\n  - {id: m, provider: up, fallbacks: [{provider: gone}], max_images: 2}\n' +
    'routing:\n  auto: [m, missing]\n';
  const expected = [
    'server.prot: unknown key',
    'server.port: must be an integer from 0 to 65535',
    'accounts[0].wallet_units: must be a non-negative integer',
    'providers.bad.kind: must be one of openai, anthropic, echo',
    'models[0].context_window: must be a positive integer',
    'accounts[0].plan: unknown plan "gold"',
    'accounts[0].keys[0]: must begin with "tg_"',
    'providers.up.base_url: is required for kind openai (or targets: a list of replicas)',
    'models[0].provider: unknown provider "nowhere"',
    'models[1].id: duplicate model id "m"',
    'models[1].fallbacks[0].provider: unknown provider "gone"',
    'models[1].max_images: must be 0 when supports_vision is false',
    'routing.auto[1]: unknown model "missing"',
  ];
  t.strictSame(sorted(problems(() => parseConfig(text, {}))), sorted(expected), 'parseConfig');
  const r = await check('mixed.yaml', text);
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  t.strictSame(sorted(r.stderr.trimEnd().split('\n')), sorted(expected), 'check prints all of them');

  // Whatever shape the schema refused, the cross-checks read only what they understand.
  for (const broken of [
    { service: 5, accounts: 'x', models: [null, 7, { provider: 5 }], providers: [], routing: { auto: 'x' }, plans: null },
    { accounts: [{ id: 1, plan: [], keys: {} }], models: [{ fallbacks: [null, 'x'] }], content_policy: { block: [1] }, auth: { jwt: 'x' } },
    { server: { passthrough: 5 }, providers: { p: null }, models: [{ id: 'a', provider: 'p', context_window: 'x', max_output_tokens: {} }] },
  ]) {
    const list = problems(() => validateConfig(broken));
    t.ok(list.length > 0, 'rejected with problems');
    for (const p of list) t.match(p, /^\S+: \S/, `one "path: message" line: ${p}`);
  }
});

t.test('every integer but prices is at most 2^53-1; timers at most 2^31-1 ms', async (t) => {
  const wallet = (n: string) => `plans: {free: {}}\naccounts:\n  - {id: a, plan: free, wallet_units: ${n}}\n`;
  t.equal(parseConfig(wallet(String(MAX)), {}).accounts[0]!.wallet_units, MAX, '2^53-1 is fine');
  const msg = 'must be at most 9007199254740991 (2^53-1, the largest exact integer)';
  t.strictSame(problems(() => parseConfig(wallet(String(MAX + 1)), {})), [`accounts[0].wallet_units: ${msg}`]);
  t.strictSame(problems(() => parseConfig(wallet('1e300'), {})), [`accounts[0].wallet_units: ${msg}`]);
  t.strictSame(problems(() => parseConfig('plans:\n  free:\n    quotas: {units_per_month: 1e20}\n', {})), [`plans.free.quotas.units_per_month: ${msg}`]);
  t.strictSame(problems(() => parseConfig('plans:\n  free: {tokens_per_minute: 9007199254740992}\n', {})), [`plans.free.tokens_per_minute: ${msg}`]);
  t.strictSame(problems(() => parseConfig('server: {max_body_bytes: 1e17}\n', {})), [`server.max_body_bytes: ${msg}`]);
  t.strictSame(problems(() => parseConfig('providers:\n  e: {kind: echo}\nmodels:\n  - {id: m, provider: e, context_window: 1e16, max_output_tokens: 1}\n', {})), [`models[0].context_window: ${msg}`]);
  t.strictSame(problems(() => parseConfig('server: {drain_timeout_ms: 2147483648}\n', {})),
    ['server.drain_timeout_ms: must be at most 2147483647 ms (about 24.8 days), the longest timer Node.js supports']);
  t.strictSame(problems(() => parseConfig('providers:\n  e: {kind: echo, timeout_ms: 1e10}\n', {})),
    ['providers.e.timeout_ms: must be at most 2147483647 ms (about 24.8 days), the longest timer Node.js supports']);
  t.equal(parseConfig('server: {drain_timeout_ms: 2147483647}\n', {}).server.drain_timeout_ms, 2147483647);
  t.strictSame(problems(() => parseConfig('server: {port: 1e20}\n', {})), ['server.port: must be an integer from 0 to 65535'], 'the port keeps its own message');

  const prices = parseConfig('providers:\n  e: {kind: echo, model_defaults: {price: {input_per_mtok: 1e30}}}\nmodels:\n  - {id: m, provider: e, price: {input_per_mtok: 1e300, output_per_mtok: 9007199254740993}}\n', {});
  t.equal(prices.models[0]!.price.input_per_mtok, 1e300, 'prices are not capped');
  t.equal(prices.providers.e!.model_defaults.price!.input_per_mtok, 1e30);
});

t.test('YAML alias bombs and broken YAML: path: message lines, exit 1, no stack', async (t) => {
  const bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    .concat('bcdefghi'.split('').map((n, i) => `${n}: &${n} [${Array(9).fill(`*${'abcdefgh'[i]}`).join(',')}]`)).join('\n');
  const line = '(yaml): aliases expand to more than 100 copies (a YAML alias bomb?); use fewer aliases';
  t.strictSame(problems(() => parseConfig(bomb, {})), [line]);
  const r = await check('bomb.yaml', bomb);
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  t.equal(r.stderr, `${line}\n`, 'one line');

  const anchors = 'providers:\n  a: &p {kind: echo}\n  b: *p\n  c: *p\nmodels:\n  - &m {id: m1, provider: a}\n  - {id: m2, provider: b}\n';
  t.strictSame(Object.keys(parseConfig(anchors, {}).providers), ['a', 'b', 'c'], 'ordinary anchors still work');
  const ok = await check('anchors.yaml', anchors);
  t.equal(ok.code, 0, ok.stderr);
  t.equal(ok.stdout, `${ok.file}: ok\n`);

  for (const [name, text] of [
    ['deep', `${'['.repeat(20000)}${']'.repeat(20000)}\n`],
    ['deep-map', `${Array.from({ length: 3000 }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n')} 1\n`],
    ['unclosed', 'server: [\n'],
    ['tab', 'server:\n\tport: 1\n'],
    ['duplicate', 'server:\n  port: 1\n  port: 2\n'],
    ['unknown-alias', 'server: *nothing\n'],
    ['binary', '\u0000\u0001\u0002: \u0003\n'],
  ] as const) {
    const res = await check(`${name}.yaml`, text);
    t.equal(res.code, 1, `${name}: exit 1`);
    t.equal(res.stdout, '', `${name}: nothing on stdout`);
    const lines = res.stderr.trimEnd().split('\n');
    t.ok(lines.length >= 1 && lines.length <= 20, `${name}: a few lines (${lines.length})`);
    for (const l of lines) t.match(l, /^\S+: \S/, `${name}: "path: message": ${l.slice(0, 120)}`);
    t.notMatch(res.stderr, /[\u0000-\u0008\u000b-\u001f]/, `${name}: no control characters`);
    t.notMatch(res.stderr, /\n\s+at |Error:/, `${name}: no stack trace`);
  }
});

t.test('a price no wallet can pay is a warning: check says ok, exit 0', async (t) => {
  const text =
    'providers:\n  e:\n    kind: echo\n    model_defaults: {price: {output_per_mtok: 1e22}}\n' +
    'models:\n' +
    '  - {id: m0, provider: e, price: {input_per_mtok: 1e300, output_per_mtok: 9000000000000000000000}}\n' +
    '  - {id: m1, provider: e, price: {input_per_mtok: 100, output_per_mtok: 10000000000000000000000}}\n';
  const warnings = [
    'models[0].price.input_per_mtok: 1e+300 units per million tokens: one token costs more than the largest possible wallet (9007199254740991 units), so no request can ever be paid',
    'models[1].price.output_per_mtok: 1e+22 units per million tokens: one token costs more than the largest possible wallet (9007199254740991 units), so no request can ever be paid',
    'providers.e.model_defaults.price.output_per_mtok: 1e+22 units per million tokens: one token costs more than the largest possible wallet (9007199254740991 units), so no request can ever be paid',
  ];
  t.strictSame(configWarnings(parseConfig(text, {})), warnings, '9e21 (payable: below (2^53-1) x 10^6) is no warning');
  const r = await check('prices.yaml', text);
  t.equal(r.code, 0, 'a warning is never fatal');
  t.equal(r.stdout, `${r.file}: ok\n`);
  t.equal(r.stderr, warnings.map((w) => `WARNING ${w}\n`).join(''));
  t.strictSame(configWarnings(parseConfig('providers:\n  e: {kind: echo}\nmodels:\n  - {id: m, provider: e, price: {input_per_mtok: 9000000000000000000000}}\n', {})), []);

  // serve logs the same warnings at start-up, and serves.
  const served = join(dir, 'prices-serve.yaml');
  await writeFile(served, `server: {port: 0}\n${text}`);
  const child = await serveChild(t, served);
  for (let i = 0; i < 100 && !child.output().includes('providers.e.model_defaults'); i++) await new Promise((res) => setTimeout(res, 20));
  for (const w of warnings) t.ok(child.output().includes(JSON.stringify(w).slice(1, -1)), `logged: ${w.slice(0, 40)}`);
  t.match(child.output(), /"msg":"config warning"/);
  t.equal((await fetch(`${child.url}/healthz`)).status, 200, 'and serves');
});

t.test('passthrough pointed at a provider host, or under /v1, is warned about, never refused', async (t) => {
  const text = [
    'server: {passthrough: "http://127.0.0.1:8081"}',
    'providers:',
    '  llama: {kind: openai, base_url: "http://127.0.0.1:8081/v1"}',
    '  other: {kind: openai, base_url: "http://127.0.0.1:9000/v1"}',
    'models:',
    '  - {id: m, provider: llama}',
    '',
  ].join('\n');
  const warning = 'server.passthrough: points at the host of provider "llama" (127.0.0.1:8081): its generation endpoints are refused, but its other endpoints (management, tokenize, metrics) are reachable through the gateway without a key (passthrough_auth is false)';
  t.strictSame(configWarnings(parseConfig(text, {})), [warning]);
  const r = await check('passthrough.yaml', text);
  t.equal(r.code, 0);
  t.equal(r.stderr, `WARNING ${warning}\n`);
  const authed = text.replace('passthrough: "http://127.0.0.1:8081"', 'passthrough: "http://127.0.0.1:8081/", passthrough_auth: true');
  t.match(configWarnings(parseConfig(authed, {})), [/reachable through the gateway with a key$/], 'with passthrough_auth: still reachable, but keyed');
  const underV1 = text.replace('passthrough: "http://127.0.0.1:8081"', 'passthrough: "http://127.0.0.1:7000/v1/"');
  t.strictSame(configWarnings(parseConfig(underV1, {})), [
    "server.passthrough: its path /v1/ is under the model server's /v1, which is metered: every request passthrough would send there is refused 404; point passthrough at the server's root",
  ], 'a target under /v1: said at check');
  const elsewhere = text.replace('8081"}', '7000"}');
  t.strictSame(configWarnings(parseConfig(elsewhere, {})), [], 'another host: nothing to say');
});

t.test('cache prices (CONTRACT section 8): optional, non-negative integers, absent = input price, unpayable = warning', async (t) => {
  const ok = parseConfig('providers:\n  e:\n    kind: echo\n    model_defaults: {price: {cache_write_per_mtok: 5}}\n' +
    'models:\n  - {id: m, provider: e, price: {input_per_mtok: 10, cached_input_per_mtok: 1, cache_write_per_mtok: 12}}\n  - {id: n, provider: e}\n', {});
  t.strictSame(ok.models[0]!.price, { input_per_mtok: 10, output_per_mtok: 0, cached_input_per_mtok: 1, cache_write_per_mtok: 12 });
  t.strictSame(ok.models[1]!.price, { input_per_mtok: 0, output_per_mtok: 0 }, 'absent: left to default to input_per_mtok when charged');
  t.strictSame(ok.providers.e!.model_defaults.price, { cache_write_per_mtok: 5 });
  t.strictSame(sorted(problems(() => parseConfig('providers:\n  e: {kind: echo}\n' +
    'models:\n  - {id: m, provider: e, price: {cached_input_per_mtok: -1, cache_write_per_mtok: 1.5, cache_read_per_mtok: 1}}\n', {}))), sorted([
    'models[0].price.cached_input_per_mtok: must be a non-negative integer',
    'models[0].price.cache_write_per_mtok: must be a non-negative integer',
    'models[0].price.cache_read_per_mtok: unknown key',
  ]));
  t.strictSame(configWarnings(parseConfig('providers:\n  e:\n    kind: echo\n    model_defaults: {price: {cached_input_per_mtok: 1e22}}\n' +
    'models:\n  - {id: m, provider: e, price: {cache_write_per_mtok: 1e300}}\n', {})), [
    'models[0].price.cache_write_per_mtok: 1e+300 units per million tokens: one token costs more than the largest possible wallet (9007199254740991 units), so no request can ever be paid',
    'providers.e.model_defaults.price.cached_input_per_mtok: 1e+22 units per million tokens: one token costs more than the largest possible wallet (9007199254740991 units), so no request can ever be paid',
  ]);
});

t.test('forward_params naming a held alias is warned about: it is sent under its held name', async (t) => {
  const text = [
    'providers:',
    '  llama: {kind: openai, base_url: "http://127.0.0.1:8081/v1", forward_params: [n_predict, n_cmpl, top_k]}',
    'models:',
    '  - {id: m, provider: llama}',
    '',
  ].join('\n');
  t.strictSame(configWarnings(parseConfig(text, {})), [
    'providers.llama.forward_params: n_predict is never forwarded as it is: it is held and sent as max_tokens',
    'providers.llama.forward_params: n_cmpl is never forwarded as it is: it is held and sent as n',
  ]);
});
