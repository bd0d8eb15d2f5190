// round_robin: smooth weighted round robin (as nginx does it): over any run of picks each
// replica's share follows its weight, interleaved rather than in bursts. Replicas that may not
// take the request are passed over without losing their turn.

import type { BalanceRequest, Policy } from './policy.js';
import { eligible } from './policy.js';
import type { Replica } from './replica.js';

export class RoundRobin implements Policy {
  readonly name = 'round_robin' as const;
  readonly #current = new Map<Replica, number>();

  pick(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
    let best: Replica | undefined;
    let bestCurrent = -Infinity;
    let total = 0;
    for (const r of replicas) {
      if (!eligible(r, request)) continue;
      const current = (this.#current.get(r) ?? 0) + r.weight;
      this.#current.set(r, current);
      total += r.weight;
      if (current > bestCurrent) {
        best = r;
        bestCurrent = current;
      }
    }
    if (best !== undefined) this.#current.set(best, bestCurrent - total);
    return best;
  }
}
