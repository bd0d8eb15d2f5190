// lib/slice.ts: work in slices gives the same text as at once. stringifySliced is what a
// 20 MB rerank or embeddings body sent upstream is made with, so it must be JSON.stringify's
// text for any JSON object (fast-check, fixed seed); joinSliced is a JSON list's inside.

import t from 'tap';
import fc from 'fast-check';
import { Slice, joinSliced, stringifySliced } from '../lib/slice.js';

t.test('stringifySliced is JSON.stringify for any JSON object, with lists at the top', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.dictionary(fc.string(), fc.oneof(fc.jsonValue(), fc.array(fc.oneof(fc.string(), fc.jsonValue()), { maxLength: 50 }))),
    async (obj) => {
      t.equal(await stringifySliced(obj), JSON.stringify(obj));
    },
  ), { seed: 21021, numRuns: 300 });
  // Members JSON.stringify leaves out (undefined), and holes in lists (null).
  const odd = { a: undefined, b: [undefined, 1], c: 'x' } as Record<string, unknown>;
  t.equal(await stringifySliced(odd), JSON.stringify(odd));
});

t.test('many pieces: the same text, and the event loop had turns meanwhile', async (t) => {
  const docs = Array.from({ length: 2000 }, (_, i) => `${'word '.repeat(2000)}${i}`);
  let turns = 0;
  const ticker = setInterval(() => { turns++; }, 0);
  const text = await stringifySliced({ model: 'm', query: 'q', documents: docs }, new Slice());
  clearInterval(ticker);
  t.equal(text, JSON.stringify({ model: 'm', query: 'q', documents: docs }));
  t.ok(turns > 0, `timers ran while 20 MB were made (${turns} times)`);
  t.equal(`[${await joinSliced([1, 'a', null], (x) => JSON.stringify(x))}]`, '[1,"a",null]');
});
