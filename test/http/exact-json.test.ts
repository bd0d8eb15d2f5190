// The scanner that tells an exact integer literal from one JSON.parse rounded
// (lib/http/exact-json.ts): money in admin bodies must be refused, never rounded.

import t from 'tap';
import fc from 'fast-check';
import { exactSafeInteger, roundedMembers } from '../../lib/http/exact-json.js';

const MAX = Number.MAX_SAFE_INTEGER;

t.test('exactSafeInteger: the exact value of integer literals up to 2^53-1, nothing else', async (t) => {
  const exact: Array<[string, bigint]> = [
    ['0', 0n], ['-0', 0n], ['7', 7n], ['-7', -7n], ['1.0', 1n], ['1.000', 1n], ['1e3', 1000n], ['1E+3', 1000n], ['12.5e1', 125n],
    ['12.3e1', 123n], ['0.0', 0n], ['0e999999999', 0n], [String(MAX), BigInt(MAX)], [`-${MAX}`, -BigInt(MAX)],
    ['9007199254740991.000', BigInt(MAX)], ['2000e-3', 2n],
  ];
  for (const [literal, value] of exact) t.equal(exactSafeInteger(literal), value, literal);
  for (const literal of ['1.5', '0.1', '4503599627370496.5', '9007199254740990.5', '9007199254740992', '1e16', '1e400', '1e-400', '1500e-3', '12.34e1', '-0.5', 'abc', '', '1e999999999']) {
    t.equal(exactSafeInteger(literal), undefined, `${literal}: not an exact safe integer`);
  }
});

t.test('roundedMembers: top-level members whose literal was rounded to a safe integer', async (t) => {
  t.strictSame(roundedMembers('{"units":4503599627370496.5,"ok":5,"f":1.5,"big":1e300}'), new Set(['units']),
    'fractions and out-of-range values are left to the ordinary checks (not safe integers once parsed)');
  t.strictSame(roundedMembers('{"a":9007199254740990.5, "b" : 1.0e3, "c":[4503599627370496.5], "d":{"x":4503599627370496.5}}'), new Set(['a']), 'only top-level members');
  t.strictSame(roundedMembers('{"s":"\\"units\\": 4503599627370496.5","t":"a\\\\","u":4503599627370496.5}'), new Set(['u']), 'text inside strings is not a number');
  t.strictSame(roundedMembers('[4503599627370496.5]'), new Set(), 'no members in an array');
  t.strictSame(roundedMembers('{"units":-4503599627370496.5}'), new Set(['units']), 'negative too');
});

t.test('property: a literal is flagged exactly when its exact value differs from the parsed number', async () => {
  const literal = fc.tuple(fc.boolean(), fc.bigInt({ min: 0n, max: 10n ** 17n }), fc.option(fc.stringMatching(/^[0-9]{1,6}$/)), fc.option(fc.integer({ min: -20, max: 20 })))
    .map(([neg, int, frac, exp]) => `${neg ? '-' : ''}${int}${frac === null ? '' : `.${frac}`}${exp === null ? '' : `e${exp}`}`);
  fc.assert(fc.property(literal, (lit) => {
    const parsed = Number(lit);
    const flagged = roundedMembers(`{"n":${lit}}`).has('n');
    // Reference: the exact rational value compared with the double, by scaling both to integers.
    const m = /^(-?)(\d+)(?:\.(\d+))?(?:e(-?\d+))?$/.exec(lit)!;
    const digits = BigInt(m[2]! + (m[3] ?? ''));
    const scale = Number(m[4] ?? 0) - (m[3]?.length ?? 0);
    const sign = m[1] === '-' ? -1n : 1n;
    // Not a safe integer once parsed: the ordinary checks refuse it, so it is never flagged.
    if (!Number.isSafeInteger(parsed)) return !flagged;
    const p = BigInt(parsed);
    const equal = scale >= 0 ? sign * digits * 10n ** BigInt(scale) === p : sign * digits === p * 10n ** BigInt(-scale);
    return flagged === !equal;
  }), { numRuns: 2000 });
});
