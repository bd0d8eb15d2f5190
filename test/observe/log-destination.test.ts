// Where the log goes and how it is written: synchronously to a file (or /dev/null), without a
// thread-pool round trip per batch; asynchronously to a pipe, so a slow reader never stalls
// the request path. Either way every access-log line arrives whole, within the flush interval,
// and nothing buffered is lost when the gateway stops.

import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { BIN } from '../helpers/child.js';
import { DEMO_KEY } from '../helpers/gateway.js';

const LOG_MODULE = fileURLToPath(new URL('../../dist/lib/observe/log.js', import.meta.url));

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
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-logfile-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = join(dir, 'tollgate.yaml');
  await writeFile(config, `server:
  port: 0
accounts:
  - id: demo
    plan: free
    keys: [${DEMO_KEY}]
providers:
  echo: { kind: echo }
models:
  - { id: echo, provider: echo }
`);
  const logPath = join(dir, 'gateway.log');
  const fd = openSync(logPath, 'w');
  const proc = spawn(process.execPath, [BIN, 'serve', '--config', config, '--host', '127.0.0.1'], {
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

  const chat = (content: string) => fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content }] }),
  });
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
