// The config file's JSON Schema, with the defaults of CONTRACT section 3.
// ajv fills the defaults in and reports every problem; load.ts turns its errors into
// `path.to.field: message` lines.
//
// Every integer is at most 2^53-1, the largest a JavaScript number holds exactly, except prices:
// their arithmetic is exact at any size, and a price no wallet can pay is a warning
// (cross-check.ts), not an error. Durations in ms are at most 2^31-1, the longest a Node.js
// timer can wait (a longer one would fire at once).

const MAX_EXACT = Number.MAX_SAFE_INTEGER;
const MAX_TIMER_MS = 2 ** 31 - 1;
const exact = { maximum: MAX_EXACT, 'x-max-msg': `must be at most ${MAX_EXACT} (2^53-1, the largest exact integer)` } as const;
const priceUnits = { type: 'integer', minimum: 0, 'x-msg': 'must be a non-negative integer' } as const;
const uint = { ...priceUnits, ...exact } as const;
const posInt = { type: 'integer', minimum: 1, 'x-msg': 'must be a positive integer', ...exact } as const;
const nullableUint = { type: ['integer', 'null'], minimum: 0, 'x-msg': 'must be a non-negative integer or null', ...exact } as const;
const timerMsg = { maximum: MAX_TIMER_MS, 'x-max-msg': `must be at most ${MAX_TIMER_MS} ms (about 24.8 days), the longest timer Node.js supports` } as const;
const uintMs = { ...uint, ...timerMsg } as const;
const posMs = { ...posInt, ...timerMsg } as const;
const str = { type: 'string' } as const;
const nullableStr = { type: ['string', 'null'] } as const;
const slug = { type: 'string', pattern: '^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$', 'x-msg': 'must be 1-128 characters of letters, digits and ._:/@+-' } as const;
/** host:port, the host a name, an IPv4 address or a bracketed IPv6 address. */
const hostPort = {
  type: 'string', pattern: '^(?:\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9._-]+):[0-9]{1,5}$', 'x-msg': 'must be host:port',
} as const;
const httpUrl = { type: 'string', pattern: '^https?://[^\\s]+$', 'x-msg': 'must be an http:// or https:// URL' } as const;

/** The alert events a webhook may ask for (CONTRACT section 15). */
export const ALERT_EVENTS = ['budget.threshold', 'wallet.low', 'key.expiring', 'upstream.ejected'] as const;

function obj(properties: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { type: 'object', additionalProperties: false, properties, ...extra };
}

// cached_input_per_mtok and cache_write_per_mtok default to input_per_mtok where a price is
// used (billing/meter.ts), so a price without them charges cached tokens as any others.
const price = obj(
  {
    input_per_mtok: { ...priceUnits, default: 0 }, output_per_mtok: { ...priceUnits, default: 0 },
    cached_input_per_mtok: priceUnits, cache_write_per_mtok: priceUnits,
    // Transcription models (type: transcription): units per minute of audio, charged per second started.
    audio_per_minute: priceUnits,
  },
  { default: {} },
);

const plan = obj({
  paid: { type: 'boolean', default: false },
  requests_per_minute: { ...nullableUint, default: null },
  tokens_per_minute: { ...nullableUint, default: null },
  max_concurrent: { ...nullableUint, default: null },
  // The queue in front of a full fleet (CONTRACT section 13): its priority band, and its share
  // within the band against other accounts (or keys) waiting.
  priority: { enum: ['high', 'normal', 'low'], default: 'normal', 'x-msg': 'must be one of high, normal, low' },
  fair_weight: { type: 'number', exclusiveMinimum: 0, maximum: 1000000, default: 1, 'x-msg': 'must be a number above 0 and at most 1000000' },
  // Patterns over <server>__<tool> of the MCP tools the plan's keys may use (CONTRACT section 17); none by default.
  mcp_tools: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 256, 'x-msg': 'must be a pattern of 1 to 256 characters' }, default: [] },
  // A batch line (CONTRACT section 18) costs this percent less than the same live request.
  batch_discount_percent: { type: 'integer', minimum: 0, maximum: 100, default: 0, 'x-msg': 'must be an integer from 0 to 100' },
  quotas: obj(
    {
      requests_per_day: { ...nullableUint, default: null },
      tokens_per_day: { ...nullableUint, default: null },
      units_per_month: { ...nullableUint, default: null },
    },
    { default: {} },
  ),
});

const modelFields = {
  context_window: { ...posInt, default: 8192 },
  max_output_tokens: { ...posInt, default: 2048 },
  supports_vision: { type: 'boolean', default: false },
  max_images: { ...uint, default: 0 },
  paid_only: { type: 'boolean', default: false },
  tokenizer: {
    type: 'string', pattern: '^(?:o200k_base|cl100k_base|p50k_base|r50k_base|upstream|.+\\.json)$', default: 'o200k_base',
    'x-msg': 'must be o200k_base, cl100k_base, p50k_base, r50k_base, upstream, or the path of a tokenizer.json',
  },
  image_tokens: { ...uint, default: 85 },
  price,
  created: { ...uint },
};

/** Fields a provider gives the models it discovers: a model entry's, without the defaults. */
const modelDefaults = obj(
  Object.fromEntries(Object.entries(modelFields).map(([k, v]) => {
    const { default: _unused, ...rest } = v as Record<string, unknown>;
    return [k, k === 'price' ? obj({ input_per_mtok: priceUnits, output_per_mtok: priceUnits, cached_input_per_mtok: priceUnits, cache_write_per_mtok: priceUnits, audio_per_minute: priceUnits }) : rest];
  })),
  { default: {} },
);

const target = obj({ provider: str, upstream_model: str }, { required: ['provider'] });

/** One replica of a provider's server (CONTRACT section 7). */
const replica = obj(
  { url: httpUrl, weight: { ...posInt, default: 1 }, metrics_url: httpUrl },
  { required: ['url'] },
);

/**
 * A fleet found in DNS (CONTRACT section 19): the A/AAAA records of `dns` (a Kubernetes
 * headless Service), each address a replica at `port`, looked up again every refresh_ms.
 */
const discover = obj(
  {
    dns: {
      type: 'string', pattern: '^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\\.?$',
      'x-msg': 'must be a DNS name (letters, digits and -, dot-separated labels)',
    },
    port: { type: 'integer', minimum: 1, maximum: 65535, 'x-msg': 'must be an integer from 1 to 65535' },
    refresh_ms: { type: 'integer', minimum: 1000, default: 5000, 'x-msg': 'must be an integer of at least 1000 (ms)', ...timerMsg },
    // The DNS server asked (an IP address and port); null: the system's (/etc/resolv.conf).
    resolver: { type: ['string', 'null'], default: null, pattern: '^(?:\\[[0-9A-Fa-f:.]+\\]|[0-9.]+):[0-9]{1,5}$', 'x-msg': 'must be an IP address and port (1.2.3.4:53 or [::1]:53)' },
    // The path of each replica's base URL (default: /v1 for kind openai, none for anthropic).
    path: { type: 'string', pattern: '^(?:/[\\x21-\\x7e]*)?$', 'x-msg': 'must be empty or a path beginning with /' },
    // Each replica's Prometheus endpoint, as a target's metrics_url (default: none scraped).
    metrics_path: { type: 'string', pattern: '^/[\\x21-\\x7e]*$', 'x-msg': 'must be a path beginning with /' },
  },
  { required: ['dns', 'port'] },
);

const model = obj(
  {
    id: slug,
    type: { enum: ['chat', 'embedding', 'rerank', 'transcription'], default: 'chat', 'x-msg': 'must be chat, embedding, rerank or transcription' },
    provider: str,
    upstream_model: str,
    fallbacks: { type: 'array', items: target, default: [] },
    ...modelFields,
  },
  { required: ['id', 'provider'] },
);

const provider = obj(
  {
    kind: { enum: ['openai', 'anthropic', 'echo'], 'x-msg': 'must be one of openai, anthropic, echo' },
    base_url: httpUrl,
    api_key: { ...str, default: '' },
    timeout_ms: { ...posMs, default: 60000 },
    connect_timeout_ms: { ...posMs, default: 5000 },
    max_connections: { ...posInt, default: 256 },
    max_response_bytes: { ...posInt, default: 67108864 },
    discover_models: { type: 'boolean', default: false },
    discover_interval_ms: { ...posMs, default: 60000 },
    headers: { type: 'object', additionalProperties: str, default: {} },
    model_defaults: modelDefaults,
    stream_usage: { type: 'boolean', default: true },
    // auto: streamed upstream calls for non-streaming clients where the server cancels only
    // streamed work when its client leaves (llama.cpp, found by its /props); always; never.
    stream_upstream: { enum: ['auto', 'always', 'never'], default: 'auto', 'x-msg': 'must be auto, always or never' },
    anthropic_version: { ...str, default: '2023-06-01' },
    circuit_failures: { ...posInt, default: 5 },
    circuit_cooldown_ms: { ...posMs, default: 30000 },
    chunk_delay_ms: { ...uintMs, default: 0 },
    tokenize_timeout_ms: { ...posMs, default: 500 },
    targets: { type: 'array', items: replica, minItems: 1, 'x-msg': 'must be a non-empty list of {url, weight, metrics_url}' },
    discover,
    // Behind an inference gateway (llm-d, Gateway API Inference Extension): every request sends
    // x-gateway-inference-fairness-id and x-gateway-inference-objective from what was verified.
    inference_gateway: { type: 'boolean' },
    balance: {
      enum: ['round_robin', 'least_outstanding', 'prefix_affinity'], default: 'least_outstanding',
      'x-msg': 'must be one of round_robin, least_outstanding, prefix_affinity',
    },
    affinity_prefix_tokens: { ...posInt, default: 256 },
    metrics_interval_ms: { ...posMs, default: 1000 },
    max_outstanding: { type: ['integer', 'null'], minimum: 1, default: null, 'x-msg': 'must be a positive integer or null' },
    // Used when max_outstanding is set: requests wait here while every replica is full; null = none wait.
    queue: {
      type: ['object', 'null'],
      additionalProperties: false,
      default: {},
      properties: {
        max_wait_ms: { ...posMs, default: 30000 },
        max_queued: { ...uint, default: 1000 },
        fairness: { enum: ['account', 'key', 'none'], default: 'account', 'x-msg': 'must be one of account, key, none' },
      },
    },
    outlier: obj(
      { consecutive_failures: { ...posInt, default: 5 }, eject_ms: { ...posMs, default: 30000 } },
      { default: {} },
    ),
    health_check: {
      type: ['object', 'null'],
      additionalProperties: false,
      default: null,
      properties: {
        path: { type: 'string', pattern: '^/[\\x21-\\x7e]*$', default: '/models', 'x-msg': 'must be a path beginning with /' },
        interval_ms: { ...posMs, default: 5000 },
      },
    },
    forward_params: {
      type: 'array',
      default: [],
      items: {
        type: 'string', pattern: '^(?!(?:model|messages|stream|stream_options)$)[A-Za-z_][A-Za-z0-9_]{0,63}$',
        'x-msg': 'must be a request field name (letters, digits, _), not model, messages, stream or stream_options',
      },
    },
  },
  { required: ['kind'] },
);

/** An MCP server Tollgate fronts (CONTRACT section 17); names and patterns are checked by config/mcp-check.ts. */
const mcpServer = obj(
  {
    url: httpUrl,
    headers: { type: 'object', additionalProperties: str, default: {} },
    timeout_ms: { ...posMs, default: 30000 },
    price: obj({ per_call_units: { ...uint, default: 0 } }, { default: {} }),
    tools: { type: 'object', additionalProperties: obj({ per_call_units: uint }, { required: ['per_call_units'] }), default: {} },
  },
  { required: ['url'] },
);

const account = obj(
  {
    id: slug,
    plan: str,
    wallet_units: { ...uint, default: 0 },
    keys: { type: 'array', items: str, default: [] },
    key_sha256: { type: 'array', items: { type: 'string', pattern: '^[0-9a-fA-F]{64}$', 'x-msg': 'must be 64 hex digits' }, default: [] },
  },
  { required: ['id', 'plan'] },
);

export const configSchema = obj({
  service: obj(
    {
      name: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]*$', default: 'tollgate', 'x-msg': 'must be lowercase letters, digits and ._-' },
      key_prefix: { type: 'string', pattern: '^[A-Za-z0-9]+$', default: 'tg', 'x-msg': 'must be letters and digits' },
    },
    { default: {} },
  ),
  server: obj(
    {
      host: { ...str, default: '127.0.0.1' },
      port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080, 'x-msg': 'must be an integer from 0 to 65535' },
      max_body_bytes: { ...posInt, default: 41943040 },
      // The whole multipart body of an audio route (transcriptions, translations): 25 MiB, as OpenAI's.
      max_audio_bytes: { ...posInt, default: 26214400 },
      body_timeout_ms: { ...posMs, default: 30000 },
      max_connections_per_ip: { type: ['integer', 'null'], minimum: 1, ...exact, default: 256, 'x-msg': 'must be a positive integer, or null for no cap' },
      drain_timeout_ms: { ...uintMs, default: 30000 },
      sse_keepalive_ms: { ...posMs, default: 15000 },
      watch_config: { type: 'boolean', default: false },
      passthrough: { ...nullableStr, default: null },
      passthrough_auth: { type: 'boolean', default: false },
      // true, false, a number of hops or a list of CIDRs (each checked by cross-check.ts).
      trust_proxy: {
        type: ['boolean', 'integer', 'array'], minimum: 0, maximum: 64, items: { type: 'string', 'x-msg': 'must be a CIDR string' }, default: false,
        'x-msg': 'must be true, false, a number of proxy hops (0 to 64) or a list of CIDRs', 'x-max-msg': 'must be at most 64 proxy hops',
      },
    },
    { default: {} },
  ),
  admin: obj({
    token: { ...nullableStr, default: null },
    // Wrong admin tokens one client address may send in 5 minutes before every token attempt
    // from it is refused 429 for the rest of that window (lib/admin/token-guard.ts); null: no limit.
    max_token_failures: { type: ['integer', 'null'], minimum: 1, maximum: 1000000, default: null, 'x-msg': 'must be an integer from 1 to 1000000, or null for no limit' },
  }, { default: {} }),
  // The operator console (CONTRACT section 12, lib/console/): on by default whenever admin.token
  // or console.oidc is set (enabled: null), off with false. cross-check.ts checks oidc's URLs;
  // secrets.ts every secret (and that an SSO console has a key to sign its sessions with).
  console: obj(
    {
      enabled: { type: ['boolean', 'null'], default: null, 'x-msg': 'must be true, false or null (on when admin.token or console.oidc is set)' },
      session_ttl_s: { ...posInt, maximum: 2_592_000, 'x-max-msg': 'must be at most 2592000 s (30 days)', default: 28800 },
      // The key console sessions are signed with (CONTRACT section 21); null: admin.token's.
      session_secret: { ...nullableStr, default: null },
      // Requests (and export pages) one session makes per minute on each instance: lib/console/session-limit.ts.
      requests_per_minute: { type: ['integer', 'null'], minimum: 1, maximum: 1000000, default: 600, 'x-msg': 'must be an integer from 1 to 1000000, or null for no limit' },
      oidc: {
        type: ['object', 'null'],
        additionalProperties: false,
        default: null,
        required: ['issuer', 'client_id', 'redirect_url'],
        properties: {
          issuer: httpUrl,
          client_id: { type: 'string', minLength: 1, 'x-msg': 'must be a non-empty string' },
          client_secret: { ...nullableStr, default: null },
          redirect_url: httpUrl,
          roles_claim: { type: 'string', minLength: 1, default: 'roles', 'x-msg': 'must be a non-empty string (a claim of the ID token)' },
          admin_values: { type: 'array', items: { type: 'string', minLength: 1 }, default: ['admin'], 'x-msg': 'must be a list of non-empty strings' },
          viewer_values: { type: 'array', items: { type: 'string', minLength: 1 }, default: ['viewer'], 'x-msg': 'must be a list of non-empty strings' },
          account_claim: { ...nullableStr, default: null },
        },
      },
    },
    { default: {} },
  ),
  store: obj(
    {
      kind: { enum: ['memory', 'redis'], default: 'memory', 'x-msg': 'must be memory or redis' },
      path: { ...nullableStr, default: null },
      fsync_ms: { ...uintMs, default: 1000 },
      // No default here: cross-check.ts must see whether url was given beside sentinel/cluster.
      // load.ts fills in redis://127.0.0.1:6379 afterwards.
      url: str,
      sentinel: {
        type: ['object', 'null'],
        additionalProperties: false,
        default: null,
        required: ['name', 'sentinels'],
        properties: {
          name: { type: 'string', minLength: 1, 'x-msg': 'must be a non-empty string (the master group name Sentinel monitors)' },
          sentinels: { type: 'array', items: hostPort, minItems: 1, 'x-msg': 'must be a non-empty list of host:port' },
          sentinel_password: { ...nullableStr, default: null },
        },
      },
      cluster: { type: ['array', 'null'], items: hostPort, minItems: 1, default: null, 'x-msg': 'must be a non-empty list of host:port' },
      /** Password of the Redis servers behind store.sentinel or store.cluster (store.url carries its own). */
      password: { ...nullableStr, default: null },
      wait_replicas: { ...uint, default: 0 },
      wait_timeout_ms: { ...posMs },
      prefix: { ...str, default: 'tollgate:' },
      on_error: { enum: ['closed', 'open'], default: 'closed', 'x-msg': 'must be closed or open' },
      timeout_ms: { ...posInt, default: 1000 },
      /**
       * How long a request whose debit's outcome is unknown (a store timeout, a connection lost
       * in flight, replicas that did not confirm) waits for the store to tell, asking again.
       */
      settle_wait_ms: { ...posMs, default: 10000 },
    },
    { default: {} },
  ),
  auth: obj(
    {
      jwt: {
        type: ['object', 'null'],
        additionalProperties: false,
        default: null,
        properties: {
          secret: nullableStr,
          public_key: nullableStr,
          jwks_url: nullableStr,
          issuer: nullableStr,
          audience: nullableStr,
        },
      },
    },
    { default: {} },
  ),
  plans: {
    type: 'object',
    additionalProperties: plan,
    default: {
      free: {
        paid: false, requests_per_minute: 60, tokens_per_minute: 100000, max_concurrent: 4,
        quotas: { requests_per_day: 1000, tokens_per_day: 1000000, units_per_month: null },
      },
      pro: { paid: true, requests_per_minute: 600, tokens_per_minute: 2000000, max_concurrent: 32 },
    },
  },
  accounts: { type: 'array', items: account, default: [] },
  providers: { type: 'object', additionalProperties: provider, default: {} },
  models: { type: 'array', items: model, default: [] },
  mcp: obj({ servers: { type: 'object', additionalProperties: mcpServer, default: {} } }, { default: {} }),
  routing: obj({ auto: { type: 'array', items: str, default: [] } }, { default: {} }),
  content_policy: obj({ block: { type: 'array', items: str, default: [] } }, { default: {} }),
  responses: obj(
    {
      retention_hours: { ...posInt, default: 24 },
      max_bytes: { ...posInt, default: 8388608 },
      max_account_bytes: { ...posInt, default: 67108864 },
      max_chain_length: { ...posInt, default: 1000 },
    },
    { default: {} },
  ),
  // Batches and files (CONTRACT section 18, lib/batch/).
  batch: obj(
    {
      max_file_bytes: { ...posInt, default: 104857600 },
      max_lines: { ...posInt, default: 50000 },
      concurrency: { type: 'integer', minimum: 0, 'x-msg': 'must be a non-negative integer', ...exact, maximum: 10000, default: 8, 'x-max-msg': 'must be at most 10000' },
      retention_days: { ...posInt, maximum: 36500, default: 30, 'x-max-msg': 'must be at most 36500 (100 years)' },
    },
    { default: {} },
  ),
  usage: obj(
    { retention_days: { ...posInt, maximum: 36500, default: 90, 'x-max-msg': 'must be at most 36500 (100 years)' } },
    { default: {} },
  ),
  // Alerts (CONTRACT section 15; lib/alerts/): thresholds in percent of a budget, the wallet's
  // low mark, and the webhooks events are POSTed to (signed with each one's secret).
  alerts: obj(
    {
      thresholds: {
        type: 'array', items: { type: 'integer', minimum: 1, maximum: 100, 'x-msg': 'must be an integer from 1 to 100' },
        uniqueItems: true, default: [50, 80, 100], 'x-msg': 'must be a list of distinct integers from 1 to 100',
      },
      wallet_low_units: { ...nullableUint, default: null },
      webhooks: {
        type: 'array',
        items: obj(
          {
            url: httpUrl,
            // Empty, whitespace and under 16 characters: secrets.ts.
            secret: { type: 'string', 'x-msg': 'must be a string of at least 16 characters' },
            events: {
              type: 'array', items: { enum: ALERT_EVENTS, 'x-msg': `must be one of ${ALERT_EVENTS.join(', ')}` },
              default: [...ALERT_EVENTS], 'x-msg': `must be a list of ${ALERT_EVENTS.join(', ')}`,
            },
          },
          { required: ['url', 'secret'] },
        ),
        default: [],
      },
      delivery_timeout_ms: { ...posMs, default: 10000 },
      sweep_interval_ms: { ...posMs, default: 60000 },
    },
    { default: {} },
  ),
  observe: obj(
    {
      otlp_endpoint: { type: ['string', 'null'], pattern: '^https?://[^\\s]+$', default: null, 'x-msg': 'must be an http:// or https:// URL, or null' },
      otlp_headers: { type: 'object', additionalProperties: str, default: {} },
      service_name: { ...nullableStr, default: null },
      export_interval_ms: { ...posMs, default: 1000 },
    },
    { default: {} },
  ),
});
