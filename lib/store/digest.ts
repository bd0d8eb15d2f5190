// Developer keys are known by their SHA-256 digest only, so no raw key is ever stored or compared:
// the digest the store keeps a key under, and the public id derived from it.

import { hash } from 'node:crypto';

export function sha256Hex(text: string): string {
  // The one-shot hash (no Hash object per call): every request's key goes through here.
  return hash('sha256', text, 'hex');
}

/** A key's public id: the first 16 hex digits of its digest (safe to log and to show). */
export function keyIdOf(digest: string): string {
  return `key_${digest.slice(0, 16)}`;
}
