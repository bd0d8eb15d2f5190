// Hot reload in process: new requests see the new config at once, requests in flight finish on
// the old one, and a removed provider's connections close once its last request is done.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { baseConfig, postChat, sseData, startGateway } from './helpers/gateway.js';
import { chunk, startUpstream, streamFrames, writeSse } from './helpers/upstream.js';

t.test('swap a model\'s provider while a slow stream is in flight', async (t) => {
  const old = await startUpstream(async (_req, res) => {
    await writeSse(res, streamFrames([]).slice(0, 1), { end: false });
    for (const w of ['slow', ' old', ' stream']) {
      await sleep(150);
      res.write(`data: ${JSON.stringify(chunk({ content: w }))}\n\n`);
    }
    await writeSse(res, streamFrames([]).slice(1));
  });
  const fresh = await startUpstream((_req, res) => writeSse(res, streamFrames(['from', ' new'])));
  t.teardown(async () => { await old.close(); await fresh.close(); });

  const config = (url: string) => {
    const c = baseConfig();
    c.providers = { up: { kind: 'openai', base_url: url } };
    c.models = [{ id: 'm', provider: 'up' }];
    c.routing = { auto: [] };
    return c;
  };
  const gw = await startGateway(config(old.baseUrl));
  t.teardown(() => gw.close());

  const inflight = postChat(gw.url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] });
  while (old.requests.length === 0) await sleep(10);
  await gw.gateway.reload(config(fresh.baseUrl));

  const now = sseData((await postChat(gw.url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] })).text);
  t.equal(now.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'from new', 'new requests use the new provider');

  const before = sseData((await inflight).text);
  t.ok(before.done);
  t.equal(before.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'slow old stream', 'the stream in flight finished on the old one');

  // The old provider's pool closes once drained: its keep-alive connection goes away.
  let open = -1;
  for (let i = 0; i < 100 && open !== 0; i++) { await sleep(20); open = await old.connections(); }
  t.equal(open, 0, 'the removed provider\'s connections were closed');
  t.equal(old.requests.length, 1);
});

t.test('an invalid config is rejected and the old one stays', async (t) => {
  const gw = await startGateway(baseConfig());
  t.teardown(() => gw.close());
  const bad = baseConfig();
  bad.models[0].provider = 'nowhere';
  await t.rejects(gw.gateway.reload(bad), { name: 'ConfigError', problems: ['models[0].provider: unknown provider "nowhere"'] });
  t.equal((await postChat(gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'still here' }] })).json().choices[0].message.content, 'still here');
});

t.test('a reload that turns auth.jwt on authenticates dashboard JWTs at once, and one that turns it off stops them', async (t) => {
  // jose is imported only by a state whose config sets auth.jwt (Authenticator.start()).
  const secret = 'a-dashboard-secret-of-enough-length-0123456789';
  const { SignJWT } = await import('jose');
  const tok = await new SignJWT({ type: 'access', sub: 'acme' }).setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt().setExpirationTime(Math.floor(Date.now() / 1000) + 600).sign(new TextEncoder().encode(secret));
  const ask = { model: 'echo-small', messages: [{ role: 'user', content: 'by jwt' }] };
  const headers = { authorization: `Bearer ${tok}`, 'content-type': 'application/json' };
  const gw = await startGateway(baseConfig());
  t.teardown(() => gw.close());
  let res = await postChat(gw.url, ask, headers);
  t.equal(res.status, 401, 'no auth.jwt: a JWT is not a key');
  t.equal(res.json().code, 'invalid_api_key');

  const on = baseConfig();
  on.auth = { jwt: { secret } };
  await gw.gateway.reload(on);
  res = await postChat(gw.url, ask, headers);
  t.equal(res.status, 200, 'the first request after the reload is served');
  t.equal(res.json().choices[0].message.content, 'by jwt');

  await gw.gateway.reload(baseConfig());
  res = await postChat(gw.url, ask, headers);
  t.equal(res.status, 401, 'auth.jwt removed again');
});
