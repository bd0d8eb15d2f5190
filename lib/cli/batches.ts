// `tollgate batches`: every account's batches (CONTRACT section 18) over the admin API of a
// running gateway (--url, --token or TOLLGATE_ADMIN_TOKEN), as the other admin sub-commands:
//   tollgate batches [list] [--account A] [--status S]   newest first, a table (or --json)
//   tollgate batches show ID                              counts, timestamps, files
//   tollgate batches cancel ID                            no new line starts; in-flight ones finish
// A refusal of the API is exit 1 with `error STATUS CODE: message` on stderr; a usage mistake
// or no admin token is exit 2; a gateway that cannot be reached is exit 1.

import { parseArgs } from 'node:util';
import type { BatchRecord } from '../store/batches.js';

export const BATCHES_USAGE = `  tollgate batches [list] [--account A] [--status S]
  tollgate batches show ID
  tollgate batches cancel ID`;

const USAGE = `usage (--url URL, --token T or TOLLGATE_ADMIN_TOKEN, --json):\n${BATCHES_USAGE}`;

interface FileView { id: string; bytes: number; filename: string; expires_at: number }

/** A batch as the admin API shows it (admin/batches.ts): the record less its key, with its files on `show`. */
type BatchView = Omit<BatchRecord, 'key_id'> & { files?: { input: FileView | null; output: FileView | null; error: FileView | null } };

/** A refusal to go on: its message (stderr) and exit code. */
class Stop extends Error {
  constructor(message: string, readonly exitCode: number) {
    super(message);
  }
}

function iso(seconds: number): string {
  return new Date(seconds * 1000).toISOString().replace('.000Z', 'Z');
}

/** The list as a table: one row a batch, columns as wide as their widest cell. */
export function batchTable(batches: readonly BatchView[]): string {
  const rows = [['ID', 'ACCOUNT', 'STATUS', 'ENDPOINT', 'COMPLETED', 'FAILED', 'TOTAL', 'CREATED']];
  for (const b of batches) {
    const c = b.request_counts;
    rows.push([b.id, b.account, b.status, b.endpoint, String(c.completed), String(c.failed), String(c.total), iso(b.created_at)]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ')).join('\n');
}

function fileLine(what: string, f: FileView | null | undefined, id: string | null | undefined): string {
  if (f === null || f === undefined) return `  ${what}: ${id === null || id === undefined ? 'none' : `${id} (gone)`}`;
  return `  ${what}: ${f.id}  ${f.filename}  ${f.bytes} bytes  kept until ${iso(f.expires_at)}`;
}

/** One batch on a few lines: its counts, each time it reached, its files and errors. */
export function batchLines(b: BatchView): string {
  const c = b.request_counts;
  const times = ([['created', b.created_at], ['in progress', b.in_progress_at], ['finalizing', b.finalizing_at], ['completed', b.completed_at],
    ['failed', b.failed_at], ['expired', b.expired_at], ['cancelling', b.cancelling_at], ['cancelled', b.cancelled_at]] as const)
    .flatMap(([name, t]) => (t === null ? [] : [`${name} ${iso(t)}`]));
  return [
    `${b.id}  account=${b.account}  status=${b.status}  endpoint=${b.endpoint}`,
    `  lines: ${c.total} total, ${c.completed} completed, ${c.failed} failed`,
    `  times: ${times.join(', ')}; window ends ${iso(b.expires_at)}`,
    ...(b.files === undefined ? [] : [
      fileLine('input file', b.files.input, b.input_file_id), fileLine('output file', b.files.output, b.output_file_id), fileLine('error file', b.files.error, b.error_file_id),
    ]),
    ...(b.errors?.data ?? []).map((e) => `  error${e.line === null ? '' : ` line ${e.line}`}: ${e.code}: ${e.message}`),
    ...(b.metadata === null || Object.keys(b.metadata).length === 0 ? [] : [`  metadata: ${Object.entries(b.metadata).map(([k, v]) => `${k}=${v}`).join(' ')}`]),
  ].join('\n');
}

/** One admin API call; the answer's status and JSON body (or its text). */
async function adminCall(url: string, token: string, method: 'GET' | 'POST', path: string): Promise<{ status: number; body: unknown }> {
  let res: Response;
  let text: string;
  try {
    res = await fetch(`${url.replace(/\/+$/, '')}${path}`, { method, headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(10_000), redirect: 'manual' });
    text = await res.text();
  } catch (err) {
    throw new Stop(`cannot reach ${url}: ${(err as Error & { cause?: Error }).cause?.message ?? (err as Error).message}`, 1);
  }
  try {
    return { status: res.status, body: JSON.parse(text) as unknown };
  } catch {
    return { status: res.status, body: text };
  }
}

/** What the command asks the API, and how its answer is printed. */
function request(sub: string, args: string[], opts: { account?: string; status?: string }): { method: 'GET' | 'POST'; path: string; show: (body: never) => string } {
  const one = (verb: string) => {
    if (args.length !== 1 || args[0] === '') throw new Stop(`usage: tollgate batches ${verb} ID`, 2);
    return encodeURIComponent(args[0]!);
  };
  if (sub === 'list') {
    if (args.length !== 0) throw new Stop(`usage: tollgate batches [list] [--account A] [--status S]`, 2);
    const q = new URLSearchParams();
    if (opts.account !== undefined) q.set('account', opts.account);
    if (opts.status !== undefined) q.set('status', opts.status);
    const qs = q.toString();
    return {
      method: 'GET', path: `/admin/batches${qs === '' ? '' : `?${qs}`}`,
      show: (b: { data: BatchView[] }) => (b.data.length === 0 ? 'no batches' : batchTable(b.data)),
    };
  }
  if (sub === 'show') return { method: 'GET', path: `/admin/batches/${one('show')}`, show: batchLines };
  if (sub === 'cancel') return { method: 'POST', path: `/admin/batches/${one('cancel')}/cancel`, show: (b: BatchView) => `cancel asked: ${batchLines(b)}` };
  throw new Stop(`tollgate: unknown command 'batches ${sub}'\n${USAGE}`, 2);
}

/** Runs `tollgate batches ...`; returns the exit code. */
export async function batches(argv: string[]): Promise<number> {
  try {
    let parsed;
    try {
      parsed = parseArgs({
        args: argv, allowPositionals: true, strict: true,
        options: { url: { type: 'string' }, token: { type: 'string' }, json: { type: 'boolean' }, account: { type: 'string' }, status: { type: 'string' } },
      });
    } catch (err) {
      throw new Stop(`tollgate: ${(err as Error).message}\n${USAGE}`, 2);
    }
    const { values, positionals } = parsed;
    const [sub = 'list', ...args] = positionals;
    const step = request(sub, args, values);
    const token = values.token ?? process.env.TOLLGATE_ADMIN_TOKEN;
    if (token === undefined || token === '') throw new Stop('no admin token: pass --token or set TOLLGATE_ADMIN_TOKEN', 2);
    const url = values.url ?? 'http://127.0.0.1:8080';
    const { status, body } = await adminCall(url, token, step.method, step.path);
    if (status !== 200) {
      const e = (body as { error?: { code?: string; message?: string } } | null)?.error;
      if (values.json === true && typeof body === 'object' && body !== null) process.stdout.write(`${JSON.stringify(body)}\n`);
      throw new Stop(`error ${status}${e?.code === undefined ? '' : ` ${e.code}`}: ${e?.message ?? String(body)}`, 1);
    }
    if (body === null || typeof body !== 'object') throw new Stop(`unexpected answer from ${url}: not a JSON object`, 1);
    let out: string;
    try {
      out = values.json === true ? JSON.stringify(body) : step.show(body as never);
    } catch {
      throw new Stop(`unexpected answer from ${url}: ${JSON.stringify(body).slice(0, 200)}`, 1);
    }
    process.stdout.write(`${out}\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof Stop)) throw err;
    process.stderr.write(`${err.message}\n`);
    return err.exitCode;
  }
}
