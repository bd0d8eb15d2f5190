// Replica discovery's parts on their own (lib/upstream/balance/dns.ts and Fleet's changes),
// against the loopback DNS server of test/helpers/dns-server.ts: what a lookup reads (A and
// AAAA, NXDOMAIN, SERVFAIL), how a fleet follows its lookups (a replica joins, one that left
// takes no new request and is let go once its requests end), a failed or empty lookup keeping
// the last good set with one warning per streak, and the timer stopped with the fleet. The
// operator's view (a YAML file, `tollgate serve`, the openai SDK) is test/operator/discover.test.ts.

import t from 'tap';
import fc from 'fast-check';
import { Resolver } from 'node:dns/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { validateConfig } from '../../lib/config/load.js';
import { AffinityKey, Fleet, Replicas, type Replica } from '../../lib/upstream/balance/index.js';
import { lookup, replicaUrl } from '../../lib/upstream/balance/dns.js';
import { answer, startDns } from '../helpers/dns-server.js';
import { until } from '../helpers/fleet.js';

const dns = await startDns({ 'vllm.test': ['10.1.0.2', '10.1.0.1', 'fd00::7'] });
t.teardown(() => dns.close());

const warnings: Record<string, unknown>[] = [];
const logger: any = {
  warn: (o: Record<string, unknown>, msg: string) => warnings.push({ ...o, msg }),
  info: () => undefined, error: () => undefined, debug: () => undefined,
};

function discovered(provider: Record<string, unknown> = {}, registry = new Replicas()): Fleet {
  const config = validateConfig({
    providers: { p: { kind: 'openai', discover: { dns: 'vllm.test', port: 8000, resolver: dns.resolver, refresh_ms: 1000 }, balance: 'round_robin', ...provider } },
  });
  return new Fleet('p', config.providers.p!, registry, logger);
}

const key = new AffinityKey({ model: 'm', messages: [], stream: false, includeUsage: false, maxOutputTokens: undefined, imageCount: 0, body: {} }, undefined);

t.test('a lookup reads A and AAAA records, sorted and distinct; NXDOMAIN is empty, SERVFAIL a failure', async (t) => {
  const r = new Resolver({ timeout: 500, tries: 1 });
  r.setServers([dns.resolver]);
  t.strictSame(await lookup(r, 'vllm.test'), ['10.1.0.1', '10.1.0.2', 'fd00::7']);
  t.strictSame(await lookup(r, 'VLLM.test'), ['10.1.0.1', '10.1.0.2', 'fd00::7'], 'names are case-insensitive');
  t.strictSame(await lookup(r, 'nothing.test'), [], 'no such name: no replica (not an error)');
  dns.mode = 'servfail';
  await t.rejects(lookup(r, 'vllm.test'), { code: 'ESERVFAIL' }, 'SERVFAIL is a failure');
  dns.mode = 'answer';
  t.equal(replicaUrl('fd00::7', { dns: 'x', port: 8000, refresh_ms: 1000, resolver: null }, 'openai'), 'http://[fd00::7]:8000/v1', 'IPv6 in brackets, /v1 for openai');
  t.equal(replicaUrl('10.0.0.1', { dns: 'x', port: 9, refresh_ms: 1000, resolver: null }, 'anthropic'), 'http://10.0.0.1:9', 'no path for anthropic');
  t.equal(replicaUrl('10.0.0.1', { dns: 'x', port: 9, refresh_ms: 1000, resolver: null, path: '/api/v1' }, 'openai'), 'http://10.0.0.1:9/api/v1', 'discover.path');
});

t.test('the fake server never answers a malformed query with a malformed answer (seeded property)', async () => {
  fc.assert(fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
    const out = answer(Buffer.from(bytes), new Map([['a.test', ['10.0.0.1']]]), 'answer');
    return out === undefined || (out.length >= 12 && out.readUInt16BE(4) === 1);
  }), { seed: 19, numRuns: 300 });
});

t.test('a fleet follows its lookups: joins, leaves after its requests end, keeps the last good set', async (t) => {
  warnings.length = 0;
  dns.records.set('vllm.test', ['127.0.0.2']);
  const registry = new Replicas();
  const fleet = discovered({}, registry);
  const joined: string[] = [];
  const left: string[] = [];
  fleet.members = { joined: (r) => joined.push(r.url), left: (r) => left.push(r.url) };
  t.teardown(() => fleet.stop());
  t.equal(fleet.replicas.length, 0, 'no replica before the first lookup');
  t.equal(fleet.retryAfterMs(), 1000, 'no replica yet: come back after a refresh');
  fleet.watch(undefined);
  await fleet.ready();
  t.strictSame(fleet.replicas.map((r) => r.url), ['http://127.0.0.2:8000/v1'], 'the first lookup found one');
  t.strictSame(joined, ['http://127.0.0.2:8000/v1']);

  const onOld: Replica = fleet.replicas[0]!;
  const slot = fleet.take(key, [])!;
  t.equal(slot.replica, onOld, 'a request in flight on the first replica');

  dns.records.set('vllm.test', ['127.0.0.3']);
  t.ok(await until(() => fleet.replicas[0]?.url === 'http://127.0.0.3:8000/v1', 3000), 'within refresh_ms the fleet is the new set');
  t.strictSame(left, [], 'the replica that left still has a request in flight: its pool stays');
  for (let i = 0; i < 20; i++) {
    const s = fleet.take(key, [])!;
    t.not(s.replica, onOld, 'no new request goes to the replica that left');
    fleet.end(s.replica, s.token, 'success', false);
  }
  const view = fleet.view();
  t.strictSame(view.discovery!.draining.map((r) => [r.url, r.outstanding]), [['http://127.0.0.2:8000/v1', 1]], 'shown as draining');
  t.strictSame(view.discovery!.addresses, ['127.0.0.3']);
  fleet.end(slot.replica, slot.token, 'success', false);
  t.strictSame(left, ['http://127.0.0.2:8000/v1'], 'its last request ended: its pool may close');
  t.not(registry.get('p', 'http://127.0.0.2:8000/v1'), onOld, 'and the registry lets it go (pods come and go with new addresses)');
  t.strictSame(fleet.view().discovery!.draining, [], 'nothing draining');

  dns.mode = 'servfail';
  t.ok(await until(() => fleet.view().discovery!.consecutive_failures >= 2, 5000), 'lookups keep failing');
  t.strictSame(fleet.replicas.map((r) => r.url), ['http://127.0.0.3:8000/v1'], 'a failing lookup keeps the last good set');
  const failed = fleet.view().discovery!;
  t.match(failed.last_error, /SERVFAIL/, 'the error is shown');
  t.ok(failed.last_error_at !== null && failed.last_refresh !== null);
  t.equal(warnings.filter((w) => /lookup failed/.test(String(w.msg))).length, 1, 'one warning for the whole streak');

  dns.mode = 'answer';
  dns.records.delete('vllm.test');
  t.ok(await until(() => fleet.view().discovery!.last_error?.includes('no A or AAAA') === true, 5000), 'an empty answer counts as a failure');
  t.strictSame(fleet.replicas.map((r) => r.url), ['http://127.0.0.3:8000/v1'], 'an empty lookup keeps the last good set too');

  dns.records.set('vllm.test', ['127.0.0.3', '127.0.0.4']);
  t.ok(await until(() => fleet.replicas.length === 2, 5000), 'lookups succeed again: a second replica joins');
  t.equal(fleet.view().discovery!.consecutive_failures, 0);
  t.ok(warnings.some((w) => /succeed again/.test(String(w.msg))), 'the recovery is logged');

  // A reload's fleet starts from the last good set at once.
  const next = discovered({}, registry);
  t.strictSame(next.replicas.map((r) => r.url), ['http://127.0.0.3:8000/v1', 'http://127.0.0.4:8000/v1'], "a reload's fleet starts with the last good set");
  t.equal(next.replicas[0], fleet.replicas[0], 'the same replica objects: counts and ejections carry over');
  next.stop();
});

t.test('stop() ends the lookups: no query after it', async (t) => {
  dns.records.set('vllm.test', ['127.0.0.2']);
  const fleet = discovered();
  fleet.watch(undefined);
  await fleet.ready();
  fleet.stop();
  const asked = dns.queries.length;
  await sleep(1300);
  t.equal(dns.queries.length, asked, 'no lookup after stop()');
});

t.test('a resolver that does not answer: the first lookup gives up, the fleet stays empty and says why', async (t) => {
  dns.mode = 'silent';
  t.teardown(() => { dns.mode = 'answer'; });
  const fleet = discovered();
  t.teardown(() => fleet.stop());
  fleet.watch(undefined);
  const started = Date.now();
  await fleet.ready();
  t.ok(Date.now() - started < 6000, `the first lookup gave up in ${Date.now() - started} ms`);
  t.equal(fleet.replicas.length, 0);
  t.equal(fleet.available(), false, 'no replica: not available (503 model_unavailable)');
  t.match(fleet.view().discovery!.last_error, /TIMEOUT|timeout/i);
});

t.test("a request of an earlier config's fleet on a replica that left: let go at the next lookup after it ends", async (t) => {
  dns.mode = 'answer';
  dns.records.set('vllm.test', ['127.0.0.5', '127.0.0.6']);
  const registry = new Replicas();
  const fleet = discovered({}, registry);
  const left: string[] = [];
  fleet.members = { joined: () => undefined, left: (r) => left.push(r.url) };
  t.teardown(() => fleet.stop());
  fleet.watch(undefined);
  await fleet.ready();
  // The earlier config's request: counted on the shared replica, ended through that config's fleet.
  const shared = registry.get('p', 'http://127.0.0.5:8000/v1');
  const token = shared.begin();
  dns.records.set('vllm.test', ['127.0.0.6']);
  t.ok(await until(() => fleet.replicas.length === 1, 3000), 'it left');
  t.strictSame(left, [], 'its request is still in flight');
  shared.end(token, 'success', false, null);
  t.ok(await until(() => left.length === 1, 3000), 'the next lookup lets it go');
  t.strictSame(fleet.view().discovery!.draining, []);
});
