// The memory store's open holds and settled request ids (./metering.ts): per account, the holds
// with their running totals, and the ids settled in the last SETTLED_TTL_MS with the units each
// was first charged, kept lean.

import { flattened } from '../../strings.js';
import { UNDONE } from './metering-entries.js';

export interface Hold { units: number; day: string; expires: number; key: string | undefined; team: string | undefined }


/**
 * One account's open holds, with their running totals, so that a hold or a settle does not walk
 * every hold of the account (at 64 requests in flight that walk was the store's main cost).
 * `soonest` is no later than the earliest expiry among them: until then none has expired and
 * the totals are exact; from then on the holds are walked once, expired ones purged, and the
 * totals recomputed.
 */
export class AccountHolds {
  readonly byRid = new Map<string, Hold>();
  units = 0;
  /** Open holds per UTC day. */
  readonly perDay = new Map<string, number>();
  /** Units held per key id. (Sums stay exact: holds are only taken while they fit a balance below 2^53.) */
  readonly perKey = new Map<string, number>();
  /** Units held per team id. */
  readonly perTeam = new Map<string, number>();
  soonest = Infinity;

  add(rid: string, h: Hold): void {
    const old = this.byRid.get(rid);
    if (old !== undefined) this.#forget(old);
    this.byRid.set(rid, h);
    this.units += h.units;
    this.perDay.set(h.day, (this.perDay.get(h.day) ?? 0) + 1);
    if (h.key !== undefined) this.perKey.set(h.key, (this.perKey.get(h.key) ?? 0) + h.units);
    if (h.team !== undefined) this.perTeam.set(h.team, (this.perTeam.get(h.team) ?? 0) + h.units);
    if (h.expires < this.soonest) this.soonest = h.expires;
  }

  delete(rid: string): void {
    const h = this.byRid.get(rid);
    if (h === undefined) return;
    this.byRid.delete(rid);
    this.#forget(h);
  }

  #forget(h: Hold): void {
    this.units -= h.units;
    // A day, key or team with nothing left held reads as 0 whether or not its entry is kept:
    // kept at 0 until dropZeros (the sweep), as a Map emptied by a delete is made anew, and the
    // next hold grows it again (at one request at a time, every request).
    this.perDay.set(h.day, this.perDay.get(h.day)! - 1);
    if (h.key !== undefined) this.perKey.set(h.key, this.perKey.get(h.key)! - h.units);
    if (h.team !== undefined) this.perTeam.set(h.team, this.perTeam.get(h.team)! - h.units);
  }

  /** Drops the days, keys and teams left at 0 (#forget keeps them). */
  dropZeros(): void {
    for (const m of [this.perDay, this.perKey, this.perTeam]) {
      for (const [k, v] of m) if (v === 0) m.delete(k);
    }
  }

  /** Drops the holds expired at `now` (monotonic ms), when any may have. */
  purge(now: number): void {
    if (now < this.soonest) return;
    let soonest = Infinity;
    for (const [rid, h] of this.byRid) {
      if (h.expires <= now) this.delete(rid);
      else if (h.expires < soonest) soonest = h.expires;
    }
    this.soonest = soonest;
  }
}

/**
 * Settled request ids, with the units each was first charged, forgotten SETTLED_TTL_MS after.
 * There is one per metered request for an hour (3.6 million at 1,000 requests a second), so
 * they are kept lean: per account, a Map from the id (flat) to the units, and the times in runs,
 * one time and one count per second in which the account settled, not one time per id. About
 * 110 bytes an id for a UUID, where a map from an account-and-id string to [time, units] took 190.
 * A run is forgotten once its first id is past the hour (its others up to a second early).
 */
export class SettledIds {
  readonly #accounts = new Map<string, AccountSettled>();

  get(account: string, rid: string): number | undefined {
    return this.#accounts.get(account)?.ids.get(rid);
  }

  /** Marks an id settled before as UNDONE (its place in the runs, and so its age, unchanged). */
  undo(account: string, rid: string): void {
    const ids = this.#accounts.get(account)?.ids;
    if (ids?.has(rid) === true) ids.set(rid, UNDONE);
  }

  /** Adds an id not settled before (callers check); its account's expired runs are forgotten. */
  add(account: string, rid: string, at: number, charged: number, cutoff: number): void {
    let a = this.#accounts.get(account);
    if (a === undefined) this.#accounts.set(account, (a = new AccountSettled()));
    a.add(flattened(rid), at, charged);
    a.forget(cutoff);
  }

  /** Forgets every account's ids settled before `cutoff`. */
  forget(cutoff: number): void {
    for (const [account, a] of this.#accounts) {
      a.forget(cutoff);
      if (a.ids.size === 0) this.#accounts.delete(account);
    }
  }

  /** [account, request id, settled at (its run's time), units], each account's oldest first. */
  *entries(): Generator<[string, string, number, number]> {
    for (const [account, a] of this.#accounts) {
      let run = a.head;
      let left = a.counts[run] ?? 0;
      for (const [rid, charged] of a.ids) {
        while (left === 0) left = a.counts[++run]!;
        left--;
        yield [account, rid, a.times[run]!, charged];
      }
    }
  }
}

class AccountSettled {
  readonly ids = new Map<string, number>();
  /** Runs of ids in settlement order (the Map's order): the first id's time, and how many. */
  times: number[] = [];
  counts: number[] = [];
  head = 0;

  add(rid: string, at: number, charged: number): void {
    this.ids.set(rid, charged);
    const last = this.times.length - 1;
    if (last >= this.head && Math.floor(this.times[last]! / 1000) === Math.floor(at / 1000)) this.counts[last]!++;
    else {
      this.times.push(at);
      this.counts.push(1);
    }
  }

  forget(cutoff: number): void {
    let dropped = 0;
    while (this.head < this.times.length && this.times[this.head]! < cutoff) dropped += this.counts[this.head++]!;
    if (dropped === 0) return;
    for (const rid of this.ids.keys()) {
      this.ids.delete(rid);
      if (--dropped === 0) break;
    }
    // The arrays are cut once their forgotten half is worth moving.
    if (this.head > 64 && this.head * 2 > this.times.length) {
      this.times = this.times.slice(this.head);
      this.counts = this.counts.slice(this.head);
      this.head = 0;
    }
  }
}
