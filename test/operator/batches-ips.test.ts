// A key's allowed_ips and batches (CONTRACT sections 8 and 18), from a YAML file served by
// `tollgate serve`: the allowlist is checked where the submitter is, on every /v1/files and
// /v1/batches request (upload, create, read, cancel), never on the lines, which the gateway
// itself sends. From an address outside the list each is 403 ip_not_allowed and nothing is
// made; from inside it the batch runs, every line answered and charged once; narrowing the list
// while the batch runs does not stop it (revoking the key does: batches-lines.test.ts).

import t from 'tap';
import { Agent, request } from 'undici';
import OpenAI, { toFile } from 'openai';
import { LINE_UNITS, batchConfig, fakeChat, lines, until } from '../helpers/batches.js';
import { ADMIN, WALLET, serveFile, wallet } from '../helpers/operator.js';

const inside = new Agent({ localAddress: '127.0.0.2' });
t.teardown(() => inside.close());

t.test('allowed_ips is checked at submit, where the submitter is; the lines run', async (t) => {
  const up = await fakeChat(300);
  t.teardown(() => up.close());
  const served = await serveFile(t, batchConfig(up.baseUrl));
  const adminCall = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${served.url}${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return res.json() as Promise<any>;
  };
  const made = await adminCall('POST', '/admin/accounts/demo/keys', { allowed_ips: ['127.0.0.2/32'] });
  const key: string = made.key;

  // From 127.0.0.1, outside the list: the SDK's calls are refused, nothing made.
  const outside = new OpenAI({ apiKey: key, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const refused = (p: Promise<unknown>) => p.then(() => 'made', (e: any) => [e.status, e.error?.code]);
  t.same(await refused(outside.files.create({ file: await toFile(Buffer.from(lines(1)), 'x.jsonl'), purpose: 'batch' })), [403, 'ip_not_allowed'], 'upload refused');
  t.same(await refused(outside.batches.list()), [403, 'ip_not_allowed']);

  // From 127.0.0.2, inside it: raw HTTP over a socket bound to that address.
  const call = async (method: 'GET' | 'POST', path: string, body?: string, type = 'application/json') => {
    const res = await request(`${served.url}/v1${path}`, { method, dispatcher: inside, headers: { authorization: `Bearer ${key}`, 'content-type': type }, body });
    return { status: res.statusCode, body: await res.body.json() as any };
  };
  const boundary = 'tollgate-ips-test';
  const multipart = [
    `--${boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`,
    `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="eight.jsonl"\r\ncontent-type: application/jsonl\r\n\r\n${lines(8)}\r\n`,
    `--${boundary}--\r\n`,
  ].join('');
  const file = await call('POST', '/files', multipart, `multipart/form-data; boundary=${boundary}`);
  t.equal(file.status, 200, 'upload from the allowed address');
  const batch = await call('POST', '/batches', JSON.stringify({ input_file_id: file.body.id, endpoint: '/v1/chat/completions', completion_window: '24h' }));
  t.equal(batch.status, 200, 'made from the allowed address');
  const id: string = batch.body.id;
  t.same(await refused(outside.batches.retrieve(id)), [403, 'ip_not_allowed'], 'read from elsewhere: refused');
  t.same(await refused(outside.batches.cancel(id)), [403, 'ip_not_allowed'], 'cancel from elsewhere: refused');
  t.same(await refused(outside.files.content(file.body.id)), [403, 'ip_not_allowed']);

  // Narrowed to a third address while the batch runs: its lines go on.
  await until(() => call('GET', `/batches/${id}`), (b) => b.body.status === 'in_progress');
  const narrowed = await adminCall('PATCH', `/admin/keys/${made.id}`, { allowed_ips: ['127.0.0.3/32'] });
  t.same(narrowed.allowed_ips, ['127.0.0.3/32']);
  const sentBefore = up.requests.length;
  const third = new Agent({ localAddress: '127.0.0.3' });
  t.teardown(() => third.close());
  const read = async () => (await (await request(`${served.url}/v1/batches/${id}`, { dispatcher: third, headers: { authorization: `Bearer ${key}` } })).body.json()) as any;
  const done = await until(read, (b) => b.status === 'completed');
  t.equal(done.status, 'completed', 'the batch finished though no address it was sent from is allowed now');
  t.same(done.request_counts, { total: 8, completed: 8, failed: 0 });
  t.ok(up.requests.length > sentBefore, `lines were sent after the list was narrowed (${sentBefore} before, ${up.requests.length} in all)`);
  t.equal(up.requests.length, 8, 'each line sent once');
  const w = await wallet(served.url);
  t.same([w.balance_units, w.held_units], [WALLET - 8 * LINE_UNITS, 0], 'each line charged once, nothing held');
  t.equal((await call('GET', `/batches/${id}`)).status, 403, 'the old address is refused now');
});
