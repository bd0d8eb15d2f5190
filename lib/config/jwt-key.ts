// Which JWS algorithms a dashboard JWT public key can verify (auth.jwt.public_key, CONTRACT
// section 8), read by `tollgate check` (publicKeyProblem) and by the verifier (auth/jwt.ts)
// from the same code, so that check refuses exactly the keys the gateway could not use.

import { createPublicKey, type KeyObject } from 'node:crypto';

const RSA_ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512'];
const PSS_ALGS = ['PS256', 'PS384', 'PS512'];
const EC_ALGS: Record<string, string> = { prime256v1: 'ES256', secp384r1: 'ES384', secp521r1: 'ES512' };
const EDDSA_ALGS = ['EdDSA', 'Ed25519'];

/** A key set may name any asymmetric algorithm (jose also refuses symmetric JWKS keys). */
export const JWKS_ALGS = [...RSA_ALGS, 'ES256', 'ES384', 'ES512', ...EDDSA_ALGS];

export function parsePublicKey(pem: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (cause) {
    throw new Error('auth.jwt.public_key is not a PEM public key', { cause });
  }
  return key;
}

/** Why `pem` cannot verify dashboard JWTs (for `check`), or undefined when it can. */
export function publicKeyProblem(pem: string): string | undefined {
  try {
    algorithmsFor(parsePublicKey(pem));
    return undefined;
  } catch (err) {
    return (err as Error).message.replace(/^auth\.jwt\.public_key:? ?/, '');
  }
}

/** The JWS algorithms a public key can verify, by its type (and curve). */
export function algorithmsFor(key: KeyObject): string[] {
  switch (key.asymmetricKeyType) {
    case 'rsa': return RSA_ALGS;
    case 'rsa-pss': return PSS_ALGS;
    case 'ec': {
      const alg = EC_ALGS[key.asymmetricKeyDetails?.namedCurve ?? ''];
      if (alg !== undefined) return [alg];
      break;
    }
    case 'ed25519': return EDDSA_ALGS;
  }
  throw new Error(`auth.jwt.public_key: unsupported key type ${key.asymmetricKeyType ?? 'unknown'}`);
}
