// Fleets (CONTRACT section 7), failures: passive outlier ejection with doubling and
// re-admission, refused connections, active health checks, retry on another replica before any
// byte reached the client (and before any model fallback), and every replica down -> 503
// model_unavailable with Retry-After, nothing charged. Real gateway, real sockets.

import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { postChat, sseData } from '../helpers/gateway.js';
import { answerAs, ask, startFleet, until } from '../helpers/fleet.js';
import { chunk, completionBody, json, startUpstream, writeSse } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';

const fail500 = async (req: any, res: any) => json(res, req.method === 'GET' ? 200 : 500, { error: { message: 'CUDA error' } });

/** A URL where nothing listens (connections are refused). */
async function deadUrl(): Promise<string> {
  const up = await startUpstream(() => {});
  await up.close();
  return up.baseUrl;
}

t.test('passive ejection: N failures in a row eject for eject_ms, doubling while it keeps failing', async (t) => {
  const f = await startFleet(t, 2, { balance: 'round_robin', outlier: { consecutive_failures: 2, eject_ms: 400 } });
  f.replicas[0]!.setScript(fail500);
  const started = Date.now();
  for (let i = 0; i < 6; i++) {
    const res = await postChat(f.gw.url, ask(`q${i}`));
    t.equal(res.status, 200, 'the client never sees the failing replica');
    t.equal(res.json().choices[0].message.content, 'r1');
  }
  t.equal(f.chats()[0], 2, 'ejected after its second failure in a row');
  let view = (await f.admin('/upstreams')).providers.fleet.replicas;
  t.match(view[0], { healthy: false, failures: 2, outstanding: 0 });
  const until1 = Date.parse(view[0].ejected_until);
  t.ok(until1 >= started + 400 && until1 <= Date.now() + 400, 'ejected for eject_ms from its second failure');
  t.match(view[1], { healthy: true, ejected_until: null, failures: 0 });
  t.match(await f.metrics(), new RegExp(`tollgate_upstream_ejected\\{target="${f.replicas[0]!.baseUrl}"\\} 1`));

  // After the ejection one probe goes to it; it fails again: ejected for twice as long.
  await sleep(until1 - Date.now() + 20);
  const probing = Date.now();
  for (let i = 0; i < 3; i++) t.equal((await postChat(f.gw.url, ask(`again ${i}`))).status, 200);
  t.equal(f.chats()[0], 3, 'one probe after the ejection');
  view = (await f.admin('/upstreams')).providers.fleet.replicas;
  const until2 = Date.parse(view[0].ejected_until);
  t.ok(until2 >= probing + 800 && until2 <= Date.now() + 800, 'the probe failed: ejected again, for twice as long');

  // Healthy again: the next probe succeeds and it takes its share once more.
  f.replicas[0]!.setScript(answerAs('r0'));
  await sleep(until2 - Date.now() + 20);
  const served = new Set<string>();
  for (let i = 0; i < 4; i++) served.add((await postChat(f.gw.url, ask(`back ${i}`))).json().choices[0].message.content);
  t.strictSame(served, new Set(['r0', 'r1']));
  view = (await f.admin('/upstreams')).providers.fleet.replicas;
  t.match(view[0], { healthy: true, ejected_until: null });
  t.match(await f.metrics(), new RegExp(`tollgate_upstream_ejected\\{target="${f.replicas[0]!.baseUrl}"\\} 0`));
});

t.test('a replica that refuses connections is ejected at once; streams move on too', async (t) => {
  const dead = await deadUrl();
  const f = await startFleet(t, 1, { balance: 'round_robin', outlier: { consecutive_failures: 5, eject_ms: 60000 } }, {
    targets: (urls) => [{ url: dead }, { url: urls[0] }],
  });
  const res = await postChat(f.gw.url, ask('one', { stream: true }));
  t.equal(res.status, 200);
  const parsed = sseData(res.text);
  t.ok(parsed.done);
  t.equal(parsed.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'r0');
  for (let i = 0; i < 4; i++) t.equal((await postChat(f.gw.url, ask(`q${i}`))).status, 200);
  const view = (await f.admin('/upstreams')).providers.fleet.replicas;
  t.match(view[0], { url: dead, healthy: false, failures: 1, requests: 1 });
  t.match(view[1], { healthy: true, requests: 5, failures: 0 });
});

t.test('retry on another replica before any byte, before any fallback: no client-visible error', async (t) => {
  const fb = await startUpstream((_req, res) => json(res, 200, completionBody('from fallback')));
  t.teardown(() => fb.close());
  const f = await startFleet(t, 2, { balance: 'round_robin', outlier: { consecutive_failures: 1000, eject_ms: 1000 } }, {
    config: (c) => {
      c.providers.b = { kind: 'openai', base_url: fb.baseUrl };
      c.models.find((m: any) => m.id === 'm').fallbacks = [{ provider: 'b' }];
    },
  });
  const failures: Array<[string, (req: any, res: any) => any]> = [
    ['5xx', fail500],
    ['reset', (req) => req.socket.destroy()],
    ['invalid JSON', (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"choi'); }],
    ['503', (_req, res) => json(res, 503, { error: { message: 'busy' } })],
    ['429', (_req, res) => json(res, 429, { error: { message: 'slow down' } })],
    ['empty answer', (_req, res) => json(res, 200, completionBody(''))],
    ['error as the first event', (_req, res) => writeSse(res, [`data: ${JSON.stringify({ error: { message: 'oom', code: 500 } })}\n\n`])],
    ['stream cut before content', async (_req, res) => { await writeSse(res, [`data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\n`], { end: false }); res.socket?.destroy(); }],
  ];
  let balance = (await f.admin('/accounts/demo')).balance_units;
  for (const [name, script] of failures) {
    f.replicas[0]!.setScript(script);
    for (const stream of [false, true]) {
      // Two requests: round robin starts one of them on the failing replica.
      for (let i = 0; i < 2; i++) {
        const res = await postChat(f.gw.url, ask(`${name} ${i}`, { stream, stream_options: stream ? { include_usage: true } : undefined }));
        t.equal(res.status, 200, `${name}, stream ${stream}`);
        let charged: number;
        if (stream) {
          const parsed = sseData(res.text);
          t.ok(parsed.done, `${name}: the stream is whole`);
          t.equal(parsed.events.map((e) => e.choices[0]?.delta.content ?? '').join(''), 'r1');
          t.equal(parsed.events.filter((e) => e.choices[0]?.delta.role === 'assistant').length, 1, 'one role chunk');
          for (const e of parsed.events) t.same(schemas.chunk(e), []);
          charged = Math.ceil((parsed.events.at(-1).usage.prompt_tokens * 1000 + parsed.events.at(-1).usage.completion_tokens * 1000) / 1e6);
        } else {
          t.equal(res.json().choices[0].message.content, 'r1', name);
          charged = Number(res.headers['x-tollgate-units-charged']);
        }
        const now = (await f.admin('/accounts/demo')).balance_units;
        t.equal(balance - now, charged, `${name}: charged once, for the answer served`);
        balance = now;
      }
    }
  }
  t.ok(f.chats()[0]! >= failures.length * 2, 'the failing replica was tried');
  t.equal(fb.requests.length, 0, 'the fallback model was never needed');

  // Every replica failing: then, and only then, the fallback target.
  f.replicas[1]!.setScript(fail500);
  f.replicas[0]!.setScript(fail500);
  const res = await postChat(f.gw.url, ask('all down'));
  t.equal(res.status, 200);
  t.equal(res.json().choices[0].message.content, 'from fallback');
  t.equal(fb.requests.length, 1);
});

t.test('active health checks eject a failing replica and re-admit it when it passes', async (t) => {
  let healthy = false;
  const f = await startFleet(t, 2, { balance: 'least_outstanding', health_check: { path: '/health', interval_ms: 100 } });
  const checks: string[] = [];
  f.replicas[0]!.setScript(async (req, res, body, seen) => {
    if (req.method === 'GET') { checks.push(req.url!); json(res, healthy ? 200 : 503, {}); return; }
    await answerAs('r0')(req, res, body, seen);
  });
  const view = async () => (await f.admin('/upstreams')).providers.fleet.replicas;
  t.ok(await until(async () => (await view())[0].healthy === false), 'ejected by its health check');
  t.equal(checks[0], '/v1/health', 'GET {url}{path}');
  const v = (await view())[0];
  t.ok(v.ejected_until !== null && Date.parse(v.ejected_until) - Date.now() <= 100, 'until its next check');
  const before = f.chats()[0];
  for (let i = 0; i < 10; i++) t.equal((await postChat(f.gw.url, ask(`q${i}`))).json().choices[0].message.content, 'r1');
  t.equal(f.chats()[0], before, 'no request reached it');

  healthy = true;
  t.ok(await until(async () => (await view())[0].healthy === true), 're-admitted by a passing check');
  t.equal((await view())[0].ejected_until, null);
  const served = new Set<string>();
  for (let i = 0; i < 40 && served.size < 2; i++) served.add((await postChat(f.gw.url, ask(`p${i}`))).json().choices[0].message.content);
  t.strictSame(served, new Set(['r0', 'r1']));
});

t.test('every replica ejected: 503 model_unavailable with Retry-After until the first re-admission', async (t) => {
  const [a, b] = [await deadUrl(), await deadUrl()];
  const f = await startFleet(t, 0, { outlier: { consecutive_failures: 5, eject_ms: 5000 } }, { targets: () => [{ url: a }, { url: b }] });
  const first = await postChat(f.gw.url, ask('one'));
  t.equal(first.status, 502, 'both refused within the request: the last failure is the answer');
  t.equal(first.json().code, 'provider_error');

  for (const stream of [false, true]) {
    const res = await postChat(f.gw.url, ask('two', { stream }));
    t.equal(res.status, 503, `stream ${stream}`);
    const body = res.json();
    t.match(body, { code: 'model_unavailable', type: 'server_error', param: null, error: { code: 'model_unavailable', type: 'server_error' } });
    t.same(schemas.error(body), []);
    t.equal(res.headers['content-type'], 'application/json');
    const ms = Number(res.headers['retry-after-ms']);
    t.ok(ms > 2000 && ms <= 5000, `retry-after-ms ${ms}: until the first re-admission`);
    t.equal(res.headers['retry-after'], String(Math.ceil(ms / 1000)));
    t.ok(res.headers['x-request-id']);
  }
  const acct = await f.admin('/accounts/demo');
  t.match(acct, { balance_units: 1000000, held_units: 0, available_units: 1000000 }, 'nothing charged, no hold left');
  t.equal(await f.gw.gateway.slotsInUse('demo'), 0, 'every concurrency slot is free');
  const metrics = await f.metrics();
  for (const url of [a, b]) t.match(metrics, new RegExp(`tollgate_upstream_ejected\\{target="${url}"\\} 1`));
  const view = (await f.admin('/upstreams')).providers.fleet.replicas;
  t.strictSame(view.map((r: any) => [r.healthy, r.requests, r.failures]), [[false, 1, 1], [false, 1, 1]]);
  t.ok(await postChat(f.gw.url, { model: 'echo-small', messages: [{ role: 'user', content: 'other models still serve' }] }).then((r) => r.status === 200));
});

t.test('a one-replica base_url provider keeps its circuits: failures open the circuit, never eject it', async (t) => {
  const up = await startUpstream(fail500);
  t.teardown(() => up.close());
  const f = await startFleet(t, 0, {}, {
    config: (c) => {
      c.providers.fleet = { kind: 'openai', base_url: up.baseUrl, circuit_failures: 3, circuit_cooldown_ms: 60000 };
    },
  });
  for (let i = 0; i < 3; i++) t.equal((await postChat(f.gw.url, ask(`q${i}`))).status, 502);
  const res = await postChat(f.gw.url, ask('open'));
  t.equal(res.status, 503, 'the circuit is open');
  t.equal(res.json().code, 'model_unavailable');
  const view = (await f.admin('/upstreams')).providers.fleet;
  t.match(view, { balance: 'least_outstanding', replicas: [{ url: up.baseUrl, healthy: true, ejected_until: null, requests: 3, failures: 3 }] });
  t.equal(view.circuits.length, 1);
  t.match(view.circuits[0], { upstream_model: 'fleet-7b', open: true });
  const until = Date.parse(view.circuits[0].open_until) - Date.now();
  t.ok(until > 50000 && until <= 60000, 'an open circuit shows in /admin/upstreams with its next probe');
});
