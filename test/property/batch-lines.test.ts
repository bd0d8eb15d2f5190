// Boundary: a batch's input file (CONTRACT section 18), generated: valid lines mixed with hostile
// ones (any string, JSON of odd values, line objects with odd fields), uploaded and run through
// the real socket. Never a 500: the upload and the batch are accepted, and the batch ends
// `failed` with an error for each hostile line (its 1-based line number), nothing charged or
// held; with no hostile line it completes.

import t from 'tap';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { holds, oddString, oddValue, serialize } from './arbitraries.js';

const ADMIN = 'admin-token-batch-lines-0123456789';
const URL_ = '/v1/chat/completions';
let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.models.push({ id: 'priced', provider: 'echo', price: { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } });
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

const valid = fc.string({ maxLength: 20 }).map((text) => ({ custom_id: '', method: 'POST', url: URL_, body: { model: 'priced', messages: [{ role: 'user', content: text }] } }));

/** A line no batch can take. */
const hostile: fc.Arbitrary<string> = fc.oneof(
  oddString.map((s) => s.replace(/\n/g, ' ')),
  oddValue.map((v) => serialize(v)),
  fc.record({ custom_id: oddValue, method: oddValue, url: oddValue, body: oddValue }, { requiredKeys: [] }).map((v) => serialize(v)),
  fc.record({ method: fc.constant('POST'), url: fc.constant(URL_), body: fc.record({ model: oddValue, messages: oddValue, stream: oddValue }, { requiredKeys: [] }) })
    .map((v) => serialize({ custom_id: 'x', ...v })),
).filter((s) => s.trim() !== '');

async function balance(): Promise<{ balance_units: number; held_units: number }> {
  return (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json() as Promise<{ balance_units: number; held_units: number }>;
}

let n = 0;
t.test('a file of hostile lines fails its batch with line numbers, never a 500', async (t) => {
  await holds(t, 'batch lines', fc.asyncProperty(fc.array(fc.oneof(valid.map((v) => ({ v })), hostile.map((h) => ({ h }))), { minLength: 1, maxLength: 6 }), async (rows) => {
    const before = await balance();
    const text = rows.map((r) => ('v' in r ? JSON.stringify({ ...r.v, custom_id: `c${n++}` }) : r.h)).join('\n');
    const bad = rows.flatMap((r, i) => ('h' in r ? [i + 1] : []));
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([text]), 'in.jsonl');
    const auth = { authorization: `Bearer ${DEMO_KEY}` };
    const up = await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: auth, body: form });
    assert.equal(up.status, 200, await up.clone().text());
    const file = await up.json() as { id: string };
    const made = await fetch(`${gw.url}/v1/batches`, {
      method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: file.id, endpoint: URL_, completion_window: '24h' }),
    });
    assert.equal(made.status, 200, await made.clone().text());
    const { id } = await made.json() as { id: string };
    let b: any;
    for (let i = 0; i < 200; i++) {
      const res = await fetch(`${gw.url}/v1/batches/${id}`, { headers: auth });
      assert.equal(res.status, 200);
      b = await res.json();
      if (b.status === 'failed' || b.status === 'completed') break;
      await sleep(25);
    }
    if (bad.length === 0) {
      assert.equal(b.status, 'completed', JSON.stringify(b.errors));
      return;
    }
    assert.equal(b.status, 'failed');
    const lines = new Set(b.errors.data.map((e: { line: number }) => e.line));
    // A duplicate custom_id may be reported on a later line; each hostile line has its error.
    for (const line of bad) assert.ok(lines.has(line), `line ${line} has an error: ${JSON.stringify(b.errors.data)}`);
    for (const e of b.errors.data) assert.ok(typeof e.code === 'string' && typeof e.message === 'string');
    const after = await balance();
    assert.equal(after.balance_units, before.balance_units, 'nothing charged');
    assert.equal(after.held_units, 0, 'nothing held');
  }), 25);
});
