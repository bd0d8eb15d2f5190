// A discovered fleet inside a gateway (in-process): before any address is found its models
// answer 503 model_unavailable with Retry-After of refresh_ms and charge nothing; a found
// replica serves; a reload whose lookups fail starts from the last good set at once; closing
// the gateway stops the lookups; with discover_models, the models are asked of the first
// replica found, once the first lookup has ended.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDns } from '../helpers/dns-server.js';
import { until } from '../helpers/fleet.js';
import { baseConfig, postChat, startGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream } from '../helpers/upstream.js';

const NAME = 'fleet.dns.test';
const dns = await startDns();
const upstream = await startUpstream(async (req, res) => {
  if (req.method === 'GET') return json(res, 200, { object: 'list', data: [{ id: 'found-model', object: 'model' }] });
  json(res, 200, completionBody('from 127.0.0.2'));
}, { host: '127.0.0.2' });
t.teardown(async () => { await dns.close(); await upstream.close(); });
const port = Number(new URL(upstream.url).port);

function config(): Record<string, any> {
  const c = baseConfig();
  c.admin = { token: 'dns-fleet-admin-token' };
  c.providers.vllm = { kind: 'openai', discover: { dns: NAME, port, resolver: dns.resolver, refresh_ms: 1000 } };
  c.models.push({ id: 'm', provider: 'vllm', upstream_model: 'x', price: { input_per_mtok: 1000, output_per_mtok: 1000 } });
  return c;
}

const balance = async (url: string) => {
  const res = await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: 'Bearer dns-fleet-admin-token' } });
  return ((await res.json()) as any).balance_units as number;
};
const ask = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

t.test('no replica yet, then one, a reload on failing lookups, and close', async (t) => {
  const gw = await startGateway(config());
  let closed = false;
  t.teardown(async () => { if (!closed) await gw.close(); });
  const before = await balance(gw.url);
  const none = await postChat(gw.url, ask);
  t.equal(none.status, 503, 'nothing found yet: 503');
  t.equal(none.json().error.code, 'model_unavailable');
  t.equal(none.headers['retry-after'], '1', 'Retry-After: the next lookup (refresh_ms)');
  t.notMatch(none.text, /at .*\.js/, 'no stack trace');
  t.equal(await balance(gw.url), before, 'nothing charged');

  dns.records.set(NAME, ['127.0.0.2']);
  t.ok(await until(async () => (await postChat(gw.url, ask)).status === 200, 5000), 'the replica found serves');
  t.equal(upstream.requests.filter((r) => r.method === 'POST').at(-1)?.url, '/v1/chat/completions', 'at http://127.0.0.2:PORT/v1');

  dns.mode = 'servfail';
  await gw.gateway.reload(config());
  const after = await postChat(gw.url, ask);
  t.equal(after.status, 200, 'a reload whose lookups fail serves on the last good set at once');

  closed = true;
  await gw.close();
  const asked = dns.queries.length;
  await sleep(1500);
  t.equal(dns.queries.length, asked, 'closed: no more lookups');
  dns.mode = 'answer';
});

t.test('discover_models on a discovered fleet: asked once the first lookup found a replica', async (t) => {
  dns.records.set(NAME, ['127.0.0.2']);
  const c = config();
  c.providers.vllm.discover_models = true;
  c.models = c.models.filter((m: any) => m.id !== 'm');
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  t.ok(await until(async () => {
    const list = (await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: 'Bearer tg_demo_0000000000000000' } })).json()) as any;
    return list.data?.some((m: any) => m.id === 'found-model') === true;
  }, 3000), 'the model the replica lists is in the catalog');
  t.notMatch(gw.logs(), /model discovery failed/, 'no failed attempt before the replica was known');
});
