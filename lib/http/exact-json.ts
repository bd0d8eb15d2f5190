// JSON numbers are read as doubles, so a fractional or oversized literal can arrive as a
// different, whole number: 4503599627370496.5 parses as 4503599627370496. Bodies that carry
// money use this to find the top-level members whose number literal is not exactly the
// integer JSON.parse made of it, and refuse them instead of rounding an amount silently.

const MAX = BigInt(Number.MAX_SAFE_INTEGER);
const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const LITERAL = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;

/** The exact value of a JSON number literal when it is an integer of at most 2^53-1 in size. */
export function exactSafeInteger(literal: string): bigint | undefined {
  const m = LITERAL.exec(literal);
  if (m === null) return undefined;
  const fraction = m[3] ?? '';
  let digits = (m[2]! + fraction).replace(/^0+/, '');
  if (digits === '') return 0n;
  let exp = Number(m[4] ?? 0) - fraction.length;
  const zeros = /0*$/.exec(digits)![0].length;
  const dropped = Math.min(zeros, Math.max(0, -exp));
  digits = digits.slice(0, digits.length - dropped);
  exp += dropped;
  if (exp < 0) return undefined; // a fraction remains
  if (digits.length + exp > 16) return undefined; // at least 10^16: above 2^53-1
  const value = BigInt(digits) * 10n ** BigInt(exp);
  if (value > MAX) return undefined;
  return m[1] === '-' ? -value : value;
}

/** Index just past the string literal that starts at `start` (a `"`). */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
  return i + 1;
}

/**
 * Names of the top-level members of a JSON object text (already known to be valid JSON)
 * whose number literal JSON.parse turned into a safe integer that is not its exact value.
 */
export function roundedMembers(text: string): Set<string> {
  const rounded = new Set<string>();
  let depth = 0;
  let key: string | undefined;
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"') {
      const end = stringEnd(text, i);
      if (depth === 1) {
        let j = end;
        while (text[j] === ' ' || text[j] === '\t' || text[j] === '\n' || text[j] === '\r') j++;
        if (text[j] === ':') key = JSON.parse(text.slice(i, end)) as string;
      }
      i = end;
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i;
      const literal = NUMBER.exec(text)?.[0] ?? c;
      if (depth === 1 && key !== undefined) {
        const parsed = Number(literal);
        if (Number.isSafeInteger(parsed) && exactSafeInteger(literal) !== BigInt(parsed)) rounded.add(key);
      }
      i += literal.length;
    } else {
      if (c === '{' || c === '[') depth++;
      else if (c === '}' || c === ']') depth--;
      i++;
    }
  }
  return rounded;
}

/**
 * The values of every number literal, at any depth, that JSON.parse turned into a safe integer
 * other than its exact value: a nested amount equal to one of them may have been rounded.
 */
export function roundedValues(text: string): Set<number> {
  const rounded = new Set<number>();
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"') {
      i = stringEnd(text, i);
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i;
      const literal = NUMBER.exec(text)?.[0] ?? c;
      const parsed = Number(literal);
      if (Number.isSafeInteger(parsed) && exactSafeInteger(literal) !== BigInt(parsed)) rounded.add(parsed);
      i += literal.length;
    } else {
      i++;
    }
  }
  return rounded;
}
