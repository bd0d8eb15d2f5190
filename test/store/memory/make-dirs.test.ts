// The memory store makes its folder with makeDirs, which always ends: Node's recursive mkdir
// spins at 100% CPU forever under /proc (mkdir answers ENOENT there though the parent exists),
// and `tollgate serve` with such a store.path neither listened nor logged. A store that cannot
// open is reported as a store.path problem (ConfigValueError), not a stack trace.

import t from 'tap';
import { mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { ConfigValueError } from '../../../lib/config/value-error.js';
import { createGateway } from '../../../lib/gateway.js';
import { makeDirs } from '../../../lib/store/memory/make-dirs.js';
import { MemoryStore } from '../../../lib/store/memory/store.js';

const dir = await mkdtemp(join(tmpdir(), 'tollgate-dirs-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const file = join(dir, 'a-file');
await writeFile(file, 'x');
await symlink(join(dir, 'nothing-here'), join(dir, 'dangling'));

/** Rejects with the error's code, or resolves 'ok'; fails the test past 5 s (the spin never ends). */
async function outcome(p: Promise<unknown>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<string>((resolve) => { timer = setTimeout(() => resolve('still running after 5 s'), 5000); });
  const r = await Promise.race([p.then(() => 'ok', (e: NodeJS.ErrnoException) => e.code ?? e.message), late]);
  clearTimeout(timer);
  return r;
}

t.test('makeDirs makes what is missing, and ends with the first refusal', async (t) => {
  t.equal(await outcome(makeDirs(join(dir, 'x', 'y', 'z'))), 'ok');
  t.ok((await stat(join(dir, 'x', 'y', 'z'))).isDirectory());
  t.equal(await outcome(makeDirs(join(dir, 'x', 'y', 'z'))), 'ok', 'an existing folder is fine');
  t.equal(await outcome(Promise.all([makeDirs(join(dir, 'p', 'q')), makeDirs(join(dir, 'p', 'q')), makeDirs(join(dir, 'p', 'r'))])), 'ok',
    'concurrent calls making the same folders');
  t.equal(await outcome(makeDirs('/proc/tollgate-test/state')), 'ENOENT', 'under /proc: ENOENT at once');
  t.equal(await outcome(makeDirs(file)), 'ENOTDIR', 'a file in its place');
  t.equal(await outcome(makeDirs(join(file, 'sub'))), 'ENOTDIR', 'a file above it');
  t.equal(await outcome(makeDirs(join(dir, 'dangling', 'sub'))), 'ENOTDIR', 'a symbolic link to nothing above it');
});

t.test('the memory store and the gateway: a store.path that cannot be used is a store.path problem', async (t) => {
  for (const [path, code] of [['/proc/tollgate-test/state', 'ENOENT'], [file, 'ENOTDIR'], [join(file, 'state'), 'ENOTDIR']] as const) {
    t.equal(await outcome(MemoryStore.open({ path, fsyncMs: 0 })), code, `MemoryStore.open(${path}) ends`);
    const gw = createGateway({ store: { path } }, { logger: pino({ level: 'silent' }) });
    const err = await Promise.race([gw.ready.then(() => undefined, (e: unknown) => e), new Promise((r) => setTimeout(() => r('hung'), 5000))]);
    t.ok(err instanceof ConfigValueError, `the gateway's start ends with a ConfigValueError (${String(err)})`);
    t.equal((err as ConfigValueError).path, 'store.path');
    t.match((err as ConfigValueError).line, new RegExp(`^store\\.path: cannot open the store in ${JSON.stringify(path).replace(/[/.]/g, '\\$&')}: ${code}`));
    await gw.close();
  }
});
