// Developer keys: looked up by SHA-256 digest only, so no raw key is ever stored or compared.

import { createHash } from 'node:crypto';
import type { Config } from '../config/types.js';
import { GatewayError } from '../errors.js';
import type { Principal } from './principal.js';

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** A key's public id: the first 16 hex digits of its digest (safe to log and to show). */
export function keyIdOf(digest: string): string {
  return `key_${digest.slice(0, 16)}`;
}

export class KeyDirectory {
  readonly #byDigest = new Map<string, Principal>();
  readonly #prefix: string;

  constructor(config: Config) {
    this.#prefix = `${config.service.key_prefix}_`;
    for (const a of config.accounts) {
      const plan = config.plans[a.plan]!;
      const digests = [...a.keys.map(sha256Hex), ...a.key_sha256.map((d) => d.toLowerCase())];
      for (const d of digests) {
        this.#byDigest.set(d, { accountId: a.id, planName: a.plan, plan, credentialId: keyIdOf(d) });
      }
    }
  }

  /** The principal behind an Authorization header, or 401 invalid_api_key. */
  authenticate(header: string | undefined): Principal {
    const token = bearer(header);
    if (token !== undefined && token.startsWith(this.#prefix)) {
      const p = this.#byDigest.get(sha256Hex(token));
      if (p !== undefined) return p;
    }
    throw new GatewayError('invalid_api_key', 'Invalid API key. Send "Authorization: Bearer <key>" with a valid key.');
  }
}

/** The credential of a `Bearer` Authorization header. */
export function bearer(header: string | undefined): string | undefined {
  if (header === undefined || header.length < 8) return undefined;
  if (header.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
  const token = header.slice(7).trim();
  return token === '' ? undefined : token;
}
