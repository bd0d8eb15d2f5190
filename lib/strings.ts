// Strings kept for long (hours, days) are kept flat.

/**
 * `text` made one flat string. A string built by concatenation is a tree of V8 cons strings
 * (32 bytes each), and some are deep: Node's crypto.randomUUID() builds its 36 characters from
 * 16 byte pairs and 4 dashes, about 14 nodes and 450 bytes. Reading a character flattens the
 * tree in place, and the collector then keeps the flat string alone (about 56 bytes for a
 * UUID). Costs a copy; use it for what is kept, not for what dies with the request.
 */
export function flattened(text: string): string {
  text.charCodeAt(0);
  return text;
}
