// Usage records in the memory store, for MemoryStore (./store.ts): their writes, made once per
// write id, and the reports over them. The records themselves are the log's: day files with a
// path (./usage-files.ts), columns in memory without one (./usage-columns.ts).

import type { HourTotals, HourlyQuery, TopQuery, TopRow, TotalsQuery, TotalsRow, UsagePage, UsageQuery, UsageRecord, UsageReport } from '../types.js';
import { UsageWriteError } from './usage-files.js';
import { WRITE_MARK_MS, validateUsageRecord, type UsageLog } from '../usage-records.js';
import { checkRange, checkTop, checkTotalsQuery } from '../usage-totals.js';
import type { MemoryHost } from './tables.js';

export class MemoryUsage {
  /** The log: columns in memory, until a durable store has opened its day files. */
  log: UsageLog;
  /** Recent usage writes by write id, oldest first (recordUsage). */
  readonly #writes = new Map<string, { at: number; record: UsageRecord; done: Promise<void> }>();
  readonly #host: MemoryHost;

  constructor(log: UsageLog, host: MemoryHost) {
    this.log = log;
    this.#host = host;
  }

  /**
   * With a `writeId` seen in the last WRITE_MARK_MS, a repeat waits for the first write and
   * appends nothing, unless that write failed with its record not in the file (as Redis marks
   * write ids): a record, and its totals, land once however often the write is asked.
   */
  async recordUsage(r: UsageRecord, writeId?: string): Promise<void> {
    await this.#host.begin();
    validateUsageRecord(r);
    const copy = { ...r };
    if (writeId === undefined) return this.log.record(copy);
    const now = Date.now();
    for (const [id, w] of this.#writes) {
      if (now - w.at < WRITE_MARK_MS) break;
      this.#writes.delete(id);
    }
    const first = this.#writes.get(writeId);
    if (first !== undefined) {
      try {
        await first.done;
        return;
      } catch (e) {
        if (e instanceof UsageWriteError && e.landed.has(first.record)) return;
      }
    }
    const write = { at: now, record: copy, done: this.log.record(copy) };
    this.#writes.delete(writeId);
    this.#writes.set(writeId, write);
    try {
      await write.done;
    } catch (e) {
      const landed = e instanceof UsageWriteError && e.landed.has(copy);
      if (!landed && this.#writes.get(writeId) === write) this.#writes.delete(writeId);
      throw e;
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
