// Who is calling: the account, its plan, and the credential that proved it.

import type { PlanConfig } from '../config/types.js';
import type { KeyPolicy } from './controls.js';

export interface Principal {
  accountId: string;
  planName: string;
  plan: PlanConfig;
  /** Developer key id (hex prefix of its digest) or JWT session id. */
  credentialId: string;
  /** A developer key's own controls (CONTRACT section 8); absent for dashboard JWTs. */
  key?: KeyPolicy;
}
