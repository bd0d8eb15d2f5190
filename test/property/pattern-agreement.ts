// What the two pattern readers of the OpenAI provider (textAnswer, textChunk) are tested with:
// JSON text spelled every way JSON allows, members the full parse ignores, and the four
// properties each reader must hold against the full parse.

import type { Test } from 'tap';
import fc from 'fast-check';

/** A JSON string literal for `s`, with its characters escaped any way JSON allows. */
export const spelled = (s: string): fc.Arbitrary<string> =>
  fc.array(fc.constantFrom('plain', 'unicode', 'upper', 'solidus'), { minLength: s.length, maxLength: s.length }).map((how) => {
    let out = '"';
    let i = 0;
    for (const ch of s) {
      const mode = how[i++];
      const code = ch.charCodeAt(0);
      if (ch.length === 1 && (mode === 'unicode' || mode === 'upper')) {
        const hex = code.toString(16).padStart(4, '0');
        out += `\\u${mode === 'upper' ? hex.toUpperCase() : hex}`;
      } else if (ch === '/' && mode === 'solidus') {
        out += '\\/';
      } else {
        out += JSON.stringify(ch).slice(1, -1);
      }
    }
    return `${out}"`;
  });

/** Members the full parse ignores: `known` ones, and strings, numbers and nulls under names it does not read. */
export const ignoredMember = (known: readonly string[]): fc.Arbitrary<string> => fc.oneof(
  fc.constantFrom(...known),
  fc.tuple(fc.stringMatching(/^[a-z_]{1,8}$/).filter((k) => !['error', 'usage', 'choices'].includes(k)),
    fc.oneof(fc.string({ maxLength: 6 }).map((s) => JSON.stringify(s)), fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
      fc.integer().map(String), fc.constant('null')))
    .map(([k, v]) => `${JSON.stringify(k)}:${v}`),
);

export interface Agreement {
  /** What the reader reads, in the plural ("answers", "chunks"), for the test names. */
  noun: string;
  /** Returns whether the pattern took `data`; throws when it took it and disagrees with the full parse. */
  agrees: (data: string) => boolean;
  /** Inputs as servers write them, with members the full parse ignores: every one must be taken. */
  conforming: fc.Arbitrary<string>;
  /** The same shape among members of any kind. */
  amongAny: fc.Arbitrary<string>;
}

/** The four properties: conforming inputs all taken; among any members, mutated by a byte, or arbitrary JSON, taken only when the full parse agrees. */
export function agreementSuite(t: Test, a: Agreement): void {
  const { noun, agrees, conforming } = a;
  t.test(`${noun} of text as servers write them: the pattern gives what the full parse gives`, async (t) => {
    let taken = 0;
    fc.assert(fc.property(conforming, (data) => {
      if (agrees(data)) taken++;
    }), { numRuns: 3000 });
    t.equal(taken, 3000, `every one of the ${noun} of text read by the pattern, as the full parse reads it`);
  });

  t.test(`${noun} of text among members of any kind: taken only when the full parse agrees`, async (t) => {
    let taken = 0;
    fc.assert(fc.property(a.amongAny, (data) => {
      if (agrees(data)) taken++;
    }), { numRuns: 2000 });
    t.ok(taken > 0, `${taken} of 2000 taken, each agreeing`);
  });

  t.test(`the same ${noun} with a byte inserted, deleted or changed: taken only when the full parse agrees`, async (t) => {
    let taken = 0;
    fc.assert(fc.property(conforming, fc.nat(), fc.constantFrom('insert', 'delete', 'replace'),
      fc.constantFrom('"', '\\', ',', '}', ']', '{', '[', ':', ' ', '\u0000', '\n', 'u', '0', 'n', 'e', 'x'),
      (data, at, how, ch) => {
        const i = at % (data.length + 1);
        const mutated = how === 'insert' ? data.slice(0, i) + ch + data.slice(i)
          : how === 'delete' ? data.slice(0, i) + data.slice(i + 1)
            : data.slice(0, i) + ch + data.slice(i + 1);
        if (agrees(mutated)) taken++;
      }), { numRuns: 5000 });
    t.ok(taken > 0, `${taken} mutated ${noun} were still ${noun} of text, and agreed`);
  });

  t.test('arbitrary JSON and arbitrary text: taken only when the full parse agrees', async (t) => {
    let taken = 0;
    fc.assert(fc.property(fc.oneof(fc.json(), fc.string(), fc.jsonValue().map((v) => JSON.stringify({ choices: [v] })), conforming), (data) => {
      if (agrees(data)) taken++;
    }), { numRuns: 2000 });
    t.ok(taken > 0 && taken < 2000, `${taken} of 2000 taken (the ${noun} of text among them), each agreeing`);
  });
}
