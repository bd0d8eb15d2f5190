// Turns a YAML file into a validated, defaulted, deeply frozen Config, or a list of every
// problem as `path.to.field: message`. Runs at start and on reload, never per request.

import { readFile } from 'node:fs/promises';
import { Ajv, type ErrorObject } from 'ajv';
import YAML from 'yaml';
import { configSchema } from './schema.js';
import type { Config } from './types.js';

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[], source?: string) {
    super(`invalid config${source ? ` ${source}` : ''}:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

const ajv = new Ajv({ allErrors: true, useDefaults: true, coerceTypes: true, verbose: true, strict: true });
ajv.addKeyword('x-msg');
const validateSchema = ajv.compile(configSchema);

const ENV_REF = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/** `${NAME}` and `${NAME:-default}` replaced from env; an unset NAME without default is "". */
export function interpolate(text: string, env: NodeJS.ProcessEnv): string {
  return text.replace(ENV_REF, (_m, name: string, fallback: string | undefined) => {
    const value = env[name];
    if (value !== undefined && (value !== '' || fallback === undefined)) return value;
    return fallback ?? '';
  });
}

/**
 * Interpolates every string scalar of the document. Values stay text; the schema converts
 * them where it wants a number or a boolean (so `port: ${PORT:-8080}` works and an all-digit
 * `api_key` stays a string).
 */
function interpolateDocument(doc: YAML.Document, env: NodeJS.ProcessEnv): void {
  YAML.visit(doc, {
    Scalar(_key, node) {
      if (typeof node.value === 'string' && node.value.includes('${')) node.value = interpolate(node.value, env);
    },
  });
}

function pointerToPath(pointer: string): string {
  let out = '';
  for (const raw of pointer.split('/').slice(1)) {
    const seg = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    out += /^\d+$/.test(seg) ? `[${seg}]` : `${out === '' ? '' : '.'}${seg}`;
  }
  return out;
}

function join(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

function describe(e: ErrorObject): string {
  const path = pointerToPath(e.instancePath);
  const custom = (e.parentSchema as Record<string, unknown> | undefined)?.['x-msg'];
  switch (e.keyword) {
    case 'additionalProperties':
      return `${join(path, String(e.params.additionalProperty))}: unknown key`;
    case 'required':
      return `${join(path, String(e.params.missingProperty))}: is required`;
    case 'type':
      return `${path || '(root)'}: ${typeof custom === 'string' ? custom : `must be ${article(String(e.params.type))}`}`;
    case 'enum':
      return `${path || '(root)'}: ${typeof custom === 'string' ? custom : `must be one of ${(e.params.allowedValues as unknown[]).join(', ')}`}`;
    default:
      return `${path || '(root)'}: ${typeof custom === 'string' ? custom : e.message ?? 'is invalid'}`;
  }
}

function article(type: string): string {
  const t = type.replace(/,/g, ' or ');
  return /^[aeiou]/.test(t) ? `an ${t}` : `a ${t}`;
}

function crossCheck(c: Config): string[] {
  const problems: string[] = [];
  const prefix = `${c.service.key_prefix}_`;
  const accountIds = new Set<string>();
  const keys = new Set<string>();
  c.accounts.forEach((a, i) => {
    if (accountIds.has(a.id)) problems.push(`accounts[${i}].id: duplicate account id "${a.id}"`);
    accountIds.add(a.id);
    if (!Object.hasOwn(c.plans, a.plan)) problems.push(`accounts[${i}].plan: unknown plan "${a.plan}"`);
    a.keys.forEach((k, j) => {
      if (!k.startsWith(prefix) || k.length <= prefix.length) problems.push(`accounts[${i}].keys[${j}]: must begin with "${prefix}"`);
      if (keys.has(k)) problems.push(`accounts[${i}].keys[${j}]: the same key is listed twice`);
      keys.add(k);
    });
  });

  for (const [name, p] of Object.entries(c.providers)) {
    if (p.kind !== 'echo' && p.base_url === undefined && p.targets === undefined) problems.push(`providers.${name}.base_url: is required for kind ${p.kind}`);
    if (p.base_url !== undefined) {
      try { new URL(p.base_url); } catch { problems.push(`providers.${name}.base_url: must be an http:// or https:// URL`); }
    }
    problems.push(...replicaProblems(name, p));
  }

  const modelIds = new Set<string>();
  c.models.forEach((m, i) => {
    if (m.id === 'auto') problems.push(`models[${i}].id: "auto" is reserved for routing.auto`);
    if (modelIds.has(m.id)) problems.push(`models[${i}].id: duplicate model id "${m.id}"`);
    modelIds.add(m.id);
    if (!Object.hasOwn(c.providers, m.provider)) problems.push(`models[${i}].provider: unknown provider "${m.provider}"`);
    m.fallbacks.forEach((f, j) => {
      if (!Object.hasOwn(c.providers, f.provider)) problems.push(`models[${i}].fallbacks[${j}].provider: unknown provider "${f.provider}"`);
    });
    if (m.max_output_tokens > m.context_window) problems.push(`models[${i}].max_output_tokens: must not exceed context_window (${m.context_window})`);
    if (m.supports_vision === false && m.max_images > 0) problems.push(`models[${i}].max_images: must be 0 when supports_vision is false`);
  });

  // With discovery, auto may name models that only the upstream lists.
  const discovers = Object.values(c.providers).some((p) => p.discover_models);
  c.routing.auto.forEach((id, i) => {
    if (!modelIds.has(id) && !discovers) problems.push(`routing.auto[${i}]: unknown model "${id}"`);
  });

  c.content_policy.block.forEach((re, i) => {
    try { new RegExp(re, 'u'); } catch (err) {
      problems.push(`content_policy.block[${i}]: not a valid regular expression (${(err as Error).message})`);
    }
  });

  if (c.server.passthrough !== null) {
    try {
      const u = new URL(c.server.passthrough);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('protocol');
    } catch { problems.push('server.passthrough: must be an http:// or https:// URL'); }
  }

  const jwt = c.auth.jwt;
  if (jwt !== null) {
    const sources = (['secret', 'public_key', 'jwks_url'] as const).filter((k) => typeof jwt[k] === 'string' && jwt[k] !== '');
    if (sources.length !== 1) problems.push('auth.jwt: set exactly one of secret, public_key, jwks_url (non-empty)');
  }
  return problems;
}

/** A provider's replicas (CONTRACT section 7): exactly one of base_url and targets, distinct URLs. */
function replicaProblems(name: string, p: Config['providers'][string]): string[] {
  const problems: string[] = [];
  const at = `providers.${name}`;
  if (p.targets === undefined) return problems;
  if (p.kind === 'echo') problems.push(`${at}.targets: the echo provider has no replicas`);
  if (p.base_url !== undefined) problems.push(`${at}.targets: set exactly one of base_url and targets`);
  const seen = new Set<string>();
  p.targets.forEach((r, i) => {
    for (const key of ['url', 'metrics_url'] as const) {
      const v = r[key];
      if (v === undefined) continue;
      try { new URL(v); } catch { problems.push(`${at}.targets[${i}].${key}: must be an http:// or https:// URL`); }
    }
    const u = r.url.replace(/\/+$/, '');
    if (seen.has(u)) problems.push(`${at}.targets[${i}].url: the same replica is listed twice`);
    seen.add(u);
  });
  return problems;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** Validates a parsed config object (a copy of it is defaulted and frozen). */
export function validateConfig(input: unknown): Config {
  const data: unknown = input === null || input === undefined ? {} : structuredClone(input);
  if (!validateSchema(data)) {
    const lines = (validateSchema.errors ?? []).map(describe);
    throw new ConfigError([...new Set(lines)]);
  }
  const config = data as unknown as Config;
  const problems = crossCheck(config);
  if (problems.length > 0) throw new ConfigError(problems);
  for (const m of config.models) m.upstream_model ??= m.id;
  if (config.admin.token === '') config.admin.token = null;
  return deepFreeze(config);
}

/** Parses YAML text: env interpolation, then validation. */
export function parseConfig(text: string, env: NodeJS.ProcessEnv = process.env): Config {
  const doc = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(doc.errors.map((e) => `(yaml): ${e.message.split('\n')[0]}`));
  }
  interpolateDocument(doc, env);
  return validateConfig(doc.toJS({ maxAliasCount: 100 }));
}

export async function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`(file): cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`]);
  }
  try {
    return parseConfig(text, env);
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(err.problems, path);
    throw err;
  }
}
