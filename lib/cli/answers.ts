// The admin API's answers as the `tollgate` admin sub-commands read them (CONTRACT section 10):
// the JSON a gateway of this version sends. The CLI prints them; a body of another shape makes
// its printer throw, which the CLI reports as an unexpected answer (see `shown` in ./admin.ts).

import type { AccountView } from '../admin/api.js';
import type { BudgetPeriod, KeyControls, KeyLimits } from '../store/rules.js';
import type { UsageReport } from '../store/usage-types.js';

export type { AccountView };

/** Prints one command's answer; each printer takes its own answer's type below. */
export type Show = (b: never) => string;

/** A key or team's budget with its spend this period (auth/controls.ts keyView, teamView). */
export interface BudgetAnswer { units: number | null; period: BudgetPeriod; spent_units: number; resets_at: string | null }

/** A key as GET /admin/accounts/{id}/keys and PATCH /admin/keys/{id} show it. */
export interface KeyAnswer extends Omit<KeyControls, 'expires_at' | 'budget'> {
  id: string;
  account: string;
  hint: string | null;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  budget: BudgetAnswer;
}

/** A team as the team routes show it. */
export interface TeamAnswer {
  id: string;
  account: string;
  name: string | null;
  budget: BudgetAnswer;
  limits: KeyLimits;
  models: string[] | null;
  /** The MCP tool patterns of its own (CONTRACT section 17); null: the plan's. */
  mcp_tools?: string[] | null;
  created_at: string;
}

/** A new or rotated key: its plaintext, shown once. */
export interface NewKeyAnswer { id: string; account: string; key: string; previous_key_valid_until?: string }

/** POST /admin/accounts/{id}/credits. */
export interface CreditAnswer extends AccountView { applied: boolean }

/** GET /admin/usage. */
export interface UsageAnswer extends UsageReport { account: string | null; since: string }
