// `tollgate usage` (the admin API's usage report) and `tollgate usage export` (every usage
// record of a query, page by page, as JSON lines or CSV).

import { CSV_HEADER, csvRow } from '../store/usage-csv.js';
import type { UsageAnswer } from './answers.js';
import { CliError, call, type Opts, type Step } from './call.js';

/** The call of `tollgate usage`, which has no sub-command: its words are all options. */
export function planUsage(sub: string | undefined, _args: string[], opts: Opts): Step {
  if (sub !== undefined) throw new CliError('usage: tollgate usage [--account A] [--since DATE] | tollgate usage export --since DATE ...', 2);
  const q = new URLSearchParams();
  if (typeof opts.account === 'string') q.set('account', opts.account);
  if (typeof opts.since === 'string') q.set('since', opts.since);
  const qs = q.toString();
  return {
    call: { method: 'GET', path: `/admin/usage${qs === '' ? '' : `?${qs}`}` },
    show: (b: UsageAnswer) => [
      `usage since ${b.since}${b.account === null ? ' (all accounts)' : ` for ${b.account}`}: ${b.requests} requests, ${b.prompt_tokens} prompt + ${b.completion_tokens} completion tokens, ${b.units} units`,
      ...Object.entries(b.by_model).map(([m, u]) => `  ${m}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
      ...Object.entries(b.by_key ?? {}).map(([k, u]) => `  key ${k}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
      ...Object.entries(b.by_team ?? {}).map(([k, u]) => `  team ${k}: ${u.requests} requests, ${u.prompt_tokens} + ${u.completion_tokens} tokens, ${u.units} units`),
    ].join('\n'),
  };
}

export interface ExportArgs { query: URLSearchParams; format: 'jsonl' | 'csv' }

export function exportPlan(args: string[], opts: Record<string, string | undefined>): ExportArgs {
  const usage = 'usage: tollgate usage export --since DATE [--until DATE] [--account A] [--key KEY_ID] [--model M] [--tag T] [--end-user U] --format jsonl|csv';
  if (args.length !== 0) throw new CliError(usage, 2);
  if (opts.since === undefined) throw new CliError(`usage export: --since is required\n${usage}`, 2);
  if (opts.format !== 'jsonl' && opts.format !== 'csv') throw new CliError(`usage export: --format must be jsonl or csv\n${usage}`, 2);
  const query = new URLSearchParams({ since: opts.since, limit: '1000' });
  for (const [opt, param] of [['until', 'until'], ['account', 'account'], ['key', 'key'], ['model', 'model'], ['tag', 'tag'], ['end-user', 'end_user']] as const) {
    if (opts[opt] !== undefined) query.set(param, opts[opt]!);
  }
  return { query, format: opts.format };
}

/** Writes to stdout, waiting while its buffer is full (memory stays bounded by one page). */
function write(text: string): Promise<void> {
  if (process.stdout.write(text)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const done = (err?: Error) => { process.stdout.off('drain', onDrain); process.stdout.off('error', done); if (err) reject(err); else resolve(); };
    const onDrain = () => done();
    process.stdout.once('drain', onDrain);
    process.stdout.once('error', done);
  });
}

/**
 * `tollgate usage export`: every record of the query, page by page (GET /admin/usage/records
 * with each page's next_cursor), each page written before the next is asked for: one page in
 * memory at a time, whatever the export's size. jsonl: one record per line; csv: a header, then
 * one row per record (RFC 4180, CRLF).
 */
export async function exportUsage(url: string, token: string, a: ExportArgs): Promise<number> {
  if (a.format === 'csv') await write(CSV_HEADER);
  let cursor: string | null = null;
  let pages = 0;
  do {
    const q = new URLSearchParams(a.query);
    if (cursor !== null) q.set('cursor', cursor);
    const { status, body } = await call(url, token, { method: 'GET', path: `/admin/usage/records?${q.toString()}` });
    if (status !== 200) {
      const e = body as { code?: string; message?: string } | null;
      process.stderr.write(`error ${status}${e?.code ? ` ${e.code}` : ''}: ${e?.message ?? String(body)}${pages > 0 ? ` (after ${pages} pages were written)` : ''}\n`);
      return 1;
    }
    const page = body as { records?: unknown; next_cursor?: unknown } | null;
    if (page === null || typeof page !== 'object' || !Array.isArray(page.records) || (page.next_cursor !== null && typeof page.next_cursor !== 'string')) {
      throw new CliError(`unexpected answer from ${url}: ${JSON.stringify(body).slice(0, 200)}`, 1);
    }
    let out = '';
    for (const r of page.records as Record<string, unknown>[]) out += a.format === 'csv' ? csvRow(r) : `${JSON.stringify(r)}\n`;
    if (out !== '') await write(out);
    cursor = page.next_cursor as string | null;
    pages++;
  } while (cursor !== null);
  return 0;
}
