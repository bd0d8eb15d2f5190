// The Batch API (CONTRACT section 18): POST /v1/batches, GET /v1/batches (newest first, `after`,
// `limit`), GET /v1/batches/{id}, POST /v1/batches/{id}/cancel. A batch is made `validating`;
// the runner (./runner.ts) checks its file, runs its lines and finishes it. A batch belongs to
// the account that made it (another's id is 404 not_found), and runs as the key that made it.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, clip } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { sendJson } from '../http/respond.js';
import type { RequestContext } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import { endedAt, markCancelling, type BatchRecord, type BatchStore } from '../store/batches.js';
import { caller, newId, notFound, ownFile } from './files.js';
import { ENDPOINTS } from './validate.js';

const WINDOW_S = 24 * 3600;

/** The batch as the API shows it: its record, less its owner, with its lines' counts. */
export async function batchObject(store: BatchStore, b: BatchRecord): Promise<Record<string, unknown>> {
  const { account: _a, key_id: _k, ...shown } = b;
  if (b.status === 'in_progress' || b.status === 'cancelling' || b.status === 'finalizing') {
    const c = await store.counts(b.id);
    shown.request_counts = { total: b.request_counts.total, completed: c.completed, failed: c.failed };
  }
  return shown;
}

/** A finished batch that ended more than `days` ago: gone, as the retention sweep will make it (./retention.ts). */
function pastRetention(b: BatchRecord, days: number): boolean {
  const ended = endedAt(b);
  return ended !== undefined && ended + days * 86_400 <= Date.now() / 1000;
}

function badValue(param: string, message: string): GatewayError {
  return new GatewayError('invalid_value', message, { param });
}

/** /v1/batches and /v1/batches/{id}[/cancel]: `rest` is what follows /v1/batches. */
export async function serveBatches(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, rest: string): Promise<void> {
  const { principal, store, headers } = await caller(state, ctx, req);
  if (rest === '') {
    if (req.method === 'POST') {
      const body = await readJsonBody(req, state.config.server);
      if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new GatewayError('invalid_type', 'The body must be a JSON object.');
      const b = body as Record<string, unknown>;
      if (typeof b.input_file_id !== 'string') throw new GatewayError('missing_required_parameter', 'Missing required parameter: input_file_id.', { param: 'input_file_id' });
      if (typeof b.endpoint !== 'string' || !ENDPOINTS.includes(b.endpoint)) throw badValue('endpoint', `endpoint must be one of ${ENDPOINTS.join(', ')}.`);
      if (b.completion_window !== '24h') throw badValue('completion_window', 'completion_window must be 24h.');
      const metadata = b.metadata ?? null;
      if (metadata !== null && (typeof metadata !== 'object' || Array.isArray(metadata) || Object.keys(metadata).length > 16 ||
        Object.entries(metadata).some(([k, v]) => k.length > 64 || typeof v !== 'string' || v.length > 512))) {
        throw badValue('metadata', 'metadata must be an object of at most 16 string values (keys up to 64 characters, values up to 512).');
      }
      if (principal.key === undefined) throw new GatewayError('forbidden', 'A batch runs as a developer key: make it with one.');
      await ownFile(store, principal, b.input_file_id);
      const now = Math.floor(Date.now() / 1000);
      const record: BatchRecord = {
        id: newId('batch_'), object: 'batch', endpoint: b.endpoint, errors: null, input_file_id: b.input_file_id, completion_window: '24h',
        status: 'validating', output_file_id: null, error_file_id: null, created_at: now, in_progress_at: null, expires_at: now + WINDOW_S,
        finalizing_at: null, completed_at: null, failed_at: null, expired_at: null, cancelling_at: null, cancelled_at: null,
        request_counts: { total: 0, completed: 0, failed: 0 }, metadata: metadata as Record<string, string> | null,
        account: principal.accountId, key_id: principal.key.id,
      };
      await store.putBatch(record);
      sendJson(res, 200, JSON.stringify(await batchObject(store, record)), headers);
      return;
    }
    const kept = (await store.listBatches(principal.accountId)).filter((x) => !pastRetention(x, state.config.batch.retention_days));
    sendJson(res, 200, JSON.stringify(await page(store, kept, req.url ?? '')), headers);
    return;
  }
  const cancel = rest.endsWith('/cancel');
  const id = rest.slice(1, cancel ? -'/cancel'.length : undefined);
  const b = await store.getBatch(id);
  if (b === undefined || b.account !== principal.accountId || pastRetention(b, state.config.batch.retention_days)) throw notFound('batch', id);
  if (cancel && markCancelling(b, Math.floor(Date.now() / 1000))) await store.putBatch(b);
  sendJson(res, 200, JSON.stringify(await batchObject(store, b)), headers);
}

/** A page of batches, newest first: `limit` (1 to 100, default 20) after the batch `after`. */
export async function page(store: BatchStore, all: BatchRecord[], url: string): Promise<Record<string, unknown>> {
  const q = new URLSearchParams(url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');
  const limitText = q.get('limit');
  const limit = limitText === null ? 20 : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw badValue('limit', 'limit must be an integer from 1 to 100.');
  all.sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1));
  const after = q.get('after');
  let from = 0;
  if (after !== null) {
    const at = all.findIndex((b) => b.id === after);
    if (at === -1) throw badValue('after', `No batch '${clip(after, 64)}' to list after.`);
    from = at + 1;
  }
  const rows = all.slice(from, from + limit);
  const data = await Promise.all(rows.map((b) => batchObject(store, b)));
  return { object: 'list', data, first_id: rows[0]?.id ?? null, last_id: rows.at(-1)?.id ?? null, has_more: from + limit < all.length };
}
