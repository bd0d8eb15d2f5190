// merged() (lib/objects.ts) stands in for `{ ...a, ...b }` on the request path: for any plain
// objects, including ones JSON.parse made from client JSON with a `__proto__` member, it gives
// the very object the spread gives (members, their order, the prototype).

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { merged } from '../../lib/objects.js';
import { holds } from './arbitraries.js';

const KEYS = ['a', 'b', 'model', 'x-request-id', '__proto__', 'constructor', 'toString', '0', '10', 'z'];
const key = fc.oneof(fc.constantFrom(...KEYS), fc.string({ maxLength: 6 }));
const value = fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.constant(null), fc.dictionary(fc.string({ maxLength: 3 }), fc.integer(), { maxKeys: 2 }));
/** Objects as JSON.parse makes them: `__proto__` becomes an own member. */
const source = fc.oneof(
  fc.array(fc.tuple(key, value), { maxLength: 6 }).map((entries) => JSON.parse(JSON.stringify(Object.fromEntries(entries))) as Record<string, unknown>),
  fc.array(fc.tuple(key, value), { maxLength: 6 }).map((entries) => JSON.parse(`{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(',')}}`) as Record<string, unknown>),
  fc.constant(undefined),
  fc.constant(null),
);

function same(got: Record<string, unknown>, want: Record<string, unknown>): void {
  assert.equal(Object.getPrototypeOf(got), Object.prototype, 'a plain object');
  assert.deepEqual(Reflect.ownKeys(got), Reflect.ownKeys(want), 'the same members in the same order');
  for (const k of Reflect.ownKeys(want)) {
    assert.deepEqual(Object.getOwnPropertyDescriptor(got, k), Object.getOwnPropertyDescriptor(want, k), `member ${String(k)}`);
  }
}

t.test('merged gives what the spread gives', async (t) => {
  await holds(t, 'merged(...sources) equals { ...a, ...b, ... }', fc.property(fc.array(source, { maxLength: 4 }), (sources) => {
    const want = sources.reduce<Record<string, unknown>>((acc, s) => ({ ...acc, ...s }), {});
    const got = merged<Record<string, unknown>>(...sources);
    same(got, want);
    for (const s of sources) if (s != null) assert.notEqual(got, s, 'a new object');
  }), 2000);
});

t.test('a __proto__ member is copied as a member, never taken as the prototype', async (t) => {
  const client = JSON.parse('{"model":"m","__proto__":{"polluted":true}}') as Record<string, unknown>;
  const out = merged<Record<string, unknown>>(client, { model: 'upstream-m' });
  t.equal(Object.getPrototypeOf(out), Object.prototype);
  t.equal((out as { polluted?: unknown }).polluted, undefined, 'nothing inherited from the client');
  t.same(Object.keys(out), ['model', '__proto__']);
  t.equal(JSON.stringify(out), '{"model":"upstream-m","__proto__":{"polluted":true}}', 'forwarded as the client wrote it, model rewritten');
  t.equal(({} as { polluted?: unknown }).polluted, undefined, 'Object.prototype untouched');
});

t.test('headers: later sources win, and the result is the caller\'s to extend', async (t) => {
  const upstream = { 'openai-processing-ms': '12' };
  const rate = { 'x-ratelimit-limit-requests': '10', 'x-ratelimit-remaining-requests': '9' };
  const h = merged(upstream, rate, undefined, { 'x-ratelimit-remaining-requests': '8' });
  h['x-request-id'] = 'req_1';
  t.same(h, { 'openai-processing-ms': '12', 'x-ratelimit-limit-requests': '10', 'x-ratelimit-remaining-requests': '8', 'x-request-id': 'req_1' });
  t.same(Object.keys(h), ['openai-processing-ms', 'x-ratelimit-limit-requests', 'x-ratelimit-remaining-requests', 'x-request-id']);
  t.same(rate, { 'x-ratelimit-limit-requests': '10', 'x-ratelimit-remaining-requests': '9' }, 'the sources are untouched');
});
