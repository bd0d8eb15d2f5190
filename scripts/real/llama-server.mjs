#!/usr/bin/env node
// Prepares what `npm run test:real` runs against: llama.cpp's `llama-server`, built from the
// source the `node-llama-cpp` npm package ships (package/llama/gitRelease.bundle, a git
// bundle of the llama.cpp release it binds), and a tiny random-weight Qwen2 GGUF model made
// with that source's gguf-py and vocab files. Only the npm registry (npm pack) and Debian's
// packages (python3-numpy, when numpy is missing) are used; the llama.cpp build is configured
// so that nothing else is fetched (no curl, no OpenSSL downloads, no prebuilt web UI).
//
// Everything is cached in $TOLLGATE_REAL_CACHE (default ~/.cache/tollgate-real), keyed by the
// node-llama-cpp version; a second run takes a second. The build runs under `nice -n 19` with
// two jobs: it takes 10+ minutes on two shared cores.
//
// usage: node scripts/real/llama-server.mjs [--json]
//   --json  print {bin, model, source, version} as one JSON line on stdout (progress on stderr)
// env:   TOLLGATE_REAL_CACHE, TOLLGATE_REAL_NLC_VERSION (default below), TOLLGATE_REAL_JOBS

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, chmodSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Pinned: the checks depend on what this llama.cpp release does (reasoning parser, /props). */
const NLC_VERSION = process.env.TOLLGATE_REAL_NLC_VERSION || '3.22.1';
const CACHE = process.env.TOLLGATE_REAL_CACHE || join(homedir(), '.cache', 'tollgate-real');
const JOBS = process.env.TOLLGATE_REAL_JOBS || '2';
const HERE = dirname(fileURLToPath(import.meta.url));
const MAKE_MODEL = join(HERE, 'make-model.py');

/** The build's switches: the server alone, no network at configure or build time. */
const CMAKE_FLAGS = [
  '-DCMAKE_BUILD_TYPE=Release',
  '-DBUILD_SHARED_LIBS=OFF', // one self-contained binary that can be copied into the cache
  '-DLLAMA_CURL=OFF', // deprecated and ignored by recent releases; harmless on older ones
  '-DLLAMA_OPENSSL=OFF',
  '-DLLAMA_BUILD_TESTS=OFF',
  '-DLLAMA_BUILD_EXAMPLES=OFF',
  '-DLLAMA_BUILD_TOOLS=ON', // the server lives under tools/ and is added only with them
  '-DLLAMA_BUILD_SERVER=ON',
  '-DLLAMA_BUILD_APP=OFF',
  '-DLLAMA_BUILD_UI=OFF', // the web UI would need npm packages of its own
  '-DLLAMA_USE_PREBUILT_UI=OFF', // ... or a download from Hugging Face
  '-DFETCHCONTENT_FULLY_DISCONNECTED=ON',
];

const log = (msg) => process.stderr.write(`[test:real] ${msg}\n`);

function run(cmd, args, opts = {}) {
  log(`$ ${cmd} ${args.join(' ')}`);
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], ...opts });
  if (r.error !== undefined) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.signal}`);
  return r;
}

function has(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/** node-llama-cpp's tarball, from the npm registry through npm itself. */
function tarball(dir) {
  const file = join(dir, `node-llama-cpp-${NLC_VERSION}.tgz`);
  if (existsSync(file)) return file;
  mkdirSync(dir, { recursive: true });
  run('npm', ['pack', `node-llama-cpp@${NLC_VERSION}`, '--pack-destination', dir, '--silent'], { stdio: ['ignore', 'ignore', 'inherit'] });
  if (!existsSync(file)) throw new Error(`npm pack did not write ${file}: ${readdirSync(dir).join(', ')}`);
  return file;
}

/** The llama.cpp source: the git bundle inside the tarball, cloned. */
function source(dir) {
  const src = join(dir, 'src');
  if (existsSync(join(src, 'CMakeLists.txt'))) return src;
  const tgz = tarball(dir);
  const tmp = join(dir, 'unpack.tmp');
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  run('tar', ['-xzf', tgz, '-C', tmp, 'package/llama/gitRelease.bundle']);
  rmSync(src, { recursive: true, force: true });
  run('git', ['-c', 'advice.detachedHead=false', 'clone', '--quiet', join(tmp, 'package', 'llama', 'gitRelease.bundle'), src]);
  rmSync(tmp, { recursive: true, force: true });
  return src;
}

/** llama-server, built once; an interrupted build resumes where it stopped. */
function server(dir) {
  const bin = join(dir, 'bin', 'llama-server');
  if (existsSync(bin)) return bin;
  const src = source(dir);
  const build = join(dir, 'build');
  const generator = has('ninja') ? ['-G', 'Ninja'] : [];
  log(`building llama-server ${NLC_VERSION} with ${JOBS} jobs under nice -n 19 (10+ minutes on two cores)`);
  run('nice', ['-n', '19', 'cmake', '-S', src, '-B', build, ...generator, ...CMAKE_FLAGS]);
  run('nice', ['-n', '19', 'cmake', '--build', build, '--target', 'llama-server', '-j', JOBS]);
  mkdirSync(dirname(bin), { recursive: true });
  copyFileSync(join(build, 'bin', 'llama-server'), `${bin}.tmp`);
  chmodSync(`${bin}.tmp`, 0o755);
  renameSync(`${bin}.tmp`, bin);
  return bin;
}

/** numpy from Debian's python3-numpy when Python lacks it (gguf-py needs it). */
function ensureNumpy() {
  if (spawnSync('python3', ['-c', 'import numpy'], { stdio: 'ignore' }).status === 0) return;
  log('numpy is missing: installing Debian\'s python3-numpy');
  run('apt-get', ['install', '-y', '--no-install-recommends', 'python3-numpy']);
  if (spawnSync('python3', ['-c', 'import numpy'], { stdio: 'ignore' }).status === 0) return;
  // A python3 earlier on PATH (pyenv and the like) does not see Debian's packages.
  throw new Error('python3 cannot import numpy even after apt-get install python3-numpy; put /usr/bin first on PATH');
}

/** The model, keyed by the script that makes it: a changed script makes a new file. */
function model(dir) {
  const key = createHash('sha256').update(readFileSync(MAKE_MODEL)).digest('hex').slice(0, 12);
  const file = join(dir, 'model', `tiny-qwen2-${key}.gguf`);
  if (existsSync(file)) return file;
  const src = source(dir);
  ensureNumpy();
  mkdirSync(dirname(file), { recursive: true });
  run('python3', [MAKE_MODEL, src, `${file}.tmp`], { stdio: ['ignore', 'ignore', 'inherit'] });
  renameSync(`${file}.tmp`, file);
  return file;
}

export function prepare() {
  const dir = join(CACHE, `node-llama-cpp-${NLC_VERSION}`);
  const bin = server(dir);
  return { bin, model: model(dir), source: join(dir, 'src'), version: NLC_VERSION };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    const out = prepare();
    if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(out)}\n`);
    else log(`ready: ${out.bin}, ${out.model}`);
  } catch (err) {
    log(`failed: ${err.message}`);
    process.exit(1);
  }
}
