// CLI amounts are plain decimal integers (CONTRACT section 10): `credits add ACCOUNT UNITS` and
// `--wallet-units` refuse every other spelling with exit 2 before anything is sent, and accept
// the whole range up to 2^53-1 (negative for credits: a deduction).

import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { decimalUnits } from '../../lib/cli/call.js';
import { BIN } from '../helpers/child.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'admin-cli-token-0123456789';
const MAX = Number.MAX_SAFE_INTEGER;
/** Nothing listens here: a request would fail with exit 1 ("cannot reach"), never exit 2. */
const DEAD = await new Promise<string>((resolve) => {
  const server = createServer().listen(0, '127.0.0.1', () => {
    const { port } = server.address() as AddressInfo;
    server.close(() => resolve(`http://127.0.0.1:${port}`));
  });
});

interface Run { code: number | null; stdout: string; stderr: string }

function cli(args: string[], url: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args, '--url', url], { env: { PATH: process.env.PATH, TOLLGATE_ADMIN_TOKEN: ADMIN }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

const CREDIT_MSG = /^credits add: UNITS must be a plain decimal integer from -9007199254740991 to 9007199254740991 \(like 1000 or -250\), not ".*"\n$/;
const WALLET_MSG = /^accounts create: --wallet-units must be a plain decimal integer from 0 to 9007199254740991 \(like 1000\), not ".*"\n$/;

/** The exit code decimalUnits asks for, or 0 when it accepts. */
function exitOf(text: string, negatives: boolean): number {
  try {
    decimalUnits(text, 'UNITS', negatives);
    return 0;
  } catch (err) {
    return (err as { exitCode: number }).exitCode;
  }
}

t.test('the rule, for every spelling', async (t) => {
  const refusedAlways = ['1e3', '0x10', '0o7', '0b1', ' 7', '7 ', '\t7', '00012', '01', '-01', '1.0', '1.', '.5', '+5', '', '-', '--5', '-0',
    '1_000', '1,000', '12abc', 'Infinity', 'NaN', '٣', '１２', `${MAX + 1}`, `-${MAX + 1}`, '99999999999999999999'];
  for (const text of refusedAlways) {
    t.equal(exitOf(text, true), 2, `credits: ${JSON.stringify(text)} refused`);
    t.equal(exitOf(text, false), 2, `wallet: ${JSON.stringify(text)} refused`);
  }
  for (const text of ['-5', '-1', `-${MAX}`]) {
    t.equal(decimalUnits(text, 'UNITS', true), Number(text), `credits: ${text} accepted`);
    t.equal(exitOf(text, false), 2, `wallet: ${text} refused`);
  }
  for (const text of ['0', '7', '12', '1000', String(MAX)]) {
    t.equal(decimalUnits(text, 'UNITS', true), Number(text), `credits: ${text}`);
    t.equal(decimalUnits(text, 'UNITS', false), Number(text), `wallet: ${text}`);
  }
});

t.test('as a child process: exit 2, a clear message, nothing sent', async (t) => {
  const runs: Array<[string, string[], RegExp]> = [
    ...['1e3', '0x10', ' 7', '00012', '1.0', '+5', '', `${MAX + 1}`, `-${MAX + 1}`].map((u): [string, string[], RegExp] =>
      [`credits add ${JSON.stringify(u)}`, ['credits', 'add', 'acme', u], u === '' ? /^usage: tollgate credits add ACCOUNT UNITS/ : CREDIT_MSG]),
    ['credits add "0"', ['credits', 'add', 'acme', '0'], /^credits add: UNITS must not be 0/],
    ['credits add "--5"', ['credits', 'add', 'acme', '--5'], /^tollgate: Unknown option '--5'/],
    ...['1e3', '-5', '', `${MAX + 1}`].map((u): [string, string[], RegExp] =>
      [`--wallet-units ${JSON.stringify(u)}`, ['accounts', 'create', 'x', '--plan', 'free', '--wallet-units', u], WALLET_MSG]),
    ['--wallet-units=0x10', ['accounts', 'create', 'x', '--plan', 'free', '--wallet-units=0x10'], WALLET_MSG],
  ];
  for (let i = 0; i < runs.length; i += 3) {
    const batch = runs.slice(i, i + 3);
    const results = await Promise.all(batch.map(([, args]) => cli(args, DEAD)));
    batch.forEach(([what, , stderr], k) => {
      const r = results[k]!;
      t.equal(r.code, 2, `${what}: exit 2`);
      t.match(r.stderr, stderr, `${what}: the message`);
      t.notMatch(r.stderr, /\n\s+at /, `${what}: no stack trace`);
      t.equal(r.stdout, '', `${what}: nothing on stdout`);
    });
  }
});

t.test('as a child process against a gateway: the accepted forms reach the wallet exactly', async (t) => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  const gw: TestGateway = await startGateway(c);
  t.teardown(() => gw.close());
  const balance = async () => ((await (await fetch(`${gw.url}/admin/accounts/dec`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any).balance_units;
  let r = await cli(['accounts', 'create', 'dec', '--plan', 'free', '--wallet-units', '12'], gw.url);
  t.equal(r.code, 0, r.stderr);
  t.equal(await balance(), 12);
  r = await cli(['credits', 'add', 'dec', '-12'], gw.url);
  t.equal(r.code, 0, r.stderr);
  t.equal(await balance(), 0, '-12 deducted');
  r = await cli(['credits', 'add', 'dec', String(MAX)], gw.url);
  t.equal(r.code, 0, r.stderr);
  t.equal(await balance(), MAX, '2^53-1 exactly');
  r = await cli(['credits', 'add', 'dec', '1e3'], gw.url);
  t.equal(r.code, 2);
  t.equal(await balance(), MAX, 'a refused amount sent nothing');
});
