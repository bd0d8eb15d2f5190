// Turns a YAML file into a validated, defaulted, deeply frozen Config, or a list of every
// problem as `path.to.field: message`. Runs at start and on reload, never per request.

import { readFile } from 'node:fs/promises';
import type { ErrorObject, ValidateFunction } from 'ajv';
import YAML from 'yaml';
import { clip } from '../errors.js';
import { crossCheck } from './cross-check.js';
import { localProblems } from './local.js';
import generatedValidator from './schema-validator.js';
import type { Config } from './types.js';

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[], source?: string) {
    super(`invalid config${source ? ` ${source}` : ''}:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

/** Alias expansions allowed in one file: plenty for anchors in a config, none to spare for a bomb. */
const MAX_ALIAS_COUNT = 100;
/**
 * schema.ts compiled by Ajv ahead of time (allErrors, useDefaults, coerceTypes, verbose,
 * strict; see scripts/config-validator.mjs): neither Ajv's compiler nor the schema is loaded.
 */
const validateSchema = generatedValidator as unknown as ValidateFunction;
const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

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

/** A key as a path shows it: quoted when empty or holding spaces or control characters, so a problem stays one readable line. */
function keyText(key: string): string {
  return key === '' || /[\s\p{Cc}]/u.test(key) ? JSON.stringify(key) : key;
}

function pointerToPath(pointer: string): string {
  let out = '';
  for (const raw of pointer.split('/').slice(1)) {
    const seg = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    out += /^\d+$/.test(seg) ? `[${seg}]` : `${out === '' ? '' : '.'}${keyText(seg)}`;
  }
  return out;
}

function join(path: string, key: string): string {
  return path === '' ? keyText(key) : `${path}.${keyText(key)}`;
}

function describe(e: ErrorObject): string {
  const path = pointerToPath(e.instancePath);
  const schema = e.parentSchema as Record<string, unknown> | undefined;
  const custom = (e.keyword === 'maximum' ? schema?.['x-max-msg'] : undefined) ?? schema?.['x-msg'];
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

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/**
 * The configs validateConfig made. A config is validated once, where it enters (the file, or an
 * embedder's object): what takes a Config (the gateway, a reload) is given this one back as it is.
 */
const validated = new WeakSet<object>();

/**
 * Validates a parsed config object (a copy of it is defaulted and frozen). A config this
 * function made is returned as it is: it was validated, and it is frozen. Validating a plain copy
 * of one gives the same config again (idempotent): the defaults it filled in are values the
 * schema accepts beside what was given.
 */
export function validateConfig(input: unknown): Config {
  if (typeof input === 'object' && input !== null && validated.has(input)) return input as Config;
  const data: unknown = input === null || input === undefined ? {} : structuredClone(input);
  // Schema and cross-reference problems are listed together: fixing one kind never reveals
  // more of the other.
  const schemaOk = validateSchema(data);
  const problems = [...(schemaOk ? [] : (validateSchema.errors ?? []).map(describe)), ...crossCheck(data)];
  if (problems.length > 0) throw new ConfigError([...new Set(problems)]);
  const config = data as unknown as Config;
  // The default Redis only where no other way to reach Redis is given: a url beside
  // sentinel or cluster is a problem (crossCheck), and this config must pass again as it is.
  if (config.store.sentinel === null && config.store.cluster === null) config.store.url ??= DEFAULT_REDIS_URL;
  config.store.wait_timeout_ms ??= Math.max(1, Math.floor(config.store.timeout_ms / 2));
  for (const m of config.models) m.upstream_model ??= m.id;
  if (config.admin.token === '') config.admin.token = null;
  deepFreeze(config);
  validated.add(config);
  return config;
}

/** Where the first alias `*name` stands, as a config path (`server`, `models[2].price`). */
function aliasPath(doc: YAML.Document.Parsed | undefined, name: string): string {
  let found = '(yaml)';
  if (doc === undefined) return found;
  YAML.visit(doc, {
    Alias(_key, node, path) {
      if (node.source !== name) return undefined;
      const parts: string[] = [];
      let prev: unknown = node;
      for (let i = path.length - 1; i >= 0; i--) {
        const p = path[i];
        if (YAML.isPair(p)) parts.unshift(String(YAML.isScalar(p.key) ? p.key.value : p.key));
        else if (YAML.isSeq(p)) parts.unshift(`[${p.items.indexOf(prev as never)}]`);
        prev = p;
      }
      found = parts.join('.').replace(/\.\[/g, '[') || '(yaml)';
      return YAML.visit.BREAK;
    },
  });
  return found;
}

/** Parses YAML text: env interpolation, then validation. */
export function parseConfig(text: string, env: NodeJS.ProcessEnv = process.env): Config {
  return validateConfig(parseDocument(text, env));
}

/** YAML text to data, `${NAME}` interpolated; ConfigError for a document that cannot be read. */
function parseDocument(text: string, env: NodeJS.ProcessEnv): unknown {
  let doc: YAML.Document.Parsed | undefined;
  try {
    doc = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
    if (doc.errors.length > 0) {
      throw new ConfigError([...new Set(doc.errors.map((e) => `(yaml): ${e.message.split('\n')[0]!.replace(/:$/, '')}`))]);
    }
    interpolateDocument(doc, env);
    return doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    // yaml throws (rather than reporting) on an alias bomb; a document nested too deeply for the
    // stack lands here too. Either way: one line, no stack trace.
    const message = (err as Error).message ?? String(err);
    const unresolved = /^Unresolved alias[^:]*: (.*)$/.exec(message.split('\n')[0]!);
    throw new ConfigError([/excessive alias/i.test(message)
      ? `(yaml): aliases expand to more than ${MAX_ALIAS_COUNT} copies (a YAML alias bomb?); use fewer aliases`
      : unresolved !== null
        ? `${aliasPath(doc, unresolved[1]!)}: unresolved alias *${clip(unresolved[1]!, 64)} (an anchor must be set before its alias)`
        : `(yaml): cannot read the document: ${message.split('\n')[0]}`]);
  }
}

/**
 * A config file as `tollgate check`, `tollgate serve` and its reloads all take it: read,
 * interpolated, validated, and what it names on this machine checked where the gateway would use
 * it (local.ts: files, folders, the host), every problem listed at once. The one path a file takes to a Config.
 */
export async function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`(file): cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`]);
  }
  let data: unknown;
  try {
    data = parseDocument(text, env);
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(err.problems, path);
    throw err;
  }
  const { config, problems } = await checkData(data);
  if (config === undefined || problems.length > 0) throw new ConfigError(problems, path);
  return config;
}

/**
 * A parsed document checked: the schema's problems and the local ones (files, addresses),
 * without repeats; the config when the schema took it.
 */
async function checkData(data: unknown): Promise<{ config: Config | undefined; problems: string[] }> {
  let config: Config | undefined;
  const problems: string[] = [];
  try {
    config = validateConfig(data);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
  }
  // On the validated config when there is one: the values as the gateway reads them (`host:
  // 123` is the string "123" there, not skipped as a number).
  problems.push(...await localProblems(config ?? data));
  return { config, problems: [...new Set(problems)] };
}

/**
 * `tollgate check` on a YAML text (the console's Config page): every problem, or none. The
 * text is interpolated with an empty environment: `${NAME}` is "" (or its default), so a
 * check can never echo the gateway's environment back in a problem line.
 */
export async function checkConfigText(text: string): Promise<{ config: Config | undefined; problems: string[] }> {
  let data: unknown;
  try {
    data = parseDocument(text, {});
  } catch (err) {
    if (err instanceof ConfigError) return { config: undefined, problems: err.problems };
    throw err;
  }
  const { config, problems } = await checkData(data);
  return { config: problems.length === 0 ? config : undefined, problems };
}
