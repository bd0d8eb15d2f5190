// The tests typecheck (Tollgate #40): `tsc -p test/tsconfig.json --noEmit` (tests, their
// helpers and fixtures, with lib) passes, so `npm test` catches a test that no longer fits
// the code it calls. tap runs tests through a loader that strips types without checking them.

import t from 'tap';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

t.setTimeout(600_000);

const root = fileURLToPath(new URL('../..', import.meta.url));
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

t.test('tsc -p test/tsconfig.json --noEmit passes', async (t) => {
  const { code, out } = await new Promise<{ code: number | null; out: string }>((resolve) => {
    execFile(process.execPath, [tsc, '-p', 'test/tsconfig.json', '--noEmit', '--pretty', 'false'], { cwd: root, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, out: `${stdout}${stderr}` }));
  });
  t.equal(code, 0, `type errors (npm run typecheck):\n${out}`);
});
