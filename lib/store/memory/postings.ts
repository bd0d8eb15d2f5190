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
    for (let i = 0; i < other.length; i++) this.push(...other.at(i));
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

/** One day's lists, by account, key and model. */
export class DayPostings {
  readonly #lists = new Map<string, Postings>();

  add(r: UsageRecord, start: number, length: number): void {
    this.#list(`a\u0000${r.account}`).push(start, length);
    if (r.key_id !== null) this.#list(`k\u0000${r.key_id}`).push(start, length);
    this.#list(`m\u0000${r.model}`).push(start, length);
  }

  /** The shortest list of the filter's (every match is in it); an empty one when a filter matches none. */
  shortest(f: UsageFilter): Postings | undefined {
    let best: Postings | undefined;
    for (const name of [f.account === undefined ? undefined : `a\u0000${f.account}`, f.keyId === undefined ? undefined : `k\u0000${f.keyId}`, f.model === undefined ? undefined : `m\u0000${f.model}`]) {
      if (name === undefined) continue;
      const list = this.#lists.get(name) ?? EMPTY;
      if (best === undefined || list.length < best.length) best = list;
    }
    return best;
  }

  /** Adds `later`'s lists after these (lines written after these). */
  append(later: DayPostings): void {
    for (const [name, list] of later.#lists) this.#list(name).append(list);
  }

  #list(name: string): Postings {
    let l = this.#lists.get(name);
    if (l === undefined) this.#lists.set(name, (l = new Postings()));
    return l;
  }
}
