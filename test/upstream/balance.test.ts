// The balancer's parts on their own (lib/upstream/balance/): the affinity key, weighted
// rendezvous ownership, bounded load, ejection backoff, and reading vLLM, SGLang and llama.cpp
// metrics pages. The gateway-level behaviour is pinned in fleet-routing and fleet-failover.

import t from 'tap';
import fc from 'fast-check';
import { validateConfig } from '../../lib/config/load.js';
import type { ChatRequest } from '../../lib/hub/chat.js';
import { AffinityKey, Fleet, Replica } from '../../lib/upstream/balance/index.js';
import { prefixHash } from '../../lib/upstream/balance/affinity-key.js';
import { owner, PrefixAffinity } from '../../lib/upstream/balance/prefix-affinity.js';
import { MAX_EJECT_MS } from '../../lib/upstream/balance/replica.js';
import { parseServerLoad } from '../../lib/upstream/balance/scrape.js';

function request(messages: any[], body: Record<string, unknown> = {}): ChatRequest {
  return { model: 'm', messages, stream: false, includeUsage: false, maxOutputTokens: undefined, imageCount: 0, body: { ...body, messages } };
}

function fleetOf(n: number, provider: Record<string, unknown> = {}, weights: number[] = []): Fleet {
  const config = validateConfig({
    providers: { p: { kind: 'openai', targets: Array.from({ length: n }, (_v, i) => ({ url: `http://10.9.0.${i + 1}:8000/v1`, weight: weights[i] ?? 1 })), ...provider } },
  });
  return new Fleet('p', config.providers.p!);
}

t.test('the prefix key: roles and turns count, nothing past the prefix does', async (t) => {
  const system = { role: 'system', content: 'S'.repeat(600) };
  const a = request([system, { role: 'user', content: 'first question' }, { role: 'assistant', content: 'x' }]);
  const b = request([system, { role: 'user', content: 'first question' }, { role: 'assistant', content: 'y' }, { role: 'user', content: 'z' }]);
  t.not(prefixHash(a, 2000), prefixHash(b, 2000), 'within the prefix the later turns differ');
  t.equal(prefixHash(a, 614), prefixHash(b, 614), 'past the prefix they do not matter');
  t.not(prefixHash(request([{ role: 'user', content: 'hello' }]), 100), prefixHash(request([{ role: 'system', content: 'hello' }]), 100), 'the role is part of the key');
  t.not(prefixHash(request([{ role: 'user', content: 'ab' }, { role: 'user', content: 'c' }]), 100),
    prefixHash(request([{ role: 'user', content: 'a' }, { role: 'user', content: 'bc' }]), 100), 'turns are kept apart');
  t.equal(prefixHash(request([{ role: 'user', content: [{ type: 'text', text: 'hel' }, { type: 'image_url', image_url: { url: 'https://x/y.png' } }, { type: 'text', text: 'lo' }] }]), 100),
    prefixHash(request([{ role: 'user', content: 'hello' }]), 100), 'text parts read as one text; images are not hashed');
  const long = request([{ role: 'user', content: 'w'.repeat(5_000_000) }]);
  t.equal(prefixHash(long, 1024), prefixHash(request([{ role: 'user', content: 'w'.repeat(1024) }]), 1024), 'a huge prompt costs only its prefix');

  const key = new AffinityKey(a, undefined);
  t.equal(key.hash(256), prefixHash(a, 1024), '256 tokens are taken as 1024 characters');
  t.equal(new AffinityKey(a, 'sess-1').hash(256), new AffinityKey(b, 'sess-1').hash(64), 'a session header keys alone');
  t.equal(new AffinityKey(request([system], { prompt_cache_key: 'k', user: 'u1' }), undefined).hash(256),
    new AffinityKey(request([{ role: 'user', content: 'other' }], { prompt_cache_key: 'k', user: 'u2' }), undefined).hash(256), 'prompt_cache_key before user');
  t.equal(new AffinityKey(request([system], { user: 'u1' }), undefined).hash(256),
    new AffinityKey(request([{ role: 'user', content: 'other' }], { user: 'u1' }), undefined).hash(256), 'then user');
});

t.test('rendezvous ownership: shares follow weights; a removed replica moves only its own keys', async (t) => {
  const replicas = [new Replica('http://a/v1'), new Replica('http://b/v1'), new Replica('http://c/v1')];
  replicas.forEach((r, i) => { r.weight = i + 1; });
  const counts = new Map<Replica, number>();
  for (let k = 0; k < 60_000; k++) {
    const o = owner(Math.imul(k, 0x9e3779b1) >>> 0, replicas)!;
    counts.set(o, (counts.get(o) ?? 0) + 1);
  }
  replicas.forEach((r, i) => {
    const share = counts.get(r)! / 60_000;
    t.ok(Math.abs(share - (i + 1) / 6) < 0.01, `weight ${i + 1}: share ${share.toFixed(3)}`);
  });
  fc.assert(fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 0, max: 2 }), (key, gone) => {
    const before = owner(key, replicas)!;
    const after = owner(key, replicas.filter((_r, i) => i !== gone))!;
    return before === replicas[gone] || after === before;
  }), { numRuns: 2000 });
});

t.test('bounded load: the owner gives way when 25% above the mean, ejected, or full', async (t) => {
  const policy = new PrefixAffinity();
  const replicas = [new Replica('http://a/v1'), new Replica('http://b/v1'), new Replica('http://c/v1'), new Replica('http://d/v1')];
  const now = Date.now();
  const key = 12345;
  const home = owner(key, replicas)!;
  const pick = () => policy.pick({ affinity: key, exclude: [], now }, replicas);
  t.equal(pick(), home, 'idle: the owner');
  // With this request, 9 in flight over 4 replicas: the owner may carry ceil(1.25 * 9 / 4) = 3.
  for (const r of replicas) r.outstanding = 2;
  t.equal(pick(), home, 'at the mean: still the owner');
  home.outstanding = 3;
  t.equal(pick(), home, 'within the bound once rounded up to whole requests');
  home.outstanding = 4;
  t.not(pick(), home, 'above the bound (ceil(1.25 * 11 / 4) = 4): another replica');
  t.equal(pick()!.outstanding, 2, 'the least loaded one');
  const others = replicas.filter((r) => r !== home);
  const second = owner(key, others);
  for (let i = 0; i < 20; i++) t.equal(pick(), second, 'among equally loaded ones, the key\'s next choice, every time');
  home.outstanding = 2;
  t.not(policy.pick({ affinity: key, exclude: [home], now }, replicas), home, 'a replica already tried is passed over');
  home.maxOutstanding = 2;
  t.not(pick(), home, 'a replica at max_outstanding gives way');
  home.maxOutstanding = null;
  for (let i = 0; i < 5; i++) home.end(home.begin(), 'failure', true, { consecutive_failures: 5, eject_ms: 1000 });
  t.notOk(home.healthy(Date.now()));
  t.not(pick(), home, 'an ejected owner gives way');
});

t.test('ejection: refused at once or N in a row, doubling up to a cap, reset by a success', async (t) => {
  const r = new Replica('http://a/v1');
  const opts = { consecutive_failures: 3, eject_ms: 1000 };
  let now = 1_000_000;
  const fail = (connect = false) => r.end(r.begin(), 'failure', connect, opts, now);
  fail(); fail();
  r.end(r.begin(), 'success', false, opts, now);
  fail(); fail();
  t.ok(r.usable(now), 'a success resets the count');
  r.end(r.begin(), 'neutral', false, opts, now);
  fail();
  t.notOk(r.usable(now), 'third failure in a row (a neutral outcome does not break the run)');
  t.equal(r.availableAt(), now + 1000);
  // Requests begun before the ejection do not extend it.
  now += 1000;
  t.ok(r.usable(now), 're-admitted after eject_ms');
  const probe = r.begin();
  t.notOk(r.usable(now), 'one probe at a time after an ejection');
  r.end(probe, 'failure', false, opts, now);
  t.equal(r.availableAt(), now + 2000, 'the probe failed: twice as long');
  for (let i = 0; i < 12; i++) {
    now = r.availableAt();
    r.end(r.begin(), 'failure', false, opts, now);
  }
  t.equal(r.availableAt() - now, MAX_EJECT_MS, 'capped');
  now = r.availableAt();
  r.end(r.begin(), 'success', false, opts, now);
  fail(true);
  t.equal(r.availableAt(), now + 1000, 'a success reset the doubling; a refused connection ejects at once');

  const s = new Replica('http://b/v1');
  const early = [s.begin(), s.begin(), s.begin(), s.begin()];
  for (const token of early.slice(0, 3)) s.end(token, 'failure', false, opts, now);
  const until = s.availableAt();
  s.end(early[3]!, 'failure', false, opts, until + 1);
  t.ok(s.usable(until + 1), 'a request begun before the ejection does not count as the probe');
  t.equal(s.outstanding, 0);
  t.equal(s.failures, 4);

  const u = new Replica('http://c/v1');
  for (let i = 0; i < 10; i++) u.end(u.begin(), 'failure', true, null, now);
  t.ok(u.usable(now), 'without outlier options nothing ejects');
  u.checked(false, now + 500);
  t.notOk(u.usable(now));
  t.equal(u.availableAt(), now + 500, 'a failing health check: out until the next one');
  u.checked(true, now + 1000);
  t.ok(u.usable(now));
});

t.test('round robin and least outstanding honour weights; a pick is synchronous and local', async (t) => {
  const rr = fleetOf(3, { balance: 'round_robin' }, [1, 2, 3]);
  const key = new AffinityKey(request([{ role: 'user', content: 'x' }]), undefined);
  t.ok(rr.pick(key, []) instanceof Replica, 'a pick returns the replica itself: no promise, no store');
  const counts = [0, 0, 0];
  for (let i = 0; i < 600; i++) counts[rr.replicas.indexOf(rr.pick(key, [])!)]!++;
  t.strictSame(counts, [100, 200, 300]);

  const lo = fleetOf(2, { balance: 'least_outstanding' });
  const [a, b] = lo.replicas as Replica[];
  a!.outstanding = 3;
  t.equal(lo.pick(key, []), b, 'fewest in flight');
  b!.queueDepth = 4;
  t.equal(lo.pick(key, []), a, 'the scraped queue counts');
  t.equal(lo.pick(key, [a!]), b, 'excluded ones are passed over');
  a!.outstanding = 0;
  b!.queueDepth = null;
  for (const r of lo.replicas) r.maxOutstanding = 0;
  t.equal(lo.pick(key, []), undefined, 'none may take it');
  t.equal(lo.retryAfterMs(), 1000, 'busy, not ejected: a short wait');
});

t.test('metrics pages: vLLM, SGLang and llama.cpp names; anything else leaves no figure', async (t) => {
  t.strictSame(parseServerLoad([
    '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
    '# TYPE vllm:num_requests_waiting gauge',
    'vllm:num_requests_waiting{engine="0",model_name="a"} 2.0',
    'vllm:num_requests_waiting{engine="1",model_name="a"} 3.0',
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0",model_name="a"} 30.0',
    'vllm:num_requests_running{engine="1",model_name="a"} 32.0',
    '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.',
    '# TYPE vllm:kv_cache_usage_perc gauge',
    'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.25',
    'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.5',
    '# TYPE vllm:time_to_first_token_seconds histogram',
    'vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="a"} 0.0',
  ].join('\n')), { queueDepth: 5, running: 62, kvCacheUsage: 0.5 }, 'vLLM V1: queues and batches summed, the fullest cache');
  t.strictSame(parseServerLoad('vllm:num_requests_waiting{model_name="a"} 1\nvllm:gpu_cache_usage_perc{model_name="a"} 0.75\n'),
    { queueDepth: 1, running: null, kvCacheUsage: 0.75 }, 'vLLM V0 names; no running count: null');
  t.strictSame(parseServerLoad('# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="q"} 4.0\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="q"} 7.0\n# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="q"} 0.31\n'),
    { queueDepth: 4, running: 7, kvCacheUsage: 0.31 }, 'SGLang');
  t.strictSame(parseServerLoad('# HELP llamacpp:requests_deferred Number of requests deferred.\n# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 6\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.125\n'),
    { queueDepth: 6, running: 4, kvCacheUsage: 0.125 }, 'llama.cpp');
  t.strictSame(parseServerLoad('process_cpu_seconds_total 12\n'), { queueDepth: null, running: null, kvCacheUsage: null }, 'no known metric');
  t.strictSame(parseServerLoad('<html>not metrics</html>'), { queueDepth: null, running: null, kvCacheUsage: null });
  t.strictSame(parseServerLoad('vllm:num_requests_waiting NaN\n'), { queueDepth: null, running: null, kvCacheUsage: null }, 'not a number: no figure');
});
