// Usage records in the memory store, for MemoryStore (./store.ts): their writes, made once per
// write id, and the reports over them. The records themselves are the log's: day files with a
// path (./usage-files.ts), columns in memory without one (./usage-columns.ts).

import type { HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';
import { UsageWriteError } from './usage-files.js';
import { WRITE_MARK_MS, validateUsageRecord, type UsageLog } from '../usage-records.js';
import { checkRange, checkTop, checkTotalsQuery } from '../usage-totals.js';
import type { MemoryHost } from './tables.js';
import { MemoryUsageLog } from './usage-columns.js';
import { WriteMarks } from './write-marks.js';

export class MemoryUsage {
  /** The log: columns in memory, until a durable store has opened its day files. */
  log: UsageLog;
  /** Writes to a day file under way, by write id (recordUsage): a repeat waits for the first. */
  readonly #pending = new Map<string, { record: UsageRecord; done: Promise<void> }>();
  /** The write ids of the writes done in the last WRITE_MARK_MS (recordUsage). */
  readonly #marks = new WriteMarks();
  readonly #host: MemoryHost;

  constructor(log: UsageLog, host: MemoryHost) {
    this.log = log;
    this.#host = host;
  }

  /**
   * With a `writeId` seen in the last WRITE_MARK_MS, a repeat waits for the first write and
   * appends nothing, unless that write failed with its record not in the file (as Redis marks
   * write ids): a record, and its totals, land once however often the write is asked. Of a
   * write done, only its id is kept (./write-marks.ts), not the record (issue #46).
   */
  async recordUsage(r: UsageRecord, writeId?: string): Promise<void> {
    await this.#host.begin();
    validateUsageRecord(r);
    if (writeId !== undefined) {
      this.#marks.forget(Date.now() - WRITE_MARK_MS);
      for (;;) {
        if (this.#marks.has(writeId)) return;
        const first = this.#pending.get(writeId);
        if (first === undefined) break;
        try {
          await first.done;
          return;
        } catch (e) {
          if (e instanceof UsageWriteError && e.landed.has(first.record)) return;
        }
        // Failed with its record not written: written again, by this call unless another took it up.
        if (this.#pending.get(writeId) === first) this.#pending.delete(writeId);
      }
    }
    const log = this.log;
    if (log instanceof MemoryUsageLog) {
      // Columns take the record's values at once: no copy, nothing to wait for.
      log.keep(r);
      if (writeId !== undefined) this.#marks.add(writeId, Date.now());
      return;
    }
    // A day file keeps the record until its line is written: a copy, which the caller cannot change.
    const copy = { ...r };
    if (writeId === undefined) return log.record(copy);
    const write = { record: copy, done: log.record(copy) };
    this.#pending.set(writeId, write);
    let landed = true;
    try {
      await write.done;
    } catch (e) {
      landed = e instanceof UsageWriteError && e.landed.has(copy);
      throw e;
    } finally {
      if (this.#pending.get(writeId) === write) this.#pending.delete(writeId);
      if (landed) this.#marks.add(writeId, Date.now());
    }
  }

  async usageReport(account: string | undefined, since: number): Promise<UsageReport> {
    await this.#host.begin();
    return this.log.report(account, since);
  }

  async usageRecords(q: UsageQuery): Promise<UsagePage> {
    await this.#host.begin();
    return this.log.page(q);
  }

  async usageHourly(q: HourlyQuery): Promise<HourTotals[]> {
    checkRange(q.since, q.until);
    await this.#host.begin();
    return this.log.hourly(q.since, q.until, q.account);
  }

  async usageTop(q: TopQuery): Promise<TopRow[]> {
    checkRange(q.since, q.until);
    checkTop(q.by, q.limit);
    await this.#host.begin();
    return this.log.top(q.by, q.since, q.until, q.limit, q.account);
  }

  async usageTotals(q: TotalsQuery): Promise<TotalsRow[]> {
    checkTotalsQuery(q);
    await this.#host.begin();
    return this.log.totals(q);
  }

  usageRecordsRead(): number { return this.log.reads.n; }
}
