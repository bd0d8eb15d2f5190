// Fleets (CONTRACT section 7), routing: how each policy spreads requests over a provider's
// replicas (weights honoured), prefix and session stickiness, bounded-load overflow,
// max_outstanding, scraped queue depth, GET /admin/upstreams and the /metrics gauges. Real
// gateway, real sockets, one fake upstream per replica.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { postChat } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { ADMIN, answerAs, ask, holding, startFleet, until } from '../helpers/fleet.js';
import { json, startUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

/** Which replica answered (each fake answers with its name). */
function servedBy(res: { status: number; json: () => any }): string {
  if (res.status !== 200) throw new Error(`status ${res.status}`);
  return res.json().choices[0].message.content;
}

t.test('round_robin honours weights exactly and interleaves', async (t) => {
  const f = await startFleet(t, 3, { balance: 'round_robin' }, { targets: (urls) => urls.map((url, i) => ({ url, weight: i + 1 })) });
  const order: string[] = [];
  for (let i = 0; i < 60; i++) order.push(servedBy(await postChat(f.gw.url, ask(`q${i}`))));
  t.strictSame(f.chats(), [10, 20, 30], 'shares 1:2:3');
  t.strictSame(new Set(order.slice(0, 6)), new Set(['r0', 'r1', 'r2']), 'every replica within one round of 6');
});

t.test('least_outstanding: idle replicas share by weight; a busy one is passed over', async (t) => {
  const f = await startFleet(t, 2, { balance: 'least_outstanding' }, { targets: (urls) => [{ url: urls[0], weight: 1 }, { url: urls[1], weight: 3 }] });
  for (let i = 0; i < 400; i++) servedBy(await postChat(f.gw.url, ask(`q${i}`)));
  const [a, b] = f.chats();
  // Ties are broken at random in proportion to weight: 100 and 300 expected, sd about 8.7.
  t.ok(Math.abs(a! - 100) <= 45 && a! + b! === 400, `shares ${a}:${b}`);

  // Both replicas hold their requests: the second goes where the first did not.
  const holds = [holding('r0'), holding('r1')];
  f.replicas.forEach((r, i) => r.setScript(holds[i]!.script));
  const before = f.chats();
  const first = postChat(f.gw.url, ask('one'));
  t.ok(await until(() => holds[0]!.waiting() + holds[1]!.waiting() === 1));
  const firstOn = holds[0]!.waiting() === 1 ? 0 : 1;
  const second = postChat(f.gw.url, ask('two'));
  t.ok(await until(() => holds[1 - firstOn]!.waiting() === 1), 'the second request went to the idle replica');
  const admin = await f.admin('/upstreams');
  t.strictSame(admin.providers.fleet.replicas.map((r: any) => r.outstanding), [1, 1]);
  t.match(await f.metrics(), new RegExp(`tollgate_upstream_outstanding\\{target="${f.replicas[0]!.baseUrl}"\\} 1`));
  for (const h of holds) h.release();
  t.equal((await first).status, 200);
  t.equal((await second).status, 200);
  t.strictSame(f.chats().map((n, i) => n - before[i]!), [1, 1]);
  t.ok(await until(async () => (await f.admin('/upstreams')).providers.fleet.replicas.every((r: any) => r.outstanding === 0)), 'nothing left in flight');
});

t.test('least_outstanding counts the queue depth scraped from a replica\'s /metrics', async (t) => {
  let waiting = 7;
  let metricsUp = true;
  const f = await startFleet(t, 2, { balance: 'least_outstanding', metrics_interval_ms: 250 }, {
    targets: (urls) => urls.map((url) => ({ url, metrics_url: `${url.replace(/\/v1$/, '')}/metrics` })),
  });
  const metricsScript = (name: string) => async (req: any, res: any) => {
    if (req.url === '/metrics') {
      if (!metricsUp) { json(res, 500, 'down'); return; }
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end([
        '# HELP vllm:num_requests_running Number of requests running.',
        '# TYPE vllm:num_requests_running gauge',
        'vllm:num_requests_running{model_name="fleet-7b"} 3.0',
        '# HELP vllm:num_requests_waiting Number of requests waiting.',
        '# TYPE vllm:num_requests_waiting gauge',
        `vllm:num_requests_waiting{model_name="fleet-7b"} ${name === 'r0' ? waiting : 0}.0`,
        '# TYPE vllm:kv_cache_usage_perc gauge',
        `vllm:kv_cache_usage_perc{model_name="fleet-7b"} ${name === 'r0' ? 0.42 : 0.1}`,
        '# TYPE vllm:e2e_request_latency_seconds histogram',
        'vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="fleet-7b"} 4.0',
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="fleet-7b"} 5.0',
        'vllm:e2e_request_latency_seconds_count{model_name="fleet-7b"} 5.0',
        'vllm:e2e_request_latency_seconds_sum{model_name="fleet-7b"} 3.2',
        '',
      ].join('\n'));
      return;
    }
    json(res, 200, { choices: [{ index: 0, message: { role: 'assistant', content: name }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
  };
  f.replicas.forEach((r, i) => r.setScript(metricsScript(`r${i}`)));
  const view = async () => (await f.admin('/upstreams')).providers.fleet.replicas;
  t.ok(await until(async () => (await view())[0].queue_depth === 7), 'the queue depth is scraped');
  const replicas = await view();
  t.match(replicas[0], { queue_depth: 7, kv_cache_usage: 0.42 });
  t.match(replicas[1], { queue_depth: 0, kv_cache_usage: 0.1 });

  for (let i = 0; i < 20; i++) t.equal(servedBy(await postChat(f.gw.url, ask(`q${i}`))), 'r1');

  waiting = 0;
  t.ok(await until(async () => (await view())[0].queue_depth === 0));
  const seen = new Set<string>();
  for (let i = 0; i < 40 && seen.size < 2; i++) seen.add(servedBy(await postChat(f.gw.url, ask(`p${i}`))));
  t.equal(seen.size, 2, 'with the queue drained both replicas serve again');

  metricsUp = false;
  t.ok(await until(async () => (await view())[0].queue_depth === null), 'a failing scrape leaves no stale figure');
  t.equal((await view())[0].kv_cache_usage, null);
});

t.test('prefix_affinity: the same prefix, session or user goes to the same replica', async (t) => {
  const f = await startFleet(t, 3, { balance: 'prefix_affinity' });
  const homes = new Map<string, string>();
  for (let round = 0; round < 3; round++) {
    for (let p = 0; p < 12; p++) {
      const where = servedBy(await postChat(f.gw.url, ask(`prompt number ${p}`)));
      if (round === 0) homes.set(`p${p}`, where);
      else t.equal(where, homes.get(`p${p}`), `prompt ${p} stays on its replica`);
    }
  }
  t.ok(new Set(homes.values()).size >= 2, 'different prefixes spread over the replicas');

  // A conversation: a long system prompt and first turn key it; later turns change nothing.
  const system = { role: 'system', content: 'You are a careful assistant. '.repeat(40) };
  const turns: any[] = [system, { role: 'user', content: 'first question' }];
  const home = servedBy(await postChat(f.gw.url, { model: 'm', messages: turns, max_tokens: 16 }));
  for (let i = 0; i < 5; i++) {
    turns.push({ role: 'assistant', content: `answer ${i}` }, { role: 'user', content: `follow-up ${i}` });
    t.equal(servedBy(await postChat(f.gw.url, { model: 'm', messages: turns, max_tokens: 16 })), home, `turn ${i + 2}`);
  }

  // Explicit keys win over the prompt: header, then prompt_cache_key, then user.
  for (const [name, extra, headers] of [
    ['x-session-affinity', {}, { 'x-session-affinity': 'sess-42' }],
    ['prompt_cache_key', { prompt_cache_key: 'cache-7' }, {}],
    ['user', { user: 'end-user-3' }, {}],
  ] as const) {
    const where = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const res = await postChat(f.gw.url, ask(`unrelated prompt ${name} ${i}`, extra), {
        authorization: 'Bearer tg_demo_0000000000000000', 'content-type': 'application/json', ...headers,
      });
      where.add(servedBy(res));
    }
    t.equal(where.size, 1, `${name}: one replica for every prompt`);
  }
});

t.test('prefix_affinity: bounded load sends a crowded key elsewhere; max_outstanding caps a replica', async (t) => {
  const f = await startFleet(t, 3, { balance: 'prefix_affinity' });
  const holds = f.replicas.map((_r, i) => holding(`r${i}`));
  f.replicas.forEach((r, i) => r.setScript(holds[i]!.script));
  const waiting = () => holds.map((h) => h.waiting());
  const first = postChat(f.gw.url, ask('the same prompt'));
  t.ok(await until(() => waiting().reduce((a, b) => a + b) === 1));
  const home = waiting().indexOf(1);
  // One in flight on the home of three: a second would put it 3x above the mean.
  const second = postChat(f.gw.url, ask('the same prompt'));
  t.ok(await until(() => waiting().reduce((a, b) => a + b) === 2));
  t.equal(waiting()[home], 1, 'the second request did not join the first');
  for (const h of holds) h.release();
  t.equal(servedBy(await first), `r${home}`);
  t.not(servedBy(await second), `r${home}`);
  f.replicas.forEach((r, i) => r.setScript(answerAs(`r${i}`)));
  t.equal(servedBy(await postChat(f.gw.url, ask('the same prompt'))), `r${home}`, 'idle again: back home');

  // max_outstanding: 1 on two replicas and no queue: a third concurrent request finds none free.
  const g = await startFleet(t, 2, { balance: 'round_robin', max_outstanding: 1, queue: null }, {
    config: (c) => { c.admin = { token: ADMIN }; },
  });
  const gh = g.replicas.map((_r, i) => holding(`r${i}`));
  g.replicas.forEach((r, i) => r.setScript(gh[i]!.script));
  const busy = [postChat(g.gw.url, ask('a')), postChat(g.gw.url, ask('b'))];
  t.ok(await until(() => gh[0]!.waiting() === 1 && gh[1]!.waiting() === 1));
  const full = await postChat(g.gw.url, ask('c'));
  t.equal(full.status, 503);
  const body = full.json();
  t.match(body, { code: 'model_unavailable', type: 'server_error', error: { code: 'model_unavailable' } });
  t.same(schemas.error(body), []);
  t.equal(full.headers['retry-after'], '1');
  t.equal(full.headers['retry-after-ms'], '1000');
  const acct = await g.admin('/accounts/demo');
  t.match(acct, { balance_units: 1000000 }, 'nothing charged for the refused request');
  for (const h of gh) h.release();
  for (const p of busy) t.equal((await p).status, 200);
  t.equal(await g.gw.gateway.slotsInUse('demo'), 0, 'every concurrency slot is free');
  t.strictSame(g.chats(), [1, 1], 'the refused request reached no replica');
});

t.test('GET /admin/upstreams: every provider, its policy and each replica', async (t) => {
  const f = await startFleet(t, 2, { balance: 'prefix_affinity' }, { targets: (urls) => [{ url: urls[0], weight: 2 }, { url: urls[1] }] });
  servedBy(await postChat(f.gw.url, ask('hello')));
  const res = await fetch(`${f.gw.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /application\/json/);
  const body: any = await res.json();
  t.strictSame(Object.keys(body), ['providers', 'mcp_servers']);
  t.strictSame(body.mcp_servers, {}, 'no MCP server configured');
  t.strictSame(Object.keys(body.providers).sort(), ['echo', 'fleet']);
  t.equal(body.providers.fleet.balance, 'prefix_affinity');
  t.equal(body.providers.echo.balance, 'least_outstanding');
  t.equal(body.providers.echo.replicas.length, 1, 'every provider kind goes through the balancer');
  const replicas = body.providers.fleet.replicas;
  t.equal(replicas.length, 2);
  for (const [i, r] of replicas.entries()) {
    t.strictSame(Object.keys(r).sort(), ['ejected_until', 'failures', 'healthy', 'kv_cache_usage', 'outstanding', 'queue_depth', 'requests', 'url', 'weight']);
    t.match(r, { url: f.replicas[i]!.baseUrl, weight: i === 0 ? 2 : 1, healthy: true, ejected_until: null, outstanding: 0, failures: 0, queue_depth: null, kv_cache_usage: null });
  }
  t.equal(replicas[0].requests + replicas[1].requests, 1);
  t.strictSame(body.providers.fleet.circuits, [{ upstream_model: 'fleet-7b', open: false, open_until: null }], 'circuits of the models asked for');
  t.strictSame(body.providers.echo.circuits, []);

  const wrong = await fetch(`${f.gw.url}/admin/upstreams`, { headers: { authorization: 'Bearer nope' } });
  t.equal(wrong.status, 401);
  t.equal(((await wrong.json()) as any).code, 'invalid_api_key');
  const post = await fetch(`${f.gw.url}/admin/upstreams`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
  t.equal(post.status, 405);
  t.equal(post.headers.get('allow'), 'GET, HEAD');

  const metrics = await f.metrics();
  for (const r of f.replicas) {
    t.match(metrics, new RegExp(`tollgate_upstream_outstanding\\{target="${r.baseUrl}"\\} 0`));
    t.match(metrics, new RegExp(`tollgate_upstream_ejected\\{target="${r.baseUrl}"\\} 0`));
  }
});

t.test('a routing decision costs no store round trip: Redis sees the same commands as for one replica', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const solo = await startUpstream(answerAs('solo'));
  t.teardown(() => solo.close());
  const f = await startFleet(t, 3, { balance: 'prefix_affinity', health_check: null }, {
    config: (c) => {
      c.store = { kind: 'redis', url: redis.url, prefix: `fleet-${process.pid}:` };
      c.providers.single = { kind: 'openai', base_url: solo.baseUrl };
      c.models.push({ id: 'solo', provider: 'single', price: { input_per_mtok: 1000, output_per_mtok: 1000 } });
    },
  });
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const commands = async () => Number(/total_commands_processed:(\d+)/.exec(await client.info('stats'))![1]);
  // Background work (slot renewals, flushes) only ever adds commands to a window, so the least of
  // three alternated windows is each model's own count. A routing decision costing one command
  // would add N to every fleet window.
  const N = 20;
  const run = async (model: string) => {
    await sleep(50);
    const before = await commands();
    for (let i = 0; i < N; i++) servedBy(await postChat(f.gw.url, { ...ask(`prompt ${model} ${i}`), model }));
    await sleep(50);
    return (await commands()) - before - 1;
  };
  servedBy(await postChat(f.gw.url, { ...ask('warm up'), model: 'solo' }));
  servedBy(await postChat(f.gw.url, { ...ask('warm up'), model: 'm' }));
  const singles: number[] = [];
  const fleets: number[] = [];
  for (let i = 0; i < 3; i++) {
    singles.push(await run('solo'));
    fleets.push(await run('m'));
  }
  const single = Math.min(...singles);
  const fleet = Math.min(...fleets);
  t.ok(single >= N, `the store is used for metering (${single} commands for ${N} requests)`);
  t.ok(fleet - single < N / 2, `a fleet of three with prefix affinity adds no command per request (least of three windows: ${fleet} vs ${single}; ${fleets.join(', ')} vs ${singles.join(', ')})`);
  t.equal(f.chats().reduce((a, b) => a + b), 1 + 3 * N, 'the fleet served');
});
