// Who is calling: the account, its plan, and the credential that proved it; and what of a
// request's treatment follows from both, where a key may override its plan (its band in a
// provider's queue, CONTRACT section 13).

import { INFERENCE_FAIRNESS_HEADER, INFERENCE_OBJECTIVE_HEADER, type PlanConfig, type QueuePriority } from '../config/types.js';
import { merged } from '../objects.js';
import type { KeyPolicy } from './controls.js';

export interface Principal {
  accountId: string;
  planName: string;
  plan: PlanConfig;
  /** Developer key id (hex prefix of its digest) or JWT session id. */
  credentialId: string;
  /** A developer key's own controls (CONTRACT section 8); absent for dashboard JWTs. */
  key?: KeyPolicy;
  /**
   * A batch line's (CONTRACT section 18): its batch and custom_id, the id its hold and settlement
   * take (one per line: a line run again after a restart settles once), and the plan's discount.
   */
  batch?: { id: string; customId: string; billingId: string; discountPercent: number };
}

/** The band a request waits in when its provider's replicas are full: the key's priority, else the plan's. */
export function queuePriority(p: Principal): QueuePriority {
  if (p.batch !== undefined) return 'low';
  return p.key?.priority ?? p.plan.priority ?? 'normal';
}

/**
 * What a provider behind an inference gateway (inference_gateway: true) is told of the caller,
 * from what Tollgate verified (CONTRACT section 19): whose fair share the request counts
 * against (the key's team when it has one, else the account) and its objective (its queue band:
 * high, normal or low). `base`: the call's other headers (tracing's), kept.
 */
export function inferenceHeaders(p: Principal, base: Record<string, string> | undefined): Record<string, string> {
  return merged(base, { [INFERENCE_FAIRNESS_HEADER]: p.key?.team?.id ?? p.accountId, [INFERENCE_OBJECTIVE_HEADER]: queuePriority(p) });
}
