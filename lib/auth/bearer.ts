// The credential a request carries in its `Authorization: Bearer` header.

/** The credential of a `Bearer` Authorization header. */
export function bearer(header: string | undefined): string | undefined {
  if (header === undefined || header.length < 8) return undefined;
  if (header.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
  // Only HTTP's optional whitespace (SP, HTAB) surrounds a credential; String#trim would also
  // strip NBSP and other Unicode spaces and accept a credential that is not the key.
  let token = header.slice(7);
  const first = token.charCodeAt(0);
  const last = token.charCodeAt(token.length - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) token = token.replace(/^[ \t]+|[ \t]+$/g, '');
  return token === '' ? undefined : token;
}
