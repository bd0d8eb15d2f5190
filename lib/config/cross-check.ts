// Checks the schema cannot express: references between sections (a model's provider, an
// account's plan, routing.auto's models...), duplicates and regular expressions; and warnings
// for values that are valid but cannot work (a price no wallet can ever pay).
//
// crossCheck runs on the data even when the schema refused it, so that `check` lists every
// problem at once: it reads only the parts whose shape is right and skips the rest (the
// schema's own messages already name those).

import { isIP } from 'node:net';
import { publicKeyProblem } from './jwt-key.js';
import { parseCidr } from '../http/cidr.js';
import { clip } from '../errors.js';
import { mcpProblems } from './mcp-check.js';
import { secretProblems } from './secrets.js';
import { INFERENCE_HEADERS, type Config } from './types.js';

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const obj = (v: unknown): Obj => (isObj(v) ? v : {});
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const text = (v: unknown): v is string => typeof v === 'string';
/** A config value quoted for a problem line: escaped, so it can never break the line. */
const q = (v: unknown): string => JSON.stringify(v);
/** Model types other than chat, and the API an upstream must have to serve one. */
const NOT_CHAT: Partial<Record<string, string>> = { embedding: 'embeddings', rerank: 'rerank or score API', transcription: 'audio API' };
const article = (word: string): string => (/^[aeiou]/.test(word) ? 'an' : 'a');

/** Every cross-reference problem of a (possibly schema-invalid) config, as `path: message`. */
export function crossCheck(data: unknown): string[] {
  const c = obj(data);
  const problems: string[] = [];
  const plans = obj(c.plans);
  const providers = obj(c.providers);
  const keyPrefix = obj(c.service).key_prefix ?? 'tg';
  // An invalid prefix has its own problem; keys are not judged against it.
  const prefix = text(keyPrefix) && /^[A-Za-z0-9]+$/.test(keyPrefix) ? `${keyPrefix}_` : undefined;

  list(obj(c.server).trust_proxy).forEach((v, i) => {
    if (text(v) && parseCidr(v) === undefined) {
      problems.push(`server.trust_proxy[${i}]: must be an IPv4 or IPv6 address or CIDR, e.g. 10.0.0.0/8 or 2001:db8::/32 (not ${q(clip(v, 64))})`);
    }
  });

  const accountIds = new Set<string>();
  const keys = new Set<string>();
  list(c.accounts).forEach((raw, i) => {
    const a = obj(raw);
    if (text(a.id)) {
      if (accountIds.has(a.id)) problems.push(`accounts[${i}].id: duplicate account id ${q(a.id)}`);
      accountIds.add(a.id);
    }
    if (text(a.plan) && !Object.hasOwn(plans, a.plan)) problems.push(`accounts[${i}].plan: unknown plan ${q(a.plan)}`);
    list(a.keys).forEach((k, j) => {
      if (!text(k)) return;
      if (prefix !== undefined && (!k.startsWith(prefix) || k.length <= prefix.length)) problems.push(`accounts[${i}].keys[${j}]: must begin with ${q(prefix)}`);
      if (keys.has(k)) problems.push(`accounts[${i}].keys[${j}]: the same key is listed twice`);
      keys.add(k);
    });
  });

  for (const [name, raw] of Object.entries(providers)) {
    const p = obj(raw);
    if ((p.kind === 'openai' || p.kind === 'anthropic') && p.base_url === undefined && p.targets === undefined && p.discover === undefined) {
      problems.push(`providers.${name}.base_url: is required for kind ${p.kind} (or targets: a list of replicas)`);
    }
    if (text(p.base_url)) {
      try { new URL(p.base_url); } catch { problems.push(`providers.${name}.base_url: must be an http:// or https:// URL`); }
    }
    problems.push(...replicaProblems(name, p));
    problems.push(...headerProblems(`providers.${name}.headers`, p.headers));
    if (p.inference_gateway === true) {
      for (const h of Object.keys(obj(p.headers))) {
        if (INFERENCE_HEADERS.has(h.toLowerCase())) problems.push(`providers.${name}.headers.${h}: is set by inference_gateway from the verified caller; remove it`);
      }
    }
    if (text(p.api_key) && !HEADER_VALUE.test(p.api_key)) problems.push(`providers.${name}.api_key: ${BAD_VALUE}`);
  }
  problems.push(...headerProblems('observe.otlp_headers', obj(c.observe).otlp_headers));
  for (const [name, raw] of Object.entries(obj(obj(c.mcp).servers))) problems.push(...headerProblems(`mcp.servers.${name}.headers`, obj(raw).headers));
  problems.push(...mcpProblems(c));

  const modelIds = new Set<string>();
  list(c.models).forEach((raw, i) => {
    const m = obj(raw);
    if (text(m.id)) {
      if (m.id === 'auto') problems.push(`models[${i}].id: "auto" is reserved for routing.auto`);
      if (modelIds.has(m.id)) problems.push(`models[${i}].id: duplicate model id ${q(m.id)}`);
      modelIds.add(m.id);
    }
    if (text(m.provider) && !Object.hasOwn(providers, m.provider)) problems.push(`models[${i}].provider: unknown provider ${q(m.provider)}`);
    list(m.fallbacks).forEach((f, j) => {
      const provider = obj(f).provider;
      if (text(provider) && !Object.hasOwn(providers, provider)) problems.push(`models[${i}].fallbacks[${j}].provider: unknown provider ${q(provider)}`);
    });
    const positive = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 0;
    if (positive(m.max_output_tokens) && positive(m.context_window) && m.max_output_tokens > m.context_window) {
      problems.push(`models[${i}].max_output_tokens: must not exceed context_window (${m.context_window})`);
    }
    if (m.supports_vision === false && positive(m.max_images)) {
      problems.push(`models[${i}].max_images: must be 0 when supports_vision is false`);
    }
    const api = NOT_CHAT[String(m.type)];
    if (api !== undefined) {
      // Anthropic has no embeddings, rerank or audio API: such a model could never answer.
      [m.provider, ...list(m.fallbacks).map((f) => obj(f).provider)].forEach((name, j) => {
        if (text(name) && obj(providers[name]).kind === 'anthropic') {
          problems.push(`models[${i}]${j === 0 ? '.provider' : `.fallbacks[${j - 1}].provider`}: provider ${q(name)} is anthropic, which has no ${api}`);
        }
      });
      if (text(m.id) && list(obj(c.routing).auto).includes(m.id)) problems.push(`models[${i}].type: ${article(String(m.type))} ${m.type} model cannot be in routing.auto`);
    }
  });

  // With discovery, auto may name models that only the upstream lists.
  const discovers = Object.values(providers).some((p) => obj(p).discover_models === true);
  list(obj(c.routing).auto).forEach((id, i) => {
    if (text(id) && !modelIds.has(id) && !discovers) problems.push(`routing.auto[${i}]: unknown model ${q(id)}`);
  });

  list(obj(c.content_policy).block).forEach((re, i) => {
    if (!text(re)) return;
    try { new RegExp(re, 'u'); } catch (err) {
      problems.push(`content_policy.block[${i}]: not a valid regular expression (${(err as Error).message})`);
    }
  });

  // Node listens on every address for an empty host: `host: ${HOST}` with HOST unset would
  // open the gateway to the network unasked.
  if (obj(c.server).host === '') problems.push('server.host: must not be empty (0.0.0.0 or :: listen on every address)');

  const passthrough = obj(c.server).passthrough;
  if (text(passthrough)) {
    try {
      const u = new URL(passthrough);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('protocol');
    } catch { problems.push('server.passthrough: must be an http:// or https:// URL'); }
  }

  // The schema's pattern lets through what is no URL (`http://[::1`): tracing would then fail
  // to start, and only the log would say so.
  const otlp = obj(c.observe).otlp_endpoint;
  if (text(otlp) && /^https?:\/\/\S+$/.test(otlp)) {
    try { new URL(otlp); } catch { problems.push('observe.otlp_endpoint: must be an http:// or https:// URL, or null'); }
  }

  problems.push(...storeProblems(obj(c.store)));
  problems.push(...alertProblems(obj(c.alerts)));

  const jwt = obj(c.auth).jwt;
  if (isObj(jwt)) {
    const sources = ['secret', 'public_key', 'jwks_url'].filter((k) => text(jwt[k]) && jwt[k] !== '');
    if (sources.length !== 1) problems.push('auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)');
    // What serve would refuse at start, check refuses now.
    if (text(jwt.public_key) && jwt.public_key !== '') {
      const why = publicKeyProblem(jwt.public_key);
      if (why !== undefined) problems.push(`auth.jwt.public_key: ${why}`);
    }
    if (text(jwt.jwks_url) && jwt.jwks_url !== '') {
      let ok = false;
      try { ok = ['http:', 'https:'].includes(new URL(jwt.jwks_url).protocol); } catch { /* not a URL */ }
      if (!ok) problems.push('auth.jwt.jwks_url: must be an http:// or https:// URL');
    }
  }
  problems.push(...consoleProblems(c));
  problems.push(...secretProblems(c));
  return problems;
}

/** Paths the gateway answers itself: an SSO callback there would never be reached. */
const OWNED_PATH = /^\/(v1|admin|healthz|readyz|metrics)(\/|$)/;

/** console: enabled needs a way in; oidc's URLs must parse and its callback path be free. */
function consoleProblems(c: Obj): string[] {
  const problems: string[] = [];
  const con = obj(c.console);
  const oidc = con.oidc;
  const token = obj(c.admin).token;
  if (con.enabled === true && !(text(token) && token !== '') && !isObj(oidc)) {
    problems.push('console.enabled: the console needs admin.token or console.oidc to sign anyone in');
  }
  if (!isObj(oidc)) return problems;
  for (const name of ['issuer', 'redirect_url']) {
    const v = oidc[name];
    if (!text(v)) continue;
    let url: URL | undefined;
    try { url = new URL(v); } catch { /* not a URL */ }
    if (url === undefined) { problems.push(`console.oidc.${name}: must be an http:// or https:// URL`); continue; }
    if (name === 'redirect_url' && (OWNED_PATH.test(url.pathname) || url.pathname === '/console' || url.pathname === '/console/')) {
      problems.push(`console.oidc.redirect_url: its path ${q(clip(url.pathname, 64))} is one the gateway answers itself; use e.g. /console/callback`);
    }
  }
  return problems;
}

// Headers sent upstream (a provider's headers and api_key, the OTLP exporter's headers): what
// the HTTP clients refuse to send (undici, node:http) would fail every request to that upstream
// as a provider_error, with nothing saying why.
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const BAD_VALUE = 'must not hold control characters (a new line, say) or characters beyond Latin-1: it is sent as an HTTP header';
/** A Host header: a name or address, an IPv6 address in brackets, then an optional port. */
const HOST_VALUE = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)(?::[0-9]{1,5})?$/;
const BAD_HOST = 'must be a host name or address, with an optional :port (an IPv6 address in brackets)';
/** Set by the HTTP client from the request itself (undici refuses most from a caller). */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'expect']);

function headerProblems(path: string, headers: unknown): string[] {
  const problems: string[] = [];
  for (const [name, value] of Object.entries(obj(headers))) {
    const at = `${path}.${/^[\x21-\x7e]+$/.test(name) ? name : q(name)}`;
    if (!HEADER_NAME.test(name)) problems.push(`${at}: not a valid header name`);
    else if (FRAMING.has(name.toLowerCase())) problems.push(`${at}: set by the HTTP client itself; it cannot be configured`);
    if (text(value) && !HEADER_VALUE.test(value)) problems.push(`${at}: ${BAD_VALUE}`);
    // undici takes a Host value apart for the TLS server name: one it cannot parse ('[' with no
    // ']') fails every request.
    else if (text(value) && name.toLowerCase() === 'host' && !HOST_VALUE.test(value)) problems.push(`${at}: ${BAD_HOST}`);
  }
  return problems;
}

/** store: one way to reach Redis, host:port that can be, and WAIT bounded by timeout_ms. */
function storeProblems(store: Obj): string[] {
  const problems: string[] = [];
  const given = (['url', 'sentinel', 'cluster'] as const).filter((k) => store[k] !== undefined && store[k] !== null);
  for (const k of given.slice(1)) {
    problems.push(`store.${k}: cannot be combined with store.${given[0]}; give one of store.url, store.sentinel, store.cluster`);
  }
  if (store.kind !== 'redis') {
    for (const k of ['sentinel', 'cluster'] as const) {
      if (store[k] !== undefined && store[k] !== null) problems.push(`store.${k}: needs store.kind redis`);
    }
    if (typeof store.wait_replicas === 'number' && store.wait_replicas > 0) problems.push('store.wait_replicas: needs store.kind redis');
  }
  if (text(store.url)) {
    const why = redisUrlProblem(store.url);
    if (why !== undefined) problems.push(`store.url: ${why}`);
  }
  const ports = (v: unknown, path: string) => list(v).forEach((hp, i) => {
    if (!text(hp)) return;
    const m = /:(\d+)$/.exec(hp);
    if (m !== null && (Number(m[1]) < 1 || Number(m[1]) > 65535)) problems.push(`${path}[${i}]: port must be from 1 to 65535`);
  });
  ports(obj(store.sentinel).sentinels, 'store.sentinel.sentinels');
  // A brace in the prefix would move or break the `{acct:ID}` hash tags that keep an account's
  // keys in one slot ("p{}" makes every key hash whole: scripts would span slots).
  if (store.cluster !== undefined && store.cluster !== null && text(store.prefix) && /[{}]/.test(store.prefix)) {
    problems.push('store.prefix: must not contain { or } with store.cluster (hash tags keep each account in one slot)');
  }
  ports(store.cluster, 'store.cluster');
  const timeout = typeof store.timeout_ms === 'number' ? store.timeout_ms : 1000;
  if (typeof store.wait_timeout_ms === 'number' && store.wait_timeout_ms >= timeout) {
    problems.push(`store.wait_timeout_ms: must be less than store.timeout_ms (${timeout}), which bounds every store call`);
  }
  return problems;
}

/**
 * Why ioredis could not use `url` (it parses it with new URL and decodes the user and password
 * when the store opens, and a bad one stopped `serve`), or undefined. Never quotes the URL: it
 * may hold a password.
 */
function redisUrlProblem(url: string): string | undefined {
  let u: URL;
  try { u = new URL(url); } catch { return 'must be a redis:// or rediss:// URL (redis://[:PASSWORD@]HOST[:PORT][/DB])'; }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') return 'must be a redis:// or rediss:// URL (redis://[:PASSWORD@]HOST[:PORT][/DB])';
  if (u.hostname === '') return 'must name a host (redis://HOST:PORT)';
  try {
    decodeURIComponent(u.username);
    decodeURIComponent(u.password);
  } catch {
    return 'its user or password is not valid percent-encoding (write % as %25)';
  }
  if (u.pathname !== '' && u.pathname !== '/' && !/^\/\d+$/.test(u.pathname)) return 'its path must be a database number (redis://HOST:PORT/0)';
  return undefined;
}

/** Units per million tokens above which even one token costs more than 2^53-1 units. */
const UNPAYABLE = BigInt(Number.MAX_SAFE_INTEGER) * 1_000_000n;

function priceWarnings(price: unknown, path: string): string[] {
  const out: string[] = [];
  for (const [field, value] of Object.entries(obj(price))) {
    // BigInt(): exact whether the price is a number or, with exact metering, a bigint.
    if ((typeof value === 'number' && Number.isInteger(value)) || typeof value === 'bigint') {
      if (BigInt(value) > UNPAYABLE) {
        out.push(`${path}.${field}: ${String(value)} units per million tokens: one token costs more than the largest possible wallet (${Number.MAX_SAFE_INTEGER} units), so no request can ever be paid`);
      }
    }
  }
  return out;
}

/** Valid but unworkable values of a validated config, as `path: message` (never fatal). */
export function configWarnings(c: Config): string[] {
  const warnings: string[] = [];
  c.models.forEach((m, i) => warnings.push(...priceWarnings(m.price, `models[${i}].price`)));
  for (const [name, p] of Object.entries(c.providers)) {
    warnings.push(...priceWarnings(p.model_defaults.price, `providers.${name}.model_defaults.price`));
    for (const f of p.forward_params) {
      if (f === 'n_predict' || f === 'n_cmpl') {
        warnings.push(`providers.${name}.forward_params: ${f} is never forwarded as it is: it is held and sent as ${f === 'n_predict' ? 'max_tokens' : 'n'}`);
      }
    }
  }
  warnings.push(...passthroughWarnings(c));
  return warnings;
}

/** A provider's replicas (CONTRACT sections 7, 19): exactly one of base_url, targets and discover, distinct URLs. */
function replicaProblems(name: string, p: Obj): string[] {
  const problems: string[] = [];
  const at = `providers.${name}`;
  problems.push(...discoverProblems(at, p));
  if (!Array.isArray(p.targets)) return problems;
  if (p.kind === 'echo') problems.push(`${at}.targets: the echo provider has no replicas`);
  if (p.base_url !== undefined) problems.push(`${at}.targets: set exactly one of base_url and targets`);
  const seen = new Set<string>();
  p.targets.forEach((raw, i) => {
    const r = obj(raw);
    for (const key of ['url', 'metrics_url'] as const) {
      const v = r[key];
      if (!text(v)) continue;
      try { new URL(v); } catch { problems.push(`${at}.targets[${i}].${key}: must be an http:// or https:// URL`); }
    }
    if (!text(r.url)) return;
    const u = r.url.replace(/\/+$/, '');
    if (seen.has(u)) problems.push(`${at}.targets[${i}].url: the same replica is listed twice`);
    seen.add(u);
  });
  return problems;
}

/** `discover` (CONTRACT section 19): alone (no base_url, no targets), not on echo, a resolver that is an IP address and port. */
function discoverProblems(at: string, p: Obj): string[] {
  if (p.discover === undefined) return [];
  const problems: string[] = [];
  if (p.kind === 'echo') problems.push(`${at}.discover: the echo provider has no replicas`);
  if (p.targets !== undefined) problems.push(`${at}.discover: set exactly one of base_url, targets and discover (discover and targets are exclusive)`);
  if (p.base_url !== undefined) problems.push(`${at}.discover: set exactly one of base_url, targets and discover (discover and base_url are exclusive)`);
  const resolver = obj(p.discover).resolver;
  // The schema refuses what is not shaped as an address and port; this, what is shaped so but is none (300.1.1.1:53, :0).
  if (text(resolver) && /^(?:\[[0-9A-Fa-f:.]+\]|[0-9.]+):[0-9]{1,5}$/.test(resolver) && resolverAddress(resolver) === undefined) {
    problems.push(`${at}.discover.resolver: must be an IP address and a port from 1 to 65535 (1.2.3.4:53 or [::1]:53)`);
  }
  return problems;
}

/** host:port of a DNS server as node:dns setServers takes it, or undefined when not an IP address and port 1-65535. */
export function resolverAddress(v: string): string | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(v);
  if (m === null) return undefined;
  const host = m[1] ?? m[2]!;
  const port = Number(m[3]);
  const family = isIP(host);
  if (port < 1 || port > 65535 || family === 0 || (m[1] !== undefined) !== (family === 6)) return undefined;
  return v;
}

/**
 * Passthrough is unmetered by design: pointed at a provider's own host, that server's generation
 * endpoints are refused (http/generation-paths.ts), but its other endpoints (management such as
 * llama.cpp's /slots and /lora-adapters or Ollama's /api/pull and /api/delete, /tokenize,
 * /metrics) are reachable through the gateway (and, without passthrough_auth, by anyone).
 */
function passthroughWarnings(c: Config): string[] {
  if (c.server.passthrough === null) return [];
  let target: URL;
  try { target = new URL(c.server.passthrough); } catch { return []; }
  const hostOf = (u: URL) => `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`;
  const out: string[] = [];
  if (/^\/v1(\/|$)/i.test(target.pathname)) {
    out.push(`server.passthrough: its path ${target.pathname} is under the model server's /v1, which is metered: ` +
      'every request passthrough would send there is refused 404; point passthrough at the server\'s root');
  }
  for (const [name, p] of Object.entries(c.providers)) {
    const urls = p.targets?.map((t) => t.url) ?? (p.base_url === undefined ? [] : [p.base_url]);
    const base = urls.map((u) => { try { return new URL(u); } catch { return undefined; } })
      .find((u) => u !== undefined && hostOf(u) === hostOf(target));
    if (base === undefined) continue;
    out.push(`server.passthrough: points at the host of provider ${q(name)} (${hostOf(base)}): its generation endpoints are refused, ` +
      `but its other endpoints (management, tokenize, metrics) are reachable through the gateway${c.server.passthrough_auth ? ' with a key' : ' without a key (passthrough_auth is false)'}`);
  }
  return out;
}

/**
 * alerts.webhooks (CONTRACT section 15): each URL one a request can go to, and each at most once
 * (a webhook's deliveries are kept by its URL).
 */
function alertProblems(alerts: Obj): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  list(alerts.webhooks).forEach((w, i) => {
    const url = obj(w).url;
    if (!text(url) || !/^https?:\/\/\S+$/.test(url)) return;
    let parsed: URL;
    try { parsed = new URL(url); } catch { problems.push(`alerts.webhooks[${i}].url: must be an http:// or https:// URL`); return; }
    if (seen.has(parsed.href)) problems.push(`alerts.webhooks[${i}].url: the same URL is listed twice`);
    seen.add(parsed.href);
  });
  return problems;
}
