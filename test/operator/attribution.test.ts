// Spend attribution (CONTRACT section 20) from a YAML file served by `tollgate serve --config`
// as a child process, on the embedded store with a path and on Redis: tags from
// `x-tollgate-tags` (the openai SDK's defaultHeaders) and the key's own, an end user from the
// body's `user` or `x-tollgate-end-user` (the header wins), both in the usage records and the
// grouped usage; every bad header or `user` refused 400 invalid_value (or invalid_type) naming
// it, before anything is held (the wallet unchanged).

import t from 'tap';
import OpenAI from 'openai';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN, KEY, PRICE, drainExit, fakeOpenAI, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const upstream = await fakeOpenAI('vllm');
t.teardown(() => upstream.close());

async function admin(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

const config = (store: Record<string, unknown>) => operatorConfig({
  store,
  providers: { vllm: { kind: 'openai', base_url: upstream.baseUrl } },
  models: [{ id: 'llama', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
});

/** A raw chat with `headers` and `extra` body members. */
async function chat(url: string, key: string, headers: Record<string, string>, extra: Record<string, unknown> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'llama', max_tokens: 5, messages: [{ role: 'user', content: 'hello' }], ...extra }),
  });
  return { status: res.status, body: await res.json() };
}

async function records(url: string): Promise<any[]> {
  const page = await admin(url, 'GET', '/admin/usage/records?account=demo&limit=100');
  return page.body.records.filter((r: any) => r.model === 'llama');
}

async function exercise(t: any, url: string): Promise<void> {
  const sdk = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0, defaultHeaders: { 'x-tollgate-tags': 'search,beta,search' } });
  await sdk.chat.completions.create({ model: 'llama', max_tokens: 5, user: 'alice', messages: [{ role: 'user', content: 'hi' }] });
  await sdk.chat.completions.create({ model: 'llama', max_tokens: 5, user: 'alice', messages: [{ role: 'user', content: 'hi' }] },
    { headers: { 'x-tollgate-end-user': 'bob@example.com' } });

  // A key with its own tags, locked: the request's are ignored.
  const locked = (await admin(url, 'POST', '/admin/accounts/demo/keys', { name: 'locked', tags: ['team:ml', 'prod'], tags_locked: true })).body;
  const listed = (await admin(url, 'GET', '/admin/accounts/demo/keys')).body.keys.find((k: any) => k.id === locked.id);
  t.same([listed.tags, listed.tags_locked], [['team:ml', 'prod'], true], 'the key list shows its tags');
  t.equal((await chat(url, locked.key, { 'x-tollgate-tags': 'mislabel' })).status, 200);
  // Unlocked key tags come first, then the request's.
  const open = (await admin(url, 'POST', '/admin/accounts/demo/keys', { name: 'open', tags: ['prod'] })).body;
  t.equal((await chat(url, open.key, { 'x-tollgate-tags': 'eval, prod' })).status, 200);
  const patched = await admin(url, 'PATCH', `/admin/keys/${open.id}`, { tags: null, tags_locked: false });
  t.equal(patched.status, 200);
  t.same([patched.body.tags, patched.body.tags_locked], [[], false]);

  const got = await records(url);
  const by = (user: string | null, tags: string[]) => got.filter((r) => r.end_user === user && JSON.stringify(r.tags) === JSON.stringify(tags)).length;
  t.equal(got.length, 4);
  t.equal(by('alice', ['search', 'beta']), 1, "the body's user, tags deduped in order");
  t.equal(by('bob@example.com', ['search', 'beta']), 1, 'the header wins over the body');
  t.equal(by(null, ['team:ml', 'prod']), 1, "a locked key's tags alone");
  t.equal(by(null, ['prod', 'eval']), 1, "the key's tags, then the request's");

  // Refusals: 400 before anything is held; the wallet unchanged.
  const before = await wallet(url);
  const bad: Array<[Record<string, string>, Record<string, unknown>, string, string]> = [
    [{ 'x-tollgate-tags': 'Upper' }, {}, 'x-tollgate-tags', 'invalid_value'],
    [{ 'x-tollgate-tags': 'a,,b' }, {}, 'x-tollgate-tags', 'invalid_value'],
    [{ 'x-tollgate-tags': 'a b' }, {}, 'x-tollgate-tags', 'invalid_value'],
    [{ 'x-tollgate-tags': 'a,b,c,d,e,f,g,h,i' }, {}, 'x-tollgate-tags', 'invalid_value'],
    [{ 'x-tollgate-tags': 'x'.repeat(65) }, {}, 'x-tollgate-tags', 'invalid_value'],
    [{ 'x-tollgate-end-user': 'u'.repeat(129) }, {}, 'x-tollgate-end-user', 'invalid_value'],
    [{}, { user: '' }, 'user', 'invalid_value'],
    [{}, { user: 'tab\there' }, 'user', 'invalid_value'],
    [{}, { user: 42 }, 'user', 'invalid_type'],
  ];
  for (const [headers, extra, param, code] of bad) {
    const r = await chat(url, KEY, headers, extra);
    t.equal(r.status, 400, `${JSON.stringify(headers)} ${JSON.stringify(extra)}`);
    t.match(r.body, { code, param, type: 'invalid_request_error', error: { code, param, type: 'invalid_request_error' } });
  }
  t.same(await wallet(url), before, 'no refusal held or charged anything');
  const sdkErr: any = await sdk.chat.completions.create({ model: 'llama', messages: [{ role: 'user', content: 'hi' }] },
    { headers: { 'x-tollgate-tags': 'NOPE' } }).catch((e) => e);
  t.equal(sdkErr.status, 400);
  t.equal(sdkErr.code, 'invalid_value');
  t.equal(sdkErr.param, 'x-tollgate-tags');

  // Bad key tags through the admin API.
  const badKey = await admin(url, 'POST', '/admin/accounts/demo/keys', { tags: ['ok', 'Not OK'] });
  t.equal(badKey.status, 400);
  t.match(badKey.body, { code: 'invalid_value', param: 'tags[1]' });
  const badLock = await admin(url, 'POST', '/admin/accounts/demo/keys', { tags_locked: 'yes' });
  t.match([badLock.status, badLock.body.code, badLock.body.param], [400, 'invalid_type', 'tags_locked']);
}

t.test('attribution from YAML on the embedded store with a path: records keep tags and end users across a restart', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-attrib-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const served = await serveFile(t, config({ kind: 'memory', path: join(dir, 'state'), fsync_ms: 0 }));
  await exercise(t, served.url);
  const before = await records(served.url);
  await drainExit(t, served);
  const again = await serveFile(t, undefined, served.file);
  t.same(await records(again.url), before, 'the records read back whole');
  const keys = (await admin(again.url, 'GET', '/admin/accounts/demo/keys')).body.keys;
  t.same(keys.find((k: any) => k.name === 'locked').tags, ['team:ml', 'prod'], "the key's tags survive a restart");
  await drainExit(t, again);
});

t.test('attribution from YAML on Redis', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const served = await serveFile(t, config({ kind: 'redis', url: redis.url, prefix: 'tg-attrib-op:' }));
  await exercise(t, served.url);
  await drainExit(t, served);
});
