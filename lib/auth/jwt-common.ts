// Dashboard JWTs, the parts that need no JOSE library: the config, what a verified token names,
// the 422 for a token that does not decode and the shape test (the algorithms a public key can
// verify are config/jwt-key.ts's, shared with `tollgate check`). jwt.ts (with jose) is imported
// only by a gateway whose config sets auth.jwt, when its state starts (Authenticator.start());
// these are used whatever the config.

import type { Config } from '../config/types.js';

export type JwtConfig = NonNullable<Config['auth']['jwt']>;

/** Who a verified access token names. Revocation of `sessionId` is the caller's check. */
export interface JwtIdentity {
  accountId: string;
  sessionId: string | undefined;
}

/** A JWT-shaped credential that cannot be decoded, or is not an access token: 422 {"msg"}. */
export class TokenShapeError extends Error {
  readonly status = 422;

  constructor(message: string) {
    super(message);
    this.name = 'TokenShapeError';
  }
}

/** Three dot-separated segments: header.payload.signature (the signature may be empty). */
export function looksLikeJwt(token: string): boolean {
  return token.split('.').length === 3;
}

export const HMAC_ALGS = ['HS256', 'HS384', 'HS512'];
