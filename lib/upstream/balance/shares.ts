// Who holds the places of a provider's queue (CONTRACT sections 13 and 21): `max_queued` is
// shared among the flows (accounts, keys, or one flow for all with fairness none) that are
// waiting now, by weight, so that one tenant's flood cannot fill it for everyone. When a
// request finds the queue full, this decides whose waiting request gives its place up, if any:
//
//   share(f) = max_queued x weight(f) / the sum of the weights of the flows waiting now, the
//              newcomer's flow counted in (whether or not it has a request waiting yet);
//   a newcomer whose flow, with it, stays within its share (held + 1 <= share) takes the place
//   of the newest request of the lowest priority among the flows holding more than their share;
//   else, a newcomer takes the place of its own flow's newest request of the lowest priority
//   below its own (a flow at its share may reorder what it holds, not hold more);
//   else it is refused.
//
// Each flow keeps its waiting requests per band in arrival order (a linked list through the
// entries): adding and removing are O(1); choosing whose place goes is O(flows waiting), and
// only ever runs when the queue is full.

import type { QueuePriority } from '../../config/types.js';

const RANK: Readonly<Record<QueuePriority, number>> = { high: 0, normal: 1, low: 2 };
const LOWEST = 2;

/** A waiting request as the places see it; the links are set by Shares. */
export interface Held {
  readonly flow: string;
  readonly priority: QueuePriority;
  /** The flow's weight (plan fair_weight), > 0. */
  readonly weight: number;
  /** Arrival order (larger: newer), and the neighbours in its flow's band. */
  arrival: number;
  older: this | undefined;
  newer: this | undefined;
}

interface Holder<T> {
  count: number;
  /** The weight of the flow's latest request (a reload may change its plan's). */
  weight: number;
  /** The newest waiting request per band (high, normal, low). */
  readonly newest: [T | undefined, T | undefined, T | undefined];
}

export class Shares<T extends Held> {
  readonly #holders = new Map<string, Holder<T>>();
  #arrivals = 0;

  /** Places held by `flow` (tests, views). */
  held(flow: string): number {
    return this.#holders.get(flow)?.count ?? 0;
  }

  /** Flows with a request waiting. */
  get flows(): number {
    return this.#holders.size;
  }

  add(entry: T): void {
    let h = this.#holders.get(entry.flow);
    if (h === undefined) {
      h = { count: 0, weight: entry.weight, newest: [undefined, undefined, undefined] };
      this.#holders.set(entry.flow, h);
    }
    h.weight = entry.weight;
    h.count++;
    const band = RANK[entry.priority];
    const older = h.newest[band];
    entry.older = older;
    entry.newer = undefined;
    if (older !== undefined) older.newer = entry;
    h.newest[band] = entry;
    entry.arrival = this.#arrivals++;
  }

  remove(entry: T): void {
    const h = this.#holders.get(entry.flow);
    if (h === undefined) throw new Error('not held');
    const { older, newer } = entry;
    if (older !== undefined) older.newer = newer;
    if (newer !== undefined) newer.older = older;
    else h.newest[RANK[entry.priority]] = older;
    entry.older = undefined;
    entry.newer = undefined;
    if (--h.count === 0) this.#holders.delete(entry.flow);
  }

  /**
   * `flow`'s share of `max` places were a request of weight `weight` to join the flows waiting
   * now (what the rules above compare against).
   */
  share(flow: string, weight: number, max: number): number {
    return (max * weight) / this.#total(flow, weight);
  }

  /**
   * Whose place a newcomer of `flow` (at `priority`, weighing `weight`) takes in a queue whose
   * `max` places are all held: the waiting request to refuse in its favour, or undefined when
   * the newcomer is the one refused.
   */
  victim(flow: string, priority: QueuePriority, weight: number, max: number): T | undefined {
    const total = this.#total(flow, weight);
    const own = this.#holders.get(flow);
    // Compared multiplied out: held x total against max x weight, for each flow.
    if (((own?.count ?? 0) + 1) * total <= max * weight) {
      let best: T | undefined;
      for (const [id, h] of this.#holders) {
        if (id === flow || h.count * total <= max * h.weight) continue;
        const e = newestOfLowest(h);
        if (e !== undefined && (best === undefined || RANK[e.priority] > RANK[best.priority] || (e.priority === best.priority && e.arrival > best.arrival))) best = e;
      }
      if (best !== undefined) return best;
    }
    if (own !== undefined) {
      for (let band = LOWEST; band > RANK[priority]; band--) {
        const e = own.newest[band];
        if (e !== undefined) return e;
      }
    }
    return undefined;
  }

  /** The sum of the weights of the flows waiting now, `flow`'s taken as `weight`. */
  #total(flow: string, weight: number): number {
    let total = weight;
    for (const [id, h] of this.#holders) if (id !== flow) total += h.weight;
    return total;
  }
}

function newestOfLowest<T>(h: Holder<T>): T | undefined {
  return h.newest[2] ?? h.newest[1] ?? h.newest[0];
}
