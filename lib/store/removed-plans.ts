// A reload may drop a plan only when no stored account uses it: otherwise every request of those
// accounts would fail (CONTRACT section 10). The store is asked only when plans are removed; a
// store that cannot answer then rejects the reload, since nothing proves it safe.

import type { Store } from './types.js';
import { ConfigError } from '../config/load.js';
import type { Config } from '../config/types.js';

/** Throws ConfigError (the reload is rejected) when `next` drops a plan a stored account is on. */
export async function checkRemovedPlans(old: Config | undefined, next: Config, store: Promise<Store>): Promise<void> {
  if (old === undefined) return;
  const removed = Object.keys(old.plans).filter((p) => !Object.hasOwn(next.plans, p));
  if (removed.length === 0) return;
  let users: Map<string, string>;
  try {
    users = await (await store).accountsOnPlans(removed);
  } catch (err) {
    const names = removed.map((p) => `"${p}"`).join(', ');
    throw new ConfigError([`plans: cannot check whether stored accounts still use the removed plan(s) ${names}: the store did not answer (${(err as Error).message})`]);
  }
  if (users.size > 0) {
    throw new ConfigError([...users].map(([plan, account]) => `plans.${plan}: removed, but stored accounts still use it (account "${account}", maybe others)`));
  }
}
