// Per-key controls (CONTRACT section 8): reading them from an admin body, and the compiled form
// the request path checks (model globs, CIDR lists, expiry, the queue priority of section 13)
// built once per cached key, so a request pays a comparison or a lookup, never a parse. Also
// the UTC budget periods.

import { GatewayError, clip } from '../errors.js';
import { cidrMatcher, parseCidr } from '../http/cidr.js';
import { perUtcDay } from '../utc-day.js';
import { isObject } from '../objects.js';
import type { QueuePriority } from '../config/types.js';
import { readKeyTags } from './attribution.js';
import {
  KEY_PRIORITIES, MAX_UNITS, TEAM_ID, periodId, spentIn,
  type BudgetPeriod, type BudgetPeriods, type KeyControls, type KeyLimits, type KeyPatch, type KeyRecord, type TeamPatch, type TeamRecord,
} from '../store/types.js';

export const CONTROL_FIELDS = ['name', 'models', 'expires_at', 'budget', 'limits', 'priority', 'allowed_ips', 'metadata', 'team', 'mcp_tools', 'tags', 'tags_locked', 'end_user_budget'] as const;
export const LIMIT_FIELDS = ['requests_per_minute', 'tokens_per_minute', 'max_concurrent'] as const;
const PERIODS = ['day', 'week', 'month'] as const;

/** Bounds of what one key may carry. */
export const MAX_NAME = 200;
export const MAX_MODELS = 100;
export const MAX_PATTERN = 256;
export const MAX_IPS = 100;
export const MAX_METADATA_ENTRIES = 32;
export const MAX_METADATA_KEY = 64;
export const MAX_METADATA_VALUE = 512;

// An ISO-8601 date, or date and time with seconds optional, a fraction and a zone (Z or ±hh:mm).
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?([Zz]|[+-]\d{2}:?\d{2}))?$/;
// No control characters (C0, DEL, C1) in names, patterns or metadata.
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;


const invalid = (param: string, what: string) => new GatewayError('invalid_value', `Invalid value for '${param}': ${what}.`, { param });
const badType = (param: string, what: string) => new GatewayError('invalid_type', `Invalid type for '${param}': expected ${what}.`, { param });

function text(v: unknown, param: string, max: number): string {
  if (typeof v !== 'string') throw badType(param, 'a string');
  if (v.length === 0 || v.length > max || CONTROL_CHARS.test(v)) throw invalid(param, `1 to ${max} characters, no control characters`);
  return v;
}

function safeInteger(v: unknown, param: string, min: number, rounded: ReadonlySet<number>): number {
  if (typeof v !== 'number') throw badType(param, 'an integer');
  if (!Number.isSafeInteger(v) || rounded.has(v) || v < min || v > MAX_UNITS) throw invalid(param, `an integer from ${min} to ${MAX_UNITS}`);
  return v;
}

function list(v: unknown, param: string, max: number): unknown[] {
  if (!Array.isArray(v)) throw badType(param, 'an array (or null)');
  if (v.length === 0 || v.length > max) throw invalid(param, `1 to ${max} items (null for no restriction)`);
  return v;
}

/** An ISO-8601 date or time as Unix ms; a date alone is its UTC midnight. */
export function parseIsoTime(v: string): number | undefined {
  const m = ISO.exec(v);
  if (m === null) return undefined;
  const [, y, mo, d, h, mi, s] = m;
  if (Number(mo) < 1 || Number(mo) > 12 || Number(d) < 1 || Number(d) > 31) return undefined;
  if (h !== undefined && (Number(h) > 23 || Number(mi) > 59 || Number(s ?? 0) > 59)) return undefined;
  const ms = Date.parse(h === undefined ? `${v}T00:00:00Z` : v.replace(' ', 'T').replace(/([+-]\d{2})(\d{2})$/, '$1:$2'));
  if (!Number.isFinite(ms)) return undefined;
  // Date.parse rolls 2026-02-31 over to March: refuse a day the month does not have.
  if (new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d))).getUTCDate() !== Number(d)) return undefined;
  return ms;
}

function readBudget(v: unknown, rounded: ReadonlySet<number>, name = 'budget'): KeyControls['budget'] {
  if (v === null) return null;
  if (!isObject(v)) throw badType(name, 'an object {units, period} (or null)');
  if (v.units === undefined || v.units === null) throw new GatewayError('missing_required_parameter', `Missing required parameter: '${name}.units'.`, { param: `${name}.units` });
  const units = safeInteger(v.units, `${name}.units`, 0, rounded);
  const p = v.period ?? null;
  if (p !== null && typeof p !== 'string') throw badType(`${name}.period`, "a string: 'day', 'week' or 'month' (or null)");
  if (p !== null && !(PERIODS as readonly string[]).includes(p)) {
    throw new GatewayError('unsupported_value', `Unsupported value for '${name}.period': ${clip(JSON.stringify(p), 64)}. Supported values are: 'day', 'week', 'month', null.`, { param: `${name}.period` });
  }
  return { units, period: p as BudgetPeriod };
}

/** The limits named (null clears one); `limits: null` clears them all. */
function readLimits(v: unknown, rounded: ReadonlySet<number>): Partial<KeyLimits> {
  if (v === null) return { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null };
  const limits: Partial<KeyLimits> = {};
  if (!isObject(v)) throw badType('limits', 'an object (or null)');
  for (const k of LIMIT_FIELDS) {
    const x = v[k];
    if (x !== undefined) limits[k] = x === null ? null : safeInteger(x, `limits.${k}`, 1, rounded);
  }
  return limits;
}

/** A queue priority (CONTRACT section 13); null: the plan's. */
function readPriority(v: unknown): QueuePriority | null {
  if (v === null) return null;
  if (typeof v !== 'string') throw badType('priority', "a string: 'high', 'normal' or 'low' (or null for the plan's)");
  if (!(KEY_PRIORITIES as readonly string[]).includes(v)) {
    throw new GatewayError('unsupported_value', `Unsupported value for 'priority': ${clip(JSON.stringify(v), 64)}. Supported values are: 'high', 'normal', 'low', null.`, { param: 'priority' });
  }
  return v as QueuePriority;
}

function readMetadata(v: unknown): Record<string, string> {
  if (v === null) return {};
  if (!isObject(v)) throw badType('metadata', 'an object of strings (or null)');
  const entries = Object.entries(v);
  if (entries.length > MAX_METADATA_ENTRIES) throw invalid('metadata', `at most ${MAX_METADATA_ENTRIES} entries`);
  const out: Record<string, string> = {};
  for (const [k, x] of entries) {
    if (k.length === 0 || k.length > MAX_METADATA_KEY || CONTROL_CHARS.test(k)) throw invalid('metadata', `keys of 1 to ${MAX_METADATA_KEY} characters, no control characters`);
    const param = `metadata.${k}`;
    if (typeof x !== 'string') throw badType(param, 'a string');
    if (x.length > MAX_METADATA_VALUE || CONTROL_CHARS.test(x)) throw invalid(param, `at most ${MAX_METADATA_VALUE} characters, no control characters`);
    out[k] = x;
  }
  return out;
}

/**
 * The controls a key request or a PATCH body names, checked: each present member (null clears
 * it), 400 naming the first bad field. `rounded` holds the values of number literals JSON.parse
 * rounded (an amount equal to one is refused rather than taken inexactly). Members the body
 * should not have are refused before, by its shape (../admin/body-shape.ts).
 */
export function readControls(body: Record<string, unknown>, rounded: ReadonlySet<number>): KeyPatch {
  const out: KeyPatch = {};
  if (body.name !== undefined) out.name = body.name === null ? null : text(body.name, 'name', MAX_NAME);
  if (body.models !== undefined) out.models = readPatterns(body.models, 'models');
  if (body.expires_at !== undefined) {
    if (body.expires_at === null) out.expires_at = null;
    else {
      if (typeof body.expires_at !== 'string') throw badType('expires_at', 'an ISO-8601 date or time string (or null)');
      const ms = parseIsoTime(body.expires_at);
      if (ms === undefined) throw invalid('expires_at', 'an ISO-8601 date or time, e.g. 2027-01-31T00:00:00Z');
      out.expires_at = ms;
    }
  }
  if (body.budget !== undefined) out.budget = readBudget(body.budget, rounded);
  if (body.limits !== undefined) out.limits = readLimits(body.limits, rounded);
  if (body.priority !== undefined) out.priority = readPriority(body.priority);
  if (body.allowed_ips !== undefined) {
    out.allowed_ips = body.allowed_ips === null ? null : list(body.allowed_ips, 'allowed_ips', MAX_IPS).map((c, i) => {
      const param = `allowed_ips[${i}]`;
      if (typeof c !== 'string') throw badType(param, 'a CIDR string');
      if (parseCidr(c) === undefined) throw invalid(param, 'an IPv4 or IPv6 address or CIDR, e.g. 10.0.0.0/8 or 2001:db8::/32');
      return c;
    });
  }
  if (body.metadata !== undefined) out.metadata = readMetadata(body.metadata);
  if (body.team !== undefined) out.team = body.team === null ? null : readTeamId(body.team, 'team');
  if (body.mcp_tools !== undefined) out.mcp_tools = readPatterns(body.mcp_tools, 'mcp_tools');
  if (body.tags !== undefined) out.tags = readKeyTags(body.tags, 'tags');
  if (body.end_user_budget !== undefined) out.end_user_budget = readBudget(body.end_user_budget, rounded, 'end_user_budget');
  if (body.tags_locked !== undefined) {
    if (typeof body.tags_locked !== 'boolean') throw badType('tags_locked', 'a boolean');
    out.tags_locked = body.tags_locked;
  }
  return out;
}

/** A list of globs (models, mcp_tools), or null for no restriction of its own. */
function readPatterns(v: unknown, param: string): string[] | null {
  return v === null ? null : list(v, param, MAX_MODELS).map((m, i) => text(m, `${param}[${i}]`, MAX_PATTERN));
}

/** A team id (CONTRACT section 15): 1-128 letters, digits and ._@+- (no ':'). */
export function readTeamId(v: unknown, param: string): string {
  if (typeof v !== 'string') throw badType(param, 'a team id string');
  if (!TEAM_ID.test(v)) throw invalid(param, "1-128 letters, digits and ._@+-, starting with a letter or digit");
  return v;
}

/**
 * A team's settings a create or PATCH body names (name, budget, limits, models), checked as a
 * key's are; members the body should not have are refused before, by its shape.
 */
export function readTeamSettings(body: Record<string, unknown>, rounded: ReadonlySet<number>): TeamPatch {
  const out: TeamPatch = {};
  if (body.name !== undefined) out.name = body.name === null ? null : text(body.name, 'name', MAX_NAME);
  if (body.models !== undefined) out.models = readPatterns(body.models, 'models');
  if (body.budget !== undefined) out.budget = readBudget(body.budget, rounded);
  if (body.limits !== undefined) out.limits = readLimits(body.limits, rounded);
  if (body.mcp_tools !== undefined) out.mcp_tools = readPatterns(body.mcp_tools, 'mcp_tools');
  return out;
}

/** A glob (`*` any run of characters) as a test; a plain slug as an equality. */
function globMatcher(pattern: string): (slug: string) => boolean {
  if (!pattern.includes('*')) return (slug) => slug === pattern;
  const re = new RegExp(`^${pattern.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\/-]/g, '\\$&')).join('.*')}$`, 's');
  return (slug) => re.test(slug);
}

/** A model allowlist, compiled; null when the key may use any model. */
export function modelMatcher(models: readonly string[] | null): ((slug: string) => boolean) | null {
  if (models === null) return null;
  const tests = models.map(globMatcher);
  const memo = new Map<string, boolean>();
  return (slug) => {
    let ok = memo.get(slug);
    if (ok === undefined) {
      ok = tests.some((t) => t(slug));
      if (memo.size < 1000) memo.set(slug, ok);
    }
    return ok;
  };
}

/** An IP allowlist, compiled; null when the key may be used from anywhere. */
export function ipMatcher(cidrs: readonly string[] | null): ((ip: string) => boolean) | null {
  return cidrs === null ? null : cidrMatcher(cidrs);
}

/** The budget periods Unix ms `now` falls in (UTC). */
export function budgetPeriods(now: number): BudgetPeriods {
  // Every metered request of a key asks; the periods change once a UTC day.
  return { ...periodsOfDay(now) };
}

const periodsOfDay = perUtcDay(computePeriods);

function computePeriods(now: number): BudgetPeriods {
  const d = new Date(now);
  const iso = d.toISOString();
  const dow = (d.getUTCDay() + 6) % 7; // Monday 0
  const monday = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - dow)).toISOString().slice(0, 10);
  return { day: `d:${iso.slice(0, 10)}`, week: `w:${monday}`, month: `m:${iso.slice(0, 7)}` };
}

/** When a budget of `period` next starts from 0, as ISO-8601; null for a budget that never resets. */
export function budgetResetsAt(period: BudgetPeriod, now: number): string | null {
  if (period === null) return null;
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  const day = d.getUTCDate();
  if (period === 'day') return new Date(Date.UTC(y, m, day + 1)).toISOString();
  if (period === 'week') return new Date(Date.UTC(y, m, day - ((d.getUTCDay() + 6) % 7) + 7)).toISOString();
  return new Date(Date.UTC(y, m + 1, 1)).toISOString();
}

/** What the request path checks for a developer key, compiled once per cached lookup. */
export interface KeyPolicy {
  id: string;
  expiresAt: number | null;
  models: ((slug: string) => boolean) | null;
  /** The key's own patterns, for messages. */
  patterns: readonly string[] | null;
  ips: ((ip: string) => boolean) | null;
  limits: KeyLimits;
  /** The key's band in a provider's queue; null: the plan's. */
  priority: QueuePriority | null;
  /** The key's team (CONTRACT section 15): its limits count over all its keys; null: none. */
  team: { id: string; limits: KeyLimits } | null;
  /** The key's tags, added to each request's (CONTRACT section 20). */
  tags: readonly string[];
  /** The request's own tags are ignored. */
  tagsLocked: boolean;
  /** Each end user's cap per period (CONTRACT section 20); null: none. */
  endUserBudget: KeyControls['end_user_budget'];
  /** The key's and its team's MCP tool patterns over `<server>__<tool>` (CONTRACT section 17); null: the plan's alone. */
  mcpTools?: ((slug: string) => boolean) | null;
}

/**
 * What the request path checks for a key, with its team's part: a model must be allowed by the
 * key's list and the team's (`models` tests both), and the team's limits apply on top.
 */
export function compilePolicy(record: KeyRecord, team?: TeamRecord): KeyPolicy {
  const c = record.controls;
  const own = modelMatcher(c.models);
  const theirs = team === undefined ? null : modelMatcher(team.models);
  const models = own === null ? theirs : theirs === null ? own : (slug: string) => own(slug) && theirs(slug);
  const ownTools = modelMatcher(c.mcp_tools ?? null);
  const theirTools = modelMatcher(team?.mcp_tools ?? null);
  const mcpTools = ownTools === null ? theirTools : theirTools === null ? ownTools : (slug: string) => ownTools(slug) && theirTools(slug);
  return {
    id: record.id, expiresAt: c.expires_at, models, patterns: c.models, ips: ipMatcher(c.allowed_ips), limits: c.limits,
    priority: c.priority, team: team === undefined ? null : { id: team.id, limits: team.limits }, mcpTools, tags: c.tags, tagsLocked: c.tags_locked,
    endUserBudget: c.end_user_budget,
  };
}

/** A key's or team's budget as the admin API shows it: its spend this period and when it resets. */
function budgetView(budget: { units: number; period: BudgetPeriod } | null, spent: { period: string | null; units: number }, now: number): Record<string, unknown> {
  const period = budget?.period ?? null;
  return {
    units: budget?.units ?? null, period, spent_units: spentIn(spent.period, spent.units, periodId(period, budgetPeriods(now))),
    resets_at: budget === null ? null : budgetResetsAt(period, now),
  };
}

/** A team as GET /admin/accounts/{id}/teams shows it, with its budget's spend this period. */
export function teamView(t: TeamRecord, now = Date.now()): Record<string, unknown> {
  return {
    id: t.id,
    account: t.account,
    name: t.name,
    budget: budgetView(t.budget, t.spent, now),
    limits: t.limits,
    models: t.models,
    mcp_tools: t.mcp_tools ?? null,
    created_at: new Date(t.created_at).toISOString(),
  };
}

/** A key as GET /admin/accounts/{id}/keys shows it: never the plaintext or its digest. */
export function keyView(record: KeyRecord, prefix: string, now = Date.now()): Record<string, unknown> {
  const c = record.controls;
  return {
    id: record.id,
    account: record.account,
    name: c.name,
    hint: record.last4 === null ? null : `${prefix}_…${record.last4}`,
    created_at: new Date(record.created_at).toISOString(),
    last_used_at: record.last_used_at === null ? null : new Date(record.last_used_at).toISOString(),
    models: c.models,
    mcp_tools: c.mcp_tools ?? null,
    expires_at: c.expires_at === null ? null : new Date(c.expires_at).toISOString(),
    budget: budgetView(c.budget, record.spent, now),
    limits: c.limits,
    priority: c.priority,
    allowed_ips: c.allowed_ips,
    metadata: c.metadata,
    team: c.team,
    tags: c.tags,
    tags_locked: c.tags_locked,
    end_user_budget: c.end_user_budget,
    rotated_key_valid_until: record.previous === null || record.previous.until <= now ? null : new Date(record.previous.until).toISOString(),
  };
}

