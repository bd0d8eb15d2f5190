// prefix_affinity: requests that share a prompt prefix (or a session key) go to the same
// replica, so its prefix (KV) cache is hit. Weighted rendezvous hashing: every replica scores
// the key, the highest wins; adding or removing a replica moves only the keys it wins or won.
// Bounded load: the winner gives way to the least-loaded replica when it would be more than
// 25% above the mean in-flight load (weighted, rounded up to whole requests), or when it is
// ejected, already tried by this request, or at max_outstanding.

import type { BalanceRequest, Policy } from './policy.js';
import { eligible } from './policy.js';
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

/**
 * The least-loaded eligible replica (per unit of weight); among equally loaded ones the key's
 * next choice by rendezvous score, so that a key that overflows keeps going to the same place.
 */
function leastLoadedFor(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
  let best: Replica | undefined;
  let bestLoad = Infinity;
  let bestScore = -1;
  for (const r of replicas) {
    if (!eligible(r, request)) continue;
    const load = r.load / r.weight;
    if (load > bestLoad) continue;
    const score = r.weight / -Math.log((mix(request.affinity ^ r.seed) + 0.5) / 4294967296);
    if (load < bestLoad || score > bestScore) {
      best = r;
      bestLoad = load;
      bestScore = score;
    }
  }
  return best;
}

export class PrefixAffinity implements Policy {
  readonly name = 'prefix_affinity' as const;

  pick(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
    const home = owner(request.affinity, replicas);
    if (home === undefined || !eligible(home, request)) return leastLoadedFor(request, replicas);
    let inFlight = 0;
    let weight = 0;
    for (const r of replicas) {
      if (!r.healthy(request.now)) continue;
      inFlight += r.outstanding;
      weight += r.weight;
    }
    // The bound of "consistent hashing with bounded loads" (Mirrokni, Thorup, Zadimoghaddam):
    // with this request placed, no replica above ceil(1.25 x the mean), per unit of weight.
    const bound = Math.ceil((LOAD_BOUND * (inFlight + 1) * home.weight) / weight);
    return home.outstanding + 1 > bound ? leastLoadedFor(request, replicas) : home;
  }
}
