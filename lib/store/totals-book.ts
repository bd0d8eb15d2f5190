// The memory store's usage totals (with or without a path): hour and day buckets of the
// columns of ./usage-totals.ts, in this process. The file store rebuilds them from its day
// files on open (./memory/usage-files.ts); the store without a path starts empty. A read costs
// the buckets of its range and the ids of the column (or group) it reads, never a record.

import type { HourTotals, TopRow, TotalsDimension, TotalsQuery, TotalsRow, UsageRecord } from './types.js';
import { DAY_MS } from '../utc-day.js';
import { ALL, ALL_COLUMN, HOUR_MS, HourBounds, METRICS, RowSums, SEP, cellsOf, hourRow, hoursOf, metricsInto, planOf, spans, topRows, type Cell, type ColumnSpec, type Plan } from './usage-totals.js';

const N = METRICS.length;

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

  add(id: string, group: string, m: Float64Array): void {
    this.addAt(this.slotOf(id, group), m);
  }

  /** Adds `m` to the sums of slot `slot`. */
  addAt(slot: number, m: Float64Array): void {
    const at = slot * N;
    const sums = this.sums;
    for (let i = 0; i < N; i++) sums[at + i]! += m[i]!;
  }

  /** The slot of `id` (of `group`), made when new. */
  slotOf(id: string, group: string): number {
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
    return slot;
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

/** Places found in one bucket: each one's column and slot, in the places' order. */
interface Found { bucket: Bucket; columns: Column[]; slots: Int32Array }

/** A shape's places (TotalsBook.#places), with where they were found in the last hour and day they counted in. */
interface KeptPlaces extends Places { hour: Found | undefined; day: Found | undefined }

/** Record shapes whose places are kept (TotalsBook.#places); past it the list starts anew. */
const SHAPES = 4096;

/** The totals of one hour or day: per column kept in memory. */
class Bucket {
  readonly columns = new Map<string, Column>();
  /** An hour's bounded values kept by name (../usage-totals.ts BOUNDS); unused in a day's bucket. */
  readonly bounds = new HourBounds();

  add(places: readonly Place[], m: Float64Array): void {
    for (let i = 0; i < places.length; i++) {
      const { column, group, id } = places[i]!;
      this.#column(column).add(id, group, m);
    }
  }

  /**
   * Adds `m` at `places`, looked up in this bucket's columns once (`found`, when it was found
   * here) and then kept: a shape's records count by slot, without a lookup (issue #46).
   */
  addFound(places: readonly Place[], found: Found | undefined, m: Float64Array): Found {
    if (found?.bucket !== this) {
      const columns: Column[] = [];
      const slots = new Int32Array(places.length);
      for (let i = 0; i < places.length; i++) {
        const { column, group, id } = places[i]!;
        const col = this.#column(column);
        columns.push(col);
        slots[i] = col.slotOf(id, group);
      }
      found = { bucket: this, columns, slots };
    }
    const { columns, slots } = found;
    for (let i = 0; i < columns.length; i++) columns[i]!.addAt(slots[i]!, m);
    return found;
  }

  #column(spec: ColumnSpec): Column {
    let col = this.columns.get(spec.name);
    if (col === undefined) this.columns.set(spec.name, (col = new Column(indexed(spec))));
    return col;
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
  /**
   * The places of records without tags or end user, by account, key, team and model (null: no
   * key, no team), in maps one within the other: a record finds them without a string made.
   */
  readonly #shapes = new Map<string, Map<string | null, Map<string | null, Map<string, KeptPlaces>>>>();
  #shapeCount = 0;
  /** A record's METRICS, written anew for each record (metricsInto). */
  readonly #metrics = new Float64Array(N);

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
    const daily = bucketOf(this.#days, day);
    const m = metricsInto(r, this.#metrics);
    if (r.tags.length > 0 || r.end_user !== null) {
      const places = this.#place(cellsOf(r, hourly.bounds.of(r)));
      hourly.add(places.hourly, m);
      daily.add(places.daily, m);
      return;
    }
    const kept = this.#kept(r);
    kept.hour = hourly.addFound(kept.hourly, kept.hour, m);
    kept.day = daily.addFound(kept.daily, kept.day, m);
  }

  /**
   * Where `r`, a record without tags or end user, counts. It has no value the hour's bounds
   * could change: it counts where every such record of its account, key, team and model does,
   * so those places are kept (and, per bucket, their columns and slots), and the common record
   * costs four lookups (issue #46: attribution paid by every record while unused).
   */
  #kept(r: UsageRecord): KeptPlaces {
    let byKey = this.#shapes.get(r.account);
    if (byKey === undefined) this.#shapes.set(r.account, (byKey = new Map()));
    let byTeam = byKey.get(r.key_id);
    if (byTeam === undefined) byKey.set(r.key_id, (byTeam = new Map()));
    let byModel = byTeam.get(r.team);
    if (byModel === undefined) byTeam.set(r.team, (byModel = new Map()));
    let kept = byModel.get(r.model);
    if (kept === undefined) {
      if (this.#shapeCount >= SHAPES) {
        // Past the bound the list starts anew (with this record's shape).
        this.#shapes.clear();
        this.#shapeCount = 0;
        return this.#kept(r);
      }
      const { hourly, daily } = this.#place(cellsOf(r));
      byModel.set(r.model, (kept = { hourly, daily, hour: undefined, day: undefined }));
      this.#shapeCount++;
    }
    return kept;
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
    const buckets = this.#days.size + this.#hours.size;
    for (const day of this.#days.keys()) if ((day + 1) * DAY_MS <= cutoff) this.#days.delete(day);
    for (const hour of this.#hours.keys()) if ((Math.floor(hour / 24) + 1) * DAY_MS <= cutoff) this.#hours.delete(hour);
    // Kept places hold the columns they were last found in: a bucket dropped is let go.
    if (this.#days.size + this.#hours.size < buckets || this.#days.size === 0) {
      this.#shapes.clear();
      this.#shapeCount = 0;
    }
    if (this.#days.size === 0) this.#strings.clear();
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
