// Where one day's records are in its usage file, per account, key and model: the postings the
// memory store's filtered record pages read (./usage-files.ts), kept in this process (built as
// records are written, and from the files on open). A posting is a line's byte offset and
// length, in two typed arrays per list (12 bytes a record and list: about 36 MB for 1,000,000
// records), so a filter that matches few records reads only their lines.

import type { UsageRecord } from '../types.js';
import type { UsageFilter } from '../usage-records.js';

/** One list: the lines of one account's (or key's, or model's) records, in file order. */
export class Postings {
  #starts = new Float64Array(4);
  #lengths = new Uint32Array(4);
  length = 0;

  push(start: number, length: number): void {
    if (this.length === this.#starts.length) {
      const starts = new Float64Array(this.length * 2);
      starts.set(this.#starts);
      this.#starts = starts;
      const lengths = new Uint32Array(this.length * 2);
      lengths.set(this.#lengths);
      this.#lengths = lengths;
    }
    this.#starts[this.length] = start;
    this.#lengths[this.length] = length;
    this.length++;
  }

  /** Adds every posting of `other` after these. */
  append(other: Postings): void {
    for (let i = 0; i < other.length; i++) this.push(other.#starts[i]!, other.#lengths[i]!);
  }

  at(i: number): [number, number] {
    return [this.#starts[i]!, this.#lengths[i]!];
  }

  /** The first index whose line starts at or after byte `pos`. */
  after(pos: number): number {
    let lo = 0;
    let hi = this.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#starts[mid]! < pos) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

const EMPTY = new Postings();

/** One day's lists, by account, key and model: one map each, so a record's lists are found without a string made. */
export class DayPostings {
  readonly #accounts = new Map<string, Postings>();
  readonly #keys = new Map<string, Postings>();
  readonly #models = new Map<string, Postings>();

  add(r: UsageRecord, start: number, length: number): void {
    listOf(this.#accounts, r.account).push(start, length);
    if (r.key_id !== null) listOf(this.#keys, r.key_id).push(start, length);
    listOf(this.#models, r.model).push(start, length);
  }

  /** The shortest list of the filter's (every match is in it); an empty one when a filter matches none. */
  shortest(f: UsageFilter): Postings | undefined {
    let best: Postings | undefined;
    const consider = (lists: Map<string, Postings>, value: string | undefined): void => {
      if (value === undefined) return;
      const list = lists.get(value) ?? EMPTY;
      if (best === undefined || list.length < best.length) best = list;
    };
    consider(this.#accounts, f.account);
    consider(this.#keys, f.keyId);
    consider(this.#models, f.model);
    return best;
  }

  /** Adds `later`'s lists after these (lines written after these). */
  append(later: DayPostings): void {
    for (const [mine, theirs] of [[this.#accounts, later.#accounts], [this.#keys, later.#keys], [this.#models, later.#models]] as const) {
      for (const [value, list] of theirs) listOf(mine, value).append(list);
    }
  }
}

function listOf(lists: Map<string, Postings>, value: string): Postings {
  let l = lists.get(value);
  if (l === undefined) lists.set(value, (l = new Postings()));
  return l;
}
