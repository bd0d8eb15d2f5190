// Retention (CONTRACT section 18, batch.retention_days): files past their expires_at and
// finished batches that ended more than retention_days ago are deleted from the store (a
// file's record and content; a batch's record, its lines' outcomes and its lease), not only
// refused on read. Each sweep deletes at most SWEEP_LIMIT of each, so a sweep's work is bounded
// however much has piled up; the runner sweeps again at its next look while a sweep was full.

import type { BatchStore } from '../store/batches.js';

/** The most files, and the most batches, one sweep deletes. */
export const SWEEP_LIMIT = 500;
const DAY_S = 86_400;

/** Deletes what is past retention at `now` (Unix seconds); true when a limit was reached (more may be left). */
export async function sweep(store: BatchStore, now: number, retentionDays: number, limit = SWEEP_LIMIT): Promise<boolean> {
  const files = await store.expiredFiles(now, limit);
  for (const id of files) await store.deleteFile(id);
  const batches = await store.endedBatches(now - retentionDays * DAY_S, limit);
  for (const id of batches) await store.deleteBatch(id);
  return files.length >= limit || batches.length >= limit;
}
