// The embedded memory store (no path), served from a YAML file by `tollgate serve`, with every
// provider kind: echo, openai (a fake OpenAI-compatible server) and anthropic (a fake Anthropic
// Messages API). Real clients: the openai SDK (plain and streamed) on each, the Anthropic SDK on
// /v1/messages natively to the anthropic upstream and translated to the openai one; the wallet
// and the metrics after each; /readyz and a SIGTERM drain.

import t from 'tap';
import { PRICE, drainExit, exercise, fakeAnthropic, fakeOpenAI, operatorConfig, serveFile } from '../helpers/operator.js';

const openai = await fakeOpenAI('openai');
const anthropic = await fakeAnthropic();
t.teardown(async () => { await openai.close(); await anthropic.close(); });

t.test('memory store, every provider kind', async (t) => {
  const served = await serveFile(t, operatorConfig({
    providers: {
      echo: { kind: 'echo' },
      oai: { kind: 'openai', base_url: openai.baseUrl, api_key: 'sk-upstream-secret' },
      ant: { kind: 'anthropic', base_url: anthropic.url, api_key: 'sk-ant-upstream-secret' },
    },
    models: [
      { id: 'm-echo', provider: 'echo', price: PRICE },
      { id: 'm-oai', provider: 'oai', upstream_model: 'upstream-model', price: PRICE },
      { id: 'm-ant', provider: 'ant', upstream_model: 'claude-sonnet-4-5', price: PRICE },
    ],
  }), undefined, { TOLLGATE_LOG_LEVEL: 'info' });
  await t.test('echo', (t) => exercise(t, served.url, { model: 'm-echo', answer: /^Say hello/ }).then(() => undefined));
  await t.test('openai', (t) => exercise(t, served.url, { model: 'm-oai', answer: /^Hello from openai$/, messages: { model: 'm-oai', answer: /^Hello from openai$/ } }).then(() => undefined));
  await t.test('anthropic', (t) => exercise(t, served.url, { model: 'm-ant', answer: /^Hello from anthropic$/, messages: { model: 'm-ant', answer: /^Hello from anthropic$/ } }).then(() => undefined));
  t.equal(openai.requests.at(-1)!.headers.authorization, 'Bearer sk-upstream-secret', 'the openai upstream got its key');
  t.equal(anthropic.requests.at(-1)!.headers['x-api-key'], 'sk-ant-upstream-secret', 'the anthropic upstream got its key');
  t.equal(anthropic.requests.at(-1)!.body.model, 'claude-sonnet-4-5', 'the upstream model, natively');
  await drainExit(t, served);
  t.notMatch(served.output(), /sk-upstream-secret|sk-ant-upstream-secret|tg_demo_0000000000000000|operator-admin-token/, 'no credential in the logs');
});
