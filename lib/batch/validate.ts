// A batch's input file checked whole before any line runs (CONTRACT section 18): each line
// `{custom_id, method: "POST", url, body}` with `url` the batch's endpoint, `custom_id` unique,
// the body a valid request of that route (its dialect's own parser) for a model the key may use,
// and no `stream: true`. Every problem is reported with its line number (1-based), up to a bound.

import type { IncomingMessage } from 'node:http';
import type { Principal } from '../auth/principal.js';
import type { Catalog } from '../catalog/catalog.js';
import { chatDialect } from '../dialects/chat/index.js';
import { completionsDialect } from '../dialects/completions/index.js';
import { parseEmbeddings } from '../dialects/embeddings/index.js';
import { GatewayError, clip } from '../errors.js';
import type { BatchError } from '../store/batches.js';

export const ENDPOINTS: readonly string[] = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'];

/** The most errors a failed batch lists. */
const MAX_ERRORS = 100;

export interface BatchLine { line: number; custom_id: string; body: Record<string, unknown> }

/** Nothing of the request is read by the parsers but its body. */
const NO_REQUEST = { headers: {} } as IncomingMessage;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Lines checked between two turns of the event loop: a file of 50,000 lines does not hold it. */
const SLICE = 1000;

/** The file's lines, or the problems found in it (then nothing runs). */
export async function validateLines(
  content: Buffer, endpoint: string, maxLines: number, catalog: Catalog, principal: Principal,
): Promise<{ lines: BatchLine[]; errors: BatchError[] }> {
  const lines: BatchLine[] = [];
  const errors: BatchError[] = [];
  const seen = new Set<string>();
  const add = (line: number | null, code: string, message: string, param: string | null = null) => {
    if (errors.length < MAX_ERRORS) errors.push({ code, line, message, param });
  };
  const text = content.toString('utf8');
  const raw = text.split('\n');
  let count = 0;
  for (let i = 0; i < raw.length; i++) {
    const n = i + 1;
    if (n % SLICE === 0) await new Promise<void>((r) => setImmediate(r));
    const src = raw[i]!.trim();
    if (src === '') continue;
    if (++count > maxLines) {
      add(n, 'too_many_lines', `The file has more than batch.max_lines (${maxLines}) requests.`);
      break;
    }
    let v: unknown;
    try {
      v = JSON.parse(src);
    } catch {
      add(n, 'invalid_json_line', 'This line is not valid JSON.');
      continue;
    }
    if (!isRecord(v)) { add(n, 'invalid_request', 'Each line must be a JSON object {custom_id, method, url, body}.'); continue; }
    const { custom_id: id, method, url, body } = v;
    if (typeof id !== 'string' || id.length === 0 || id.length > 512) { add(n, 'invalid_custom_id', 'custom_id must be a string of 1 to 512 characters.', 'custom_id'); continue; }
    if (seen.has(id)) { add(n, 'duplicate_custom_id', `The custom_id '${clip(id, 64)}' is used by an earlier line.`, 'custom_id'); continue; }
    seen.add(id);
    if (method !== 'POST') { add(n, 'invalid_method', 'method must be POST.', 'method'); continue; }
    if (url !== endpoint) { add(n, 'mismatched_url', `url must be the batch's endpoint, ${endpoint}.`, 'url'); continue; }
    if (!isRecord(body)) { add(n, 'invalid_request', 'body must be a JSON object.', 'body'); continue; }
    if (body.stream === true) { add(n, 'invalid_request', 'A batch line cannot stream (stream: true).', 'body.stream'); continue; }
    try {
      const model = parseModel(endpoint, body);
      catalog.resolve(model, principal.plan, false, () => null, principal.key);
    } catch (err) {
      if (!(err instanceof GatewayError)) throw err;
      add(n, err.code, err.message, err.param === null ? 'body' : `body.${err.param}`);
      continue;
    }
    lines.push({ line: n, custom_id: id, body });
  }
  if (count === 0 && errors.length === 0) add(null, 'empty_file', 'The input file has no requests.');
  return { lines, errors };
}

/** The body parsed as its route's request would be: its model, or the route's 400. */
function parseModel(endpoint: string, body: Record<string, unknown>): string {
  if (endpoint === '/v1/embeddings') return parseEmbeddings(body).model;
  if (endpoint === '/v1/completions') return completionsDialect.parse(body, NO_REQUEST).model;
  return chatDialect.parse(body, NO_REQUEST).model;
}
