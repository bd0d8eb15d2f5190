// Stored responses as chains (Responses API, `store: true`), the same on every store.
//
// A conversation is stored once: each response keeps only its own part (the input its request
// added, and its answer: `value`) and the id of the response it continued (`parent`). Reading a
// conversation walks the chain from a response up to the first one (at most `maxDepth`).
// - Expiry: a response lives `ttlMs`; a continuation moves each ancestor's expiry up to
//   ancestorExpiry() when it is earlier, so ancestors live at least as long as any response that
//   continues them, and always at least as long as their own children ("an ancestor expires no
//   earlier than its descendants"), which lets the walk that moves them stop at the first one
//   already late enough. That target is rounded up to an eighth of the TTL: a conversation's
//   continuations within one such step move one or two ancestors, and the whole chain moves once
//   per step; ancestors may thus outlive the retention by up to an eighth of it.
// - Deletion: a deleted response is gone for GET, DELETE and previous_response_id at once. While
//   responses that continue it are stored, its part stays, unreadable by itself, so their
//   conversations stay whole (as when each response kept a copy of the whole conversation); it is
//   freed with the last of them (deleted, or expired), else at its own expiry.
// - Bytes: each account's stored bytes (its values' UTF-8 bytes, the deleted ones still kept
//   included) are counted as responses are put and freed, expired ones when noticed (every call
//   of the account frees what expired, amortized).

/** A conversation as read back, and what its account stores now. */
export interface ResponseChain {
  /** The values of the chain's responses, the first response first and the one asked for last. */
  values: string[];
  /** Bytes the account's stored responses hold. */
  accountBytes: number;
}

/**
 * The expiry an ancestor is moved up to by a continuation expiring at `expiresAt` (Unix ms):
 * the next multiple of an eighth of `ttlMs` after it.
 */
export function ancestorExpiry(expiresAt: number, ttlMs: number): number {
  const step = Math.max(1, Math.floor(ttlMs / 8));
  return (Math.floor(expiresAt / step) + 1) * step;
}
