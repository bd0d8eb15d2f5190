// The write ids of the memory store's usage records whose writes are done (./usage.ts), kept
// WRITE_MARK_MS so that a repeat appends nothing. Every metered request writes one (the guard
// gives each record its own id: ../guard.ts), so they are kept lean, as SettledIds keeps
// settled request ids (./holds.ts): the ids (flat) in a Set, oldest first, and their times in
// runs, one time and one count per second in which writes ended, not one per id. An id costs
// its string and a Set entry (about 45 bytes for the guard's ids) where the write it marks kept
// the record, its copy and its promise for the whole five minutes (about 600 bytes, all of it
// promoted to the old generation: issue #46).

import { flattened } from '../../strings.js';

export class WriteMarks {
  readonly #ids = new Set<string>();
  /** Runs of ids in the order they were marked (the Set's): the first one's time, and how many. */
  #times: number[] = [];
  #counts: number[] = [];
  #head = 0;

  get size(): number {
    return this.#ids.size;
  }

  has(id: string): boolean {
    return this.#ids.has(id);
  }

  /** Marks `id` done at `at` (Unix ms); one marked already keeps its time. */
  add(id: string, at: number): void {
    if (this.#ids.has(id)) return;
    this.#ids.add(flattened(id));
    const last = this.#times.length - 1;
    if (last >= this.#head && Math.floor(this.#times[last]! / 1000) === Math.floor(at / 1000)) this.#counts[last]!++;
    else {
      this.#times.push(at);
      this.#counts.push(1);
    }
  }

  /**
   * Forgets the ids marked before `cutoff`, a run once all of its second is (so an id is kept
   * up to a second longer, never shorter). A run after a clock that went back waits for those
   * before it.
   */
  forget(cutoff: number): void {
    let dropped = 0;
    while (this.#head < this.#times.length && (Math.floor(this.#times[this.#head]! / 1000) + 1) * 1000 <= cutoff) dropped += this.#counts[this.#head++]!;
    if (dropped === 0) return;
    for (const id of this.#ids) {
      this.#ids.delete(id);
      if (--dropped === 0) break;
    }
    // The arrays are cut once their forgotten half is worth moving.
    if (this.#head > 64 && this.#head * 2 > this.#times.length) {
      this.#times = this.#times.slice(this.#head);
      this.#counts = this.#counts.slice(this.#head);
      this.#head = 0;
    }
  }
}
