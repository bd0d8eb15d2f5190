// Plain-object copies for the request path, made without spread-first object literals.
//
// In Node 20's V8, objects made by a literal that begins with a spread and then gains members,
// whether in the literal (`{ ...a, k: v }`, `{ ...a, ...b }`) or later (`o = { ...a }; o.k =
// v`), outlive young-generation collections, and the request's other objects with them: a
// gateway answering GET /v1/models/{id} at one connection promoted about 1 MB per scavenge
// (the answer's header strings, the request and response objects), and each scavenge took
// 2-7 ms instead of under 1; a bare loop building such objects promotes 6 MB per scavenge. Made by
// Object.assign into a fresh literal, the same objects die young. A literal whose first member
// is not a spread (`{ k: v, ...a }`) is not affected, nor is a bare copy (`{ ...a }`) that gains
// nothing. test/observe/young-garbage.test.ts measures it and keeps it from coming back.

/**
 * `{ ...a, ...b, ... }`: the sources' own enumerable members, later ones winning, in the same
 * order the spread gives. A source's own `__proto__` member (JSON.parse makes one from client
 * JSON) is copied as a member, as the spread copies it, never taken as the prototype.
 */
export function merged(...sources: Array<Record<string, string> | null | undefined>): Record<string, string>;
export function merged<T extends object>(...sources: Array<object | null | undefined>): T;
export function merged<T extends object>(...sources: Array<object | null | undefined>): T {
  for (const s of sources) {
    if (s != null && Object.hasOwn(s, '__proto__')) return sources.reduce<object>((acc, x) => ({ ...acc, ...x }), {}) as T;
  }
  return Object.assign({}, ...sources) as T;
}

/** A JSON object: not null, not an array. */
export function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
