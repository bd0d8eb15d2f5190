// `tollgate batches` (CONTRACT section 18) as an operator runs it: a YAML file served by
// `tollgate serve` as a child process, batches made with the openai SDK by two accounts, then
// the built bin as a child process: list (every account, newest first, `--account`,
// `--status`, a table or --json), show (counts, times, files), cancel (a running batch stops
// starting lines; the ones in flight finish and are charged, nothing held). Error paths with
// their exact stdout, stderr and exit code: an unknown id, a finished batch, a bad filter, no
// admin token, a wrong one, a gateway that is down, an unknown sub-command.

import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import OpenAI, { toFile } from 'openai';
import { BIN } from '../helpers/child.js';
import { LINE_UNITS, OTHER, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, KEY, WALLET, serveFile, wallet } from '../helpers/operator.js';

interface Run { code: number | null; stdout: string; stderr: string }

function cli(args: string[], env: NodeJS.ProcessEnv = { TOLLGATE_ADMIN_TOKEN: ADMIN }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, 'batches', ...args], { env: { PATH: process.env.PATH, ...env }, timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

async function admin(url: string, path: string): Promise<any> {
  return (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
}

const iso = (s: number) => new Date(s * 1000).toISOString().replace('.000Z', 'Z');

/** A table row as the spec of the table says: columns padded to the widest cell (IDs 30, ACCOUNT 7, STATUS 9). */
function row(b: any): string {
  const c = b.request_counts;
  return [b.id.padEnd(30), b.account.padEnd(7), b.status.padEnd(9), b.endpoint.padEnd(20), String(c.completed).padEnd(9), String(c.failed).padEnd(6), String(c.total).padEnd(5), iso(b.created_at)].join('  ');
}
const HEADER = 'ID                              ACCOUNT  STATUS     ENDPOINT              COMPLETED  FAILED  TOTAL  CREATED';

t.test('tollgate batches list, show, cancel against a served YAML file', async (t) => {
  const up = await fakeChat(700);
  t.teardown(() => up.close());
  // 40 lines at 0.7 s, 2 at a time: 14 s of work, so the CLI child (slow to start on a loaded machine) cancels it midway.
  const served = await serveFile(t, batchConfig(up.baseUrl, { batch: { max_file_bytes: 65536, concurrency: 2 } }));
  const demo = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const other = new OpenAI({ apiKey: OTHER, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const url = ['--url', served.url];

  const inA = await other.files.create({ file: await toFile(Buffer.from(lines(1)), 'one.jsonl'), purpose: 'batch' });
  const a = await other.batches.create({ input_file_id: inA.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'nightly' } });
  t.equal((await until(() => other.batches.retrieve(a.id), (x) => x.status === 'completed')).status, 'completed');
  const inB = await other.files.create({ file: await toFile(Buffer.from('not json\n'), 'bad.jsonl'), purpose: 'batch' });
  const b = await other.batches.create({ input_file_id: inB.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  t.equal((await until(() => other.batches.retrieve(b.id), (x) => x.status === 'failed')).status, 'failed');
  const inC = await demo.files.create({ file: await toFile(Buffer.from(lines(40)), 'forty.jsonl'), purpose: 'batch' });
  const c = await demo.batches.create({ input_file_id: inC.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  t.equal((await until(() => demo.batches.retrieve(c.id), (x) => x.status === 'in_progress')).status, 'in_progress');

  const cancel = await cli(['cancel', c.id, ...url]);
  t.equal(cancel.code, 0, cancel.stderr);
  t.equal(cancel.stderr, '');
  t.match(cancel.stdout, new RegExp(`^cancel asked: ${c.id}  account=demo  status=cancelling  endpoint=/v1/chat/completions\\n  lines: 40 total, `));
  const cancelled = await until(() => demo.batches.retrieve(c.id), (x) => x.status === 'cancelled');
  t.equal(cancelled.status, 'cancelled', 'the runner stops the batch');
  const ran = cancelled.request_counts!.completed;
  t.ok(ran < 40, `lines not started were not run (${ran} ran)`);
  t.equal(up.requests.length, 1 + ran, 'the upstream saw only the lines that ran');
  const w = await wallet(served.url);
  t.same([w.balance_units, w.held_units], [WALLET - ran * LINE_UNITS, 0], 'the lines that ran are charged, nothing held');

  const all = (await admin(served.url, '/admin/batches')).data;
  t.same(all.map((x: any) => x.id).sort(), [a.id, b.id, c.id].sort());
  const list = await cli(['list', ...url]);
  t.same([list.code, list.stderr], [0, '']);
  t.equal(list.stdout, `${[HEADER, ...all.map(row)].join('\n')}\n`, 'every account, newest first, as a table');
  t.equal((await cli(url)).stdout, list.stdout, 'list is the default');
  t.ok(all.every((x: any, i: number) => i === 0 || all[i - 1].created_at >= x.created_at), 'newest first');

  const failed = await cli(['--account', 'other', '--status', 'failed', ...url]);
  t.equal(failed.stdout, `${HEADER.replace('ACCOUNT  STATUS     ', 'ACCOUNT  STATUS  ')}\n${row(all.find((x: any) => x.id === b.id)).replace('other    failed     ', 'other    failed  ')}\n`);
  t.equal((await cli(['list', '--account', 'nobody', ...url])).stdout, 'no batches\n');
  const json = await cli(['list', '--account', 'other', '--json', ...url]);
  t.strictSame(JSON.parse(json.stdout), await admin(served.url, '/admin/batches?account=other'), "--json prints the API's answer");

  const shown = await admin(served.url, `/admin/batches/${a.id}`);
  t.match(shown, { id: a.id, account: 'other', status: 'completed', request_counts: { total: 1, completed: 1, failed: 0 }, files: { input: { id: inA.id }, error: null } });
  t.notOk('key_id' in shown, 'the key a batch runs as is not shown');
  const show = await cli(['show', a.id, ...url]);
  t.same([show.code, show.stderr], [0, '']);
  const out = shown.files.output;
  t.equal(show.stdout, [
    `${a.id}  account=other  status=completed  endpoint=/v1/chat/completions`,
    '  lines: 1 total, 1 completed, 0 failed',
    `  times: created ${iso(shown.created_at)}, in progress ${iso(shown.in_progress_at)}, finalizing ${iso(shown.finalizing_at)}, completed ${iso(shown.completed_at)}; window ends ${iso(shown.expires_at)}`,
    `  input file: ${inA.id}  one.jsonl  ${inA.bytes} bytes  kept until ${iso(shown.files.input.expires_at)}`,
    `  output file: ${out.id}  ${a.id}_output.jsonl  ${out.bytes} bytes  kept until ${iso(out.expires_at)}`,
    '  error file: none',
    '  metadata: job=nightly',
    '',
  ].join('\n'));
  const showB = await cli(['show', b.id, ...url]);
  t.match(showB.stdout, /\n {2}error line 1: invalid_json_line: This line is not valid JSON\.\n$/, "a failed batch's errors, with line numbers");
  t.strictSame(JSON.parse((await cli(['show', a.id, '--json', ...url])).stdout), shown);

  // Error paths: exact output and exit codes, nothing changed.
  t.same(await cli(['show', 'batch_nope', ...url]), { code: 1, stdout: '', stderr: "error 404 not_found: No batch with id 'batch_nope' found.\n" });
  t.same(await cli(['cancel', 'batch_nope', ...url]), { code: 1, stdout: '', stderr: "error 404 not_found: No batch with id 'batch_nope' found.\n" });
  t.same(await cli(['cancel', a.id, ...url]), { code: 1, stdout: '', stderr: 'error 400 invalid_value: A batch that is completed cannot be cancelled.\n' });
  t.equal((await other.batches.retrieve(a.id)).status, 'completed', 'still completed');
  t.same(await cli(['list', '--status', 'nope', ...url]), {
    code: 1, stdout: '',
    stderr: "error 400 invalid_value: Invalid value for 'status': one of validating, failed, in_progress, finalizing, completed, expired, cancelling, cancelled.\n",
  });
  t.same(await cli(['list', ...url], {}), { code: 2, stdout: '', stderr: 'no admin token: pass --token or set TOLLGATE_ADMIN_TOKEN\n' });
  t.same(await cli(['list', ...url, '--token', 'wrong'], {}), { code: 1, stdout: '', stderr: 'error 401 invalid_api_key: Invalid admin token.\n' });
  t.same(await cli(['show', ...url]), { code: 2, stdout: '', stderr: 'usage: tollgate batches show ID\n' });
  const unknown = await cli(['frob', ...url]);
  t.same([unknown.code, unknown.stdout], [2, '']);
  t.match(unknown.stderr, /^tollgate: unknown command 'batches frob'\nusage \(--url URL, --token T or TOLLGATE_ADMIN_TOKEN, --json\):\n {2}tollgate batches \[list\]/);

  // A gateway that is down: a port nothing listens on.
  const port = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = (s.address() as any).port; s.close(() => resolve(p)); });
  });
  t.same(await cli(['list', '--url', `http://127.0.0.1:${port}`]), {
    code: 1, stdout: '', stderr: `cannot reach http://127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}\n`,
  });
});
