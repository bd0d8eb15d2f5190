#!/usr/bin/env node
// The `tollgate` command. The code lives in lib/ and is compiled to dist/ by `npm install`.
import { main } from '../dist/lib/cli/index.js';

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write(`tollgate: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
