// The Files API (CONTRACT section 18): POST /v1/files (multipart: `file`, `purpose=batch`),
// GET /v1/files, GET and DELETE /v1/files/{id}, GET /v1/files/{id}/content. A file belongs to the
// account that uploaded it: another account's id is 404 not_found, as an absent one. Not
// metered (nothing is generated); kept in the batch store (store/batches.ts) for
// batch.retention_days. The body is read within batch.max_file_bytes (and the form's few
// fields): a larger one is 413 as soon as it is known, never buffered past the limit.

import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BusboyConstructor } from '@fastify/busboy';
import { GatewayError, clip } from '../errors.js';
import { readBody } from '../http/body.js';
import { sendJson, sendWhole } from '../http/respond.js';
import { answerHeaders, type RequestContext } from '../pipeline/context.js';
import type { GatewayState } from '../state.js';
import type { BatchStore, FileRecord } from '../store/batches.js';
import type { Principal } from '../auth/principal.js';

/** Bytes a form may hold beside its file: the part headers and the `purpose` field. */
const FORM_SLACK = 64 * 1024;
const DAY_S = 86_400;

let busboy: Promise<{ Busboy: BusboyConstructor }> | undefined;

export function notFound(what: 'file' | 'batch', id: string): GatewayError {
  return new GatewayError('not_found', `No ${what} with id '${clip(id, 128)}' found.`);
}

/** The batch store, or 503 while the gateway has none (it is set before the state serves). */
export function batchStore(state: GatewayState): BatchStore {
  if (state.batches === null) throw new GatewayError('service_unavailable', 'Batches are not available yet; retry shortly.');
  return state.batches;
}

/**
 * Who makes a /v1/files or /v1/batches request (the key's own checks done: expiry, allowed_ips),
 * with the rate headers of its answer set, the batch store, and the answer's headers.
 */
export async function caller(state: GatewayState, ctx: RequestContext, req: IncomingMessage): Promise<{ principal: Principal; store: BatchStore; headers: Record<string, string> }> {
  const principal = await state.auth.authenticate(req.headers.authorization, req);
  ctx.principal = principal;
  ctx.rateHeaders = await state.limits.peek(principal);
  return { principal, store: batchStore(state), headers: answerHeaders(ctx) };
}

/** The file as the API shows it (without its owner). */
export function fileObject(f: FileRecord): Record<string, unknown> {
  return { id: f.id, object: 'file', bytes: f.bytes, created_at: f.created_at, filename: f.filename, purpose: f.purpose, status: 'processed', expires_at: f.expires_at };
}

export function newId(prefix: string): string {
  return `${prefix}${randomBytes(12).toString('hex')}`;
}

/** A stored file of `principal`'s account, or 404 not_found. */
export async function ownFile(store: BatchStore, principal: Principal, id: string): Promise<FileRecord> {
  const f = await store.getFile(id);
  if (f === undefined || f.account !== principal.accountId || f.expires_at * 1000 <= Date.now()) throw notFound('file', id);
  return f;
}

/** /v1/files and /v1/files/{id}[/content]: `rest` is what follows /v1/files. */
export async function serveFiles(state: GatewayState, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, rest: string): Promise<void> {
  const { principal, store, headers } = await caller(state, ctx, req);
  if (rest === '') {
    if (req.method === 'POST') {
      const f = await upload(state, principal, req);
      await store.putFile(f.record, f.content);
      sendJson(res, 200, JSON.stringify(fileObject(f.record)), headers);
      return;
    }
    const files = (await store.listFiles(principal.accountId)).filter((f) => f.expires_at * 1000 > Date.now());
    files.sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1));
    sendJson(res, 200, JSON.stringify({ object: 'list', data: files.map(fileObject), has_more: false }), headers);
    return;
  }
  const content = rest.endsWith('/content');
  const id = decodeId(content ? rest.slice(1, -'/content'.length) : rest.slice(1));
  const f = await ownFile(store, principal, id);
  if (content) {
    if (req.method !== 'GET') throw new GatewayError('method_not_allowed', 'Use GET on a file\'s content.', { headers: { allow: 'GET' } });
    const data = await store.fileContent(f.id);
    if (data === undefined) throw notFound('file', id);
    headers['content-type'] = 'application/jsonl';
    sendWhole(res, 200, data, headers);
  } else if (req.method === 'DELETE') {
    await store.deleteFile(f.id);
    sendJson(res, 200, JSON.stringify({ id: f.id, object: 'file', deleted: true }), headers);
  } else {
    sendJson(res, 200, JSON.stringify(fileObject(f)), headers);
  }
}

function decodeId(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** Reads the multipart upload: its `file` (within batch.max_file_bytes) and `purpose`. */
async function upload(state: GatewayState, principal: Principal, req: IncomingMessage): Promise<{ record: FileRecord; content: Buffer }> {
  const contentType = req.headers['content-type'];
  const semi = contentType?.indexOf(';') ?? -1;
  if (contentType === undefined || (semi === -1 ? contentType : contentType.slice(0, semi)).trim().toLowerCase() !== 'multipart/form-data') {
    throw new GatewayError('unsupported_media_type', 'The request body must be multipart/form-data (a `file` part and `purpose`).');
  }
  const max = state.config.batch.max_file_bytes;
  const body = await readBody(req, max + FORM_SLACK, state.config.server.body_timeout_ms);
  const form = await parseForm(body, contentType, max);
  const purpose = form.fields.get('purpose');
  if (purpose === undefined) throw new GatewayError('missing_required_parameter', 'Missing required parameter: purpose.', { param: 'purpose' });
  if (purpose !== 'batch') throw new GatewayError('invalid_value', `Invalid purpose '${clip(purpose, 64)}': this gateway keeps files for batches only (purpose: batch).`, { param: 'purpose' });
  if (form.file === undefined) throw new GatewayError('missing_required_parameter', 'Missing required parameter: file.', { param: 'file' });
  const now = Math.floor(Date.now() / 1000);
  const record: FileRecord = {
    id: newId('file-'), object: 'file', bytes: form.file.data.length, created_at: now, filename: clip(form.file.filename || 'batch.jsonl', 255),
    purpose, expires_at: now + state.config.batch.retention_days * DAY_S, account: principal.accountId,
  };
  return { record, content: form.file.data };
}

interface Form { fields: Map<string, string>; file: { filename: string; data: Buffer } | undefined }

function malformed(why: string): GatewayError {
  return new GatewayError('invalid_value', `The multipart body is malformed: ${why}.`);
}

async function parseForm(body: Buffer, contentType: string, max: number): Promise<Form> {
  const { Busboy } = await (busboy ??= import('@fastify/busboy'));
  return new Promise((resolve, reject) => {
    let failed = false;
    const fail = (err: GatewayError) => {
      if (!failed) reject(err);
      failed = true;
    };
    let bb;
    try {
      bb = Busboy({ headers: { 'content-type': contentType }, limits: { fileSize: max, files: 1, fields: 8, parts: 9, fieldSize: 1024, headerPairs: 16 } });
    } catch {
      fail(malformed('no boundary'));
      return;
    }
    const form: Form = { fields: new Map(), file: undefined };
    bb.on('field', (name, value) => { form.fields.set(name, value); });
    bb.on('file', (name, stream, filename) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('limit', () => fail(new GatewayError('request_too_large', `The file exceeds batch.max_file_bytes (${max} bytes).`)));
      stream.on('error', () => fail(malformed('a part cut short')));
      stream.on('end', () => {
        if (name === 'file') form.file = { filename, data: Buffer.concat(chunks) };
      });
    });
    bb.on('filesLimit', () => fail(malformed('one file only')));
    bb.on('partsLimit', () => fail(malformed('too many parts')));
    bb.on('fieldsLimit', () => fail(malformed('too many fields')));
    bb.on('error', () => fail(malformed('unreadable')));
    bb.on('finish', () => { if (!failed) resolve(form); });
    bb.end(body);
  });
}
