// The standalone command, as an operator runs it: the URL line, SIGHUP reloads, SIGTERM drains.

import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, writeFile, rm, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEMO_KEY, sseData } from '../helpers/gateway.js';

const bin = fileURLToPath(new URL('../../bin/tollgate.js', import.meta.url));

function yaml(models: string, extra = ''): string {
  return `server:
  port: 0
  sse_keepalive_ms: 60000
  drain_timeout_ms: 5000
accounts:
  - id: demo
    plan: free
    keys: [${DEMO_KEY}]
providers:
  echo: { kind: echo }
  slow: { kind: echo, chunk_delay_ms: 100 }
models:
${models}
${extra}`;
}

interface Child { proc: ChildProcess; url: string; out: () => string }

async function serve(t: any, file: string, env: NodeJS.ProcessEnv = {}): Promise<Child> {
  const proc = spawn(process.execPath, [bin, 'serve', '--config', file, '--host', '127.0.0.1'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => { out += d; });
  proc.stderr!.on('data', (d) => { out += d; });
  t.teardown(() => { if (proc.exitCode === null) proc.kill('SIGKILL'); });
  // Up to 30 s: a loaded machine can take seconds to start Node; it stops as soon as the line is there.
  for (let i = 0; i < 1200 && !/listening on (http:\/\/\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const m = /^tollgate listening on (http:\/\/\S+)$/m.exec(out);
  if (m === null) throw new Error(`no listening line: ${out}`);
  t.equal(out.split('\n')[0], m[0], 'the first stdout line is the listening URL');
  return { proc, url: m[1]!, out: () => out };
}

const chat = (url: string, model: string, content: string, stream = false) => fetch(`${url}/v1/chat/completions`, {
  method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
  body: JSON.stringify({ model, stream, messages: [{ role: 'user', content }] }),
});

t.test('serve, reload on SIGHUP, reject a bad reload, drain on SIGTERM', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-cli-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, yaml('  - { id: first, provider: echo }\n  - { id: slow, provider: slow }'));
  const child = await serve(t, file);

  t.equal((await chat(child.url, 'first', 'a')).status, 200);
  t.equal((await chat(child.url, 'second', 'a')).status, 404);

  // A slow stream is in flight while the config changes under it.
  const inflight = chat(child.url, 'slow', 'one two three four five six seven eight', true).then((r) => r.text());
  await sleep(150);
  await writeFile(file, yaml('  - { id: second, provider: echo }\n  - { id: slow, provider: echo }'));
  child.proc.kill('SIGHUP');
  let status = 0;
  for (let i = 0; i < 100 && status !== 200; i++) { await sleep(20); status = (await chat(child.url, 'second', 'a')).status; }
  t.equal(status, 200, 'the new model serves after SIGHUP');
  t.equal((await chat(child.url, 'first', 'a')).status, 404, 'the removed model is gone');
  const finished = sseData(await inflight);
  t.ok(finished.done, 'the stream in flight finished on the old config');
  t.equal(finished.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'one two three four five six seven eight');

  await writeFile(file, yaml('  - { id: third, provider: nowhere }'));
  child.proc.kill('SIGHUP');
  for (let i = 0; i < 100 && !/reload rejected/.test(child.out()); i++) await sleep(20);
  t.match(child.out(), /config reload rejected/);
  t.match(child.out(), /models\[0\]\.provider: unknown provider \\"nowhere\\"/);
  t.equal((await chat(child.url, 'second', 'a')).status, 200, 'the old config stays in force');

  // SIGTERM while a stream is open: readiness drops, the stream completes, exit 0.
  await writeFile(file, yaml('  - { id: second, provider: echo }\n  - { id: slow, provider: slow }'));
  child.proc.kill('SIGHUP');
  for (let i = 0; i < 100 && (await chat(child.url, 'slow', 'x')).status !== 200; i++) await sleep(20);
  const draining = chat(child.url, 'slow', 'w1 w2 w3 w4 w5 w6 w7 w8 w9 w10', true).then((r) => r.text());
  await sleep(150);
  const exited = new Promise<number | null>((r) => child.proc.once('exit', (code) => r(code)));
  child.proc.kill('SIGTERM');
  await sleep(50);
  const ready = await fetch(`${child.url}/readyz`).then((r) => r.status, () => 'refused');
  t.ok(ready === 503 || ready === 'refused', `readyz during drain: ${ready}`);
  const drained = sseData(await draining);
  t.ok(drained.done, 'the open stream finished during the drain');
  t.equal(await exited, 0, 'exit 0');
  t.notMatch(child.out(), new RegExp(DEMO_KEY), 'the key never reaches the logs');
});

t.test('watch_config: true reloads when the file changes, also when it is replaced by a rename', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-watch-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  const watched = (models: string) => yaml(models).replace('  drain_timeout_ms: 5000', '  drain_timeout_ms: 5000\n  watch_config: true');
  await writeFile(file, watched('  - { id: first, provider: echo }'));
  const child = await serve(t, file);
  t.equal((await chat(child.url, 'second', 'a')).status, 404);

  await writeFile(file, watched('  - { id: second, provider: echo }'));
  let status = 0;
  for (let i = 0; i < 150 && status !== 200; i++) { await sleep(20); status = (await chat(child.url, 'second', 'a')).status; }
  t.equal(status, 200, 'reloaded after an in-place write');

  await writeFile(join(dir, 'tmp.yaml'), watched('  - { id: third, provider: echo }'));
  await rename(join(dir, 'tmp.yaml'), file);
  status = 0;
  for (let i = 0; i < 150 && status !== 200; i++) { await sleep(20); status = (await chat(child.url, 'third', 'a')).status; }
  t.equal(status, 200, 'reloaded after a rename over the file');
  child.proc.kill('SIGTERM');
});

t.test('bad invocations', async (t) => {
  const run = (args: string[]) => new Promise<{ code: number | null; err: string }>((resolve) => {
    const p = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => resolve({ code, err }));
  });
  let r = await run(['serve']);
  t.equal(r.code, 2);
  t.match(r.err, /--config FILE is required/);
  r = await run(['frobnicate']);
  t.equal(r.code, 2);
  t.match(r.err, /unknown command 'frobnicate'/);
  r = await run(['serve', '--config', '/nonexistent.yaml']);
  t.equal(r.code, 1);
  t.match(r.err, /cannot read \/nonexistent\.yaml: ENOENT/);
  t.notMatch(r.err, /\n\s+at /, 'no stack trace');
});
