// lib/slice.ts: work in slices gives the same text as at once. encodeSliced is what a 20 MB
// rerank or embeddings body sent upstream is made with, so it must be JSON.stringify's text, as
// UTF-8 bytes, for any JSON object (fast-check, fixed seed); joinSlicedBytes, an answer around a list.

import t from 'tap';
import fc from 'fast-check';
import { Slice, encodeSliced, joinSlicedBytes } from '../lib/slice.js';

t.test('encodeSliced is JSON.stringify\'s bytes for any JSON object, with lists at the top', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.dictionary(fc.string(), fc.oneof(fc.jsonValue(), fc.array(fc.oneof(fc.string(), fc.jsonValue()), { maxLength: 50 }))),
    async (obj) => {
      t.same(await encodeSliced(obj), Buffer.from(JSON.stringify(obj)));
    },
  ), { seed: 21021, numRuns: 300 });
  // Members JSON.stringify leaves out (undefined), and holes in lists (null).
  const odd = { a: undefined, b: [undefined, 1], c: 'x' } as Record<string, unknown>;
  t.same(await encodeSliced(odd), Buffer.from(JSON.stringify(odd)));
});

t.test('many pieces: the same text, and the event loop had turns meanwhile', async (t) => {
  const docs = Array.from({ length: 2000 }, (_, i) => `${'word '.repeat(2000)}${i}`);
  let turns = 0;
  const ticker = setInterval(() => { turns++; }, 0);
  const bytes = await encodeSliced({ model: 'm', query: 'q', documents: docs }, new Slice());
  clearInterval(ticker);
  t.ok(bytes.equals(Buffer.from(JSON.stringify({ model: 'm', query: 'q', documents: docs }))), 'the same bytes');
  t.ok(turns > 0, `timers ran while 20 MB were made (${turns} times)`);
  t.equal((await joinSlicedBytes('[', [1, 'a', null], (x) => JSON.stringify(x), ']')).toString(), '[1,"a",null]');
});

t.test('encodeSliced: characters of several bytes across its 64 K pieces', async (t) => {
  const docs = Array.from({ length: 300 }, (_, i) => `${'é😀ж '.repeat(200 + i)}${i}`);
  const obj = { model: 'm', input: docs, note: '„quoted" \u2028' };
  const bytes = await encodeSliced(obj);
  t.ok(bytes.length > 3 * 64 * 1024, `several pieces (${bytes.length} bytes)`);
  t.ok(bytes.equals(Buffer.from(JSON.stringify(obj))), 'the same bytes');
});

t.test('joinSlicedBytes: head, the items joined, tail, as bytes, across pieces', async (t) => {
  for (const n of [0, 1, 2, 3000]) {
    const items = Array.from({ length: n }, (_, i) => ({ i, text: `ü ${'x'.repeat(i % 97)}` }));
    const bytes = await joinSlicedBytes('{"data":[', items, (x) => JSON.stringify(x), '],"end":"é"}');
    t.ok(bytes.equals(Buffer.from(JSON.stringify({ data: items, end: 'é' }))), `${n} items`);
  }
});
