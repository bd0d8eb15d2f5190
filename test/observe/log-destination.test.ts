// Where the log goes and how it is written: synchronously to a file (or /dev/null), without a
// thread-pool round trip per batch; asynchronously to a pipe, so a slow reader never stalls
// the request path. Either way every access-log line arrives whole, within the flush interval,
// and nothing buffered is lost when the gateway stops.

import t, { type Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { BIN } from '../helpers/child.js';
import { DEMO_KEY } from '../helpers/gateway.js';
import { freePort } from '../helpers/redis.js';
import { LogHealth } from '../../lib/observe/log.js';

const LOG_MODULE = fileURLToPath(new URL('../../dist/lib/observe/log.js', import.meta.url));

/**
 * A process that runs `body` with `log` (createLogger('info'), writing to fd 1 = `stdout`) and
 * `pad` (200 characters) in scope; its stderr is a pipe.
 */
function loggingChild(body: string, stdout: 'pipe' | number = 'pipe'): ChildProcess {
  return spawn(process.execPath, ['--input-type=module', '-e', `
    const { createLogger } = await import(${JSON.stringify(LOG_MODULE)});
    const log = createLogger('info');
    const pad = 'x'.repeat(200);
${body}`], { stdio: ['ignore', stdout, 'pipe'] });
}

/** What writesSynchronously(1) says in a child whose stdout is `stdout` (printed to stderr). */
async function verdict(t: Test, stdout: 'pipe' | number): Promise<string> {
  const child = spawn(process.execPath, ['--input-type=module', '-e',
    `const m = await import(${JSON.stringify(LOG_MODULE)}); process.stderr.write(String(m.writesSynchronously(1)))`,
  ], { stdio: ['ignore', stdout, 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => { err += d; });
  child.stdout?.resume();
  const code = await new Promise((resolve) => child.once('exit', resolve));
  t.equal(code, 0, `the child ran (${err})`);
  return err;
}

/** A gateway config on `port` (0: any) with the demo key and an echo model. */
async function configFile(t: Test, port: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-logfail-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, `server:
  port: ${port}
  host: 127.0.0.1
accounts:
  - id: demo
    plan: free
    keys: [${DEMO_KEY}]
providers:
  echo: { kind: echo }
models:
  - { id: echo, provider: echo }
`);
  return file;
}

/** Resolves with the exit code, or 'hung' when the child is still there after `ms`. */
function exited(proc: ChildProcess, ms: number): Promise<unknown> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); resolve('hung'); }, ms);
    proc.once('exit', (code, signal) => { clearTimeout(timer); resolve(code ?? signal); });
  });
}

const chatAt = (url: string, content = 'hello') => fetch(`${url}/v1/chat/completions`, {
  method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content }] }),
});

t.test('stdout a file or /dev/null: synchronous; a pipe: asynchronous', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-logdest-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = openSync(join(dir, 'out.log'), 'w');
  const devnull = openSync('/dev/null', 'w');
  t.teardown(() => { closeSync(file); closeSync(devnull); });
  t.equal(await verdict(t, file), 'true', 'a regular file');
  t.equal(await verdict(t, devnull), 'true', '/dev/null');
  t.equal(await verdict(t, 'pipe'), 'false', 'a pipe');
});

t.test('a gateway logging to a file: every line whole, within the flush interval, and all of them at exit', async (t) => {
  const config = await configFile(t, 0);
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-logfile-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const logPath = join(dir, 'gateway.log');
  const fd = openSync(logPath, 'w');
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', config], {
    stdio: ['ignore', fd, 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'info' },
  });
  closeSync(fd);
  let stderr = '';
  proc.stderr!.on('data', (d) => { stderr += d; });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  const log = () => readFileSync(logPath, 'utf8');
  let url: string | undefined;
  for (let i = 0; i < 1200 && url === undefined && proc.exitCode === null; i++) {
    await sleep(25);
    url = /^tollgate listening on (\S+)$/m.exec(log())?.[1];
  }
  if (url === undefined) throw new Error(`the gateway did not start: ${log()} ${stderr}`);

  const chat = (content: string) => chatAt(url!, content);
  const requestLines = () => log().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.msg === 'request');

  // Three requests: far less than a 4 KB batch, so only the periodic flush writes them.
  const ids: string[] = [];
  for (const word of ['one', 'two', 'three']) {
    const res = await chat(word);
    t.equal(res.status, 200);
    ids.push(res.headers.get('x-request-id')!);
    await res.text();
  }
  let seen: Array<Record<string, unknown>> = [];
  // The flush runs every 500 ms; a loaded machine gets a few seconds.
  for (let i = 0; i < 200 && seen.length < 3; i++) { await sleep(25); seen = requestLines(); }
  t.same(seen.map((l) => l.request_id), ids, 'the three lines arrive without more traffic, in order');

  // Enough lines to fill many batches, then a stop: every line is whole JSON and none is missing.
  const more = await Promise.all(Array.from({ length: 200 }, async (_, i) => {
    const res = await chat(`word${i}`);
    await res.text();
    return res.headers.get('x-request-id')!;
  }));
  proc.kill('SIGTERM');
  const code = await new Promise((resolve) => proc.once('exit', resolve));
  t.equal(code, 0, stderr);
  const lines = log().split('\n').filter((l) => l !== '');
  for (const l of lines.slice(1)) t.doesNotThrow(() => JSON.parse(l), 'a whole JSON line');
  const logged = new Set(requestLines().map((l) => l.request_id));
  t.equal(more.filter((id) => logged.has(id)).length, 200, 'every request of the burst is logged, the last batch at exit');
  t.notMatch(log(), new RegExp(DEMO_KEY), 'no key in the log');
});

/**
 * A child that logs `lines` lines through createLogger with stdout as given, then says
 * 'alive' on stderr and exits 0 (flushing at exit): its exit code and stderr.
 */
async function logThrough(stdout: 'pipe' | number, lines: number, closeReader = false): Promise<{ code: unknown; stderr: string }> {
  const child = loggingChild(`
    for (let i = 0; i < ${lines}; i++) log.info({ i, pad }, 'line');
    await new Promise((r) => setTimeout(r, 700)); // a periodic flush too
    for (let i = 0; i < ${lines}; i++) log.info({ i, pad }, 'line');
    process.stderr.write('alive\\n');
  `, stdout);
  if (closeReader) child.stdout!.destroy();
  let stderr = '';
  child.stderr!.on('data', (d) => { stderr += d; });
  const code = await new Promise((resolve) => child.once('exit', (c, s) => resolve(c ?? s)));
  return { code, stderr };
}

t.test('a log that cannot be written (disk full, reader gone) is reported once and never stops the process', async (t) => {
  const full = openSync('/dev/full', 'w');
  t.teardown(() => closeSync(full));
  // /dev/full answers every write with ENOSPC, as a full disk does: written synchronously.
  const disk = await logThrough(full, 2000);
  t.equal(disk.code, 0, `exit code (${disk.stderr})`);
  t.match(disk.stderr, /alive/);
  t.equal(disk.stderr.match(/the log cannot be written/g)?.length, 1, 'reported once, not once per batch');
  t.match(disk.stderr, /ENOSPC/);
  // A pipe whose reader is gone (EPIPE), written asynchronously.
  const pipe = await logThrough('pipe', 2000, true);
  t.equal(pipe.code, 0, `exit code (${pipe.stderr})`);
  t.match(pipe.stderr, /alive/);
  t.equal(pipe.stderr.match(/the log cannot be written \(EPIPE/g)?.length, 1, `reported once: ${pipe.stderr}`);
});

t.test('a gateway whose stdout is a full disk serves on, says so once on stderr, and stops promptly', async (t) => {
  const port = await freePort();
  const full = openSync('/dev/full', 'w');
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', await configFile(t, port)], {
    stdio: ['ignore', full, 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'info' },
  });
  closeSync(full);
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let stderr = '';
  proc.stderr!.on('data', (d) => { stderr += d; });
  const url = `http://127.0.0.1:${port}`;
  let up = false;
  for (let i = 0; i < 1200 && !up && proc.exitCode === null; i++) {
    await sleep(25);
    up = await fetch(`${url}/healthz`).then((r) => r.ok, () => false);
  }
  t.ok(up, `the gateway came up (${stderr})`);
  // Enough requests for many 4 KB batches, each write failing.
  for (let i = 0; i < 60; i++) {
    const res = await chatAt(url);
    t.equal(res.status, 200);
    await res.text();
  }
  await sleep(600); // a periodic flush fails too
  proc.kill('SIGTERM');
  t.equal(await exited(proc, 15_000), 0, 'SIGTERM: the exit neither hangs on the unwritable log nor fails');
  t.equal(stderr.match(/the log cannot be written/g)?.length, 1, `said once: ${stderr}`);
  t.match(stderr, /ENOSPC/);
  t.notMatch(stderr, /Unhandled 'error' event|at .*\.js:\d+/, 'no crash, no stack');
});

t.test('lines buffered when the log reader has gone: the exit does not hang on them', async (t) => {
  // The reader goes before the child logs anything; the child logs one line (buffered, far from
  // a 4 KB batch, before any periodic flush) and exits at once: the exit flush meets EPIPE.
  // sonic-boom's own flushSync retried that write forever.
  const child = loggingChild(`
    await new Promise((r) => setTimeout(r, 200));
    log.info('one line, buffered');
    process.exit(0);
  `);
  child.stdout!.destroy();
  let stderr = '';
  child.stderr!.on('data', (d) => { stderr += d; });
  t.equal(await exited(child, 10_000), 0, 'exits at once, the unwritable line given up');
  t.match(stderr, /^tollgate: the log cannot be written \(EPIPE: broken pipe, write\)/);
});

t.test('LogHealth: a failure said once, its end once with the lines dropped, drops behind a slow reader counted once a minute', async (t) => {
  const said: string[] = [];
  const destination = { minLength: 4096 };
  const h = new LogHealth(destination, (text) => said.push(text));
  h.wrote(100);
  const err = Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  h.failed(err);
  h.failed(err);
  t.equal(destination.minLength, 16 * 1024 * 1024, 'while failing, lines only wait for the periodic flush');
  h.dropped();
  h.dropped();
  h.wrote(0);
  t.equal(h.failing, true, 'an empty write is no return');
  h.wrote(4096);
  h.wrote(4096);
  t.equal(h.failing, false);
  t.equal(destination.minLength, 4096, 'batches of 4 KB again');
  t.same(said, [
    'the log cannot be written (ENOSPC: no space left on device, write); requests are served on, lines are kept up to 16 MB and dropped beyond',
    'the log is written again (2 line(s) were dropped meanwhile)',
  ]);
  // A slow reader, no failure: the first drop is said at once, the next ones a minute later.
  said.length = 0;
  h.dropped(1_000_000);
  h.dropped(1_000_001);
  h.dropped(1_030_000);
  t.equal(h.unsaid(), 2);
  h.dropped(1_060_000);
  t.same(said, [
    '1 log line(s) dropped: the log reader is more than 16 MB behind',
    '3 log line(s) dropped: the log reader is more than 16 MB behind',
  ]);
  t.equal(h.unsaid(), 0);
});

t.test('every buffered line reaches the reader at exit, a write in flight or not', async (t) => {
  // 500 lines at once (many batches, one of them in the thread pool), then exit at once.
  const child = loggingChild(`
    for (let i = 0; i < 500; i++) log.info({ i, pad }, 'line');
    process.exit(0);
  `);
  let out = '';
  let stderr = '';
  child.stdout!.on('data', (d) => { out += d; });
  child.stderr!.on('data', (d) => { stderr += d; });
  t.equal(await exited(child, 15_000), 0, stderr);
  await new Promise((r) => (child.stdout!.closed ? r(undefined) : child.stdout!.once('close', r)));
  const seen = out.split('\n').filter((l) => l !== '').map((l) => (JSON.parse(l) as { i: number }).i);
  t.same(seen, Array.from({ length: 500 }, (_, i) => i), 'all 500, in order, each once');
  t.equal(stderr, '');
});

t.test('a reader more than 16 MB behind: lines dropped are said, counted, and the rest arrive', async (t) => {
  const child = loggingChild(`
    for (let i = 0; i < 80000; i++) log.info({ i, pad }, 'line');
    process.stderr.write('logged\\n');
    process.exit(0);
  `);
  let stderr = '';
  let lines = 0;
  // The reader starts once all 80,000 lines (about 20 MB) are logged, and a little later: the
  // exit is then waiting for it (a descriptor answering EAGAIN is given time while it reads).
  child.stdout!.pause();
  const ended = new Promise((r) => child.stdout!.once('end', r));
  let reading = false;
  child.stderr!.on('data', (d) => {
    stderr += d;
    if (reading || !stderr.includes('logged')) return;
    reading = true;
    setTimeout(() => {
      child.stdout!.on('data', (b: Buffer) => { for (const x of b) if (x === 10) lines++; });
      child.stdout!.resume();
    }, 300);
  });
  t.equal(await exited(child, 30_000), 0, stderr);
  await ended;
  t.notMatch(stderr, /not written at exit/, 'the exit waited for the reader');
  const first = /^tollgate: (\d+) log line\(s\) dropped: the log reader is more than 16 MB behind$/m.exec(stderr);
  const atExit = /^tollgate: (\d+) log line\(s\) were dropped and not said before the exit$/m.exec(stderr);
  t.ok(first !== null && atExit !== null, stderr);
  const dropped = Number(first?.[1]) + Number(atExit?.[1]);
  t.ok(dropped > 0 && lines > 0, `${lines} read, ${dropped} dropped`);
  t.equal(lines + dropped, 80000, 'every line either arrived or was counted as dropped');
});

t.test('stdout and stderr readers both gone: the process neither crashes nor hangs', async (t) => {
  const child = loggingChild(`
    for (let i = 0; i < 100; i++) log.info({ i }, 'line');
    await new Promise((r) => setTimeout(r, 1200)); // periodic flushes meet EPIPE; the notice too
    for (let i = 0; i < 100; i++) log.info({ i }, 'line');
    process.exit(7);
  `);
  child.stdout!.destroy();
  child.stderr!.destroy();
  t.equal(await exited(child, 15_000), 7, 'its own exit code: no unhandled error');
});
