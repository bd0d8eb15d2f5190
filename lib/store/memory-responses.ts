// Stored responses for the memory store (Responses API, `store: true`): kept in memory only, not
// journaled (they are a convenience that expires within `responses.retention_hours`, not money),
// each under its account, dropped once expired. Expired entries are swept as new ones arrive,
// so memory stays bounded by what the retention keeps.

interface Kept { value: string; expiresAt: number }

export class MemoryResponses {
  readonly #kept = new Map<string, Kept>();
  #puts = 0;

  #key(account: string, id: string): string {
    return `${account}\u0000${id}`;
  }

  put(account: string, id: string, value: string, ttlMs: number): void {
    const now = Date.now();
    // Amortized sweep: one pass per 256 puts, insertion order is close to expiry order.
    if (++this.#puts % 256 === 0) {
      for (const [k, v] of this.#kept) if (v.expiresAt <= now) this.#kept.delete(k);
    }
    const key = this.#key(account, id);
    this.#kept.delete(key);
    this.#kept.set(key, { value, expiresAt: now + ttlMs });
  }

  get(account: string, id: string): string | undefined {
    const key = this.#key(account, id);
    const kept = this.#kept.get(key);
    if (kept === undefined) return undefined;
    if (kept.expiresAt <= Date.now()) {
      this.#kept.delete(key);
      return undefined;
    }
    return kept.value;
  }

  delete(account: string, id: string): boolean {
    return this.get(account, id) !== undefined && this.#kept.delete(this.#key(account, id));
  }
}
