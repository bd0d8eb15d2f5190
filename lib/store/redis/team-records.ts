// A team's record as the Redis store keeps it: its hash's members (MEMBERS in ./teams.ts) read
// back into a TeamRecord, for ./teams.ts and for a key's record that names its team (./key-records.ts).

import { toTeamSettings } from '../rules.js';
import type { TeamRecord } from '../types.js';

function json(text: string | undefined): unknown {
  if (text === undefined) return null;
  try { return JSON.parse(text); } catch { return undefined; }
}

/**
 * A team from its fields (member -> value, as MEMBERS names them); undefined when it has no `c`
 * (no such team) or a member is unreadable.
 */
export function teamFromFields(id: string, account: string, f: Record<string, string>): TeamRecord | undefined {
  if (f.c === undefined) return undefined;
  const period = f.bp === 'day' || f.bp === 'week' || f.bp === 'month' ? f.bp : null;
  const settings = toTeamSettings({
    name: json(f.n), models: json(f.m), mcp_tools: json(f.mt),
    limits: { requests_per_minute: json(f.rpm), tokens_per_minute: json(f.tpm), max_concurrent: json(f.mc) },
    budget: f.bu === undefined ? null : { units: Number(f.bu), period },
  });
  if (settings === null) return undefined;
  return { id, account, created_at: Number(f.c), ...settings, spent: { period: f.sp ?? 'n', units: Number(f.su ?? '0') } };
}
