// Usage records as the console's downloads write them: CSV by the one writer the CLI uses too
// (store/usage-csv.ts: a header row, RFC 4180 quoting, a cell that a spreadsheet could take for a
// formula prefixed with ') and JSON lines.

export { CSV_HEADER, USAGE_COLUMNS, toCsv } from '../store/usage-csv.js';

export function toJsonl(records: readonly Record<string, unknown>[]): string {
  let out = '';
  for (const r of records) out += `${JSON.stringify(r)}\n`;
  return out;
}
