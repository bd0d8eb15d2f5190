// The balancer's contract, as small as undici's dispatch: a policy picks one replica of a
// provider for one attempt of one request, from what this instance knows (no store round trip),
// in a few microseconds. Every provider kind and every route goes through it (fleet.ts).

import type { BalancePolicy } from '../../config/types.js';
import type { Replica } from './replica.js';

export interface BalanceRequest {
  /** 32-bit hash of the session key or the prompt's prefix; read by prefix_affinity only. */
  readonly affinity: number;
  /** Replicas this request has tried already: never picked again for it. */
  readonly exclude: readonly Replica[];
  readonly now: number;
}

export interface Policy {
  readonly name: BalancePolicy;
  /** The replica for this attempt, or undefined when none may take it now. */
  pick(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined;
}

/** A replica this request may go to: usable now and not tried yet. */
export function eligible(r: Replica, request: BalanceRequest): boolean {
  return r.usable(request.now) && (request.exclude.length === 0 || !request.exclude.includes(r));
}

/**
 * Fewest requests in flight per unit of weight (the server's scraped queue counted in); ties
 * are broken at random in proportion to weight, so idle replicas share by weight too.
 */
export function leastLoaded(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
  let best: Replica | undefined;
  let bestScore = Infinity;
  let tieWeight = 0;
  for (const r of replicas) {
    if (!eligible(r, request)) continue;
    const score = r.load / r.weight;
    if (score < bestScore) {
      best = r;
      bestScore = score;
      tieWeight = r.weight;
    } else if (score === bestScore) {
      tieWeight += r.weight;
      if (Math.random() * tieWeight < r.weight) best = r;
    }
  }
  return best;
}
