// A config that `tollgate check` refuses, `tollgate serve` refuses with the same lines, exit 1;
// a value serve still cannot use when it starts is one `path: message` line, exit 1; never a
// stack trace, never a spin or a hang (CONTRACT section 11). Found by an operator: a store.path
// under /proc made serve spin at 100% CPU forever without listening or logging, and one naming
// a regular file exited with a raw stack.

import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN } from '../helpers/child.js';
import { TINY_TOKENIZER } from '../helpers/config-gen.js';

const dir = await mkdtemp(join(tmpdir(), 'tollgate-start-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

export interface Run { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }

/** Runs the bin; SIGKILLed after `ms` (then signal is SIGKILL: it hung or spun). */
function run(args: string[], ms = 20_000): Promise<Run> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' } });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => proc.kill('SIGKILL'), ms);
    proc.once('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
  });
}

/** A config file: `server` (the inside of its map) and the rest of the YAML. */
async function configFile(name: string, text: string, server = 'port: 0, drain_timeout_ms: 1000'): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, `server: {${server}}\n${text}`);
  return file;
}

const NO_STACK = /^\s+at /m;

t.test('a store.path serve cannot use: check and serve refuse it with the same line', async (t) => {
  const aFile = join(dir, 'a-file');
  await writeFile(aFile, 'x');
  const cases: Array<[string, string, RegExp]> = [
    ['under /proc', '/proc/tollgate-test/state', /^store\.path: cannot be created: "\/proc" does not take a new folder \(ENOENT\)$/],
    ['a regular file', aFile, /^store\.path: ".*a-file" is not a directory$/],
    ['below a regular file', join(aFile, 'state'), /^store\.path: cannot be created: ".*a-file" is not a directory$/],
    ['a folder nobody may write', '/proc/sys', /^store\.path: "\/proc\/sys" is not writable \(EACCES\)$/],
  ];
  for (const [name, path, line] of cases) {
    const file = await configFile(`${name.replace(/\W/g, '-')}.yaml`, `store: {path: ${JSON.stringify(path)}}\n`);
    const checked = await run(['check', '--config', file]);
    const served = await run(['serve', '--config', file]);
    t.equal(checked.code, 1, `${name}: check exits 1`);
    t.match(checked.stderr.trim(), line, `${name}: check says why`);
    t.equal(served.signal, null, `${name}: serve ended by itself (no spin)`);
    t.equal(served.code, 1, `${name}: serve exits 1`);
    t.equal(served.stderr, checked.stderr, `${name}: serve prints the lines check prints`);
    t.notMatch(served.stderr, NO_STACK, `${name}: no stack trace`);
    t.notMatch(served.stdout, /listening/);
  }
});

t.test('a tokenizer.json serve cannot load: check and serve refuse it with the same lines', async (t) => {
  const notJson = join(dir, 'not-json.json');
  await writeFile(notJson, 'not\njson');
  const notTokenizer = join(dir, 'not-tokenizer.json');
  await writeFile(notTokenizer, '{"a": 1}');
  const folder = join(dir, 'folder.json');
  await mkdir(folder);
  const missing = join(dir, 'missing', 'tokenizer.json');
  const text = `providers:\n  echo: {kind: echo, model_defaults: {tokenizer: ${JSON.stringify(missing)}}}\nmodels:\n` +
    [missing, notJson, notTokenizer, folder, 'o200k_base', TINY_TOKENIZER].map((tok, i) => `  - {id: m${i}, provider: echo, tokenizer: ${JSON.stringify(tok)}}\n`).join('');
  const file = await configFile('tokenizers.yaml', text);
  const checked = await run(['check', '--config', file]);
  t.equal(checked.code, 1);
  const q = (p: string) => JSON.stringify(p).replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const lines = checked.stderr.trim().split('\n');
  t.equal(lines.length, 5, 'every problem at once, one line each');
  const expected = [
    new RegExp(`^models\\[0\\]\\.tokenizer: cannot load ${q(missing)}: ENOENT: no such file or directory`),
    new RegExp(`^providers\\.echo\\.model_defaults\\.tokenizer: cannot load ${q(missing)}: ENOENT`),
    new RegExp(`^models\\[1\\]\\.tokenizer: cannot load ${q(notJson)}: Unexpected token .*is not valid JSON`),
    new RegExp(`^models\\[2\\]\\.tokenizer: cannot load ${q(notTokenizer)}: not a usable tokenizer\\.json`),
    new RegExp(`^models\\[3\\]\\.tokenizer: cannot load ${q(folder)}: EISDIR`),
  ];
  expected.forEach((re, i) => t.match(lines[i], re, `line ${i + 1}`));
  const served = await run(['serve', '--config', file]);
  t.equal(served.code, 1);
  t.equal(served.stderr, checked.stderr, 'serve prints the lines check prints');
  t.notMatch(served.stderr, NO_STACK);
});

t.test('the address to listen on: check refuses a host serve cannot listen on, with the line serve prints', async (t) => {
  // [the host as the YAML file writes it, the line]; 123 is a YAML number, read as the string "123" (0.0.0.123).
  const cases: Array<[string, RegExp]> = [
    ['"no-such-host.invalid"', /^server\.host: "no-such-host\.invalid" cannot be resolved \((ENOTFOUND|EAI_AGAIN)\)\n$/],
    ['"192.0.2.1"', /^server\.host: "192\.0\.2\.1" is not an address of this machine \(EADDRNOTAVAIL\)\n$/],
    ['123', /^server\.host: "123" is not an address of this machine \(EADDRNOTAVAIL\)\n$/],
  ];
  for (const [host, line] of cases) {
    const file = await configFile(`host-${host.replace(/\W/g, '')}.yaml`, '', `port: 0, host: ${host}`);
    const checked = await run(['check', '--config', file]);
    t.equal(checked.code, 1, `${host}: check exits 1`);
    t.match(checked.stderr, line);
    const served = await run(['serve', '--config', file]);
    t.equal(served.code, 1, `${host}: serve exits 1`);
    t.equal(served.stderr, checked.stderr, `${host}: the same line`);
    t.notMatch(served.stderr, NO_STACK);
  }
  const empty = await configFile('host-empty.yaml', '', 'port: 0, host: "${TOLLGATE_TEST_UNSET_HOST}"');
  const [checkedEmpty, servedEmpty] = await Promise.all([run(['check', '--config', empty]), run(['serve', '--config', empty])]);
  t.equal(checkedEmpty.code, 1, 'an empty host (an unset variable): refused, not every address');
  t.equal(checkedEmpty.stderr, 'server.host: must not be empty (0.0.0.0 or :: listen on every address)\n');
  t.equal(servedEmpty.code, 1);
  t.equal(servedEmpty.stderr, checkedEmpty.stderr);
  t.notMatch(servedEmpty.stdout, /listening/);
  const file = await configFile('host-flag.yaml', '');
  const flagged = await run(['serve', '--config', file, '--host', 'no-such-host.invalid']);
  t.equal(flagged.code, 1);
  t.match(flagged.stderr, /^--host: "no-such-host\.invalid" cannot be resolved \((ENOTFOUND|EAI_AGAIN)\)\n$/, 'the flag is named when it gave the host');
});

t.test('a port in use: serve says so in one line and exits 1 (check, run beside a gateway, does not judge ports)', async (t) => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { taken.close(); });
  const port = (taken.address() as AddressInfo).port;
  const file = await configFile('port-taken.yaml', '', `port: ${port}`);
  t.equal((await run(['check', '--config', file])).code, 0);
  const served = await run(['serve', '--config', file]);
  t.equal(served.code, 1);
  t.equal(served.stderr, `server.port: 127.0.0.1:${port} is already in use (EADDRINUSE)\n`);
  const flagged = await run(['serve', '--config', await configFile('port-flag.yaml', ''), '--port', String(port)]);
  t.equal(flagged.code, 1);
  t.equal(flagged.stderr, `--port: 127.0.0.1:${port} is already in use (EADDRINUSE)\n`);
});

t.test('an otlp_endpoint that is no URL: check refuses it (tracing could not start)', async (t) => {
  const file = await configFile('otlp.yaml', 'observe: {otlp_endpoint: "http://[::1"}\n');
  const checked = await run(['check', '--config', file]);
  t.equal(checked.code, 1);
  t.equal(checked.stderr, 'observe.otlp_endpoint: must be an http:// or https:// URL, or null\n');
  const served = await run(['serve', '--config', file]);
  t.equal(served.code, 1);
  t.equal(served.stderr, checked.stderr);
});

t.test('a store.url ioredis cannot open: check and serve refuse it with the same line', async (t) => {
  for (const [url, line] of [
    ['redis://127.0.0.1:99999', 'store.url: must be a redis:// or rediss:// URL (redis://[:PASSWORD@]HOST[:PORT][/DB])\n'],
    ['redis://:se%cret@127.0.0.1:6379', 'store.url: its user or password is not valid percent-encoding (write % as %25)\n'],
  ]) {
    const file = await configFile('redis-url.yaml', `store: {kind: redis, url: ${JSON.stringify(url)}, timeout_ms: 200}\n`);
    const [checked, served] = await Promise.all([run(['check', '--config', file]), run(['serve', '--config', file])]);
    t.equal(checked.code, 1);
    t.equal(checked.stderr, line);
    t.equal(served.code, 1);
    t.equal(served.stderr, checked.stderr, 'serve prints the line check prints');
    t.notMatch(served.stdout, /se%cret|listening/, 'the password is not quoted, nothing listens');
  }
});

t.test('a store serve still cannot open (its snapshot is not one) is one store.path line, exit 1', async (t) => {
  const store = join(dir, 'corrupt');
  await mkdir(store);
  await writeFile(join(store, 'snapshot.json'), '{"not": "a snapshot"');
  const file = await configFile('corrupt.yaml', `store: {path: ${JSON.stringify(store)}}\n`);
  t.equal((await run(['check', '--config', file])).code, 0, 'check looks at files, not into the store\'s data');
  const served = await run(['serve', '--config', file]);
  t.equal(served.code, 1);
  t.match(served.stderr, /^store\.path: cannot open the store in ".*corrupt": .+\n$/, 'one line naming store.path');
  t.notMatch(served.stderr, NO_STACK);
});

t.test('SIGTERM while serve is still starting: the store is closed and the exit is 0', async (t) => {
  // A "Redis" that takes the connection and never answers holds the start up for
  // store.timeout_ms (CONTRACT section 9); its first connection says the start is under way.
  let connected!: () => void;
  const reached = new Promise<void>((resolve) => { connected = resolve; });
  const silent = createServer((socket) => { socket.on('error', () => undefined); connected(); });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { silent.close(); });
  const port = (silent.address() as AddressInfo).port;
  const file = await configFile('slow-start.yaml', `store: {kind: redis, url: "redis://127.0.0.1:${port}", timeout_ms: 20000}\n`);
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  const exited = new Promise<[number | null, string | null]>((resolve) => proc.once('exit', (code, signal) => resolve([code, signal])));
  await reached;
  t.notMatch(out, /listening on/, 'still starting');
  proc.kill('SIGTERM');
  t.strictSame(await exited, [0, null], 'exit 0, not killed by the signal');
  t.notMatch(out, NO_STACK);
});
