// Stored responses for the memory store (Responses API, `store: true`), as chains (see
// ../response-chains.ts): kept in memory only, not journaled (they are a convenience that expires
// within `responses.retention_hours`, not money), each under its account. Expiries sit in one
// min-heap; every call first frees what expired (O(log n) each), so memory holds only live
// responses and an account's byte count is exact whenever it is read.

import { ancestorExpiry, type ResponseChain } from '../response-chains.js';

interface Entry {
  value: string;
  parent: string | null;
  bytes: number;
  expiresAt: number;
  /** Stored responses that continue this one. */
  children: number;
  /** Deleted while continued: kept for their conversations only. */
  deleted: boolean;
}

interface Account { entries: Map<string, Entry>; bytes: number }

interface Due { at: number; account: string; id: string }

/**
 * Expiries, earliest first (a binary min-heap). An expiry moved later leaves its old item in
 * place: it is skipped when it comes up, its entry then expiring later.
 */
class Expiries {
  readonly #items: Due[] = [];

  get size(): number { return this.#items.length; }

  /** Starts again from `items` (any order). */
  reset(items: Due[]): void {
    this.#items.length = 0;
    for (const item of items) this.push(item);
  }

  peek(): Due | undefined { return this.#items[0]; }

  push(item: Due): void {
    const a = this.#items;
    let i = a.push(item) - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (a[up]!.at <= item.at) break;
      a[i] = a[up]!;
      i = up;
    }
    a[i] = item;
  }

  pop(): Due | undefined {
    const a = this.#items;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= a.length) break;
      const c = l + 1 < a.length && a[l + 1]!.at < a[l]!.at ? l + 1 : l;
      if (a[c]!.at >= last.at) break;
      a[i] = a[c]!;
      i = c;
    }
    a[i] = last;
    return top;
  }
}

export class MemoryResponses {
  readonly #accounts = new Map<string, Account>();
  readonly #expiries = new Expiries();
  /** Responses stored now, in every account. */
  #live = 0;

  /** Frees every response whose expiry has passed. */
  #expire(now: number): void {
    for (let due = this.#expiries.peek(); due !== undefined && due.at <= now; due = this.#expiries.peek()) {
      this.#expiries.pop();
      const account = this.#accounts.get(due.account);
      const entry = account?.entries.get(due.id);
      if (account !== undefined && entry !== undefined && entry.expiresAt <= now) this.#free(due.account, account, due.id, entry);
    }
  }

  /** Drops `id`, then each deleted ancestor that no stored response continues any more. */
  #free(name: string, account: Account, id: string, entry: Entry): void {
    for (;;) {
      account.entries.delete(id);
      account.bytes -= entry.bytes;
      this.#live--;
      const parent = entry.parent === null ? undefined : account.entries.get(entry.parent);
      if (parent === undefined || --parent.children > 0 || !parent.deleted) break;
      id = entry.parent!;
      entry = parent;
    }
    if (account.entries.size === 0) this.#accounts.delete(name);
  }

  put(account: string, id: string, value: string, parent: string | null, ttlMs: number): void {
    const now = Date.now();
    this.#expire(now);
    const old = this.#accounts.get(account)?.entries.get(id);
    if (old !== undefined) this.#free(account, this.#accounts.get(account)!, id, old);
    let acct = this.#accounts.get(account);
    if (acct === undefined) this.#accounts.set(account, acct = { entries: new Map(), bytes: 0 });
    const expiresAt = now + ttlMs;
    const entry: Entry = { value, parent, bytes: Buffer.byteLength(value), expiresAt, children: 0, deleted: false };
    acct.entries.set(id, entry);
    acct.bytes += entry.bytes;
    this.#live++;
    this.#schedule({ at: expiresAt, account, id });
    if (parent === null) return;
    let up = acct.entries.get(parent);
    if (up !== undefined) up.children++;
    const target = ancestorExpiry(expiresAt, ttlMs);
    let upId = parent;
    while (up !== undefined && up.expiresAt < target) {
      up.expiresAt = target;
      this.#schedule({ at: target, account, id: upId });
      if (up.parent === null) break;
      upId = up.parent;
      up = acct.entries.get(upId);
    }
  }

  /**
   * Adds an expiry. Items left behind (moved expiries, deleted responses) are dropped by a
   * rebuild once they outnumber the live responses, so the heap stays within about twice them.
   */
  #schedule(due: Due): void {
    this.#expiries.push(due);
    if (this.#expiries.size <= 2 * this.#live + 1024) return;
    const items: Due[] = [];
    for (const [account, acct] of this.#accounts) for (const [id, e] of acct.entries) items.push({ at: e.expiresAt, account, id });
    this.#expiries.reset(items);
  }

  get(account: string, id: string): string | undefined {
    this.#expire(Date.now());
    const entry = this.#accounts.get(account)?.entries.get(id);
    return entry === undefined || entry.deleted ? undefined : entry.value;
  }

  chain(account: string, id: string, maxDepth: number): ResponseChain | undefined {
    this.#expire(Date.now());
    const acct = this.#accounts.get(account);
    let entry = acct?.entries.get(id);
    if (acct === undefined || entry === undefined || entry.deleted) return undefined;
    const values = [entry.value];
    while (entry.parent !== null) {
      if (values.length >= maxDepth) return undefined;
      entry = acct.entries.get(entry.parent);
      if (entry === undefined) return undefined;
      values.push(entry.value);
    }
    return { values: values.reverse(), accountBytes: acct.bytes };
  }

  bytes(account: string): number {
    this.#expire(Date.now());
    return this.#accounts.get(account)?.bytes ?? 0;
  }

  delete(account: string, id: string): boolean {
    this.#expire(Date.now());
    const acct = this.#accounts.get(account);
    const entry = acct?.entries.get(id);
    if (acct === undefined || entry === undefined || entry.deleted) return false;
    if (entry.children > 0) entry.deleted = true;
    else this.#free(account, acct, id, entry);
    return true;
  }

  /** Heap items, live and stale (for tests: what the expiry index holds). */
  get scheduled(): number {
    return this.#expiries.size;
  }
}
