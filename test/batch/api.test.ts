// The Files and Batch APIs' refusals (CONTRACT section 18), in-process on a real socket: each
// with its exact status, code, param and envelope, nothing stored, never a 500; and `after` /
// `limit` paging of GET /v1/batches, newest first.

import t from 'tap';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

let gw: TestGateway;
t.before(async () => { gw = await startGateway(baseConfig()); });
t.teardown(() => gw.close());

const auth = { authorization: `Bearer ${DEMO_KEY}` };
const LINE = JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/chat/completions', body: { model: 'echo-small', messages: [{ role: 'user', content: 'hi' }] } });

async function upload(text = LINE, purpose: string | null = 'batch'): Promise<Response> {
  const form = new FormData();
  if (purpose !== null) form.append('purpose', purpose);
  form.append('file', new Blob([text]), 'in.jsonl');
  return fetch(`${gw.url}/v1/files`, { method: 'POST', headers: auth, body: form });
}

async function refused(t: any, res: Response, status: number, code: string, param: string | null = null): Promise<void> {
  t.equal(res.status, status, `${code}: status`);
  const body = await res.json() as any;
  t.equal(body.error.code, code);
  t.equal(body.error.param, param);
  t.equal(body.error.type, status === 403 ? 'permission_error' : 'invalid_request_error');
  t.match(res.headers.get('x-request-id'), /\S/);
}

const create = (body: unknown) => fetch(`${gw.url}/v1/batches`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });

t.test('files: refusals', async (t) => {
  await refused(t, await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{}' }), 415, 'unsupported_media_type');
  await refused(t, await upload(LINE, null), 400, 'missing_required_parameter', 'purpose');
  await refused(t, await upload(LINE, 'assistants'), 400, 'invalid_value', 'purpose');
  const noFile = new FormData();
  noFile.append('purpose', 'batch');
  await refused(t, await fetch(`${gw.url}/v1/files`, { method: 'POST', headers: auth, body: noFile }), 400, 'missing_required_parameter', 'file');
  await refused(t, await fetch(`${gw.url}/v1/files/file-nope`, { headers: auth }), 404, 'not_found');
  await refused(t, await fetch(`${gw.url}/v1/files/file-nope/content`, { headers: auth }), 404, 'not_found');
  const f = await (await upload()).json() as any;
  const del = await fetch(`${gw.url}/v1/files/${f.id}/content`, { method: 'DELETE', headers: auth });
  t.equal(del.status, 405);
  t.equal(del.headers.get('allow'), 'GET');
  await refused(t, await fetch(`${gw.url}/v1/files`, { headers: {} }), 401, 'invalid_api_key');
  await refused(t, await fetch(`${gw.url}/v1/files/${f.id}/x`, { headers: auth }), 404, 'unknown_url');
  t.equal((await fetch(`${gw.url}/v1/files/${f.id}`, { method: 'PUT', headers: auth })).status, 405);
});

t.test('batches: refusals', async (t) => {
  const f = await (await upload()).json() as any;
  await refused(t, await create({ endpoint: '/v1/chat/completions', completion_window: '24h' }), 400, 'missing_required_parameter', 'input_file_id');
  await refused(t, await create({ input_file_id: f.id, endpoint: '/v1/responses', completion_window: '24h' }), 400, 'invalid_value', 'endpoint');
  await refused(t, await create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '48h' }), 400, 'invalid_value', 'completion_window');
  await refused(t, await create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { a: 1 } }), 400, 'invalid_value', 'metadata');
  await refused(t, await create({ input_file_id: 'file-nope', endpoint: '/v1/chat/completions', completion_window: '24h' }), 404, 'not_found');
  await refused(t, await create([1]), 400, 'invalid_type');
  await refused(t, await fetch(`${gw.url}/v1/batches/batch_nope`, { headers: auth }), 404, 'not_found');
  await refused(t, await fetch(`${gw.url}/v1/batches/batch_nope/cancel`, { method: 'POST', headers: auth }), 404, 'not_found');
  await refused(t, await fetch(`${gw.url}/v1/batches?limit=0`, { headers: auth }), 400, 'invalid_value', 'limit');
  await refused(t, await fetch(`${gw.url}/v1/batches?after=batch_nope`, { headers: auth }), 400, 'invalid_value', 'after');
});

t.test('batches: newest first, paged with after and limit; a finished batch cannot be cancelled', async (t) => {
  const f = await (await upload()).json() as any;
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push((await (await create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' })).json() as any).id);
  const page1 = await (await fetch(`${gw.url}/v1/batches?limit=2`, { headers: auth })).json() as any;
  t.equal(page1.data.length, 2);
  t.equal(page1.has_more, true);
  const page2 = await (await fetch(`${gw.url}/v1/batches?limit=2&after=${page1.last_id}`, { headers: auth })).json() as any;
  const all = [...page1.data, ...page2.data].map((b: any) => b.id);
  t.equal(new Set(all).size, all.length, 'no batch twice');
  for (const id of ids) t.ok(all.includes(id), `${id} listed`);
  const created = [...page1.data, ...page2.data].map((b: any) => b.created_at);
  t.same(created, [...created].sort((a, b) => b - a), 'newest first');
  let done: any;
  for (let i = 0; i < 200; i++) {
    done = await (await fetch(`${gw.url}/v1/batches/${ids[0]}`, { headers: auth })).json();
    if (done.status === 'completed') break;
    await new Promise((r) => setTimeout(r, 25));
  }
  t.equal(done.status, 'completed');
  t.notOk('account' in done || 'key_id' in done, 'the owner is not shown');
  await refused(t, await fetch(`${gw.url}/v1/batches/${ids[0]}/cancel`, { method: 'POST', headers: auth }), 400, 'invalid_value');
});
