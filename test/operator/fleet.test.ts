// A fleet (providers.NAME.targets: two replicas, each a fake OpenAI-compatible server), served
// from a YAML file by `tollgate serve`: requests through the openai SDK reach both replicas
// (round_robin), each answer is metered, /admin/upstreams shows the two, /readyz and a SIGTERM
// drain.

import t from 'tap';
import { ADMIN, PRICE, drainExit, exercise, fakeOpenAI, operatorConfig, serveFile } from '../helpers/operator.js';

const a = await fakeOpenAI('replica-a');
const b = await fakeOpenAI('replica-b');
t.teardown(async () => { await a.close(); await b.close(); });

t.test('a provider with two replicas', async (t) => {
  const served = await serveFile(t, operatorConfig({
    providers: { vllm: { kind: 'openai', targets: [{ url: a.baseUrl }, { url: b.baseUrl }], balance: 'round_robin' } },
    models: [{ id: 'm-fleet', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  }));
  await exercise(t, served.url, { model: 'm-fleet', answer: /^Hello from replica-[ab]$/, messages: { model: 'm-fleet', answer: /^Hello from replica-[ab]$/ } });
  await exercise(t, served.url, { model: 'm-fleet', answer: /^Hello from replica-[ab]$/ });
  const chats = (u: typeof a) => u.requests.filter((r) => r.url === '/v1/chat/completions').length;
  t.equal(chats(a) + chats(b), 6, "six requests upstream");
  t.ok(chats(a) >= 2 && chats(b) >= 2, `both replicas served (${chats(a)} and ${chats(b)})`);
  const view: any = await (await fetch(`${served.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  t.strictSame(view.providers.vllm.replicas.map((r: any) => r.url).sort(), [a.baseUrl, b.baseUrl].sort(), '/admin/upstreams lists both replicas');
  await drainExit(t, served);
});
