// The store's rules, shared by both stores (./memory/, ./redis/) and by their callers through
// ./types.ts: what ids a store takes, the bounds of a balance and the rule of a credit, and a
// key's controls on the store side (their shape, their defaults, a PATCH applied, their check
// when read back from a journal, a snapshot or a Redis hash, and the budget spend a period
// counts). Where a Redis script applies the same rule, its comment says so. The controls' admin
// side (reading them from a request body) and the compiled form the request path checks are
// ../auth/controls.ts.

import type { AccountConfig, QueuePriority } from '../config/types.js';
import { sha256Hex } from './digest.js';

// ---- ids ---------------------------------------------------------------------------------

/** Ids the stores take (account, key, request, ...): non-empty strings. */
export function requireId(what: string, v: unknown): void {
  if (typeof v !== 'string' || v === '') throw new TypeError(`${what} must be a non-empty string`);
}

/**
 * A hold's request id: an id that does not begin with '#' (the Redis holds hash keeps its sums
 * in such fields; every store refuses them alike).
 */
export function requireRequestId(v: unknown): void {
  requireId('request id', v);
  if ((v as string).startsWith('#')) throw new TypeError("request id must not begin with '#'");
}

// ---- units -------------------------------------------------------------------------------

/** The largest balance or amount a store keeps: beyond it integer arithmetic is not exact. */
export const MAX_UNITS = Number.MAX_SAFE_INTEGER;

/**
 * Why a credit of `units` to `balance` must be refused, if it must (both safe integers). The
 * Redis store's credit script applies the same rule.
 */
export function creditRefusal(balance: number, units: number): 'below_zero' | 'above_max' | undefined {
  if (units < 0 && balance + units < 0) return 'below_zero';
  // Compared without forming the sum, which could round above MAX_UNITS.
  if (units > 0 && balance > MAX_UNITS - units) return 'above_max';
  return undefined;
}

// ---- a key's controls ---------------------------------------------------------------------

/** How often a key's budget starts again from 0 (UTC; weeks start on Monday); null: never. */
export type BudgetPeriod = 'day' | 'week' | 'month' | null;

export interface KeyLimits {
  requests_per_minute: number | null;
  tokens_per_minute: number | null;
  max_concurrent: number | null;
}

/** A key's controls (CONTRACT section 8), as the admin API sets them. */
export interface KeyControls {
  name: string | null;
  /** Catalog slugs or globs (`llama-*`) the key may use; null: any the plan allows. */
  models: string[] | null;
  /** Unix milliseconds after which the key answers 401 key_expired; null: never. */
  expires_at: number | null;
  /** Units the key may spend per period; null: no budget of its own (the wallet still bounds it). */
  budget: { units: number; period: BudgetPeriod } | null;
  /** Per-key limits on top of the plan's; null members: only the plan's. */
  limits: KeyLimits;
  /** The key's band in a provider's queue (CONTRACT section 13); null: its plan's priority. */
  priority: QueuePriority | null;
  /** IPv4/IPv6 CIDRs the key may be used from; null: anywhere. */
  allowed_ips: string[] | null;
  metadata: Record<string, string>;
  /** The team (inside the key's account) whose budget, limits and models apply too; null: none. */
  team: string | null;
  /** Patterns over `<server>__<tool>` narrowing the plan's MCP tools (CONTRACT section 17); null or absent: the plan's. */
  mcp_tools?: string[] | null;
  /** Tags every request of the key carries (CONTRACT section 20); [] for none. */
  tags: string[];
  /** True: the request's own tags are ignored (a caller cannot mislabel its spend). */
  tags_locked: boolean;
  /** Units each end user of the key may spend per period (CONTRACT section 20); null: no cap per end user. */
  end_user_budget: { units: number; period: BudgetPeriod } | null;
}

/** A change of controls: each member named replaces the key's; `limits` members one by one. */
export type KeyPatch = Partial<Omit<KeyControls, 'limits'>> & { limits?: Partial<KeyLimits> };

/** `base` with `patch` applied (see KeyPatch); a new object, sharing nothing with either. */
export function applyPatch(base: KeyControls, patch: KeyPatch): KeyControls {
  const { limits, ...rest } = structuredClone(patch);
  return { ...structuredClone(base), ...rest, limits: { ...base.limits, ...limits } };
}

export function defaultControls(): KeyControls {
  return {
    name: null, models: null, expires_at: null, budget: null,
    limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null },
    priority: null, allowed_ips: null, metadata: {}, team: null, tags: [], tags_locked: false, end_user_budget: null,
  };
}

export const str = (v: unknown): v is string => typeof v === 'string';
export const int = (v: unknown): v is number => Number.isSafeInteger(v);

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const nullableInt = (v: unknown): v is number | null => v === null || int(v);
const strList = (v: unknown): v is string[] | null => v === null || (Array.isArray(v) && v.every(str));

/** The queue priorities a key may carry. */
export const KEY_PRIORITIES: readonly QueuePriority[] = ['high', 'normal', 'low'];

/** Controls as written by this store, or null when they are not. */
export function toControls(v: unknown): KeyControls | null {
  if (!isRecord(v) || !isRecord(v.limits) || !isRecord(v.metadata)) return null;
  const { name, models, expires_at, budget, limits, allowed_ips, metadata } = v;
  if (!(name === null || str(name)) || !strList(models) || !nullableInt(expires_at) || !strList(allowed_ips)) return null;
  // Controls written before keys had a priority have none: the plan's.
  const priority = v.priority ?? null;
  if (!(priority === null || KEY_PRIORITIES.includes(priority as QueuePriority))) return null;
  if (!(budget === null || (isRecord(budget) && int(budget.units) && (budget.period === null || ['day', 'week', 'month'].includes(budget.period as string))))) return null;
  if (!nullableInt(limits.requests_per_minute) || !nullableInt(limits.tokens_per_minute) || !nullableInt(limits.max_concurrent)) return null;
  if (!Object.values(metadata).every(str)) return null;
  // Controls written before teams name none.
  const team = v.team ?? null;
  if (!(team === null || (str(team) && TEAM_ID.test(team)))) return null;
  // Controls written before tags (CONTRACT section 20) have none, unlocked.
  const tags = v.tags ?? [];
  const locked = v.tags_locked ?? false;
  if (!Array.isArray(tags) || !tags.every(str) || typeof locked !== 'boolean') return null;
  const eub = v.end_user_budget ?? null;
  if (!(eub === null || (isRecord(eub) && int(eub.units) && (eub.period === null || ['day', 'week', 'month'].includes(eub.period as string))))) return null;
  return {
    name, models, expires_at,
    budget: budget === null ? null : { units: budget.units as number, period: budget.period as BudgetPeriod },
    limits: { requests_per_minute: limits.requests_per_minute, tokens_per_minute: limits.tokens_per_minute, max_concurrent: limits.max_concurrent },
    priority: priority as QueuePriority | null,
    allowed_ips, metadata: { ...metadata } as Record<string, string>, team: team as string | null, tags: [...tags] as string[], tags_locked: locked,
    end_user_budget: eub === null ? null : { units: eub.units as number, period: eub.period as BudgetPeriod },
    // Controls written before MCP grants (CONTRACT section 17) have none: the plan's.
    ...(strList(v.mcp_tools) && v.mcp_tools !== null ? { mcp_tools: [...v.mcp_tools] } : {}),
  };
}

// ---- teams -----------------------------------------------------------------------------------

/**
 * A team's id: unique across the gateway; no ':' (the Redis store keeps a team's fields in its
 * account's hash as t:<id>:<member>) and nothing a hold's value uses as a separator.
 */
export const TEAM_ID = /^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$/;

/** A team's settings (CONTRACT section 15), as the admin API sets them. */
export interface TeamSettings {
  name: string | null;
  /** Units the team's keys may spend together per period; null: no team budget. */
  budget: { units: number; period: BudgetPeriod } | null;
  /** Limits on top of the plan's and each key's, counted over the team's keys together. */
  limits: KeyLimits;
  /** Slugs or globs the team's keys may use (with the plan's and the key's own); null: any. */
  models: string[] | null;
  /** Patterns over `<server>__<tool>` narrowing its keys' MCP tools (CONTRACT section 17); null or absent: the plan's. */
  mcp_tools?: string[] | null;
}

export type TeamPatch = Partial<Omit<TeamSettings, 'limits'>> & { limits?: Partial<KeyLimits> };

export interface TeamRecord extends TeamSettings {
  id: string;
  account: string;
  created_at: number;
  /** Units spent in period `period` (see spentIn), by settled requests of the team's keys. */
  spent: { period: string; units: number };
}

export function defaultTeamSettings(): TeamSettings {
  return { name: null, budget: null, limits: { requests_per_minute: null, tokens_per_minute: null, max_concurrent: null }, models: null };
}

/** `base` with `patch` applied; a new object. */
export function applyTeamPatch<T extends TeamSettings>(base: T, patch: TeamPatch): T {
  const { limits, ...rest } = structuredClone(patch);
  return { ...structuredClone(base), ...rest, limits: { ...base.limits, ...limits } };
}

/** Settings as written by a store, or null when they are not. */
export function toTeamSettings(v: unknown): TeamSettings | null {
  if (!isRecord(v) || !isRecord(v.limits)) return null;
  const { name, budget, limits, models } = v;
  if (!(name === null || str(name)) || !strList(models)) return null;
  if (!(budget === null || (isRecord(budget) && int(budget.units) && (budget.period === null || ['day', 'week', 'month'].includes(budget.period as string))))) return null;
  if (!nullableInt(limits.requests_per_minute) || !nullableInt(limits.tokens_per_minute) || !nullableInt(limits.max_concurrent)) return null;
  return {
    name, models,
    budget: budget === null ? null : { units: budget.units as number, period: budget.period as BudgetPeriod },
    limits: { requests_per_minute: limits.requests_per_minute, tokens_per_minute: limits.tokens_per_minute, max_concurrent: limits.max_concurrent },
    ...(strList(v.mcp_tools) && v.mcp_tools !== null ? { mcp_tools: [...v.mcp_tools] } : {}),
  };
}

/** A key names a team its account does not have (createKey, updateKey): nothing changed. */
export class TeamNotFoundError extends Error {
  constructor(readonly team: string) {
    super(`no team '${team}' in the key's account`);
    this.name = 'TeamNotFoundError';
  }
}

// ---- a key's budget spend ----------------------------------------------------------------

/**
 * A key's budget periods at one moment, one id per kind: a spend is counted in the period it
 * was admitted in, and a stored spend of another period id counts as 0 (no job resets budgets).
 */
export interface BudgetPeriods {
  /** 'd:YYYY-MM-DD' */
  day: string;
  /** 'w:YYYY-MM-DD', the Monday the week starts on */
  week: string;
  /** 'm:YYYY-MM' */
  month: string;
}

/** The period id a budget of `period` counts in at `periods`; 'n' for a budget that never resets. */
export function periodId(period: BudgetPeriod, periods: BudgetPeriods): string {
  return period === null ? 'n' : periods[period];
}

/**
 * What a spend in period `current` finds already spent, given the stored spend (`stored` units
 * in period `storedId`): the stored units in the same period, else 0. The Redis scripts apply
 * the same rule.
 */
export function spentIn(storedId: string | null, stored: number, current: string): number {
  return storedId === current ? stored : 0;
}

/**
 * A stored spend after adding `units` spent in period `pid`: added within the same period,
 * started afresh in a new one, and left alone when a later period of the same kind has begun
 * (a spend admitted before a boundary and settled after it belongs to the period it was
 * admitted in, which is over). The Redis settle script applies the same rule.
 */
export function addSpend(spent: { period: string; units: number }, pid: string, units: number): { period: string; units: number } {
  if (spent.period === pid) return { period: pid, units: Math.min(MAX_UNITS, spent.units + units) };
  if (spent.period[0] === pid[0] && spent.period > pid) return spent;
  return { period: pid, units };
}

// ---- seeding -------------------------------------------------------------------------------

/** A config account's keys: digests, with the last 4 characters of those given in plaintext. */
export function seededKeys(a: AccountConfig): Array<{ digest: string; last4: string | null }> {
  const keys = new Map<string, string | null>();
  for (const k of a.keys) keys.set(sha256Hex(k), k.slice(-4));
  for (const d of a.key_sha256) if (!keys.has(d.toLowerCase())) keys.set(d.toLowerCase(), null);
  return [...keys].map(([digest, last4]) => ({ digest, last4 }));
}
