// Boundary: generated hostile JSON-RPC bodies to POST /mcp/<server> in a live session, through
// the real socket (CONTRACT section 17). Each body carries one defect: a duplicate member at
// some depth, a member that differs only in case from one the gateway reads, a batch, a body
// too large, a member of the wrong type, or text that is not JSON. Every answer is a JSON-RPC
// error with a contract HTTP status (never a 500), nothing at all reaches the MCP server, and
// the wallet does not move.

import t from 'tap';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'undici';
import { baseConfig, DEMO_KEY, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startFakeMcp, type FakeMcp } from '../helpers/mcp.js';
import { holds } from './arbitraries.js';

let gw: TestGateway;
let upstream: FakeMcp;
let session: string;
const path = '/mcp/files';

t.before(async () => {
  upstream = await startFakeMcp();
  const c = baseConfig();
  c.admin = { token: 'admin-token-mcp-props-0123456789' };
  c.plans.free.mcp_tools = ['files__*'];
  c.mcp = { servers: { files: { url: upstream.url, price: { per_call_units: 3 } } } };
  gw = await startGateway(c);
  const res = await post(JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'p', version: '1' } } }), {});
  assert.equal(res.status, 200, res.text);
  session = res.headers['mcp-session-id'] as string;
});
t.teardown(async () => {
  await gw.close();
  await upstream.close();
});

async function post(body: string, extra: Record<string, string>): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  const res = await request(`${gw.url}${path}`, {
    method: 'POST', body,
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...extra },
    headersTimeout: 20_000, bodyTimeout: 20_000,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

const call = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'search', arguments: { q: 'x' } } };
/** Where a member may be repeated or varied: the message, its params, the tool's arguments. */
const LEVELS = ['top', 'params', 'arguments'] as const;
/** The members `call` has at each level (a second one is a duplicate). */
const PRESENT: Record<(typeof LEVELS)[number], string[]> = { top: ['jsonrpc', 'id', 'method', 'params'], params: ['name', 'arguments'], arguments: ['q'] };
/** Members the gateway reads at each level, present or not (a case variant of one is refused). */
const READ = { top: PRESENT.top, params: ['name', 'arguments', '_meta', 'cursor', 'uri'] };

/** JSON text of `call` with `member: value` written again into the object at `level` (after its own members). */
function withExtraMember(level: (typeof LEVELS)[number], member: string, value: unknown): string {
  const extra = `,${JSON.stringify(member)}:${JSON.stringify(value)}`;
  const args = `{"q":"x"${level === 'arguments' ? extra : ''}}`;
  const params = `{"name":"search","arguments":${args}${level === 'params' ? extra : ''}}`;
  return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":${params}${level === 'top' ? extra : ''}}`;
}

/** A case variant of `name` that is not `name` itself. */
const variantOf = (name: string) => fc.array(fc.boolean(), { minLength: name.length, maxLength: name.length })
  .map((flips) => [...name].map((ch, i) => (flips[i] ? ch.toUpperCase() : ch)).join(''))
  .filter((v) => v !== name);

const jsonValue = fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.constant(null), fc.boolean(), fc.dictionary(fc.string({ maxLength: 4 }), fc.integer(), { maxKeys: 2 }));

const duplicate = fc.constantFrom(...LEVELS).chain((level) => fc.tuple(fc.constant(level), fc.constantFrom(...PRESENT[level]), jsonValue))
  .map(([level, member, value]) => ({ kind: 'duplicate', body: withExtraMember(level, member, value), status: [400] }));
const escapedDuplicate = fc.constantFrom('"n\\u0061me"', '"\\u006eame"', '"argument\\u0073"').map((m) => ({
  kind: 'escaped duplicate', body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"},${m}:"secret"}}`, status: [400],
}));
const caseVariant = fc.constantFrom('top', 'params').chain((level) => fc.constantFrom(...READ[level as keyof typeof READ])
  .chain((member) => fc.tuple(fc.constant(level as keyof typeof READ), variantOf(member), jsonValue)))
  .map(([level, member, value]) => ({ kind: 'case variant', body: withExtraMember(level, member, value), status: [400] }));
const batch = fc.array(fc.constant(call), { maxLength: 4 }).map((list) => ({ kind: 'batch', body: JSON.stringify(list), status: [400] }));
const wrongType = fc.oneof(
  fc.constantFrom('1.0', 2, null, '2.0 ').map((v) => ({ ...call, jsonrpc: v })),
  fc.constantFrom(null, 1.5, {}, [], true, 'i'.repeat(300), 2 ** 60).map((v) => ({ ...call, id: v })),
  fc.constantFrom(1, null, '', {}, 'm'.repeat(200)).map((v) => ({ ...call, method: v })),
  fc.constantFrom([], 'x', 1, null, true).map((v) => ({ ...call, params: v })),
  fc.constantFrom(1, null, '', {}, [], true).map((v) => ({ ...call, params: { name: v, arguments: {} } })),
  fc.constantFrom([], 'x', 1, null, true).map((v) => ({ ...call, params: { name: 'search', arguments: v } })),
  fc.constantFrom([], 'x', 1, null).map((v) => ({ ...call, params: { name: 'search', _meta: v } })),
  fc.constantFrom(1, {}, 'x'.repeat(600), 'not-a-cursor').map((v) => ({ ...call, method: 'tools/list', params: { cursor: v } })),
  fc.jsonValue({ maxDepth: 3 }).filter((v) => typeof v !== 'object' || v === null),
).map((v) => ({ kind: 'wrong type', body: JSON.stringify(v), status: [200, 400] }));
const notJson = fc.oneof(
  fc.string({ maxLength: 40 }).filter((s) => { try { JSON.parse(s); return false; } catch { return true; } }),
  fc.nat({ max: 60 }).map((n) => JSON.stringify(call).slice(0, n)),
).map((body) => ({ kind: 'not JSON', body, status: [400] }));

const hostile = fc.oneof(duplicate, escapedDuplicate, caseVariant, batch, wrongType, notJson);

t.test('hostile bodies: a JSON-RPC error, never a 500, never a forward', async (t) => {
  const wallet = async () => (await request(`${gw.url}/admin/accounts/demo`, { headers: { authorization: 'Bearer admin-token-mcp-props-0123456789' } })).body.json();
  // The gateway's first read of the tool list (at start) is over before any case is judged.
  await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), { 'mcp-session-id': session });
  const before = await wallet();
  await holds(t, 'mcp hostile body', fc.asyncProperty(hostile, async (c) => {
    const seen = upstream.seen.length;
    const res = await post(c.body, { 'mcp-session-id': session });
    assert.ok(c.status.includes(res.status), `${c.kind}: status ${res.status} for ${c.body.slice(0, 200)}: ${res.text.slice(0, 200)}`);
    const answer = JSON.parse(res.text);
    assert.equal(answer.jsonrpc, '2.0');
    assert.ok(Number.isInteger(answer.error?.code) && answer.error.code <= -32000 && answer.error.code >= -32700, `${c.kind}: ${res.text.slice(0, 200)}`);
    assert.equal(upstream.seen.length, seen, `${c.kind}: forwarded ${c.body.slice(0, 200)}`);
  }), 300);
  t.same(await wallet(), before);
});

t.test('a body too large: 413, nothing forwarded', async (t) => {
  const seen = upstream.seen.length;
  const big = JSON.stringify({ ...call, params: { name: 'search', arguments: { q: 'x'.repeat(4 * 1024 * 1024) } } });
  const res = await post(big, { 'mcp-session-id': session });
  t.equal(res.status, 413);
  t.match(JSON.parse(res.text), { error: { code: 'request_too_large' } });
  t.equal(upstream.seen.length, seen);
});
