// The store's scale-out keys (CONTRACT section 9): store.sentinel and store.cluster, one way to
// reach Redis at a time, host:port lists, store.wait_replicas and its timeout below
// store.timeout_ms; `tollgate check` lists every such problem at once. Host:port parsing is
// property-tested: what the config accepts, the store can connect to, exactly as written.

import t from 'tap';
import fc from 'fast-check';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, parseConfig, validateConfig } from '../../lib/config/load.js';
import { topologyOf } from '../../lib/store/index.js';
import { hostPort } from '../../lib/store/redis/connect.js';
import { BIN } from '../helpers/child.js';

function problems(f: () => unknown): string[] {
  try {
    f();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('accepted');
}
const store = (yaml: string) => () => parseConfig(`store:\n${yaml}`, {});
const sorted = (lines: string[]) => [...lines].sort();

t.test('sentinel and cluster: accepted, defaults, and the topology the store uses', async (t) => {
  const s = parseConfig('store:\n  kind: redis\n  sentinel: {name: mymaster, sentinels: ["10.0.0.1:26379", "[::1]:26380", "s3.example:26381"]}\n  password: pw\n', {}).store;
  t.strictSame(s.sentinel, { name: 'mymaster', sentinels: ['10.0.0.1:26379', '[::1]:26380', 's3.example:26381'], sentinel_password: null });
  t.equal(s.cluster, null);
  t.equal(s.wait_replicas, 0, 'no WAIT unless asked');
  t.equal(s.wait_timeout_ms, 500, 'half of timeout_ms by default');
  t.strictSame(topologyOf(s), { kind: 'sentinel', name: 'mymaster', sentinels: ['10.0.0.1:26379', '[::1]:26380', 's3.example:26381'], password: 'pw', sentinelPassword: null });

  const c = parseConfig('store:\n  kind: redis\n  cluster: ["127.0.0.1:7000", "127.0.0.1:7001"]\n  wait_replicas: 1\n  timeout_ms: 300\n', {}).store;
  t.strictSame(topologyOf(c), { kind: 'cluster', nodes: ['127.0.0.1:7000', '127.0.0.1:7001'], password: null });
  t.equal(c.wait_replicas, 1);
  t.equal(c.wait_timeout_ms, 150);

  const u = parseConfig('store:\n  kind: redis\n  url: redis://:secret@db:6380/2\n  wait_replicas: 2\n  wait_timeout_ms: 999\n  timeout_ms: 1000\n', {}).store;
  t.strictSame(topologyOf(u), { kind: 'url', url: 'redis://:secret@db:6380/2' });
  t.equal(u.wait_timeout_ms, 999);
  t.equal(parseConfig('', {}).store.url, 'redis://127.0.0.1:6379', 'url keeps its default when nothing is given');
});

t.test('one way to reach Redis, only with kind redis; each problem names its field', async (t) => {
  const hint = 'give one of store.url, store.sentinel, store.cluster';
  t.strictSame(problems(store('  kind: redis\n  url: redis://x:1\n  sentinel: {name: m, sentinels: ["a:1"]}\n')),
    [`store.sentinel: cannot be combined with store.url; ${hint}`]);
  t.strictSame(sorted(problems(store('  kind: redis\n  url: redis://x:1\n  sentinel: {name: m, sentinels: ["a:1"]}\n  cluster: ["b:2"]\n'))),
    sorted([`store.sentinel: cannot be combined with store.url; ${hint}`, `store.cluster: cannot be combined with store.url; ${hint}`]));
  t.strictSame(problems(store('  kind: redis\n  sentinel: {name: m, sentinels: ["a:1"]}\n  cluster: ["b:2"]\n')),
    [`store.cluster: cannot be combined with store.sentinel; ${hint}`]);
  t.strictSame(sorted(problems(store('  cluster: ["b:2"]\n  sentinel: {name: m, sentinels: ["a:1"]}\n  wait_replicas: 1\n'))), sorted([
    `store.cluster: cannot be combined with store.sentinel; ${hint}`,
    'store.sentinel: needs store.kind redis', 'store.cluster: needs store.kind redis', 'store.wait_replicas: needs store.kind redis',
  ]), 'kind memory (the default) takes none of them');
  t.ok(validateConfig({ store: { kind: 'redis', url: 'redis://x:1', sentinel: null, cluster: null } }), 'null is the same as absent');
});

t.test('store.url: what ioredis can open, or a problem that never quotes the URL', async (t) => {
  const url = (u: string) => problems(store(`  kind: redis\n  url: ${JSON.stringify(u)}\n`));
  const form = 'store.url: must be a redis:// or rediss:// URL (redis://[:PASSWORD@]HOST[:PORT][/DB])';
  t.strictSame(url('not a url'), [form]);
  t.strictSame(url(''), [form], 'empty (an unset variable) is no silent default');
  t.strictSame(url('redis://127.0.0.1:99999'), [form], 'a port out of range');
  t.strictSame(url('http://127.0.0.1:6379'), [form]);
  t.strictSame(url('redis://:pa%ss@127.0.0.1:6379'), ['store.url: its user or password is not valid percent-encoding (write % as %25)']);
  t.strictSame(url('redis://127.0.0.1:6379/db'), ['store.url: its path must be a database number (redis://HOST:PORT/0)']);
  for (const ok of ['redis://127.0.0.1:6379', 'rediss://user:p%25w@db.internal:6380/3', 'redis://[::1]:6379/', 'redis://db']) {
    t.ok(parseConfig(`store:\n  kind: redis\n  url: ${JSON.stringify(ok)}\n`, {}), `${ok} is accepted`);
  }
});

t.test('host:port lists, sentinel fields, WAIT bounds', async (t) => {
  const r = '  kind: redis\n';
  t.strictSame(problems(store(`${r}  cluster: []\n`)), ['store.cluster: must be a non-empty list of host:port']);
  t.strictSame(problems(store(`${r}  cluster: "a:1"\n`)), ['store.cluster: must be a non-empty list of host:port']);
  t.strictSame(problems(store(`${r}  cluster: ["a:1", "nohost", "a b:1", "a:", "::1:6379"]\n`)),
    ['store.cluster[1]: must be host:port', 'store.cluster[2]: must be host:port', 'store.cluster[3]: must be host:port', 'store.cluster[4]: must be host:port']);
  t.strictSame(problems(store(`${r}  cluster: ["a:0", "b:65536", "c:65535"]\n`)),
    ['store.cluster[0]: port must be from 1 to 65535', 'store.cluster[1]: port must be from 1 to 65535']);
  t.strictSame(problems(store(`${r}  sentinel: {sentinels: ["a:1"]}\n`)), ['store.sentinel.name: is required']);
  t.strictSame(problems(store(`${r}  sentinel: {name: "", sentinels: []}\n`)), [
    'store.sentinel.name: must be a non-empty string (the master group name Sentinel monitors)',
    'store.sentinel.sentinels: must be a non-empty list of host:port',
  ]);
  t.strictSame(problems(store(`${r}  sentinel: {name: m, sentinels: ["a:99999"], master: x}\n`)),
    ['store.sentinel.master: unknown key', 'store.sentinel.sentinels[0]: port must be from 1 to 65535']);
  t.strictSame(problems(store(`${r}  cluster: ["a:1"]\n  prefix: "tg{}:"\n`)),
    ['store.prefix: must not contain { or } with store.cluster (hash tags keep each account in one slot)']);
  t.ok(parseConfig(`store:\n${r}  url: redis://x:1\n  prefix: "tg{x}:"\n`, {}), 'one Redis takes any prefix');
  t.strictSame(problems(store(`${r}  wait_replicas: -1\n`)), ['store.wait_replicas: must be a non-negative integer']);
  t.strictSame(problems(store(`${r}  wait_timeout_ms: 0\n`)), ['store.wait_timeout_ms: must be a positive integer']);
  t.strictSame(problems(store(`${r}  wait_replicas: 1\n  wait_timeout_ms: 1000\n`)),
    ['store.wait_timeout_ms: must be less than store.timeout_ms (1000), which bounds every store call']);
  t.strictSame(problems(store(`${r}  wait_timeout_ms: 200\n  timeout_ms: 200\n`)),
    ['store.wait_timeout_ms: must be less than store.timeout_ms (200), which bounds every store call']);
});

t.test('tollgate check lists the store problems with the others, exit 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-topology-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'bad.yaml');
  await writeFile(file, 'store:\n  kind: redis\n  url: redis://x:1\n  cluster: ["a:1", "b"]\n  wait_timeout_ms: 5000\naccounts:\n  - {id: a, plan: gold}\n');
  const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : (err as any).code ?? null, stdout, stderr });
    });
  });
  t.equal(r.code, 1);
  t.equal(r.stdout, '');
  t.strictSame(sorted(r.stderr.trimEnd().split('\n')), sorted([
    'store.cluster[1]: must be host:port',
    'accounts[0].plan: unknown plan "gold"',
    'store.cluster: cannot be combined with store.url; give one of store.url, store.sentinel, store.cluster',
    'store.wait_timeout_ms: must be less than store.timeout_ms (1000), which bounds every store call',
  ]));
});

t.test('property: host:port the config accepts is what the store connects to', async (t) => {
  const label = fc.stringMatching(/^[A-Za-z0-9._-]{1,20}$/);
  const ipv6 = fc.ipV6().map((a) => `[${a}]`);
  const host = fc.oneof(label, fc.ipV4(), ipv6);
  let checked = 0;
  fc.assert(fc.property(host, fc.integer({ min: 1, max: 65535 }), (h, port) => {
    const text = `${h}:${port}`;
    const c = validateConfig({ store: { kind: 'redis', cluster: [text] } });
    const parsed = hostPort(c.store.cluster![0]!);
    checked++;
    return parsed.port === port && (h.startsWith('[') ? `[${parsed.host}]` === h : parsed.host === h);
  }), { numRuns: 300 });
  t.equal(checked, 300, 'every generated host:port was accepted and read back exactly');

  // Arbitrary text: accepted only if it reads as host:port with a port in range; never a crash.
  let judged = 0;
  fc.assert(fc.property(fc.string({ maxLength: 30 }), (text) => {
    let accepted = true;
    try { validateConfig({ store: { kind: 'redis', cluster: [text] } }); } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      accepted = false;
      for (const p of err.problems) if (!p.startsWith('store.cluster[0]: ')) return false;
    }
    judged++;
    if (!accepted) return true;
    const { port } = hostPort(text);
    return port >= 1 && port <= 65535;
  }), { numRuns: 500 });
  t.equal(judged, 500, 'every arbitrary string was judged');
});
