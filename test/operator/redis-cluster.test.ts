// Redis Cluster (store.cluster: three real redis-server primaries in cluster mode, joined with
// `redis-cli --cluster create` by the helper), served from a YAML file by `tollgate serve`, the
// model on a fake OpenAI-compatible server: the openai SDK plain and streamed, the Anthropic SDK
// on /v1/messages (translated), the wallet, the metrics, /readyz and a SIGTERM drain. Such a
// file passed `check` and made `serve` die at once before 0e1f54b.

import t from 'tap';
import { startCluster } from '../helpers/redis-topology.js';
import { PRICE, drainExit, exercise, fakeOpenAI, operatorConfig, serveFile } from '../helpers/operator.js';

const cluster = await startCluster();
const upstream = await fakeOpenAI('openai');
t.teardown(async () => { await upstream.close(); await cluster.stop(); });

t.test('redis store.cluster', async (t) => {
  const served = await serveFile(t, operatorConfig({
    store: { kind: 'redis', cluster: cluster.nodes, prefix: 'op-cluster:' },
    providers: { oai: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [{ id: 'm-oai', provider: 'oai', upstream_model: 'upstream-model', price: PRICE }],
  }));
  await exercise(t, served.url, { model: 'm-oai', answer: /^Hello from openai$/, messages: { model: 'm-oai', answer: /^Hello from openai$/ } });
  await drainExit(t, served);
});
