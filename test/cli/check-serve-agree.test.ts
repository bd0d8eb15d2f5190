// `tollgate serve` starts with every config `tollgate check` accepts, and refuses every one it
// refuses with the same `path: message` lines, exit 1, never a stack trace (CONTRACT section
// 11). Property-tested on generated configs (test/helpers/config-gen.ts): valid and invalid
// values of the schema's fields, and values that only fail where the gateway runs (a
// store.path under /proc or naming a file, tokenizer.json files missing or not JSON). Each run
// spawns both commands, so the runs are few.

import t from 'tap';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { BIN } from '../helpers/child.js';
import { configArb, type GenPlaces } from '../helpers/config-gen.js';
import { freePort } from '../helpers/redis.js';

const root = await mkdtemp(join(tmpdir(), 'tollgate-agree-'));
t.teardown(() => rm(root, { recursive: true, force: true }));
const closedPort = await freePort();
const env = { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' };
const STACK = /^\s+at /m;

function check(file: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env, timeout: 30_000 }, (err, _stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stderr });
    });
  });
}

interface Served { code: number | null; signal: string | null; stdout: string; stderr: string; health: number | undefined }

/** Serves `file`: once it listens, GET /healthz and SIGTERM; the outcome once it exits (SIGKILL after 30 s). */
function serve(file: string): Promise<Served> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [BIN, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stdout = '';
    let stderr = '';
    let health: number | undefined;
    let asked = false;
    const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.stdout.on('data', (d) => {
      stdout += d;
      const url = /^tollgate listening on (\S+)$/m.exec(stdout)?.[1];
      if (url === undefined || asked) return;
      asked = true;
      void fetch(`${url}/healthz`).then((r) => { health = r.status; }, () => { health = -1; })
        .finally(() => proc.kill('SIGTERM'));
    });
    proc.once('close', (code, signal) => { clearTimeout(killer); resolve({ code, signal, stdout, stderr, health }); });
  });
}

/** Stands for each run's own folder in the generated configs: a store.path one run made is not there for the next. */
const DIR = '/@run-dir@';
const places: GenPlaces = { dir: DIR, file: `${DIR}/a-file`, notJson: `${DIR}/not.json`, folderJson: `${DIR}/folder.json`, closedPort };

// About a second of CPU per run (two Node processes); a loaded machine stretches that a lot.
const RUNS = 30;
t.setTimeout(900_000);

t.test('serve starts with what check accepts and refuses what it refuses, with the same lines', async (t) => {
  let runs = 0;
  let accepted = 0;
  await fc.assert(fc.asyncProperty(fc.context(), configArb(places), async (ctx, gen) => {
    const dir = join(root, `run-${++runs}`);
    await mkdir(dir);
    await writeFile(join(dir, 'a-file'), 'x');
    await writeFile(join(dir, 'not.json'), 'not json');
    await mkdir(join(dir, 'folder.json'));
    const file = join(dir, 'tollgate.yaml');
    const text = YAML.stringify(gen.config).replaceAll(DIR, dir);
    ctx.log(text);
    await writeFile(file, text);
    const [checked, served] = await Promise.all([check(file), serve(file)]);
    ctx.log(`check exit ${checked.code}: ${checked.stderr}\nserve exit ${served.code} (${served.signal}): ${served.stderr}`);
    assert.equal(checked.code === 0, gen.valid, 'check accepts exactly the configs valid in every part');
    assert.doesNotMatch(checked.stderr, STACK);
    assert.doesNotMatch(served.stderr, STACK, 'no stack trace from serve');
    if (checked.code === 0) {
      accepted++;
      assert.match(served.stdout, /^tollgate listening on http:\/\/\S+$/m, 'serve listens');
      assert.equal(served.health, 200, '/healthz answers');
      assert.equal(served.signal, null);
      assert.equal(served.code, 0, 'SIGTERM: exit 0');
    } else {
      assert.equal(checked.code, 1);
      assert.equal(served.code, 1, 'serve exits 1');
      assert.equal(served.stderr, checked.stderr, 'serve prints the lines check prints');
      assert.doesNotMatch(served.stdout, /listening/);
    }
  }), { numRuns: RUNS, endOnFailure: true });
  t.equal(runs, RUNS);
  t.ok(accepted >= 5 && accepted <= RUNS - 5, `${RUNS} configs, ${accepted} accepted and served; the others refused alike`);
});
