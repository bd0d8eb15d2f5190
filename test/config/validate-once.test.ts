// A config is validated once, where it enters (CONTRACT section 11): the gateway takes a
// validated Config as it is, and validating a copy of one gives the same config (the defaults
// filled in never conflict with what was given). Found by an operator: a file with
// store.cluster or store.sentinel passed `tollgate check`, and `tollgate serve` died at once
// ("store.cluster: cannot be combined with store.url"): the gateway validated the defaulted
// config again, and the default store.url then stood beside the cluster.

import t from 'tap';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import YAML from 'yaml';
import { ConfigError, parseConfig, validateConfig } from '../../lib/config/load.js';
import { createGateway } from '../../lib/gateway.js';
import { BIN } from '../helpers/child.js';
import { configArb } from '../helpers/config-gen.js';
import { freePort } from '../helpers/redis.js';

const silent = pino({ level: 'silent' });
const dir = await mkdtemp(join(tmpdir(), 'tollgate-once-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const closedPort = await freePort();

const cluster = `store:\n  kind: redis\n  timeout_ms: 200\n  cluster: ["127.0.0.1:${closedPort}"]\n`;
const sentinel = `store:\n  kind: redis\n  timeout_ms: 200\n  sentinel: {name: m, sentinels: ["127.0.0.1:${closedPort}"]}\n`;

t.test('the gateway takes a validated config as it is; a plain object is validated once', async (t) => {
  for (const [name, text] of [['cluster', cluster], ['sentinel', sentinel]] as const) {
    const config = parseConfig(text, {});
    t.equal(config.store.url, undefined, `${name}: no default url beside it`);
    const gw = createGateway(config, { logger: silent });
    await gw.ready;
    t.equal(gw.config, config, `${name}: the gateway serves the very config it was given`);
    await gw.close();
  }
  const memory = parseConfig('server: {port: 0}\n', {});
  const gw = createGateway(memory, { logger: silent });
  await gw.ready;
  t.equal(gw.config, memory, 'the same for the memory store');
  await gw.reload(memory);
  t.equal(gw.config, memory, 'and for a reload');
  await gw.close();

  const plain = { store: { kind: 'redis', cluster: [`127.0.0.1:${closedPort}`], timeout_ms: 200 } };
  const fromPlain = createGateway(plain, { logger: silent });
  await fromPlain.ready;
  t.not(fromPlain.config, plain, 'a plain object is validated: a defaulted copy');
  t.equal(fromPlain.config!.store.wait_timeout_ms, 100);
  await fromPlain.close();
  t.throws(() => createGateway({ server: { prot: 1 } }, { logger: silent }), ConfigError, 'and refused when invalid');
});

t.test('validating a copy of a validated config gives the same config (property)', async (t) => {
  const places = { dir, file: join(dir, 'f'), notJson: join(dir, 'n.json'), folderJson: join(dir, 'd.json'), closedPort };
  let accepted = 0;
  fc.assert(fc.property(configArb(places), ({ config }) => {
    let once;
    try {
      once = validateConfig(config);
    } catch (err) {
      if (err instanceof ConfigError) return;
      throw err;
    }
    accepted++;
    assert.equal(validateConfig(once), once, 'the validated config itself comes back as it is');
    assert.deepStrictEqual(validateConfig(structuredClone(once)), once, 'a copy passes again, unchanged');
    assert.deepStrictEqual(validateConfig(YAML.parse(YAML.stringify(once))), once, 'so does the YAML of it');
  }), { numRuns: 200 });
  t.ok(accepted > 50, `200 runs, ${accepted} of them accepted configs: each passed again unchanged`);
});

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

t.test('tollgate check and tollgate serve agree on a cluster and a sentinel file', async (t) => {
  for (const [name, text] of [['cluster', cluster], ['sentinel', sentinel]] as const) {
    const file = join(dir, `${name}.yaml`);
    await writeFile(file, `server: {port: 0, drain_timeout_ms: 1000}\n${text}`);
    const checked = await run(['check', '--config', file]);
    t.equal(checked.code, 0, `${name}: check accepts it`);
    const proc = spawn(process.execPath, [BIN, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' } });
    t.teardown(() => { if (proc.exitCode === null) proc.kill('SIGKILL'); });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => { out += d; });
    proc.stderr.on('data', (d) => { err += d; });
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
    const url = /listening on (\S+)/.exec(out)?.[1];
    t.ok(url, `${name}: serve starts (stderr: ${err})`);
    t.notMatch(err, /^\s+at /m, 'no stack trace');
    if (url === undefined) continue;
    t.equal((await fetch(`${url}/healthz`)).status, 200, 'healthz with the store down');
    t.equal((await fetch(`${url}/readyz`)).status, 503, 'readyz 503: the store is down');
    proc.kill('SIGTERM');
    t.equal(await exited, 0, 'SIGTERM: exit 0');
  }
});
