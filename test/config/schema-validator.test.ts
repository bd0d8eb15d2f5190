// lib/config/schema-validator.ts is the config schema compiled ahead of time (Ajv's standalone
// code): it must be what scripts/config-validator.mjs makes of lib/config/schema.ts now, or a
// schema change would not reach the gateway. Regenerate with `npm run gen:config-validator`.

import t from 'tap';
import { readFileSync } from 'node:fs';
import { configSchema } from '../../lib/config/schema.js';
// @ts-expect-error: a plain .mjs script, without types
import { OUT, generate } from '../../scripts/config-validator.mjs';

t.test('the generated validator is up to date with schema.ts', async (t) => {
  const current = readFileSync(OUT as string, 'utf8');
  const fresh = (generate as (s: unknown) => string)(configSchema);
  t.ok(current === fresh, 'lib/config/schema-validator.ts is out of date: run `npm run gen:config-validator`');
});
