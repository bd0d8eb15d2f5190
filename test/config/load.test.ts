// Pins config loading (lib/config/load.ts): defaults, deep freezing, env interpolation, every
// problem reported with its path, cross-reference checks, and the `tollgate check` command.

import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConfigError, interpolate, loadConfigFile, parseConfig, validateConfig } from '../../lib/config/load.js';
import type { Config } from '../../lib/config/types.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));
const SHIPPED = fileURLToPath(new URL('../../config/tollgate.yaml', import.meta.url));
const CONTRACT_EXAMPLE = fileURLToPath(new URL('../fixtures/config/contract-example.yaml', import.meta.url));
/** An HS256 secret of the 32 bytes check wants. */
const JWT_SECRET = 'load-test-jwt-secret-0123456789abcdef';

/** The problems a config text is rejected with (fails the test if it is accepted). */
function problemsOf(t: any, text: string, env: NodeJS.ProcessEnv = {}): string[] {
  try {
    parseConfig(text, env);
  } catch (err) {
    t.ok(err instanceof ConfigError, 'a ConfigError');
    return (err as ConfigError).problems;
  }
  t.fail('the config was accepted');
  return [];
}

function problemsOfObject(t: any, obj: unknown): string[] {
  try {
    validateConfig(obj);
  } catch (err) {
    t.ok(err instanceof ConfigError, 'a ConfigError');
    return (err as ConfigError).problems;
  }
  t.fail('the config was accepted');
  return [];
}

/** A small valid config object to break one thing at a time. */
function valid(): Record<string, any> {
  return {
    accounts: [{ id: 'demo', plan: 'free', keys: ['tg_demo_1'] }],
    providers: { echo: { kind: 'echo' }, up: { kind: 'openai', base_url: 'http://127.0.0.1:8000/v1' } },
    models: [
      { id: 'small', provider: 'echo' },
      { id: 'big', provider: 'up', context_window: 32768, max_output_tokens: 4096 },
    ],
    routing: { auto: ['small', 'big'] },
  };
}

const EMPTY_DEFAULTS = {
  service: { name: 'tollgate', key_prefix: 'tg' },
  server: {
    host: '127.0.0.1',
    port: 8080,
    max_body_bytes: 41943040,
    max_audio_bytes: 26214400,
    body_timeout_ms: 30000,
    max_connections_per_ip: 256,
    drain_timeout_ms: 30000,
    sse_keepalive_ms: 15000,
    watch_config: false,
    passthrough: null,
    passthrough_auth: false,
    trust_proxy: false,
  },
  admin: { token: null, max_token_failures: null },
  console: { enabled: null, session_ttl_s: 28800, session_secret: null, requests_per_minute: 600, oidc: null },
  store: {
    kind: 'memory', path: null, fsync_ms: 1000, url: 'redis://127.0.0.1:6379', sentinel: null, cluster: null, password: null,
    wait_replicas: 0, wait_timeout_ms: 500, prefix: 'tollgate:', on_error: 'closed', timeout_ms: 1000, settle_wait_ms: 10000,
  },
  auth: { jwt: null },
  plans: {
    free: {
      paid: false, requests_per_minute: 60, tokens_per_minute: 100000, max_concurrent: 4, priority: 'normal', fair_weight: 1, mcp_tools: [], batch_discount_percent: 0,
      quotas: { requests_per_day: 1000, tokens_per_day: 1000000, units_per_month: null },
    },
    pro: {
      paid: true, requests_per_minute: 600, tokens_per_minute: 2000000, max_concurrent: 32, priority: 'normal', fair_weight: 1, mcp_tools: [], batch_discount_percent: 0,
      quotas: { requests_per_day: null, tokens_per_day: null, units_per_month: null },
    },
  },
  accounts: [],
  providers: {},
  models: [],
  mcp: { servers: {} },
  batch: { max_file_bytes: 104857600, max_lines: 50000, concurrency: 8, retention_days: 30 },
  routing: { auto: [] },
  content_policy: { block: [] },
  responses: { retention_hours: 24, max_bytes: 8388608, max_account_bytes: 67108864, max_chain_length: 1000 },
  usage: { retention_days: 90 },
  alerts: { thresholds: [50, 80, 100], wallet_low_units: null, webhooks: [], delivery_timeout_ms: 10000, sweep_interval_ms: 60000 },
  observe: { otlp_endpoint: null, otlp_headers: {}, service_name: null, export_interval_ms: 1000 },
};

t.test('an empty file is every default', async (t) => {
  const c = parseConfig('', {});
  t.strictSame(c, EMPTY_DEFAULTS);
  t.equal(c.service.name, 'tollgate');
  t.equal(c.service.key_prefix, 'tg');
  t.equal(c.server.port, 8080);
  t.equal(c.server.max_body_bytes, 41943040);
  t.equal(c.server.max_audio_bytes, 26214400);
  t.equal(c.server.drain_timeout_ms, 30000);
  t.equal(c.server.body_timeout_ms, 30000);
  t.equal(c.server.sse_keepalive_ms, 15000);
  t.equal(c.store.kind, 'memory');
  t.strictSame(parseConfig('# only a comment\n', {}), EMPTY_DEFAULTS);
  t.strictSame(parseConfig('{}', {}), EMPTY_DEFAULTS);
  t.strictSame(validateConfig(undefined), EMPTY_DEFAULTS);
  t.strictSame(validateConfig(null), EMPTY_DEFAULTS);
});

t.test('defaults are fresh objects for every load', async (t) => {
  const a = parseConfig('', {});
  const b = parseConfig('', {});
  t.not(a, b);
  t.not(a.plans, b.plans);
  t.not(a.plans.free!.quotas, b.plans.free!.quotas);
  t.strictSame(b, EMPTY_DEFAULTS, 'freezing the first load did not break the second');
});

t.test('provider and model defaults; upstream_model defaults to the id', async (t) => {
  const c = parseConfig(
    'providers:\n  up:\n    kind: openai\n    base_url: http://127.0.0.1:8000/v1\n' +
    'models:\n  - id: llama\n    provider: up\n  - id: named\n    provider: up\n    upstream_model: meta/Llama-3\n',
    {},
  );
  t.strictSame(c.providers.up, {
    kind: 'openai',
    base_url: 'http://127.0.0.1:8000/v1',
    api_key: '',
    timeout_ms: 60000,
    connect_timeout_ms: 5000,
    max_connections: 256,
    max_response_bytes: 67108864,
    discover_models: false,
    discover_interval_ms: 60000,
    headers: {},
    model_defaults: {},
    stream_usage: true,
    stream_upstream: 'auto',
    anthropic_version: '2023-06-01',
    circuit_failures: 5,
    circuit_cooldown_ms: 30000,
    chunk_delay_ms: 0,
    forward_params: [],
    tokenize_timeout_ms: 500,
    balance: 'least_outstanding',
    affinity_prefix_tokens: 256,
    metrics_interval_ms: 1000,
    max_outstanding: null,
    queue: { max_wait_ms: 30000, max_queued: 1000, fairness: 'account' },
    outlier: { consecutive_failures: 5, eject_ms: 30000 },
    health_check: null,
  });
  t.strictSame(c.models[0], {
    id: 'llama',
    type: 'chat',
    provider: 'up',
    fallbacks: [],
    context_window: 8192,
    max_output_tokens: 2048,
    supports_vision: false,
    max_images: 0,
    paid_only: false,
    tokenizer: 'o200k_base',
    image_tokens: 85,
    price: { input_per_mtok: 0, output_per_mtok: 0 },
    upstream_model: 'llama',
  });
  t.equal(c.models[1]!.upstream_model, 'meta/Llama-3');
  t.notOk('created' in c.models[0]!, 'created has no default');
});

t.test('an anthropic provider is accepted: anthropic_version defaults, base_url is required', async (t) => {
  const c = parseConfig(
    'providers:\n  claude:\n    kind: anthropic\n    base_url: https://api.anthropic.com\n    api_key: sk-ant-x\n' +
    'models:\n  - id: sonnet\n    provider: claude\n',
    {},
  );
  t.equal(c.providers.claude!.kind, 'anthropic');
  t.equal(c.providers.claude!.anthropic_version, '2023-06-01');
  t.equal(c.providers.claude!.api_key, 'sk-ant-x');
  t.equal(parseConfig('providers:\n  c:\n    kind: anthropic\n    base_url: http://x\n    anthropic_version: 2024-01-01\n', {}).providers.c!.anthropic_version, '2024-01-01');
  t.strictSame(problemsOf(t, 'providers:\n  c:\n    kind: anthropic\n'), ['providers.c.base_url: is required for kind anthropic (or targets: a list of replicas)']);
});

t.test('account defaults', async (t) => {
  const c = parseConfig('accounts:\n  - id: a\n    plan: pro\n', {});
  t.strictSame(c.accounts, [{ id: 'a', plan: 'pro', wallet_units: 0, keys: [], key_sha256: [] }]);
});

t.test('the result is deeply frozen', async (t) => {
  const c = parseConfig(
    'accounts:\n  - id: a\n    plan: free\n    keys: [tg_a]\n' +
    'providers:\n  up:\n    kind: openai\n    base_url: http://x/v1\n    headers: {x-team: core}\n' +
    'models:\n  - id: m\n    provider: up\n    fallbacks: [{provider: up, upstream_model: other}]\n' +
    'routing:\n  auto: [m]\n',
    {},
  );
  const nested: Array<[string, unknown]> = [
    ['config', c], ['service', c.service], ['server', c.server], ['admin', c.admin], ['store', c.store], ['auth', c.auth],
    ['plans', c.plans], ['plans.free', c.plans.free], ['plans.free.quotas', c.plans.free!.quotas],
    ['accounts', c.accounts], ['accounts[0]', c.accounts[0]], ['accounts[0].keys', c.accounts[0]!.keys],
    ['providers', c.providers], ['providers.up', c.providers.up], ['providers.up.headers', c.providers.up!.headers],
    ['providers.up.model_defaults', c.providers.up!.model_defaults],
    ['models', c.models], ['models[0]', c.models[0]], ['models[0].price', c.models[0]!.price],
    ['models[0].fallbacks', c.models[0]!.fallbacks], ['models[0].fallbacks[0]', c.models[0]!.fallbacks[0]],
    ['routing.auto', c.routing.auto], ['content_policy.block', c.content_policy.block],
  ];
  for (const [name, value] of nested) t.ok(Object.isFrozen(value), `${name} is frozen`);
  t.throws(() => { (c.server as any).port = 1; }, TypeError);
  t.throws(() => { (c.models as any).push({}); }, TypeError);
  t.throws(() => { (c.providers.up!.headers as any)['x-new'] = '1'; }, TypeError);
  t.equal(c.server.port, 8080);
});

t.test('validateConfig works on a copy: its input is neither defaulted nor frozen', async (t) => {
  const input = { models: [{ id: 'a', provider: 'p' }], providers: { p: { kind: 'echo' } } };
  const c = validateConfig(input);
  t.strictSame(input, { models: [{ id: 'a', provider: 'p' }], providers: { p: { kind: 'echo' } } });
  t.notOk(Object.isFrozen(input));
  t.notOk(Object.isFrozen(input.models[0]));
  t.equal(c.models[0]!.upstream_model, 'a');
  t.equal(c.models[0]!.context_window, 8192);
});

t.test('interpolate: ${VAR}, ${VAR:-default}, unset or empty', async (t) => {
  const env = { A: '1', EMPTY: '', REF: '${A}' };
  t.equal(interpolate('${A}', env), '1');
  t.equal(interpolate('x-${A}-y', env), 'x-1-y');
  t.equal(interpolate('${A:-z}', env), '1', 'a set value wins over the default');
  t.equal(interpolate('${UNSET}', env), '', 'unset without default is empty');
  t.equal(interpolate('${UNSET:-fallback}', env), 'fallback');
  t.equal(interpolate('${UNSET:-}', env), '');
  t.equal(interpolate('${EMPTY}', env), '');
  t.equal(interpolate('${EMPTY:-dflt}', env), 'dflt', ':- also replaces an empty value');
  t.equal(interpolate('${UNSET:-a b:c/d}', env), 'a b:c/d');
  t.equal(interpolate('${A}${A} ${UNSET:-x}${A}', env), '11 x1');
  t.equal(interpolate('${REF}', env), '${A}', 'a value is not interpolated again');
  t.equal(interpolate('$A ${1X} ${A-b} no refs', env), '$A ${1X} ${A-b} no refs', 'only ${NAME} and ${NAME:-d} are references');
});

t.test('interpolation in the YAML document', async (t) => {
  const text =
    'server:\n' +
    '  port: ${PORT:-9090}\n' +
    '  host: "${X}"\n' +
    '  watch_config: ${WATCH}\n' +
    'service:\n' +
    "  name: '${NAME:-svc}'\n" +
    'admin:\n' +
    '  token: ${NO_SUCH_VAR}\n' +
    'providers:\n' +
    '  up:\n' +
    '    kind: openai\n' +
    '    base_url: ${BASE:-http://127.0.0.1:8000}/v1\n' +
    '    api_key: ${UPSTREAM_KEY:-}\n' +
    '    timeout_ms: ${TIMEOUT}\n';
  const c = parseConfig(text, { X: '123', WATCH: 'true', TIMEOUT: '2500' });
  t.equal(c.server.port, 9090, 'an unquoted reference takes its YAML type: a number');
  t.equal(c.server.host, '123', 'a quoted reference stays a string');
  t.equal(c.server.watch_config, true, 'and a boolean');
  t.equal(c.service.name, 'svc');
  t.equal(c.admin.token, null, 'an unset token is "" and then null');
  t.equal(c.providers.up!.base_url, 'http://127.0.0.1:8000/v1');
  t.equal(c.providers.up!.api_key, '');
  t.equal(c.providers.up!.timeout_ms, 2500);

  const set = parseConfig(text, { X: '123', WATCH: 'false', TIMEOUT: '1', PORT: '7000', NAME: 'edge', NO_SUCH_VAR: 's3cret-admin-token-0123', UPSTREAM_KEY: 'sk-1', BASE: 'https://api.example' });
  t.equal(set.server.port, 7000);
  t.equal(set.server.watch_config, false);
  t.equal(set.service.name, 'edge');
  t.equal(set.admin.token, 's3cret-admin-token-0123');
  t.equal(set.providers.up!.api_key, 'sk-1');
  t.equal(set.providers.up!.base_url, 'https://api.example/v1');
});

t.test('an unset variable without default is the empty string', async (t) => {
  t.equal(parseConfig('store:\n  prefix: ${UNSET_PREFIX}\n', {}).store.prefix, '');
  t.equal(parseConfig('store:\n  prefix: "${UNSET_PREFIX}"\n', {}).store.prefix, '');
  t.strictSame(problemsOf(t, 'server:\n  port: ${UNSET_PORT}\n'), ['server.port: must be an integer from 0 to 65535']);
  // An empty host would listen on every address (68eb2e6).
  t.strictSame(problemsOf(t, 'server:\n  host: ${UNSET_HOST}\n'), ['server.host: must not be empty (0.0.0.0 or :: listen on every address)']);
});

t.test('values take the type their field wants: numbers for ports, text for secrets', async (t) => {
  t.equal(parseConfig('server:\n  port: "${PORT}"\n', { PORT: '9090' }).server.port, 9090, 'a quoted port is still a port');
  t.equal(parseConfig("store:\n  prefix: '${P}'\n", { P: '42' }).store.prefix, '42');
  t.equal(parseConfig('admin:\n  token: ${T}\n', { T: '0123456789012345' }).admin.token, '0123456789012345', 'an all-digit token stays text');
  t.equal(parseConfig('providers:\n  p:\n    kind: echo\n    api_key: ${K}\n', { K: '0042' }).providers.p!.api_key, '0042', 'leading zeros kept');
  t.equal(parseConfig('server:\n  watch_config: ${W}\n', { W: 'true' }).server.watch_config, true);
  t.strictSame(problemsOf(t, 'server:\n  port: ${PORT}\n', { PORT: '80.5' }), ['server.port: must be an integer from 0 to 65535']);
});

t.test('admin.token "" becomes null', async (t) => {
  t.equal(parseConfig('admin:\n  token: ""\n', {}).admin.token, null);
  t.equal(validateConfig({ admin: { token: '' } }).admin.token, null);
  t.equal(parseConfig('admin:\n  token: abc-0123456789abc\n', {}).admin.token, 'abc-0123456789abc');
  t.equal(parseConfig('admin:\n  token: null\n', {}).admin.token, null);
});

t.test('admin.max_token_failures: a count from 1, or null for no limit', async (t) => {
  t.equal(parseConfig('admin:\n  token: abc-0123456789abc\n  max_token_failures: 20\n', {}).admin.max_token_failures, 20);
  t.equal(parseConfig('admin:\n  token: abc-0123456789abc\n', {}).admin.max_token_failures, null);
  for (const bad of ['0', '-1', '2.5', 'lots', '1000001']) {
    t.same(problemsOf(t, `admin:\n  token: abc-0123456789abc\n  max_token_failures: ${bad}\n`),
      ['admin.max_token_failures: must be an integer from 1 to 1000000, or null for no limit'], bad);
  }
});

t.test('an environment value YAML cannot parse is still taken as text', async (t) => {
  // `token: ${T}` is an unquoted scalar; the loader re-reads the substituted text as YAML to
  // type numbers and booleans. A value that is not valid YAML on its own must stay the string
  // it is, not crash the loader with a YAMLParseError / ReferenceError (not a ConfigError).
  // Each is long enough to be an admin token (lib/config/secrets.ts).
  for (const value of ['[', '{', '"abc', '@team', '*alias', '`x'].map((v) => `${v}-0123456789abcdef`)) {
    let result: unknown;
    try {
      result = parseConfig('admin:\n  token: ${T}\n', { T: value }).admin.token;
    } catch (err) {
      result = `threw ${(err as Error).name}: ${(err as Error).message.split('\n')[0]}`;
    }
    t.equal(result, value, `token ${JSON.stringify(value)}`);
  }
});

t.test('unknown keys are reported with their path at every depth', async (t) => {
  t.strictSame(problemsOf(t, 'server:\n  prot: 8080\n'), ['server.prot: unknown key']);
  t.strictSame(problemsOf(t, 'servr:\n  port: 8080\n'), ['servr: unknown key']);
  t.strictSame(
    problemsOf(t, 'providers:\n  p:\n    kind: echo\nmodels:\n  - id: a\n    provider: p\n  - id: b\n    provider: p\n    price:\n      inputt_per_mtok: 5\n'),
    ['models[1].price.inputt_per_mtok: unknown key'],
  );
  t.strictSame(problemsOf(t, 'plans:\n  free:\n    quotas:\n      requests_per_week: 5\n'), ['plans.free.quotas.requests_per_week: unknown key']);
  t.strictSame(problemsOf(t, 'providers:\n  p:\n    kind: echo\n    timeout: 5\n'), ['providers.p.timeout: unknown key']);
  t.strictSame(
    problemsOf(t, 'providers:\n  p:\n    kind: echo\nmodels:\n  - id: a\n    provider: p\n    fallbacks:\n      - provider: p\n        model: x\n'),
    ['models[0].fallbacks[0].model: unknown key'],
  );
  t.strictSame(problemsOf(t, 'accounts:\n  - id: a\n    plan: free\n    key: tg_x\n'), ['accounts[0].key: unknown key']);
  t.strictSame(problemsOf(t, 'auth:\n  jwt:\n    secrett: x\n'), [
    'auth.jwt.secrett: unknown key',
    'auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)',
  ], 'with the cross-reference problem the typo causes');
});

t.test('bad values are reported with their paths', async (t) => {
  const models = 'providers:\n  p:\n    kind: echo\nmodels:\n  - {id: a, provider: p}\n  - {id: b, provider: p}\n';
  t.strictSame(problemsOf(t, `${models}  - {id: c, provider: p, price: {input_per_mtok: -1}}\n`), ['models[2].price.input_per_mtok: must be a non-negative integer']);
  t.strictSame(problemsOf(t, `${models}  - {id: c, provider: p, price: {output_per_mtok: 1.5}}\n`), ['models[2].price.output_per_mtok: must be a non-negative integer']);
  t.strictSame(problemsOf(t, `${models}  - {id: c, provider: p, context_window: 0}\n`), ['models[2].context_window: must be a positive integer']);
  t.strictSame(problemsOf(t, `${models}  - {id: c, provider: p, tokenizer: gpt2}\n`), ['models[2].tokenizer: must be o200k_base, cl100k_base, p50k_base, r50k_base, upstream, or the path of a tokenizer.json']);
  t.strictSame(problemsOf(t, `${models}  - {id: "bad id", provider: p}\n`), ['models[2].id: must be 1-128 characters of letters, digits and ._:/@+-']);
  t.strictSame(problemsOf(t, `${models}  - {id: c}\n`), ['models[2].provider: is required']);
  t.strictSame(problemsOf(t, 'server:\n  port: 70000\n'), ['server.port: must be an integer from 0 to 65535']);
  t.strictSame(problemsOf(t, 'server:\n  port: eighty\n'), ['server.port: must be an integer from 0 to 65535']);
  t.strictSame(problemsOf(t, 'store:\n  kind: disk\n'), ['store.kind: must be memory or redis']);
  t.strictSame(problemsOf(t, 'store:\n  on_error: maybe\n'), ['store.on_error: must be closed or open']);
  t.strictSame(problemsOf(t, 'service:\n  name: Tollgate\n'), ['service.name: must be lowercase letters, digits and ._-']);
  t.strictSame(problemsOf(t, 'service:\n  key_prefix: t_g\n'), ['service.key_prefix: must be letters and digits']);
  t.strictSame(problemsOf(t, 'plans:\n  free:\n    paid: yes\n'), ['plans.free.paid: must be a boolean']);
  t.strictSame(problemsOf(t, 'plans:\n  free:\n    max_concurrent: -2\n'), ['plans.free.max_concurrent: must be a non-negative integer or null']);
  t.strictSame(problemsOf(t, 'providers:\n  p:\n    kind: grpc\n'), ['providers.p.kind: must be one of openai, anthropic, echo']);
  t.strictSame(problemsOf(t, 'providers:\n  p:\n    base_url: http://x\n'), ['providers.p.kind: is required']);
  t.strictSame(problemsOf(t, 'providers:\n  p:\n    kind: openai\n    base_url: ftp://x\n'), ['providers.p.base_url: must be an http:// or https:// URL']);
  t.strictSame(problemsOf(t, 'providers:\n  p:\n    kind: echo\n    headers:\n      x-n: [5]\n'), ['providers.p.headers.x-n: must be a string']);
  t.equal(parseConfig('providers:\n  p:\n    kind: echo\n    headers:\n      x-n: 5\n').providers.p!.headers['x-n'], '5', 'a number where text is wanted is text');
  t.strictSame(problemsOf(t, 'accounts:\n  - id: a\n    plan: free\n    key_sha256: [abc]\n'), ['accounts[0].key_sha256[0]: must be 64 hex digits']);
  t.strictSame(problemsOf(t, 'models: {}\n'), ['models: must be an array']);
  t.strictSame(problemsOf(t, '- a\n- b\n'), ['(root): must be an object']);
  t.strictSame(problemsOfObject(t, 'text'), ['(root): must be an object']);
});

t.test('several problems are all reported at once', async (t) => {
  const text =
    'server:\n  prot: 1\n  port: -1\n' +
    'store:\n  kind: disk\n' +
    'providers:\n  p:\n    kind: echo\n' +
    'models:\n  - {id: a, provider: p}\n  - {id: b, provider: p, price: {inputt_per_mtok: 1}}\n  - {id: c, provider: p, price: {input_per_mtok: -1}}\n  - {provider: p}\n';
  const problems = problemsOf(t, text);
  t.strictSame([...problems].sort(), [
    'models[1].price.inputt_per_mtok: unknown key',
    'models[2].price.input_per_mtok: must be a non-negative integer',
    'models[3].id: is required',
    'server.port: must be an integer from 0 to 65535',
    'server.prot: unknown key',
    'store.kind: must be memory or redis',
  ]);
  t.equal(new Set(problems).size, problems.length, 'no problem is listed twice');

  const cross = problemsOfObject(t, {
    ...valid(),
    accounts: [{ id: 'a', plan: 'gold', keys: ['xx_1'] }],
    models: [{ id: 'a', provider: 'nowhere' }, { id: 'a', provider: 'echo' }],
    routing: { auto: ['zzz'] },
  });
  t.strictSame([...cross].sort(), [
    'accounts[0].keys[0]: must begin with "tg_"',
    'accounts[0].plan: unknown plan "gold"',
    'models[0].provider: unknown provider "nowhere"',
    'models[1].id: duplicate model id "a"',
    'routing.auto[0]: unknown model "zzz"',
  ]);
});

t.test('the small valid config is valid', async (t) => {
  const c = validateConfig(valid());
  t.strictSame(c.models.map((m) => m.id), ['small', 'big']);
  t.strictSame(c.routing.auto, ['small', 'big']);
});

t.test('cross-reference problems', async (t) => {
  const with_ = (patch: (c: Record<string, any>) => void) => { const c = valid(); patch(c); return problemsOfObject(t, c); };

  t.strictSame(with_((c) => { c.models[0].provider = 'x'; }), ['models[0].provider: unknown provider "x"']);
  t.strictSame(with_((c) => { c.models[1].fallbacks = [{ provider: 'echo' }, { provider: 'gone' }]; }), ['models[1].fallbacks[1].provider: unknown provider "gone"']);
  t.strictSame(with_((c) => { c.accounts[0].plan = 'gold'; }), ['accounts[0].plan: unknown plan "gold"']);
  t.strictSame(with_((c) => { c.accounts[0].keys = ['tg_ok', 'sk_live_1']; }), ['accounts[0].keys[1]: must begin with "tg_"']);
  t.strictSame(with_((c) => { c.accounts[0].keys = ['tg_']; }), ['accounts[0].keys[0]: must begin with "tg_"'], 'the prefix alone is not a key');
  t.strictSame(with_((c) => { c.service = { key_prefix: 'sk' }; }), ['accounts[0].keys[0]: must begin with "sk_"'], 'the configured prefix counts');
  t.strictSame(with_((c) => { c.accounts[0].keys = ['tg_a', 'tg_a']; }), ['accounts[0].keys[1]: the same key is listed twice']);
  t.strictSame(with_((c) => { c.accounts.push({ id: 'demo', plan: 'pro' }); }), ['accounts[1].id: duplicate account id "demo"']);
  t.strictSame(with_((c) => { c.models.push({ id: 'small', provider: 'up' }); }), ['models[2].id: duplicate model id "small"']);
  t.strictSame(with_((c) => { c.routing.auto = ['small', 'missing']; }), ['routing.auto[1]: unknown model "missing"']);
  t.strictSame(with_((c) => { delete c.providers.up.base_url; }), ['providers.up.base_url: is required for kind openai (or targets: a list of replicas)']);
  t.strictSame(with_((c) => { c.models.push({ id: 'auto', provider: 'echo' }); }), ['models[2].id: "auto" is reserved for routing.auto']);
  t.strictSame(with_((c) => { c.models[0].context_window = 1000; c.models[0].max_output_tokens = 1001; }), ['models[0].max_output_tokens: must not exceed context_window (1000)']);
  t.strictSame(with_((c) => { c.models[0].max_images = 2; }), ['models[0].max_images: must be 0 when supports_vision is false']);
  t.strictSame(with_((c) => { c.server = { passthrough: 'ftp://files' }; }), ['server.passthrough: must be an http:// or https:// URL']);
  t.strictSame(with_((c) => { c.auth = { jwt: { issuer: 'me' } }; }), ['auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)']);
  t.strictSame(with_((c) => { c.auth = { jwt: { secret: JWT_SECRET, jwks_url: 'https://x/jwks' } }; }), ['auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)']);

  const regex = with_((c) => { c.content_policy = { block: ['ok', '(unclosed'] }; });
  t.equal(regex.length, 1);
  t.match(regex[0], /^content_policy\.block\[1\]: not a valid regular expression \(.+\)$/);

  // the boundaries that are fine
  t.equal(validateConfig({ ...valid(), models: [{ id: 'm', provider: 'echo', context_window: 1000, max_output_tokens: 1000 }], routing: {} }).models[0]!.max_output_tokens, 1000);
  t.equal(validateConfig({ ...valid(), auth: { jwt: { secret: JWT_SECRET, issuer: 'me' } } }).auth.jwt!.secret, JWT_SECRET);
});

t.test('invalid YAML is reported as (yaml) problems', async (t) => {
  const broken = problemsOf(t, 'server:\n  port: [1\nstore: x\n');
  t.ok(broken.length >= 1);
  for (const p of broken) t.match(p, /^\(yaml\): \S/);
  t.match(broken[0], /line \d+, column \d+/);

  const tab = problemsOf(t, 'server:\n\tport: 1\n');
  t.ok(tab.length >= 1);
  for (const p of tab) t.match(p, /^\(yaml\): /);

  const dup = problemsOf(t, 'server:\n  port: 1\n  port: 2\n');
  t.equal(dup.length, 1);
  t.match(dup[0], /^\(yaml\): Map keys must be unique/);
});

t.test('loadConfigFile reads, interpolates and names the file in its error', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-load-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const good = join(dir, 'good.yaml');
  await writeFile(good, 'server:\n  port: ${P:-1234}\n');
  t.equal((await loadConfigFile(good, {})).server.port, 1234);
  t.equal((await loadConfigFile(good, { P: '4321' })).server.port, 4321);

  const bad = join(dir, 'bad.yaml');
  await writeFile(bad, 'server:\n  prot: 1\n');
  const err = await loadConfigFile(bad, {}).catch((e: unknown) => e);
  t.ok(err instanceof ConfigError);
  t.strictSame((err as ConfigError).problems, ['server.prot: unknown key']);
  t.equal((err as ConfigError).message, `invalid config ${bad}:\n  server.prot: unknown key`);
  t.equal((err as ConfigError).name, 'ConfigError');

  const missing = join(dir, 'nope.yaml');
  const gone = await loadConfigFile(missing, {}).catch((e: unknown) => e);
  t.ok(gone instanceof ConfigError);
  t.strictSame((gone as ConfigError).problems, [`(file): cannot read ${missing}: ENOENT`]);
});

t.test('the shipped config and the CONTRACT example load', async (t) => {
  const shipped: Config = await loadConfigFile(SHIPPED, {});
  t.equal(shipped.server.port, 8080);
  t.equal(shipped.server.host, '127.0.0.1');
  t.strictSame(shipped.models.map((m) => m.id), ['echo-small', 'echo-vision', 'echo-embed', 'echo-rerank', 'echo-whisper']);
  t.equal((await loadConfigFile(SHIPPED, { TOLLGATE_PORT: '0', TOLLGATE_HOST: '0.0.0.0' })).server.port, 0);

  const example = await loadConfigFile(CONTRACT_EXAMPLE, { TOLLGATE_ADMIN_TOKEN: 'contract-admin-token', JWT_SECRET });
  t.equal(example.admin.token, 'contract-admin-token');
  t.strictSame(example.auth.jwt, { secret: JWT_SECRET, issuer: null, audience: null });
  t.equal(example.store.path, './data/state');
  t.equal(example.store.prefix, 'tollgate:');
  t.equal(example.providers.local!.api_key, '');
  t.equal(example.models[0]!.upstream_model, 'meta-llama/Llama-3.2-1B-Instruct');
  t.strictSame(example.models[0]!.price, { input_per_mtok: 100, output_per_mtok: 300 });
  t.strictSame(example.plans, EMPTY_DEFAULTS.plans, 'the example plans are the default plans');
});

// ---- the `tollgate check` command ----

interface Run { code: number; stdout: string; stderr: string }

function check(args: string[], env: NodeJS.ProcessEnv = { PATH: process.env.PATH }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: ROOT, env, timeout: 20000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

t.test('check: the CLI needs the compiled dist/', async (t) => {
  t.ok(existsSync(fileURLToPath(new URL('../../dist/lib/cli/index.js', import.meta.url))), 'dist/lib/cli/index.js exists (run npx tsc -p tsconfig.json)');
});

t.test('check: a valid file exits 0 and prints "<file>: ok"', async (t) => {
  const r = await check(['check', '--config', SHIPPED]);
  t.equal(r.code, 0);
  t.equal(r.stdout, `${SHIPPED}: ok\n`);
  t.equal(r.stderr, '');

  const rel = await check(['check', '--config', 'config/tollgate.yaml']);
  t.equal(rel.code, 0);
  t.equal(rel.stdout, 'config/tollgate.yaml: ok\n');
});

t.test('check: a bad file exits 1 with every problem on stderr', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-check-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const file = join(dir, 'bad.yaml');
  await writeFile(file,
    'server:\n  prot: 8080\n' +
    'providers:\n  p:\n    kind: echo\n' +
    'models:\n  - id: a\n    provider: p\n  - id: b\n    provider: p\n    price:\n      inputt_per_mtok: 1\n' +
    '  - id: c\n    provider: p\n    price:\n      input_per_mtok: -1\n');
  const r = await check(['check', '--config', file]);
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  const lines = r.stderr.split('\n');
  t.equal(lines.pop(), '', 'ends with a newline');
  t.strictSame(lines.sort(), [
    'models[1].price.inputt_per_mtok: unknown key',
    'models[2].price.input_per_mtok: must be a non-negative integer',
    'server.prot: unknown key',
  ]);

  const cross = join(dir, 'cross.yaml');
  await writeFile(cross,
    'accounts:\n  - id: a\n    plan: gold\n    keys: [sk_1]\n' +
    'providers:\n  up:\n    kind: openai\n' +
    'models:\n  - id: m\n    provider: x\n' +
    'routing:\n  auto: [m, n]\n');
  const rc = await check(['check', '--config', cross]);
  t.equal(rc.code, 1);
  t.equal(rc.stdout, '');
  t.strictSame(rc.stderr.trimEnd().split('\n').sort(), [
    'accounts[0].keys[0]: must begin with "tg_"',
    'accounts[0].plan: unknown plan "gold"',
    'models[0].provider: unknown provider "x"',
    'providers.up.base_url: is required for kind openai (or targets: a list of replicas)',
    'routing.auto[1]: unknown model "n"',
  ]);

  const yaml = join(dir, 'yaml.yaml');
  await writeFile(yaml, 'server: [\n');
  const ry = await check(['check', '--config', yaml]);
  t.equal(ry.code, 1);
  t.equal(ry.stdout, '');
  t.match(ry.stderr, /^\(yaml\): /);
  t.notMatch(ry.stderr, /\n\s+at /, 'no stack trace');

  const env = join(dir, 'env.yaml');
  await writeFile(env, 'server:\n  port: ${CHECK_PORT}\n');
  const bad = await check(['check', '--config', env], { PATH: process.env.PATH, CHECK_PORT: 'x' });
  t.equal(bad.code, 1);
  t.equal(bad.stderr, 'server.port: must be an integer from 0 to 65535\n');
  const ok = await check(['check', '--config', env], { PATH: process.env.PATH, CHECK_PORT: '9000' });
  t.equal(ok.code, 0, 'check reads the environment');
  t.equal(ok.stdout, `${env}: ok\n`);
});

t.test('check: a missing file exits 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-missing-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'absent.yaml');
  const r = await check(['check', '--config', file]);
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  t.equal(r.stderr, `(file): cannot read ${file}: ENOENT\n`);
});

t.test('check: no --config is a usage error (exit 2)', async (t) => {
  const r = await check(['check']);
  t.equal(r.code, 2);
  t.equal(r.stdout, '');
  t.match(r.stderr, /^tollgate check: --config FILE is required\nusage:/);
});
