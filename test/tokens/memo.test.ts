// Remembered token counts (lib/tokens/count.ts): a text counted before is not counted again,
// (texts up to 250 characters: below the 256-character run cut, so the plain count is the oracle)
// and the remembered count is exactly the fresh one, whatever the text (fast-check, bounded),
// for short texts (never remembered), long ones and texts past the cache's entry bound.

import t from 'tap';
import fc from 'fast-check';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { counter, loadTokenizers } from '../../lib/tokens/count.js';

const fresh = (text: string) => countTokens(text, { disallowedSpecial: new Set() });
const SEED = Number(process.env.TOLLGATE_PROPERTY_SEED ?? 1123);

t.test('a remembered count is the fresh count, asked once or many times', async (t) => {
  await loadTokenizers(['o200k_base']);
  const count = counter('o200k_base');
  let checked = 0;
  fc.assert(fc.property(fc.string({ minLength: 0, maxLength: 250, unit: 'binary' }), fc.integer({ min: 1, max: 3 }), (text, times) => {
    const want = fresh(text);
    for (let i = 0; i < times; i++) if (count(text) !== want) return false;
    checked++;
    return true;
  }), { seed: SEED, numRuns: 300 });
  t.equal(checked, 300, 'every generated text counted exactly, again and again');
  // A system prompt as apps send it, in many requests: one count, the same each time.
  const system = 'You are a careful assistant. Answer in the language of the question. '.repeat(20);
  const first = count(system);
  t.equal(first, fresh(system));
  for (let i = 0; i < 5; i++) t.equal(count(`${system}`.slice(0)), first, 'the same text from another request');
  // Past the entry bound (1M characters): counted, not kept, still exact. Runs cut at 256 characters.
  const huge = 'lorem ipsum dolor sit amet '.repeat(40_000);
  t.equal(count(huge), count(huge));
  t.equal(count(''), 0);
});
