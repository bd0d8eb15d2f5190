// The contract's invariants as assertions that throw (so fast-check can shrink): the error
// envelope of CONTRACT section 4, schema-valid answers and streams, the wallet and slots
// left as they were, and the contract's cost formula in exact integer arithmetic.

import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { ERROR_CODES } from '../../lib/errors.js';
import { schemas } from '../helpers/schemas.js';
import { SAFE_REQUEST_ID } from './arbitraries.js';

export type Headers = Record<string, string | string[] | undefined>;
export interface Answer { status: number; headers: Headers; text: string }

/** CONTRACT section 4, "Type for each status". */
export function contractType(status: number): string {
  if (status === 402) return 'insufficient_credits';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

const STACK = /\n\s+at [^\n]*:\d+:\d+|\bat (?:async )?[\w.<>]+ \([^)]*:\d+:\d+\)/;

export function header(h: Headers, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** An error answer: a table code with its exact status, the envelope, and x-request-id. */
export function assertEnvelope(a: Answer): { code: string; param: string | null; message: string; body: any } {
  assert.notEqual(a.status, 500, `never a 500: ${a.text.slice(0, 300)}`);
  assert.match(header(a.headers, 'content-type') ?? '', /^application\/json/, `error content type (status ${a.status}): ${a.text.slice(0, 200)}`);
  let body: any;
  try {
    body = JSON.parse(a.text);
  } catch {
    assert.fail(`error body is not JSON: ${a.text.slice(0, 200)}`);
  }
  assert.deepEqual(schemas.error(body), [], `envelope schema: ${a.text.slice(0, 300)}`);
  assert.ok(Object.hasOwn(ERROR_CODES, body.code), `code ${body.code} is in the table`);
  assert.equal(a.status, ERROR_CODES[body.code as keyof typeof ERROR_CODES], `status of ${body.code}`);
  assert.equal(body.type, contractType(a.status), `type of ${a.status}`);
  for (const k of ['message', 'type', 'param', 'code'] as const) assert.deepEqual(body.error[k], body[k], `error.${k} repeats ${k}`);
  const rid = header(a.headers, 'x-request-id');
  assert.ok(rid !== undefined && SAFE_REQUEST_ID.test(rid), `x-request-id present and safe: ${rid}`);
  assert.equal(body.request_id, rid, 'request_id equals x-request-id');
  assert.doesNotMatch(a.text, STACK, 'no stack trace');
  return { code: body.code, param: body.param, message: body.message, body };
}

export interface ChatOk { kind: 'ok'; content: string; usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | undefined; charged: number | undefined; done: boolean; streamError?: string }
export interface ChatError { kind: 'error'; code: string; param: string | null; message: string }

/** A chat answer: 200 (schema-valid JSON or stream) or a contract error. */
export function assertChatAnswer(a: Answer): ChatOk | ChatError {
  if (a.status !== 200) {
    const e = assertEnvelope(a);
    return { kind: 'error', code: e.code, param: e.param, message: e.message };
  }
  const rid = header(a.headers, 'x-request-id');
  assert.ok(rid !== undefined && SAFE_REQUEST_ID.test(rid), `x-request-id on 200: ${rid}`);
  const ct = header(a.headers, 'content-type') ?? '';
  if (ct.startsWith('text/event-stream')) return assertStream(a);
  assert.match(ct, /^application\/json/);
  const body = JSON.parse(a.text);
  assert.deepEqual(schemas.completion(body), [], `completion schema: ${a.text.slice(0, 300)}`);
  const charged = header(a.headers, 'x-tollgate-units-charged');
  assert.ok(charged !== undefined && /^\d+$/.test(charged), `x-tollgate-units-charged: ${charged}`);
  return { kind: 'ok', content: body.choices.map((c: any) => (c.message.reasoning_content ?? '') + (c.message.content ?? '')).join(''), usage: body.usage, charged: Number(charged), done: true };
}

/** An SSE answer: chunks that validate, ending in [DONE] or in one error envelope event. */
export function assertStream(a: Answer): ChatOk {
  assert.equal(header(a.headers, 'cache-control'), 'no-cache');
  assert.equal(header(a.headers, 'x-accel-buffering'), 'no');
  let content = '';
  let usage: ChatOk['usage'];
  let done = false;
  let streamError: string | undefined;
  let id: string | undefined;
  const blocks = a.text.split('\n\n');
  assert.equal(blocks.at(-1), '', 'the stream ends at an event boundary');
  for (const block of blocks.slice(0, -1)) {
    if (block.startsWith(':')) continue;
    assert.ok(block.startsWith('data: '), `SSE block: ${JSON.stringify(block.slice(0, 100))}`);
    assert.equal(done, false, 'nothing after [DONE]');
    assert.equal(streamError, undefined, 'nothing after an error event');
    const data = block.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    const ev = JSON.parse(data);
    if (ev.object !== 'chat.completion.chunk') {
      // An error after the first byte: one envelope event (CONTRACT section 4).
      assert.deepEqual(schemas.error(ev), [], `in-stream error envelope: ${data.slice(0, 200)}`);
      assert.ok(Object.hasOwn(ERROR_CODES, ev.code), `in-stream code ${ev.code} is in the table`);
      assert.notEqual(ev.code, 'internal_error', 'never an internal error');
      assert.equal(ev.request_id, header(a.headers, 'x-request-id'));
      streamError = ev.code;
      continue;
    }
    assert.deepEqual(schemas.chunk(ev), [], `chunk schema: ${data.slice(0, 300)}`);
    id ??= ev.id;
    assert.equal(ev.id, id, 'one id across the stream');
    if (ev.usage) usage = ev.usage;
    for (const c of ev.choices) if (typeof c.delta.content === 'string') content += c.delta.content;
  }
  assert.ok(done !== (streamError !== undefined), 'a stream ends in [DONE] or in one error event, not both, not neither');
  return { kind: 'ok', content, usage, charged: undefined, done, ...(streamError === undefined ? {} : { streamError }) };
}

/** ceil((p x in + c x out) / 1e6) in exact integers (CONTRACT section 4, Credits). */
export function contractCost(prompt: number, completion: number, price: { input_per_mtok: number; output_per_mtok: number }): bigint {
  const n = BigInt(prompt) * BigInt(price.input_per_mtok) + BigInt(completion) * BigInt(price.output_per_mtok);
  return (n + 999_999n) / 1_000_000n;
}

export interface Wallet { balance_units: number; held_units: number }

export async function wallet(url: string, adminToken: string, account: string): Promise<Wallet> {
  const res = await request(`${url}/admin/accounts/${encodeURIComponent(account)}`, { headers: { authorization: `Bearer ${adminToken}` } });
  const body: any = await res.body.json();
  assert.equal(res.statusCode, 200, `account view of ${account}`);
  return { balance_units: body.balance_units, held_units: body.held_units };
}

/** Usage totals of an account (GET /admin/usage), for charges of streams. */
export async function usageTotals(url: string, adminToken: string, account: string): Promise<{ requests: number; prompt_tokens: number; completion_tokens: number; units: number }> {
  const res = await request(`${url}/admin/usage?account=${encodeURIComponent(account)}&since=2000-01-01T00:00:00Z`, { headers: { authorization: `Bearer ${adminToken}` } });
  const body: any = await res.body.json();
  assert.equal(res.statusCode, 200, 'usage report');
  return { requests: body.requests, prompt_tokens: body.prompt_tokens, completion_tokens: body.completion_tokens, units: body.units };
}

/** Polls until `check` stops throwing (state settled after the answer), at most `ms`. */
export async function eventually<T>(check: () => Promise<T>, ms = 2000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(10);
    }
  }
}

/** Does `message` repeat more than `max` consecutive characters of `input`? */
export function echoesMoreThan(message: string, input: string, max = 256): boolean {
  if (input.length <= max || message.length <= max) return false;
  for (let i = 0; i + max < message.length; i++) if (input.includes(message.slice(i, i + max + 1))) return true;
  return false;
}

let accounts = 0;
/** Every key freshAccount issued: credentials the logs must not hold. */
export const issuedKeys: string[] = [];

/**
 * A new account and key for one generated case, so that whatever a failing case leaves
 * behind (a hold, a slot) cannot make the cases fast-check shrinks to fail as well.
 */
export async function freshAccount(url: string, adminToken: string, plan: string, units: number): Promise<{ account: string; key: string }> {
  const account = `case-${process.pid}-${++accounts}`;
  const headers = { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' };
  const created = await request(`${url}/admin/accounts`, { method: 'POST', headers, body: JSON.stringify({ id: account, plan, wallet_units: units }) });
  assert.equal(created.statusCode, 201, await created.body.text());
  const issued = await request(`${url}/admin/accounts/${account}/keys`, { method: 'POST', headers });
  const body: any = await issued.body.json();
  assert.equal(issued.statusCode, 201);
  issuedKeys.push(body.key);
  return { account, key: body.key };
}

/** One assertion that none of `secrets` appears in the captured logs (shown by prefix only). */
export function assertNoCredentials(t: { ok(...args: any[]): unknown; same(...args: any[]): unknown }, logs: string, secrets: string[]): void {
  t.ok(logs.length > 0, 'the gateway logged');
  const leaked = secrets.filter((s) => s !== '' && logs.includes(s)).map((s) => `${s.slice(0, 6)}… (${s.length} chars)`);
  t.same(leaked, [], `none of ${secrets.length} credentials is in the logs`);
}
