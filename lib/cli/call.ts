// What the admin sub-commands (./admin.ts and one file per group: ./accounts.ts, ./keys.ts,
// ./teams.ts, ./usage.ts) share: a call of the admin API, the refusal that ends a command with
// its exit code, and the readers of their options' syntax.

import type { Show } from './answers.js';

export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number) {
    super(message);
    this.exitCode = exitCode;
  }
}
export interface Call { method: 'GET' | 'POST' | 'DELETE' | 'PATCH'; path: string; body?: unknown }

/** One admin sub-command: the call it makes and how its answer is printed. */
export interface Step { call: Call; show: Show }

export async function call(url: string, token: string, c: Call): Promise<{ status: number; body: unknown }> {
  // The built-in fetch: it starts faster than importing undici, which a CLI call notices.
  let status: number;
  let text: string;
  try {
    const res = await fetch(`${url.replace(/\/+$/, '')}${c.path}`, {
      method: c.method,
      headers: { authorization: `Bearer ${token}`, ...(c.body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: c.body === undefined ? undefined : JSON.stringify(c.body),
      signal: AbortSignal.timeout(10_000),
      redirect: 'manual',
    });
    status = res.status;
    text = await res.text();
  } catch (err) {
    const cause = (err as Error & { cause?: Error }).cause;
    throw new CliError(`cannot reach ${url}: ${cause?.message ?? (err as Error).message}`, 1);
  }
  let body: unknown = text;
  try { body = text === '' ? null : JSON.parse(text); } catch { /* not JSON: shown as text */ }
  return { status, body };
}
export const enc = encodeURIComponent;
const MAX_UNITS = Number.MAX_SAFE_INTEGER;

/**
 * A plain decimal integer (no sign but an optional `-` when negatives are allowed, no leading
 * zeros, no spaces, exponent, fraction or radix prefix) of at most 2^53-1 in size.
 */
export function decimalUnits(text: string, what: string, allowNegative: boolean): number {
  const form = allowNegative ? /^(0|-?[1-9][0-9]*)$/ : /^(0|[1-9][0-9]*)$/;
  const range = allowNegative ? `-${MAX_UNITS} to ${MAX_UNITS}` : `0 to ${MAX_UNITS}`;
  if (!form.test(text) || BigInt(text) > BigInt(MAX_UNITS) || BigInt(text) < -BigInt(MAX_UNITS)) {
    throw new CliError(`${what} must be a plain decimal integer from ${range} (like 1000${allowNegative ? ' or -250' : ''}), not ${JSON.stringify(text)}`, 2);
  }
  return Number(text);
}
export type Opts = Record<string, string | string[] | boolean | undefined>;

/** A list option (`a,b`), or null for `null`. */
export function listOpt(v: string, what: string): string[] | null {
  if (v === 'null') return null;
  const items = v.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new CliError(`${what} needs at least one value (or null)`, 2);
  return items;
}

/** A limit option: a positive plain decimal integer, or null. */
export function limitOpt(v: string, what: string): number | null {
  if (v === 'null') return null;
  const n = decimalUnits(v, what, false);
  if (n === 0) throw new CliError(`${what} must be at least 1 (or null for no limit)`, 2);
  return n;
}

/** Refuses a sub-command whose positional arguments are not `n` non-empty words. */
export function need(args: readonly string[], n: number, usage: string): void {
  if (args.length !== n || args.some((a) => a === '')) throw new CliError(`usage: tollgate ${usage}`, 2);
}
