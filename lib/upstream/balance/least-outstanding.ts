// least_outstanding: the replica with the fewest requests in flight (weighted), counting the
// queue its /metrics reports; the default, as it adapts to replicas of unequal speed.

import type { BalanceRequest, Policy } from './policy.js';
import { leastLoaded } from './policy.js';
import type { Replica } from './replica.js';

export class LeastOutstanding implements Policy {
  readonly name = 'least_outstanding' as const;

  pick(request: BalanceRequest, replicas: readonly Replica[]): Replica | undefined {
    return leastLoaded(request, replicas);
  }
}
