// Usage records as CSV (RFC 4180, CRLF, a header row): the one writer of the CLI's `tollgate
// usage export --format csv` and the console's "Download CSV", so the same records give the same
// file both ways (CONTRACT sections 9, 12 and 16).

/** The columns of `usage export --format csv`: the record's fields, in the contract's order. */
export const USAGE_COLUMNS = [
  'request_id', 'at', 'account', 'key_id', 'team', 'model', 'provider', 'target', 'route', 'status', 'prompt_tokens', 'cached_tokens',
  'completion_tokens', 'units', 'usage_source', 'duration_ms', 'ttft_ms', 'queue_ms', 'tags', 'end_user', 'tool',
] as const;

/**
 * Whether a spreadsheet could take a cell of this text for a formula (CONTRACT section 16): it
 * begins with =, +, -, @, a tab or a CR. Such a cell is written with a leading ', and so is one
 * that begins with ' itself, so that dropping one leading ' gives back any cell's text.
 */
function needsQuoteMark(s: string): boolean {
  switch (s.charCodeAt(0)) {
    case 0x3d: case 0x2b: case 0x2d: case 0x40: case 0x09: case 0x0d: case 0x27: return true; // = + - @ TAB CR '
    default: return false;
  }
}

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, a quote, CR or LF; null is empty.
 * Every cell, numbers too, is neutralised as needsQuoteMark says (a negative number, which no
 * usage column should hold, would be written '-5). The one CSV writer: the CLI's
 * `usage export` and the console's download both write with it.
 */
export function csvField(v: unknown): string {
  if (v === null || v === undefined) return '';
  let s = typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : Array.isArray(v) ? v.join(',') : JSON.stringify(v);
  if (needsQuoteMark(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** One record's row, in USAGE_COLUMNS' order, CRLF-terminated. */
export function csvRow(r: Record<string, unknown>): string {
  return `${USAGE_COLUMNS.map((c) => csvField(r[c])).join(',')}\r\n`;
}

/** The header row. */
export const CSV_HEADER = `${USAGE_COLUMNS.join(',')}\r\n`;

/** The CSV lines of `records` (with the header row when `header`). */
export function toCsv(records: readonly Record<string, unknown>[], header: boolean): string {
  let out = header ? CSV_HEADER : '';
  for (const r of records) out += csvRow(r);
  return out;
}
