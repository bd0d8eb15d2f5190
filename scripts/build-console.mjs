// Bundles the console's front end (lib/console/ui/: Preact + htm + uPlot) into
// dist/console/console.js and console.css with esbuild, at build time (npm run build, which
// `prepare` runs on npm ci). Nothing of it is fetched at run time; the gateway serves these files.

import { build } from 'esbuild';
import { readFile, writeFile, mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = `${root}dist/console`;
await mkdir(out, { recursive: true });
await build({
  entryPoints: [`${root}lib/console/ui/app.js`],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2020'],
  outfile: `${out}/console.js`,
  legalComments: 'eof',
  logLevel: 'warning',
});
const require = createRequire(import.meta.url);
const uplotCss = await readFile(require.resolve('uplot/dist/uPlot.min.css'), 'utf8');
const own = await readFile(`${root}lib/console/ui/console.css`, 'utf8');
await writeFile(`${out}/console.css`, `${uplotCss}\n${own}`);
