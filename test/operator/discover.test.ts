// Replica discovery as an operator runs it (CONTRACT section 19): a YAML file whose provider
// takes its replicas from the A records of a name (`discover`, asking the loopback DNS server
// of test/helpers/dns-server.ts through `discover.resolver`), served by `tollgate serve`, under
// continuous traffic from the openai SDK. Replicas are fake model servers on one port, each on
// its own loopback address (127.0.0.2, 127.0.0.3: Linux routes all of 127/8 to lo). A replica
// added to the name joins; one removed gets no new request while a slow stream on it finishes
// intact; a failing lookup keeps the last set serving; every request is answered 200 and the
// wallet is debited exactly what the answers charged. `tollgate check` refusals are in
// test/config/discover-check.test.ts.

import t from 'tap';
import OpenAI from 'openai';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDns } from '../helpers/dns-server.js';
import { until } from '../helpers/fleet.js';
import { ADMIN, KEY, PRICE, drainExit, exercise, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { completionBody, json, startUpstream, streamFrames, writeSse, type FakeUpstream, type Script } from '../helpers/upstream.js';

const NAME = 'vllm.tollgate.test';
const dns = await startDns({ [NAME]: ['127.0.0.2'] });
t.teardown(() => dns.close());

/** Holds every stream whose prompt begins with "slow" after its first words, until released. */
let releaseSlow: () => void = () => undefined;
let slowGate = new Promise<void>((r) => { releaseSlow = r; });
const slowOn: string[] = [];

function replica(name: string): Script {
  return async (req, res, body) => {
    if (req.method === 'GET') return json(res, 200, { object: 'list', data: [{ id: 'upstream-model', object: 'model' }] });
    if (body.stream !== true) return json(res, 200, completionBody(`Hello from ${name}`, { usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } }));
    const frames = streamFrames(['one', ' two', ' three', ` ${name}`], { prompt_tokens: 12, completion_tokens: 4, total_tokens: 16 });
    if (!String(body.messages?.[0]?.content).startsWith('slow')) return writeSse(res, frames);
    await writeSse(res, frames.slice(0, 3), { end: false });
    slowOn.push(name);
    await slowGate;
    await writeSse(res, frames.slice(3));
  };
}

/** Two fakes on one port: 127.0.0.2 and 127.0.0.3 (a port free on both, found by trying). */
async function pair(): Promise<[FakeUpstream, FakeUpstream]> {
  for (let i = 0; ; i++) {
    const a = await startUpstream(replica('a'), { host: '127.0.0.2' });
    const port = Number(new URL(a.url).port);
    try {
      return [a, await startUpstream(replica('b'), { host: '127.0.0.3', port })];
    } catch (err) {
      await a.close();
      if (i === 5) throw err;
    }
  }
}

const [a, b] = await pair();
t.teardown(async () => { await a.close(); await b.close(); });
const port = Number(new URL(a.url).port);
const chats = (u: FakeUpstream) => u.requests.filter((r) => r.method === 'POST').length;

t.test('a fleet found in DNS: joins, leaves with its stream finishing, a failing lookup, nothing lost', async (t) => {
  const served = await serveFile(t, operatorConfig({
    providers: { vllm: { kind: 'openai', discover: { dns: NAME, port, resolver: dns.resolver, refresh_ms: 1000 }, balance: 'round_robin', timeout_ms: 20_000 } },
    models: [{ id: 'm-dns', provider: 'vllm', upstream_model: 'upstream-model', price: PRICE }],
  }));
  const upstreams = async () => {
    const res = await fetch(`${served.url}/admin/upstreams`, { headers: { authorization: `Bearer ${ADMIN}` } });
    return ((await res.json()) as any).providers.vllm;
  };
  await exercise(t, served.url, { model: 'm-dns', answer: /^(Hello from a|one two three a)$/ });
  let view = await upstreams();
  t.strictSame(view.replicas.map((r: any) => r.url), [`http://127.0.0.2:${port}/v1`], '/admin/upstreams: the one replica found');
  t.match(view.discovery, { dns: NAME, port, resolver: dns.resolver, refresh_ms: 1000, addresses: ['127.0.0.2'], last_error: null, consecutive_failures: 0, draining: [] });
  t.ok(Date.parse(view.discovery.last_refresh) > 0, 'the last refresh is shown');

  // Continuous traffic from here to the end: every answer must be 200.
  const openai = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  const before = await wallet(served.url);
  let charged = 0;
  let sent = 0;
  const failures: string[] = [];
  let stop = false;
  const worker = async () => {
    while (!stop) {
      sent++;
      try {
        const { data, response } = await openai.chat.completions.create({ model: 'm-dns', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
        if (!/^Hello from [ab]$/.test(data.choices[0]!.message.content ?? '')) failures.push(`answer ${data.choices[0]!.message.content}`);
        charged += Number(response.headers.get('x-tollgate-units-charged'));
      } catch (err) {
        failures.push((err as Error).message);
      }
      await sleep(20);
    }
  };
  const workers = [worker(), worker(), worker()];

  // A replica added to the name joins within refresh_ms.
  dns.records.set(NAME, ['127.0.0.2', '127.0.0.3']);
  t.ok(await until(() => chats(b) > 0, 5000), 'the new replica gets requests');
  view = await upstreams();
  t.strictSame(view.replicas.map((r: any) => r.url), [`http://127.0.0.2:${port}/v1`, `http://127.0.0.3:${port}/v1`], 'both listed');

  // A slow stream on one of them; then that one is removed from the name.
  const stream = await openai.chat.completions.create({
    model: 'm-dns', messages: [{ role: 'user', content: 'slow, please' }], stream: true, stream_options: { include_usage: true },
  });
  const iterator = stream[Symbol.asyncIterator]();
  let text = '';
  const first = await iterator.next();
  text += first.done ? '' : first.value.choices[0]?.delta.content ?? '';
  t.ok(await until(() => slowOn.length === 1, 5000), 'the slow stream is held on one replica');
  const [gone, stays] = slowOn[0] === 'a' ? [a, b] : [b, a];
  const goneAddress = slowOn[0] === 'a' ? '127.0.0.2' : '127.0.0.3';
  dns.records.set(NAME, [slowOn[0] === 'a' ? '127.0.0.3' : '127.0.0.2']);
  t.ok(await until(async () => (await upstreams()).replicas.length === 1, 5000), 'the removed replica leaves the fleet');
  view = await upstreams();
  t.strictSame(view.discovery.draining.map((r: any) => [r.url, r.outstanding]), [[`http://${goneAddress}:${port}/v1`, 1]], 'it drains: one stream in flight');
  await sleep(100); // requests picked just before it left reach it now
  const goneCount = chats(gone);
  const staysCount = chats(stays);
  await sleep(1500);
  t.equal(chats(gone), goneCount, 'the removed replica gets no new request');
  t.ok(chats(stays) > staysCount + 10, `the other serves everything (${chats(stays) - staysCount} requests)`);

  releaseSlow();
  let usage: OpenAI.CompletionUsage | undefined;
  for (let r = await iterator.next(); !r.done; r = await iterator.next()) {
    text += r.value.choices[0]?.delta.content ?? '';
    if (r.value.usage) usage = r.value.usage;
  }
  t.equal(text, `one two three ${slowOn[0]}`, 'the stream in flight on the removed replica finished intact');
  t.ok(usage, 'with its usage');
  charged += usage!.prompt_tokens + 2 * usage!.completion_tokens;
  t.ok(await until(async () => (await upstreams()).discovery.draining.length === 0, 3000), 'nothing drains once it ended');
  t.equal(gone.requests.filter((r) => r.method === 'POST' && r.aborted).length, 0, 'nothing on it was cut');

  // The resolver fails: the last set keeps serving.
  dns.mode = 'servfail';
  t.ok(await until(async () => (await upstreams()).discovery.consecutive_failures >= 2, 6000), 'lookups fail');
  view = await upstreams();
  t.match(view.discovery.last_error, /SERVFAIL/, 'the error is shown');
  t.equal(view.replicas.length, 1, 'the last good set is kept');
  const during = chats(stays);
  await sleep(500);
  t.ok(chats(stays) > during, 'and serves');
  t.equal((served.output().match(/lookup failed/g) ?? []).length, 1, 'one warning for the streak');
  dns.mode = 'answer';
  t.ok(await until(async () => (await upstreams()).discovery.consecutive_failures === 0, 5000), 'lookups succeed again');

  stop = true;
  await Promise.all(workers);
  t.strictSame(failures, [], `every one of ${sent} requests answered 200`);
  t.ok(sent > 30, `${sent} requests under traffic`);
  const after = await wallet(served.url);
  t.equal(after.balance_units, before.balance_units - charged, `the wallet is debited exactly once per request: ${charged} units`);
  t.equal(after.held_units, 0, 'no hold left');
  await drainExit(t, served);
});
