// `tollgate usage export` (CONTRACT section 8) as an operator runs it: a child process against
// a running gateway. 100,000 records (seeded straight into the store's day files) stream out
// in bounded memory (the child's peak RSS is measured); csv quotes what needs quoting and
// reads back to the same records as jsonl; bad arguments and refused queries exit non-zero.

import t from 'tap';
import fc from 'fast-check';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { csvField, csvRow, USAGE_COLUMNS } from '../../lib/store/usage-csv.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import type { UsageRecord } from '../../lib/store/types.js';
import { BIN } from '../helpers/child.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'admin-export-token-123';
const N = 100_000;

const dir = await mkdtemp(join(tmpdir(), 'tollgate-export-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const base = Date.now() - 2 * 3_600_000;
function rec(i: number, over: Partial<UsageRecord> = {}): UsageRecord {
  return {
    request_id: `exp-${i}`, at: base + i * 10, account: i % 2 === 0 ? 'demo' : 'acme', key_id: `key_${String(i % 7).padStart(16, '0')}`, team: null,
    model: 'echo-small', provider: 'local-vllm', target: 'http://10.1.2.3:8000/v1', route: '/v1/chat/completions', status: 200,
    prompt_tokens: 100 + (i % 50), cached_tokens: i % 3, completion_tokens: 20 + (i % 30), units: 7 + (i % 11), usage_source: 'upstream',
    duration_ms: 123.45, ttft_ms: 12.5, queue_ms: i % 3 === 0 ? 0 : 10 * (i % 100), tags: [], end_user: null, ...over,
  };
}

// Seeded through the store API (not 100,000 HTTP requests), then served by a gateway.
const tricky: UsageRecord[] = [
  rec(N, { at: base + N * 10, model: 'a,b', target: null, ttft_ms: null, usage_source: 'none' }),
  rec(N + 1, { at: base + N * 10 + 1, model: 'say "hi"', key_id: null }),
  rec(N + 2, { at: base + N * 10 + 2, model: 'line\nbreak\r\nand, more', provider: ' spaced ' }),
];
{
  const store = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  for (let i = 0; i < N; i += 5000) await Promise.all(Array.from({ length: 5000 }, (_, j) => store.recordUsage(rec(i + j))));
  for (const r of tricky) await store.recordUsage(r);
  await store.close();
}

const c = baseConfig();
c.admin = { token: ADMIN };
c.store = { kind: 'memory', path: dir, fsync_ms: 0 };
const gw: TestGateway = await startGateway(c);
t.teardown(() => gw.close());

// Written by the child as it exits: its peak resident set size (KiB).
const RSS_HOOK = `data:text/javascript,${encodeURIComponent(
  "import{writeFileSync}from'node:fs';process.on('exit',()=>{if(process.env.RSS_OUT)writeFileSync(process.env.RSS_OUT,String(process.resourceUsage().maxRSS))})",
)}`;

interface Run { code: number | null; stderr: string; maxRssKiB: number; bytes: number }

/** Runs the CLI; each stdout line goes to `onLine` as it arrives (nothing is kept here). */
async function cli(args: string[], onLine: (line: string) => void = () => {}): Promise<Run> {
  const rssFile = join(dir, `rss-${Math.random().toString(36).slice(2)}`);
  // A small young generation: V8 grows it up to 3 x 16 MiB under steady allocation, GC slack
  // that says nothing of what the export keeps; without it the peak shows what is retained.
  const child = spawn(process.execPath, ['--max-semi-space-size=2', '--import', RSS_HOOK, BIN, ...args, '--url', gw.url, '--token', ADMIN], {
    stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RSS_OUT: rssFile },
  });
  let stderr = '';
  let bytes = 0;
  child.stderr.on('data', (d) => { stderr += d; });
  child.stdout.on('data', (d: Buffer) => { bytes += d.length; });
  const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
  lines.on('line', onLine);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  let maxRssKiB = 0;
  try { maxRssKiB = Number(await readFile(rssFile, 'utf8')); } catch { /* exited before the hook ran */ }
  return { code, stderr, maxRssKiB, bytes };
}

const since = new Date(base - 1000).toISOString();

t.test('100,000 records export as jsonl, each once, in bounded memory', async (t) => {
  // The same command with nothing to export: what the CLI itself takes.
  const idle = await cli(['usage', 'export', '--since', since, '--until', new Date(base - 500).toISOString(), '--format', 'jsonl']);
  t.equal(idle.code, 0, idle.stderr);
  t.equal(idle.bytes, 0);

  const seen = new Set<string>();
  let bad = 0;
  let previousAt = '';
  let ordered = true;
  const run = await cli(['usage', 'export', '--since', since, '--format', 'jsonl'], (line) => {
    const r = JSON.parse(line);
    if (seen.has(r.request_id) || typeof r.at !== 'string' || r.status !== 200) bad++;
    if (r.at < previousAt) ordered = false;
    previousAt = r.at;
    seen.add(r.request_id);
  });
  t.equal(run.code, 0, run.stderr);
  t.equal(seen.size, N + tricky.length, 'every record');
  t.equal(bad, 0, 'each once, with its fields');
  t.ok(ordered, 'in time order');
  t.ok(run.bytes > 30 * 1024 * 1024, `${(run.bytes / 1048576).toFixed(1)} MiB exported`);
  t.ok(run.maxRssKiB > 0 && idle.maxRssKiB > 0, 'peak memory measured');
  const growth = (run.maxRssKiB - idle.maxRssKiB) / 1024;
  t.ok(growth < 20, `peak RSS ${(run.maxRssKiB / 1024).toFixed(0)} MiB, ${growth.toFixed(1)} MiB above an empty export: far below the ${(run.bytes / 1048576).toFixed(0)} MiB exported`);
});

t.test('filters: --account and --until', async (t) => {
  let n = 0;
  const run = await cli(['usage', 'export', '--since', since, '--until', new Date(base + 1000 * 10).toISOString(), '--account', 'acme', '--format', 'jsonl'], (line) => {
    const r = JSON.parse(line);
    if (r.account === 'acme') n++;
  });
  t.equal(run.code, 0, run.stderr);
  t.equal(n, 500, 'acme\'s records of the first 1000');
});

/** RFC 4180 rows (CRLF or LF line ends inside quotes kept), for checking the csv. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (ch === '"') quoted = false; else field += ch;
    } else if (ch === '"' && field === '') quoted = true;
    else if (ch === ',') { row.push(field); field = ''; }
    else if (ch === '\r' && text[i + 1] === '\n') { row.push(field); rows.push(row); row = []; field = ''; i++; }
    else field += ch;
  }
  if (field !== '' || row.length > 0) throw new Error('csv does not end with CRLF');
  return rows;
}

t.test('csv: a header, one row per record, fields quoted as RFC 4180 says', async (t) => {
  const from = new Date(base + N * 10 - 1).toISOString();
  const raw = await new Promise<string>((resolve) => {
    let out = '';
    const child = spawn(process.execPath, [BIN, 'usage', 'export', '--since', from, '--format', 'csv', '--url', gw.url, '--token', ADMIN], { stdio: ['ignore', 'pipe', 'inherit'] });
    child.stdout.on('data', (d) => { out += d; });
    child.on('close', () => resolve(out));
  });
  t.ok(raw.startsWith(`${USAGE_COLUMNS.join(',')}\r\n`), 'the header');
  t.match(raw, /,"a,b",/);
  t.match(raw, /,"say ""hi""",/);
  t.match(raw, /,"line\nbreak\r\nand, more", spaced ,/);
  const rows = parseCsv(raw);
  t.strictSame(rows[0], [...USAGE_COLUMNS]);
  t.equal(rows.length, 1 + tricky.length);
  const asText = (v: unknown) => (v === null || v === undefined ? '' : String(v));
  for (let i = 0; i < tricky.length; i++) {
    const r = tricky[i]!;
    t.strictSame(rows[i + 1], USAGE_COLUMNS.map((col) => (col === 'at' ? new Date(r.at).toISOString() : asText(r[col]))), r.request_id);
  }
});

t.test('csv fields read back to what they were, whatever the text (property)', async (t) => {
  let checked = 0;
  // A cell a spreadsheet could take for a formula carries a leading ' (test/cli/csv-injection.test.ts).
  const unmark = (cell: string) => (cell.startsWith("'") ? cell.slice(1) : cell);
  fc.assert(fc.property(fc.string({ unit: fc.constantFrom('a', ',', '"', '\r', '\n', ' ', 'é', '0') }), fc.option(fc.integer(), { nil: null }), (s, n) => {
    const row = csvRow({ request_id: s, status: n, model: `${s}x` });
    const parsed = parseCsv(row);
    checked++;
    return parsed.length === 1 && unmark(parsed[0]![0]!) === s && unmark(parsed[0]![USAGE_COLUMNS.indexOf('status')]!) === (n === null ? '' : String(n)) &&
      unmark(parsed[0]![USAGE_COLUMNS.indexOf('model')]!) === `${s}x` && parsed[0]!.length === USAGE_COLUMNS.length;
  }), { numRuns: 500 });
  t.equal(checked, 500);
  t.equal(csvField('plain'), 'plain');
  t.equal(csvField(null), '');
});

t.test('bad arguments exit 2 before any call; a refused query exits 1 with the error', async (t) => {
  const noSince = await cli(['usage', 'export', '--format', 'jsonl']);
  t.equal(noSince.code, 2);
  t.match(noSince.stderr, /--since is required/);
  const badFormat = await cli(['usage', 'export', '--since', since, '--format', 'xml']);
  t.equal(badFormat.code, 2);
  t.match(badFormat.stderr, /--format must be jsonl or csv/);
  const badSince = await cli(['usage', 'export', '--since', 'last tuesday', '--format', 'csv']);
  t.equal(badSince.code, 1);
  t.match(badSince.stderr, /^error 400 invalid_value: Invalid value for 'since'/);
  t.equal(badSince.bytes, `${USAGE_COLUMNS.join(',')}\r\n`.length, 'only the header was written');
  const unknown = await cli(['usage', 'export', '--since', since, '--account', 'ghost', '--format', 'jsonl']);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /error 404 account_not_found/);
});
