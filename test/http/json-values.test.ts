// MAX_JSON_VALUES (http/json.ts, CONTRACT section 16): a body's JSON values are what the main
// thread pays for once a large body is parsed on the worker (the structured clone is rebuilt value
// by value) and in every loop over messages, parts and inputs. A body with more is refused 413,
// whether parsed here or on the worker, and the worker never hands such a value over.

import t from 'tap';
import { MAX_JSON_VALUES, OFF_THREAD_BYTES, parseJsonBody, parseJsonBodyOffThread } from '../../lib/http/json.js';

const many = (n: number, item: string) => Buffer.from(`{"model":"m","messages":[${new Array(n).fill(item).join(',')}]}`);

t.test('more JSON values than the bound: 413 request_too_large, inline and on the worker', async (t) => {
  // Under the off-thread size: parsed here.
  const small = many(MAX_JSON_VALUES, '0');
  t.ok(small.length < OFF_THREAD_BYTES);
  t.throws(() => parseJsonBody(small), { code: 'request_too_large', status: 413 });
  // Over it: parsed on the worker, refused there.
  const junk = Buffer.from(`{"model":"m","junk":{${Array.from({ length: 300_000 }, (_, i) => `"k${i}":0`).join(',')}}}`);
  t.ok(junk.length >= OFF_THREAD_BYTES);
  await t.rejects(parseJsonBodyOffThread(junk), { code: 'request_too_large', status: 413 });
  const empties = many(200_000, '{"role":"user","content":""}');
  await t.rejects(parseJsonBodyOffThread(empties), { code: 'request_too_large' });
  // At the bound it is a body like any other: the top object, model, messages, and the items.
  const fits = many(MAX_JSON_VALUES - 4, '1');
  t.equal((parseJsonBody(fits) as any).messages.length, MAX_JSON_VALUES - 4);
  // A long string is one value, whatever its length.
  const text = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(3 * OFF_THREAD_BYTES) }] }));
  t.equal(((await parseJsonBodyOffThread(text)) as any).messages[0].content.length, 3 * OFF_THREAD_BYTES);
});
