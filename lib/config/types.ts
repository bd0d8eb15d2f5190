// The validated, defaulted and frozen shape of the config file (CONTRACT section 3).

export interface PriceConfig {
  input_per_mtok: number;
  output_per_mtok: number;
  /** Prompt tokens read from the upstream's cache; absent: input_per_mtok. */
  cached_input_per_mtok?: number;
  /** Prompt tokens written to the upstream's cache; absent: input_per_mtok. */
  cache_write_per_mtok?: number;
  /** Units per minute of audio (type: transcription), charged per second started; 0 when not set. */
  audio_per_minute?: number;
}

export interface PlanConfig {
  paid: boolean;
  requests_per_minute: number | null;
  tokens_per_minute: number | null;
  max_concurrent: number | null;
  /** The plan's band in a provider's queue (CONTRACT section 13). */
  priority: QueuePriority;
  /** Its share within the band, against other accounts (or keys) waiting: tokens served per unit of weight. */
  fair_weight: number;
  /** Patterns (`*` any run) over `<server>__<tool>` of the MCP tools its keys may use; [] (the default) or absent: none (CONTRACT section 17). */
  mcp_tools?: readonly string[];
  /** A batch line costs this percent less than the same live request (CONTRACT section 18). */
  batch_discount_percent?: number;
  quotas: { requests_per_day: number | null; tokens_per_day: number | null; units_per_month: number | null };
}

/** Queue bands, served strictly in this order. */
export type QueuePriority = 'high' | 'normal' | 'low';

/** A provider's queue: used when max_outstanding is set and every replica is at it. */
export interface QueueConfig {
  /** A request waiting longer is refused 503 model_overloaded. */
  max_wait_ms: number;
  /** A request arriving with this many waiting is refused 503 model_overloaded. */
  max_queued: number;
  /** Whose shares are kept fair within a band: accounts, keys, or none (first come, first served). */
  fairness: 'account' | 'key' | 'none';
}

export type ProviderKind = 'openai' | 'anthropic' | 'echo';

/** How a provider's replicas share its requests (CONTRACT section 7). */
export type BalancePolicy = 'round_robin' | 'least_outstanding' | 'prefix_affinity';

/** One replica of a provider's server. */
export interface ReplicaConfig {
  url: string;
  weight: number;
  /** The replica's Prometheus endpoint: queue depth and KV-cache use are read from it. */
  metrics_url?: string;
}

/**
 * The headers an inference gateway schedules on (llm-d, Gateway API Inference Extension): sent
 * by a provider with inference_gateway from what Tollgate verified, never passed on from a client.
 */
export const INFERENCE_FAIRNESS_HEADER = 'x-gateway-inference-fairness-id';
export const INFERENCE_OBJECTIVE_HEADER = 'x-gateway-inference-objective';
export const INFERENCE_HEADERS: ReadonlySet<string> = new Set([INFERENCE_FAIRNESS_HEADER, INFERENCE_OBJECTIVE_HEADER]);

/** A fleet from the A/AAAA records of a name (CONTRACT section 19). */
export interface DiscoverConfig {
  dns: string;
  port: number;
  refresh_ms: number;
  /** host:port of the DNS server asked; null: the system's. */
  resolver: string | null;
  /** Each replica's base URL path; absent: /v1 for openai, none for anthropic. */
  path?: string;
  /** Each replica's metrics path (as a target's metrics_url); absent: none. */
  metrics_path?: string;
}

export interface ProviderConfig {
  kind: ProviderKind;
  base_url?: string;
  api_key: string;
  timeout_ms: number;
  connect_timeout_ms: number;
  max_connections: number;
  /** A non-streaming upstream answer above this many bytes is a provider_error. */
  max_response_bytes: number;
  discover_models: boolean;
  discover_interval_ms: number;
  headers: Record<string, string>;
  model_defaults: Partial<Omit<ModelConfig, 'id' | 'provider' | 'upstream_model' | 'fallbacks'>>;
  stream_usage: boolean;
  /** Calls for non-streaming clients go streamed upstream (assembled here): always, never, or auto (llama.cpp). */
  stream_upstream: 'auto' | 'always' | 'never';
  anthropic_version: string;
  /** Consecutive failures that open a target's circuit, and how long it stays open. */
  circuit_failures: number;
  circuit_cooldown_ms: number;
  /** echo only: pause between streamed words (smoke tests of slow streams). */
  chunk_delay_ms: number;
  /** Extra request fields passed to this upstream as they are (grammar, top_k, min_p...). */
  forward_params: string[];
  /** `tokenizer: upstream`: how long a /tokenize call may take before the local estimate is used. */
  tokenize_timeout_ms: number;
  /** Replicas of the server; `base_url` is the one-replica short form (exactly one of the two). */
  targets?: ReplicaConfig[];
  /** Replicas found in DNS instead (CONTRACT section 19): exclusive with base_url and targets. */
  discover?: DiscoverConfig;
  /** Send the inference gateway's fairness and objective headers from the verified caller. */
  inference_gateway?: boolean;
  balance: BalancePolicy;
  /** The prompt prefix that keys prefix_affinity, in tokens (approximated as 4 characters each). */
  affinity_prefix_tokens: number;
  metrics_interval_ms: number;
  /** Requests in flight per replica above which it is skipped; null = no cap. */
  max_outstanding: number | null;
  /** Where requests wait while every replica is at max_outstanding; null: none wait (the replica is skipped). */
  queue: QueueConfig | null;
  outlier: { consecutive_failures: number; eject_ms: number };
  /** Active health checks: GET {replica url}{path} every interval_ms; null = none. */
  health_check: { path: string; interval_ms: number } | null;
}

export interface TargetConfig { provider: string; upstream_model?: string }

// The tokenizers a config may name live with the counting (tokens/names.ts).
import type { TokenizerName, TokenizerSpec } from '../tokens/names.js';
export type { TokenizerName, TokenizerSpec };

export type ModelType = 'chat' | 'embedding' | 'rerank' | 'transcription';

export interface ModelConfig {
  id: string;
  /**
   * Which routes serve it: chat (chat completions, Messages, Responses), embedding, rerank
   * (rerank and score) or transcription (audio transcriptions and translations).
   */
  type: ModelType;
  provider: string;
  upstream_model?: string;
  fallbacks: TargetConfig[];
  context_window: number;
  max_output_tokens: number;
  supports_vision: boolean;
  max_images: number;
  paid_only: boolean;
  tokenizer: TokenizerSpec;
  /** Prompt tokens an image is taken to cost when estimating. */
  image_tokens: number;
  price: PriceConfig;
  created?: number;
}

export interface AccountConfig {
  id: string;
  plan: string;
  wallet_units: number;
  keys: string[];
  key_sha256: string[];
}

export interface Config {
  service: { name: string; key_prefix: string };
  server: {
    host: string;
    port: number;
    max_body_bytes: number;
    /** The largest whole body of an audio route (multipart: the file and its fields); above it 413. */
    max_audio_bytes: number;
    /** A request body not complete this long after the request's start is answered 408 and closed (a deadline). */
    body_timeout_ms: number;
    /**
     * Open connections one client address (the socket's) may hold on the standalone server;
     * beyond it a connection's first request is answered 429 too_many_connections and the
     * connection closed. Peers inside a trust_proxy CIDR list are exempt. null: no cap.
     */
    max_connections_per_ip: number | null;
    drain_timeout_ms: number;
    sse_keepalive_ms: number;
    watch_config: boolean;
    passthrough: string | null;
    passthrough_auth: boolean;
    /**
     * Which X-Forwarded-For entry a key's allowed_ips are matched against (auth/client-address.ts):
     * false or 0 the socket's peer; true one trusted hop (the rightmost entry); N hops (the N-th
     * from the right); a list of CIDRs: peers inside them are proxies (the rightmost entry outside).
     */
    trust_proxy: boolean | number | readonly string[];
  };
  admin: {
    token: string | null;
    /** Wrong admin tokens one address may send per 5 minutes before it is refused 429 (lib/admin/token-guard.ts); null: no limit. */
    max_token_failures: number | null;
  };
  /** The operator console (lib/console/; CONTRACT section 12). */
  console: {
    /** null: on when admin.token or console.oidc is set. */
    enabled: boolean | null;
    session_ttl_s: number;
    /** The key console sessions are signed with (at least 32 bytes); null: admin.token's. */
    session_secret: string | null;
    /** Requests (and export pages) one console session may make per minute on each instance; null: no limit. */
    requests_per_minute: number | null;
    oidc: {
      issuer: string;
      client_id: string;
      client_secret: string | null;
      /** The gateway serves the callback at this URL's path. */
      redirect_url: string;
      /** The ID token claim holding the user's roles (a string or a list of strings). */
      roles_claim: string;
      admin_values: readonly string[];
      viewer_values: readonly string[];
      /** The claim naming a member's account (neither admin nor viewer); null: no members. */
      account_claim: string | null;
    } | null;
  };
  store: {
    kind: 'memory' | 'redis';
    path: string | null;
    fsync_ms: number;
    /**
     * One Redis (the default, redis://127.0.0.1:6379, when none of url, sentinel, cluster is
     * given); absent with sentinel or cluster.
     */
    url?: string;
    /** Redis Sentinel: the master group `name`, found through `sentinels` (host:port). */
    sentinel: { name: string; sentinels: string[]; sentinel_password: string | null } | null;
    /** Redis Cluster: seed nodes (host:port). */
    cluster: string[] | null;
    /** Password of the servers behind sentinel or cluster. */
    password: string | null;
    /** Replicas that must acknowledge each debit (Redis WAIT) before it is reported; 0 = none. */
    wait_replicas: number;
    /** How long WAIT may take; below timeout_ms (default: half of it). */
    wait_timeout_ms: number;
    prefix: string;
    on_error: 'closed' | 'open';
    /** Upper bound on every store command (redis); a store slower than this counts as down. */
    timeout_ms: number;
    /**
     * How long a request whose debit's outcome is unknown waits for the store to tell whether it
     * landed (store/guard.ts); past it the request is answered 503 and the debit undone.
     */
    settle_wait_ms: number;
  };
  auth: {
    jwt: {
      secret?: string | null;
      public_key?: string | null;
      jwks_url?: string | null;
      issuer?: string | null;
      audience?: string | null;
    } | null;
  };
  plans: Record<string, PlanConfig>;
  accounts: AccountConfig[];
  providers: Record<string, ProviderConfig>;
  models: ModelConfig[];
  /** MCP servers fronted at /mcp and /mcp/<name> (CONTRACT section 17, lib/mcp/). */
  mcp: { servers: Record<string, McpServerConfig> };
  routing: { auto: string[] };
  content_policy: { block: string[] };
  /**
   * Stored Responses API answers (`store: true`): each lives retention_hours (its ancestors at
   * least as long); one whose own part is above max_bytes, or would take its account's stored
   * bytes above max_account_bytes, or would make its conversation longer than max_chain_length
   * responses, is answered with `store: false` and not kept.
   */
  responses: { retention_hours: number; max_bytes: number; max_account_bytes: number; max_chain_length: number };
  /** Batches and files (CONTRACT section 18, lib/batch/). */
  batch: { max_file_bytes: number; max_lines: number; concurrency: number; retention_days: number };
  /** Usage records (one per metered request) are kept at least this many days. */
  usage: { retention_days: number };
  /** Alerts (CONTRACT section 15, lib/alerts/): what is detected and where it is POSTed. */
  alerts: {
    /** Percent of a key's (or team's) budget whose crossing is an event, each once per period. */
    thresholds: number[];
    /** An available balance falling below this is a wallet.low event; null: none. */
    wallet_low_units: number | null;
    webhooks: AlertWebhookConfig[];
    /** One delivery attempt's whole time (connect to the end of the answer). */
    delivery_timeout_ms: number;
    /** How often keys about to expire are looked for (key.expiring). */
    sweep_interval_ms: number;
  };
  /** Tracing: off while otlp_endpoint is null. */
  observe: {
    /** OTLP/HTTP collector: a base URL (`/v1/traces` is appended) or the full traces URL. */
    otlp_endpoint: string | null;
    /** Extra headers of every export (a collector's auth). */
    otlp_headers: Record<string, string>;
    /** resource attribute service.name; default: service.name. */
    service_name: string | null;
    /** Longest wait before a finished span is sent. */
    export_interval_ms: number;
  };
}

export type AlertEventType = 'budget.threshold' | 'wallet.low' | 'key.expiring' | 'upstream.ejected';

export interface AlertWebhookConfig {
  /** http:// or https:// URL the events are POSTed to. */
  url: string;
  /** HMAC-SHA256 key of x-tollgate-signature. */
  secret: string;
  /** The events this webhook gets; all four by default. */
  events: AlertEventType[];
}

/** One MCP server (Streamable HTTP) Tollgate is a client of. */
export interface McpServerConfig {
  url: string;
  /** Sent upstream on every request; never the client's own. */
  headers: Record<string, string>;
  timeout_ms: number;
  /** Units a tools/call costs, unless the tool has its own price. */
  price: { per_call_units: number };
  tools: Record<string, { per_call_units: number }>;
}
