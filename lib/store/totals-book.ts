// The memory store's usage totals (with or without a path): hour and day buckets of the
// columns of ./usage-totals.ts, in this process. The file store rebuilds them from its day
// files on open (./memory/usage-files.ts); the store without a path starts empty.

import type { HourTotals, TopRow, TotalsDimension, UsageRecord } from './types.js';
import { DAY_MS } from '../utc-day.js';
import { ALL, ALL_COLUMN, HOUR_MS, METRICS, columnFor, columnsOf, hourRow, hoursOf, metricsOf, spans, topRows, type Sums } from './usage-totals.js';

const N = METRICS.length;

/** One column of one bucket: ids to slots of five sums in one array (no object per id). */
class Column {
  readonly slots = new Map<string, number>();
  sums = new Float64Array(8 * N);

  add(id: string, m: Sums): void {
    let slot = this.slots.get(id);
    if (slot === undefined) {
      slot = this.slots.size;
      this.slots.set(id, slot);
      if ((slot + 1) * N > this.sums.length) {
        const grown = new Float64Array(this.sums.length * 2);
        grown.set(this.sums);
        this.sums = grown;
      }
    }
    const at = slot * N;
    for (let i = 0; i < N; i++) this.sums[at + i]! += m[i]!;
  }

  get(id: string): Float64Array | undefined {
    const slot = this.slots.get(id);
    return slot === undefined ? undefined : this.sums.subarray(slot * N, slot * N + N);
  }
}

/** The totals of one hour or day. */
class Bucket {
  readonly columns = new Map<string, Column>();

  add(pairs: Array<[string, string]>, m: Sums): void {
    for (const [c, id] of pairs) {
      let col = this.columns.get(c);
      if (col === undefined) this.columns.set(c, (col = new Column()));
      col.add(id, m);
    }
  }
}

/**
 * The memory store's totals (with or without a path): hour and day buckets in this process.
 * Strings are interned, so an id repeated over hours is held once.
 */
export class TotalsBook {
  readonly #hours = new Map<number, Bucket>();
  readonly #days = new Map<number, Bucket>();
  readonly #strings = new Map<string, string>();

  #intern(s: string): string {
    const known = this.#strings.get(s);
    if (known !== undefined) return known;
    this.#strings.set(s, s);
    return s;
  }

  /** Counts record `r` (once: the caller adds each record it keeps exactly once). */
  add(r: UsageRecord): void {
    const hour = Math.floor(r.at / HOUR_MS);
    const day = Math.floor(r.at / DAY_MS);
    const pairs = columnsOf(r).map(([c, id]): [string, string] => [c, this.#intern(id)]);
    const m = metricsOf(r);
    for (const [map, n] of [[this.#hours, hour], [this.#days, day]] as const) {
      let b = map.get(n);
      if (b === undefined) map.set(n, (b = new Bucket()));
      b.add(pairs, m);
    }
  }

  /** Drops the buckets of days wholly before `cutoff` (as the records of those days are dropped). */
  prune(cutoff: number): void {
    for (const day of this.#days.keys()) if ((day + 1) * DAY_MS <= cutoff) this.#days.delete(day);
    for (const hour of this.#hours.keys()) if ((Math.floor(hour / 24) + 1) * DAY_MS <= cutoff) this.#hours.delete(hour);
    if (this.#days.size === 0) this.#strings.clear();
  }

  hourly(since: number, until: number, account: string | undefined): HourTotals[] {
    const { from, to } = hoursOf(since, until);
    const rows: HourTotals[] = [];
    for (let h = from; h < to; h++) {
      const b = this.#hours.get(h);
      const s = account === undefined ? b?.columns.get(ALL_COLUMN)?.get(ALL) : b?.columns.get('account')?.get(account);
      rows.push(hourRow(h, s));
    }
    return rows;
  }

  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): TopRow[] {
    const { from, to } = hoursOf(since, until);
    const { days, hours } = spans(from, to);
    const { column, shown } = columnFor(by, account);
    const sums = new Map<string, { requests: number; units: number }>();
    const buckets = [...days.map((d) => this.#days.get(d)), ...hours.map((h) => this.#hours.get(h))];
    for (const b of buckets) {
      const col = b?.columns.get(column);
      if (col === undefined) continue;
      for (const [id, slot] of col.slots) {
        const name = shown(id);
        if (name === undefined) continue;
        let s = sums.get(name);
        if (s === undefined) sums.set(name, (s = { requests: 0, units: 0 }));
        s.requests += col.sums[slot * N]!;
        s.units += col.sums[slot * N + 4]!;
      }
    }
    return topRows(sums, limit);
  }
}

