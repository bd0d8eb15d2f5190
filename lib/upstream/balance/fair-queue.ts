// The order of a provider's queue (CONTRACT section 13): strict priority bands, and within a
// band start-time fair queueing (Goyal, Vin, Cheng) across flows (accounts or keys). Each flow
// carries the virtual finish tag of its last request; a request's start tag is the later of the
// band's virtual time and that tag, its finish tag the start plus its cost (tokens) over the
// flow's weight, and the band serves the smallest start tag first. A flood from one flow thus
// queues behind its own earlier requests, while a trickle from another starts at the band's
// virtual time and goes next. One indexed binary heap per band: enqueue, dispatch and removal
// (a timeout, a client gone) are O(log n).

import type { QueuePriority } from '../../config/types.js';

export const PRIORITIES: readonly QueuePriority[] = ['high', 'normal', 'low'];

/** What the queue orders: the caller's waiting request, with the fields the order needs. */
export interface QueueEntry {
  /** Who the request's share is kept for (account or key id; one flow for all with fairness none). */
  readonly flow: string;
  readonly priority: QueuePriority;
  /** Tokens the request may take: prompt + held output. */
  readonly cost: number;
  /** The flow's weight (plan fair_weight), > 0. */
  readonly weight: number;
  /** Set by the queue. */
  start: number;
  finish: number;
  seq: number;
  /** Position in its band's heap; -1 when not queued. */
  index: number;
}

interface Flow { finish: number; waiting: number }

class Band<T extends QueueEntry> {
  readonly heap: T[] = [];
  /** Virtual time: the start tag of the request last dispatched from the band. */
  vtime = 0;
  readonly flows = new Map<string, Flow>();
  /** Idle flows are swept when there are more than this many (amortized O(1) per push). */
  sweepAt = 64;
}

export class FairQueue<T extends QueueEntry> {
  readonly #bands = new Map<QueuePriority, Band<T>>(PRIORITIES.map((p) => [p, new Band<T>()]));
  #seq = 0;
  #size = 0;
  /** Comparisons made, for tests that check the work per operation grows as log n. */
  compares = 0;

  get size(): number {
    return this.#size;
  }

  /** Requests waiting in one band. */
  depth(priority: QueuePriority): number {
    return this.#bands.get(priority)!.heap.length;
  }

  push(entry: T): void {
    const band = this.#bands.get(entry.priority)!;
    let flow = band.flows.get(entry.flow);
    if (flow === undefined) {
      if (band.flows.size >= band.sweepAt) {
        sweep(band);
        band.sweepAt = 2 * band.flows.size + 64;
      }
      flow = { finish: 0, waiting: 0 };
      band.flows.set(entry.flow, flow);
    }
    entry.start = Math.max(band.vtime, flow.finish);
    entry.finish = entry.start + entry.cost / entry.weight;
    entry.seq = this.#seq++;
    flow.finish = entry.finish;
    flow.waiting++;
    entry.index = band.heap.length;
    band.heap.push(entry);
    this.#up(band.heap, entry.index);
    this.#size++;
  }

  /** The request that goes next: the highest band's smallest start tag. */
  peek(): T | undefined {
    for (const p of PRIORITIES) {
      const heap = this.#bands.get(p)!.heap;
      if (heap.length > 0) return heap[0];
    }
    return undefined;
  }

  /**
   * A few of the requests that go soon after the first, in the first's band: its heap's next
   * levels (not in order). Dispatch looks among them for one whose preferred replica is free.
   */
  near(limit: number): readonly T[] {
    const first = this.peek();
    if (first === undefined) return [];
    return this.#bands.get(first.priority)!.heap.slice(1, 1 + limit);
  }

  /**
   * Takes `entry` out as dispatched: its band's virtual time moves to its start tag (to the
   * first's, when it went ahead of the first for its replica).
   */
  take(entry: T): void {
    const band = this.#bands.get(entry.priority)!;
    const first = band.heap[0]!.start;
    this.#remove(band, entry);
    band.vtime = Math.max(band.vtime, Math.min(first, entry.start));
    const flow = band.flows.get(entry.flow)!;
    flow.waiting--;
  }

  /**
   * Takes `entry` out unserved (it timed out or its client left). When it was its flow's last
   * request, the flow's tag goes back to its start: it is not charged for what it never got.
   */
  drop(entry: T): void {
    const band = this.#bands.get(entry.priority)!;
    this.#remove(band, entry);
    const flow = band.flows.get(entry.flow)!;
    flow.waiting--;
    if (flow.finish === entry.finish) flow.finish = entry.start;
  }

  #remove(band: Band<T>, entry: T): void {
    const heap = band.heap;
    const i = entry.index;
    if (i < 0 || heap[i] !== entry) throw new Error('not queued');
    const last = heap.pop()!;
    entry.index = -1;
    this.#size--;
    if (last === entry) return;
    heap[i] = last;
    last.index = i;
    this.#up(heap, i);
    this.#down(heap, last.index);
  }

  #less(a: T, b: T): boolean {
    this.compares++;
    return a.start < b.start || (a.start === b.start && a.seq < b.seq);
  }

  #up(heap: T[], i: number): void {
    const e = heap[i]!;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent]!;
      if (!this.#less(e, p)) break;
      heap[i] = p;
      p.index = i;
      i = parent;
    }
    heap[i] = e;
    e.index = i;
  }

  #down(heap: T[], i: number): void {
    const e = heap[i]!;
    const n = heap.length;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.#less(heap[child + 1]!, heap[child]!)) child++;
      const c = heap[child]!;
      if (!this.#less(c, e)) break;
      heap[i] = c;
      c.index = i;
      i = child;
    }
    heap[i] = e;
    e.index = i;
  }
}

/**
 * Forgets flows with nothing waiting whose tag the band's virtual time has passed (they would
 * start at the virtual time anyway): the map stays proportional to the requests waiting.
 */
function sweep<T extends QueueEntry>(band: Band<T>): void {
  for (const [id, flow] of band.flows) {
    if (flow.waiting === 0 && flow.finish <= band.vtime) band.flows.delete(id);
  }
}
