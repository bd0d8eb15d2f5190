// One Redis (store.url, a real redis-server this test starts), served from a YAML file by
// `tollgate serve`, the model on a fake OpenAI-compatible server: the openai SDK plain and
// streamed, the Anthropic SDK on /v1/messages (translated), the wallet through the admin API
// and in Redis itself, the metrics, /readyz and a SIGTERM drain.

import t from 'tap';
import { startRedis } from '../helpers/redis.js';
import { PRICE, drainExit, exercise, fakeOpenAI, operatorConfig, serveFile } from '../helpers/operator.js';

const redis = await startRedis();
const upstream = await fakeOpenAI('openai');
t.teardown(async () => { await upstream.close(); await redis.stop(); });

t.test('redis store.url', async (t) => {
  const served = await serveFile(t, operatorConfig({
    store: { kind: 'redis', url: redis.url, prefix: 'op-url:' },
    providers: { oai: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [{ id: 'm-oai', provider: 'oai', upstream_model: 'upstream-model', price: PRICE }],
  }));
  await exercise(t, served.url, { model: 'm-oai', answer: /^Hello from openai$/, messages: { model: 'm-oai', answer: /^Hello from openai$/ } });
  await drainExit(t, served);
});
