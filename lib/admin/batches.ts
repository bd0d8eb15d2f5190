// Every account's batches for the operator (CONTRACT section 18): GET /admin/batches (newest
// first; `account` and `status` narrow it), GET /admin/batches/{id} (the batch with its
// account, its lines' counts and its files) and POST /admin/batches/{id}/cancel (as the owner's
// cancel: no new line starts, lines in flight finish and are charged). `tollgate batches` calls
// these (cli/batches.ts).

import { GatewayError, clip } from '../errors.js';
import { ACTIVE_STATUSES, markCancelling, type BatchRecord, type BatchStatus, type BatchStore, type FileRecord } from '../store/batches.js';

const STATUSES: readonly BatchStatus[] = ['validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled'];

/** A batch as the admin API shows it: with its account, less the key it runs as; a running one's counts so far. */
async function shown(store: BatchStore, b: BatchRecord): Promise<Record<string, unknown>> {
  const { key_id: _k, ...rest } = b;
  if (!ACTIVE_STATUSES.has(b.status)) return rest;
  return { ...rest, request_counts: { total: b.request_counts.total, ...(await store.counts(b.id)) } };
}

function batchNotFound(id: string): GatewayError {
  return new GatewayError('not_found', `No batch with id '${clip(id, 128)}' found.`);
}

/** GET /admin/batches[?account=A][&status=S]. */
export async function listBatches(store: BatchStore | null, url: string): Promise<unknown> {
  const q = new URL(url, 'http://admin').searchParams;
  const account = q.get('account') ?? undefined;
  const status = q.get('status');
  if (status !== null && !STATUSES.includes(status as BatchStatus)) {
    throw new GatewayError('invalid_value', `Invalid value for 'status': one of ${STATUSES.join(', ')}.`, { param: 'status' });
  }
  let all = store === null ? [] : await store.listBatches(account);
  if (status !== null) all = all.filter((b) => b.status === status);
  all.sort((x, y) => y.created_at - x.created_at || (x.id < y.id ? 1 : -1));
  return { object: 'list', data: await Promise.all(all.map((b) => shown(store!, b))) };
}

/** A file the batch names, as the admin API shows it (null when none, or gone past retention). */
function fileView(f: FileRecord | undefined): Record<string, unknown> | null {
  return f === undefined ? null : { id: f.id, bytes: f.bytes, filename: f.filename, purpose: f.purpose, created_at: f.created_at, expires_at: f.expires_at };
}

/** GET /admin/batches/{id}: the batch, and its input, output and error files. */
export async function getBatch(store: BatchStore | null, id: string): Promise<unknown> {
  const b = store === null ? undefined : await store.getBatch(id);
  if (b === undefined) throw batchNotFound(id);
  const file = async (fid: string | null) => (fid === null ? null : fileView(await store!.getFile(fid)));
  const [input, output, error] = await Promise.all([file(b.input_file_id), file(b.output_file_id), file(b.error_file_id)]);
  return { ...(await shown(store!, b)), files: { input, output, error } };
}

/** POST /admin/batches/{id}/cancel: cancelling (a finished batch is 400 invalid_value). */
export async function cancelBatch(store: BatchStore | null, id: string): Promise<unknown> {
  const b = store === null ? undefined : await store.getBatch(id);
  if (b === undefined) throw batchNotFound(id);
  if (markCancelling(b, Math.floor(Date.now() / 1000))) await store!.putBatch(b);
  return getBatch(store, id);
}
