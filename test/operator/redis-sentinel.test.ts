// Redis Sentinel (store.sentinel: a real primary, its replica and three redis-sentinel
// processes this test starts), served from a YAML file by `tollgate serve`, the model on a fake
// Anthropic Messages API: the openai SDK plain and streamed (translated), the Anthropic SDK on
// /v1/messages (native), the wallet, the metrics, /readyz and a SIGTERM drain. Such a file
// passed `check` and made `serve` die at once before 0e1f54b.

import t from 'tap';
import { startSentinel } from '../helpers/redis-topology.js';
import { PRICE, drainExit, exercise, fakeAnthropic, operatorConfig, serveFile } from '../helpers/operator.js';

const sentinel = await startSentinel();
const upstream = await fakeAnthropic();
t.teardown(async () => { await upstream.close(); await sentinel.stop(); });

t.test('redis store.sentinel', async (t) => {
  const served = await serveFile(t, operatorConfig({
    store: { kind: 'redis', sentinel: { name: sentinel.name, sentinels: sentinel.sentinels }, prefix: 'op-sentinel:' },
    providers: { ant: { kind: 'anthropic', base_url: upstream.url, api_key: 'sk-ant-x' } },
    models: [{ id: 'm-ant', provider: 'ant', upstream_model: 'claude-sonnet-4-5', price: PRICE }],
  }));
  await exercise(t, served.url, { model: 'm-ant', answer: /^Hello from anthropic$/, messages: { model: 'm-ant', answer: /^Hello from anthropic$/ } });
  await drainExit(t, served);
});
