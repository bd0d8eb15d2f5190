// Dashboard JWTs: decode checks first (a malformed token or a non-access token is a 422 with a
// bare {"msg"} body), then signature and claims (401 invalid_api_key, or token_expired).
// Only the algorithms that fit the configured key are allowed, so `alg: none` and HS/RS
// confusion fail. The token itself never appears in a message.

import type { KeyObject } from 'node:crypto';
import {
  createRemoteJWKSet,
  decodeJwt,
  decodeProtectedHeader,
  errors,
  importJWK,
  jwtVerify,
  type CryptoKey,
  type JWTPayload,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
} from 'jose';
import { GatewayError } from '../errors.js';
import { HMAC_ALGS, TokenShapeError, looksLikeJwt, type JwtConfig, type JwtIdentity } from './jwt-common.js';
import { JWKS_ALGS, algorithmsFor, parsePublicKey } from '../config/jwt-key.js';

export interface JwtVerifierOptions {
  /** Leeway for exp/nbf, in seconds. Default 5. */
  clockToleranceSec?: number;
  /** JWKS fetch timeout. Default 5000 ms. */
  jwksTimeoutMs?: number;
  /** Least time between two fetches triggered by an unknown `kid`. Default 30000 ms. */
  jwksCooldownMs?: number;
  /** How long a fetched key set is used before it is fetched again. Default 600000 ms. */
  jwksCacheMaxAgeMs?: number;
}

const INVALID = 'Invalid access token.';
const EXPIRED = 'The access token has expired.';

type Resolver = Uint8Array | JWTVerifyGetKey;

export class JwtVerifier {
  readonly #algorithms: string[];
  readonly #resolver: Resolver;
  readonly #options: JWTVerifyOptions;
  readonly #remote: boolean;

  constructor(config: JwtConfig, options: JwtVerifierOptions = {}) {
    const set = [config.secret, config.public_key, config.jwks_url].filter((v) => typeof v === 'string' && v !== '');
    if (set.length !== 1) throw new Error('auth.jwt needs exactly one of secret, public_key or jwks_url');
    this.#remote = false;

    if (typeof config.secret === 'string' && config.secret !== '') {
      this.#algorithms = HMAC_ALGS;
      this.#resolver = new TextEncoder().encode(config.secret);
    } else if (typeof config.public_key === 'string' && config.public_key !== '') {
      const key = parsePublicKey(config.public_key);
      this.#algorithms = algorithmsFor(key);
      this.#resolver = publicKeyResolver(key);
    } else {
      this.#algorithms = JWKS_ALGS;
      this.#remote = true;
      this.#resolver = createRemoteJWKSet(new URL(config.jwks_url!), {
        timeoutDuration: options.jwksTimeoutMs ?? 5000,
        cooldownDuration: options.jwksCooldownMs ?? 30_000,
        cacheMaxAge: options.jwksCacheMaxAgeMs ?? 600_000,
      });
    }

    this.#options = {
      algorithms: this.#algorithms,
      clockTolerance: options.clockToleranceSec ?? 5,
      requiredClaims: ['exp'],
      ...(config.issuer ? { issuer: config.issuer } : {}),
      ...(config.audience ? { audience: config.audience } : {}),
    };
  }

  /** The algorithms a token may use with the configured key. */
  get algorithms(): readonly string[] {
    return this.#algorithms;
  }

  /**
   * The identity behind a JWT-shaped credential. Throws TokenShapeError (422) for a token that
   * does not decode or is not an access token, else GatewayError invalid_api_key or token_expired.
   */
  async verify(token: string): Promise<JwtIdentity> {
    if (!looksLikeJwt(token)) throw new GatewayError('invalid_api_key', INVALID);
    checkShape(token);

    let payload: JWTPayload;
    try {
      payload = (await jwtVerify(token, this.#resolver, this.#options)).payload;
    } catch (err) {
      if (err instanceof errors.JWTExpired) throw new GatewayError('token_expired', EXPIRED, { cause: err });
      // Everything else (bad signature, disallowed alg, claims, an unreachable or malformed key
      // set) is the same 401; the cause is kept for the caller's log.
      const message = this.#remote && unreachable(err) ? 'The access token could not be verified.' : INVALID;
      throw new GatewayError('invalid_api_key', message, { cause: err });
    }

    const { sub, sid } = payload;
    if (typeof sub !== 'string' || sub === '') throw new GatewayError('invalid_api_key', 'The access token names no account.');
    if (sid === undefined) return { accountId: sub, sessionId: undefined };
    if (typeof sid !== 'string' || sid === '') throw new GatewayError('invalid_api_key', INVALID);
    return { accountId: sub, sessionId: sid };
  }
}

/** The decode checks that come before any signature check: 422 on failure. */
function checkShape(token: string): void {
  try {
    decodeProtectedHeader(token);
  } catch {
    throw new TokenShapeError('Token header is not a base64url-encoded JSON object.');
  }
  let claims: JWTPayload;
  try {
    claims = decodeJwt(token);
  } catch {
    throw new TokenShapeError('Token payload is not a base64url-encoded JSON object.');
  }
  if (claims.type !== 'access') throw new TokenShapeError('Token type must be "access".');
}

/** Key set errors that mean it could not be had (network, timeout, non-200, not JSON, malformed). */
function unreachable(err: unknown): boolean {
  return !(err instanceof errors.JOSEError) || err instanceof errors.JWKSTimeout || err instanceof errors.JWKSInvalid
    || err.code === 'ERR_JOSE_GENERIC';
}

/** Imports the public key once per algorithm, on first use, and reuses the promise. */
function publicKeyResolver(key: KeyObject): JWTVerifyGetKey {
  const jwk = key.export({ format: 'jwk' });
  const imported = new Map<string, Promise<CryptoKey | Uint8Array>>();
  return (header) => {
    const alg = header.alg;
    let p = imported.get(alg);
    if (p === undefined) {
      p = importJWK({ ...jwk, alg }, alg);
      imported.set(alg, p);
    }
    return p;
  };
}
