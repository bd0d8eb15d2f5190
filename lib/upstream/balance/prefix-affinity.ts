// prefix_affinity: requests that share a prompt prefix (or a session key) go to the same
// replica, so its prefix (KV) cache is hit. Weighted rendezvous hashing: every replica scores
// the key, the highest wins; adding or removing a replica moves only the keys it wins or won.
// Bounded load: the winner gives way to the least-loaded replica when it would be more than
// 25% above the mean in-flight load (weighted), or when it is ejected, tried, or full.

import type { BalanceRequest, Policy } from './policy.js';
import { eligible, leastLoaded } from './policy.js';
import type { Replica } from './replica.js';

/** A replica may carry this much more than its share of the requests in flight. */
export const LOAD_BOUND = 1.25;

/** murmur3's 32-bit finalizer: spreads a combined key over the whole range. */
function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The replica that owns `key` among all of them (ejected or not), by weighted rendezvous. */
export function owner(key: number, replicas: readonly Replica[]): Replica | undefined {
  let best: Replica | undefined;
  let bestScore = -1;
  for (const r of replicas) {
    const u = (mix(key ^ r.seed) + 0.5) / 4294967296;
    const score = r.weight / -Math.log(u);
    if (score > bestScore) {
      best = r;
      bestScore = score;
    }
  }
  return best;
}

export class PrefixAffinity implements Policy {
  readonly name = 'prefix_affinity' as const;

  pick(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
    const home = owner(request.affinity, replicas);
    if (home === undefined || !eligible(home, request)) return leastLoaded(request, replicas);
    let inFlight = 0;
    let weight = 0;
    for (const r of replicas) {
      if (!r.healthy(request.now)) continue;
      inFlight += r.outstanding;
      weight += r.weight;
    }
    // More than 25% above the mean load per unit of weight (so an idle fleet keeps every key home).
    return home.outstanding * weight > LOAD_BOUND * inFlight * home.weight ? leastLoaded(request, replicas) : home;
  }
}
