// One store interface, two implementations: `memory` (embedded; durable with a journal when
// `store.path` is set) and `redis` (shared by gateway instances). The store is authoritative
// for accounts, keys and sessions; the config only seeds what is absent.

import type { AccountConfig } from '../config/types.js';

export interface AccountRecord {
  id: string;
  plan: string;
  /** Wallet balance in integer units. */
  balance_units: number;
  /** Unix milliseconds. */
  created_at: number;
}

export interface KeyRecord {
  /** Public id (safe to show and log), e.g. key_<16 hex>. */
  id: string;
  account: string;
  /** SHA-256 of the plaintext key, lowercase hex. The plaintext is never stored. */
  digest: string;
  created_at: number;
  /** Unix milliseconds, or null while valid. */
  revoked_at: number | null;
}

export interface CreditResult {
  /** False when this idempotency key was used before: nothing changed. */
  applied: boolean;
  balance_units: number;
}

/** A revocation, seen by every instance sharing the store. */
export type Revocation = { kind: 'key'; digest: string } | { kind: 'session'; sid: string };

export interface Store {
  /** Creates an account; false when one with that id exists (nothing changes then). */
  createAccount(account: { id: string; plan: string; balance_units: number }): Promise<boolean>;
  getAccount(id: string): Promise<AccountRecord | undefined>;
  /**
   * Adds `units` (negative deducts) to the balance, at most once per idempotency key and
   * account. Undefined when the account does not exist. A repeated key returns applied: false
   * and the current balance.
   */
  addCredits(accountId: string, units: number, idempotencyKey: string): Promise<CreditResult | undefined>;
  /** Stores a new key; false when the account does not exist. */
  createKey(key: { id: string; account: string; digest: string }): Promise<boolean>;
  keyByDigest(digest: string): Promise<KeyRecord | undefined>;
  /** Revokes a key by its id; undefined when unknown. Revoking twice keeps the first time. */
  revokeKey(id: string): Promise<KeyRecord | undefined>;
  revokeSession(sid: string): Promise<void>;
  isSessionRevoked(sid: string): Promise<boolean>;
  /**
   * Seeds accounts and their keys from the config: each is created when absent and never
   * overwritten (the store is authoritative once it has them).
   */
  seed(accounts: readonly AccountConfig[]): Promise<void>;
  /** Calls `listener` on every revocation, by this instance or (redis) any other one. */
  onRevoke(listener: (r: Revocation) => void): () => void;
  /** Resolves when the store answers; rejects when it is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
