// The memory store's usage totals (with or without a path): hour and day buckets of the
// columns of ./usage-totals.ts, in this process. The file store rebuilds them from its day
// files on open (./memory/usage-files.ts); the store without a path starts empty. A read costs
// the buckets of its range and the ids of the column (or group) it reads, never a record.

import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsageRecord } from './types.js';
import { DAY_MS } from '../utc-day.js';
import { ALL, ALL_COLUMN, HOUR_MS, HourBounds, METRICS, RowSums, SEP, cellsOf, hourRow, hoursOf, metricsOf, planOf, spans, topRows, type Cell, type ColumnSpec, type Plan, type Sums } from './usage-totals.js';

const N = METRICS.length;
/** A record's null key or team in a shape's string (TotalsBook.#places). */
const NO_VALUE = '\u0001';

/**
 * One column of one bucket: ids to slots of five sums in one array (no object per id). A
 * grouped column's ids are kept whole (GROUP<SEP>ID), and with `indexed`, each group's slots
 * listed, so that reading one group (a key's models) costs that group's ids.
 */
class Column {
  readonly slots = new Map<string, number>();
  sums = new Float64Array(2 * N);
  readonly groups: Map<string, number[]> | undefined;
  /** With groups: each slot's id. */
  readonly ids: string[] = [];

  constructor(indexed: boolean) {
    this.groups = indexed ? new Map() : undefined;
  }

  add(id: string, group: string, m: Sums): void {
    let slot = this.slots.get(id);
    if (slot === undefined) {
      slot = this.slots.size;
      this.slots.set(id, slot);
      if ((slot + 1) * N > this.sums.length) {
        const grown = new Float64Array(this.sums.length * 2);
        grown.set(this.sums);
        this.sums = grown;
      }
      if (this.groups !== undefined) {
        this.ids.push(id);
        const list = this.groups.get(group);
        if (list === undefined) this.groups.set(group, [slot]);
        else list.push(slot);
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

/** A grouped column's groups of more than one part (a key's models) are indexed; an account's are filtered. */
const indexed = (c: ColumnSpec): boolean => c.group > 1;

/** A cell as a bucket keeps it: its column, its group, and its id in the column (GROUP<SEP>ID in a grouped one), interned. */
interface Place { column: ColumnSpec; group: string; id: string }

/** Where a record counts: in its hour's bucket (the columns kept hourly) and in its day's (all). */
interface Places { hourly: readonly Place[]; daily: readonly Place[] }

/** Record shapes whose places are kept (TotalsBook.#places); past it the list starts anew. */
const SHAPES = 4096;

/** The totals of one hour or day: per column kept in memory. */
class Bucket {
  readonly columns = new Map<string, Column>();
  /** An hour's bounded values kept by name (../usage-totals.ts BOUNDS); unused in a day's bucket. */
  readonly bounds = new HourBounds();

  add(places: readonly Place[], m: Sums): void {
    for (const { column, group, id } of places) {
      let col = this.columns.get(column.name);
      if (col === undefined) this.columns.set(column.name, (col = new Column(indexed(column))));
      col.add(id, group, m);
    }
  }

  column(name: string): Column | undefined {
    return this.columns.get(name);
  }
}

/**
 * Hour and day buckets. Columns kept per day only (ColumnSpec.daily) are in the day buckets
 * alone. Strings are interned, so an id repeated over hours is held once.
 */
export class TotalsBook {
  readonly #hours = new Map<number, Bucket>();
  readonly #days = new Map<number, Bucket>();
  readonly #strings = new Map<string, string>();
  /** The places of records without tags or end user, by account, key, team and model. */
  readonly #shapes = new Map<string, Places>();

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
    const hourly = bucketOf(this.#hours, hour);
    const places = this.#places(r, hourly.bounds);
    const m = metricsOf(r);
    hourly.add(places.hourly, m);
    bucketOf(this.#days, day).add(places.daily, m);
  }

  /**
   * Where `r` counts. A record without tags or end user has no value the hour's bounds could
   * change: it counts where every such record of its account, key, team and model does, so
   * those places are kept and the common record costs one lookup (issue #46: attribution
   * paid by every record while unused).
   */
  #places(r: UsageRecord, bounds: HourBounds): Places {
    if (r.tags.length > 0 || r.end_user !== null) return this.#place(cellsOf(r, bounds.of(r)));
    // No id holds SEP or SOH: null (no key, no team) is told from every id.
    const shape = `${r.account}${SEP}${r.key_id ?? NO_VALUE}${SEP}${r.team ?? NO_VALUE}${SEP}${r.model}`;
    let places = this.#shapes.get(shape);
    if (places === undefined) {
      if (this.#shapes.size >= SHAPES) this.#shapes.clear();
      this.#shapes.set(shape, (places = this.#place(cellsOf(r))));
    }
    return places;
  }

  #place(cells: readonly Cell[]): Places {
    const daily = cells.filter((c) => c.column.memory).map((c): Place => {
      const group = this.#intern(c.group);
      return { column: c.column, group, id: this.#intern(group === '' ? c.id : `${group}${SEP}${c.id}`) };
    });
    return { hourly: daily.filter((c) => !c.column.daily), daily };
  }

  /** Drops the buckets of days wholly before `cutoff` (as the records of those days are dropped). */
  prune(cutoff: number): void {
    for (const day of this.#days.keys()) if ((day + 1) * DAY_MS <= cutoff) this.#days.delete(day);
    for (const hour of this.#hours.keys()) if ((Math.floor(hour / 24) + 1) * DAY_MS <= cutoff) this.#hours.delete(hour);
    if (this.#days.size === 0) {
      this.#strings.clear();
      this.#shapes.clear();
    }
  }

  hourly(since: number, until: number, account: string | undefined): HourTotals[] {
    const { from, to } = hoursOf(since, until);
    const rows: HourTotals[] = [];
    for (let h = from; h < to; h++) {
      const b = this.#hours.get(h);
      const s = account === undefined ? b?.column(ALL_COLUMN)?.get(ALL) : b?.column('account')?.get(account);
      rows.push(hourRow(h, s));
    }
    return rows;
  }

  top(by: TotalsDimension, since: number, until: number, limit: number, account: string | undefined): TopRow[] {
    const { from, to } = hoursOf(since, until);
    return topRows(this.read({ by: [by], account, since: from * HOUR_MS, until: to * HOUR_MS }), limit);
  }

  /** A totals read (checked by the caller: checkTotalsQuery). */
  read(q: TotalsQuery): TotalsRow[] {
    const plan = planOf(q, (c) => c.memory);
    const sums = new RowSums();
    const from = q.since / HOUR_MS;
    const to = q.until / HOUR_MS;
    if (q.daily === true) {
      for (let d = from / 24; d < to / 24; d++) addBucket(sums, this.#days.get(d), plan, d * DAY_MS);
      return sums.rows();
    }
    const { days, hours } = spans(from, to);
    for (const d of days) addBucket(sums, this.#days.get(d), plan, null);
    for (const h of hours) addBucket(sums, this.#hours.get(h), plan, null);
    return sums.rows();
  }
}

function bucketOf(map: Map<number, Bucket>, n: number): Bucket {
  let b = map.get(n);
  if (b === undefined) map.set(n, (b = new Bucket()));
  return b;
}

/** Adds what bucket `b` holds of the plan's column (or group) to `sums`. */
function addBucket(sums: RowSums, b: Bucket | undefined, plan: Plan, day: number | null): void {
  const col = b?.column(plan.column.name);
  if (col === undefined) return;
  const add = (id: string, slot: number): void => {
    const values = plan.shown(id);
    if (values !== undefined) sums.add(day, values, col.sums.subarray(slot * N, slot * N + N));
  };
  if (plan.group === '') {
    if (plan.exactId !== undefined) {
      const s = col.get(plan.exactId);
      if (s !== undefined) sums.add(day, [], s);
      return;
    }
    for (const [id, slot] of col.slots) add(id, slot);
    return;
  }
  // A group: its ids whole are GROUP<SEP>ID; the plan shows the ID part.
  const prefix = `${plan.group}${SEP}`;
  if (col.groups !== undefined) {
    for (const slot of col.groups.get(plan.group) ?? []) add(col.ids[slot]!.slice(prefix.length), slot);
    return;
  }
  for (const [id, slot] of col.slots) if (id.startsWith(prefix)) add(id.slice(prefix.length), slot);
}
