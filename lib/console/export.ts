// Usage records as the console's downloads write them: CSV (RFC 4180, a header row, every
// field quoted when it needs it; a text field starting with = + - @ or a tab is prefixed with
// ' so a spreadsheet shows it as typed instead of running it as a formula) and JSON lines.

export const CSV_COLUMNS = [
  'at', 'request_id', 'account', 'key_id', 'model', 'provider', 'route', 'status', 'prompt_tokens', 'cached_tokens', 'completion_tokens', 'units', 'duration_ms',
  'tags', 'end_user',
] as const;

type Row = Record<string, unknown>;

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  let s = typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : Array.isArray(v) ? v.join(',') : JSON.stringify(v);
  if (typeof v === 'string' && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** The CSV lines of `records` (with the header row when `header`). */
export function toCsv(records: readonly Row[], header: boolean): string {
  let out = header ? `${CSV_COLUMNS.join(',')}\r\n` : '';
  for (const r of records) out += `${CSV_COLUMNS.map((c) => cell(r[c])).join(',')}\r\n`;
  return out;
}

export function toJsonl(records: readonly Row[]): string {
  let out = '';
  for (const r of records) out += `${JSON.stringify(r)}\n`;
  return out;
}
