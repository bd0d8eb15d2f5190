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
import { KEY, adminCall, drainExit, fakeOpenAI, llamaConfig, serveFile, wallet } from '../helpers/operator.js';
import { startRedis } from '../helpers/redis.js';

const upstream = await fakeOpenAI('vllm');
t.teardown(() => upstream.close());

const admin = adminCall;

const config = (store: Record<string, unknown>) => llamaConfig(upstream, store);

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

  await groups(t, url, locked.id, open.id);
  await filters(t, url, open.key);

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

const sum = (rows: any[]) => rows.reduce((a, r) => ({ requests: a.requests + r.requests, prompt_tokens: a.prompt_tokens + r.prompt_tokens,
  completion_tokens: a.completion_tokens + r.completion_tokens, units: a.units + r.units }), { requests: 0, prompt_tokens: 0, completion_tokens: 0, units: 0 });

/** GET /admin/usage grouped: each request 12 prompt + 7 completion tokens, 26 units. */
async function groups(t: any, url: string, lockedId: string, openId: string): Promise<void> {
  const read = async (query: string) => {
    const r = await admin(url, 'GET', `/admin/usage?account=demo&${query}`);
    t.equal(r.status, 200, query);
    return r.body;
  };
  const totals = { requests: 4, prompt_tokens: 48, completion_tokens: 28, units: 104 };
  const plain = (await admin(url, 'GET', '/admin/usage?account=demo')).body;
  t.match(plain, totals, 'the plain report');

  const byUser = await read('group_by=end_user');
  t.same(byUser.totals, totals);
  t.same(sum(byUser.groups), totals, 'end-user groups sum to the totals');
  t.same(byUser.groups.map((g: any) => [g.end_user, g.requests, g.units]).sort(), [['alice', 1, 26], ['bob@example.com', 1, 26], [null, 2, 52]].sort());

  const byTag = await read('group_by=tag');
  const tag = (name: string | null) => byTag.groups.find((g: any) => g.tag === name)?.requests ?? 0;
  t.same([tag('search'), tag('beta'), tag('team:ml'), tag('prod'), tag('eval'), tag('mislabel'), tag(null)], [2, 2, 1, 2, 1, 0, 0], 'each tag exact for itself');

  const byKey = await read('group_by=key');
  t.same(sum(byKey.groups), totals, 'key groups sum to the totals');
  t.same([lockedId, openId].map((id) => byKey.groups.find((g: any) => g.key === id)?.units), [26, 26]);

  const byDayModel = await read('group_by=day,model');
  t.equal(byDayModel.groups.length, 1);
  t.match(byDayModel.groups[0], { day: new Date().toISOString().slice(0, 10), model: 'llama', ...totals });
  const byTagModel = await read('group_by=tag,model');
  t.match(byTagModel.groups.find((g: any) => g.tag === 'prod'), { model: 'llama', requests: 2, units: 52 });

  const alice = await read('end_user=alice');
  t.same(alice.totals, { requests: 1, prompt_tokens: 12, completion_tokens: 7, units: 26 }, 'filtered by end user');
  const prodUsers = await read('group_by=end_user&tag=prod');
  t.same(prodUsers.groups.map((g: any) => [g.end_user, g.requests]), [[null, 2]], 'grouped and filtered');

  for (const [query, param] of [['group_by=colour', 'group_by'], ['group_by=tag,model,day', 'group_by'], ['group_by=key,team', 'group_by'], ['tag=Bad', 'tag']]) {
    const r = await admin(url, 'GET', `/admin/usage?account=demo&${query}`);
    t.equal(r.status, 400, query);
    t.equal(r.body.param, param, query);
  }
}

/** tag= and end_user= on the records (and so the exports) and on GET /v1/usage. */
async function filters(t: any, url: string, openKey: string): Promise<void> {
  const page = async (q: string) => (await admin(url, 'GET', `/admin/usage/records?account=demo&${q}`)).body.records.filter((r: any) => r.model === 'llama');
  t.equal((await page('tag=search')).length, 2, 'records by tag');
  t.same((await page('end_user=alice')).map((r: any) => r.end_user), ['alice'], 'records by end user');
  t.equal((await page('tag=search&end_user=alice')).length, 1, 'both');
  const self = async (q: string) => {
    const res = await fetch(`${url}/v1/usage?${q}`, { headers: { authorization: `Bearer ${openKey}` } });
    return { status: res.status, body: await res.json() as any };
  };
  const eval_ = await self('tag=eval');
  t.equal(eval_.status, 200);
  t.match(eval_.body.data, [{ model: 'llama', requests: 1, units: 26 }], "the key's own usage of one tag");
  t.same((await self('tag=search')).body.data, [], 'a tag of other keys is not its own');
  t.same((await self('end_user=alice')).body.data, [], 'nor their end users');
  const both = await self('tag=eval&end_user=alice');
  t.match([both.status, both.body.code, both.body.param], [400, 'invalid_value', 'end_user']);
  const bad = await self('tag=NOPE');
  t.match([bad.status, bad.body.code, bad.body.param], [400, 'invalid_value', 'tag']);
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
