// providers.NAME.discover and inference_gateway (CONTRACT section 19) in the config: the
// defaults, and every refusal as `tollgate check` prints it (`path: message`, exit 1), with
// `discover` and `targets` (or base_url) exclusive, refresh_ms bounded, the port and the
// resolver's address checked; a property over resolver strings at the input boundary.

import t from 'tap';
import fc from 'fast-check';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { ConfigError, validateConfig } from '../../lib/config/load.js';
import { resolverAddress } from '../../lib/config/cross-check.js';
import { BIN } from '../helpers/child.js';

function problems(t: any, provider: Record<string, unknown>): string[] {
  try {
    validateConfig({ providers: { vllm: provider } });
  } catch (err) {
    t.ok(err instanceof ConfigError, 'a ConfigError');
    return (err as ConfigError).problems;
  }
  t.fail('the config was accepted');
  return [];
}

const dns = { dns: 'vllm-headless.default.svc.cluster.local', port: 8000 };

t.test('discover: defaults', async (t) => {
  const c = validateConfig({ providers: { vllm: { kind: 'openai', discover: dns } } });
  t.strictSame(c.providers.vllm!.discover, { ...dns, refresh_ms: 5000, resolver: null }, 'refresh_ms 5000, the system resolver');
  t.equal(c.providers.vllm!.inference_gateway, undefined, 'inference_gateway off by default');
  t.equal(c.providers.vllm!.targets, undefined);
  const v6 = validateConfig({ providers: { vllm: { kind: 'anthropic', discover: { ...dns, resolver: '[::1]:5353', refresh_ms: 1000, path: '', metrics_path: '/metrics' } } } });
  t.equal(v6.providers.vllm!.discover!.resolver, '[::1]:5353');
});

t.test('discover: every refusal with its path', async (t) => {
  t.strictSame(problems(t, { kind: 'openai', discover: dns, targets: [{ url: 'http://a:1/v1' }] }),
    ['providers.vllm.discover: set exactly one of base_url, targets and discover (discover and targets are exclusive)']);
  t.strictSame(problems(t, { kind: 'openai', discover: dns, base_url: 'http://a:1/v1' }),
    ['providers.vllm.discover: set exactly one of base_url, targets and discover (discover and base_url are exclusive)']);
  t.strictSame(problems(t, { kind: 'echo', discover: dns }), ['providers.vllm.discover: the echo provider has no replicas']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, refresh_ms: 999 } }), ['providers.vllm.discover.refresh_ms: must be an integer of at least 1000 (ms)']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, refresh_ms: 2 ** 31 } }),
    ['providers.vllm.discover.refresh_ms: must be at most 2147483647 ms (about 24.8 days), the longest timer Node.js supports']);
  for (const port of [0, 65536, 1.5, 'http']) {
    t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, port } }), ['providers.vllm.discover.port: must be an integer from 1 to 65535'], `port ${port}`);
  }
  t.strictSame(problems(t, { kind: 'openai', discover: { port: 8000 } }), ['providers.vllm.discover.dns: is required']);
  t.strictSame(problems(t, { kind: 'openai', discover: { dns: 'x' } }), ['providers.vllm.discover.port: is required']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, dns: 'http://x/' } }), ['providers.vllm.discover.dns: must be a DNS name (letters, digits and -, dot-separated labels)']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, resolver: 'kube-dns:53' } }), ['providers.vllm.discover.resolver: must be an IP address and port (1.2.3.4:53 or [::1]:53)']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, resolver: '10.0.0.300:53' } }),
    ['providers.vllm.discover.resolver: must be an IP address and a port from 1 to 65535 (1.2.3.4:53 or [::1]:53)']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, resolver: '10.0.0.10:0' } }),
    ['providers.vllm.discover.resolver: must be an IP address and a port from 1 to 65535 (1.2.3.4:53 or [::1]:53)']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, path: 'v1' } }), ['providers.vllm.discover.path: must be empty or a path beginning with /']);
  t.strictSame(problems(t, { kind: 'openai', discover: { ...dns, extra: 1 } }), ['providers.vllm.discover.extra: unknown key']);
  t.strictSame(problems(t, { kind: 'openai', discover: dns, inference_gateway: true, headers: { 'X-Gateway-Inference-Objective': 'high' } }),
    ['providers.vllm.headers.X-Gateway-Inference-Objective: is set by inference_gateway from the verified caller; remove it']);
});

t.test('resolver addresses: accepted exactly when an IP address and a port 1-65535 (seeded property)', async () => {
  fc.assert(fc.property(fc.oneof(fc.ipV4(), fc.ipV6()), fc.integer({ min: -10, max: 70_000 }), fc.boolean(), (ip, port, bracket) => {
    const v6 = ip.includes(':');
    const s = `${v6 || bracket ? `[${ip}]` : ip}:${port}`;
    const ok = port >= 1 && port <= 65535 && (v6 ? true : !bracket);
    return (resolverAddress(s) !== undefined) === ok;
  }), { seed: 1919, numRuns: 400 });
  fc.assert(fc.property(fc.string({ maxLength: 40 }), (s) => {
    const r = resolverAddress(s);
    return r === undefined || r === s;
  }), { seed: 7, numRuns: 400 });
});

t.test('discover.dns: any string is accepted as a DNS name or refused with its one message, never a crash (seeded property)', async () => {
  const label = fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$/);
  fc.assert(fc.property(fc.oneof(fc.string({ maxLength: 300 }), fc.array(label, { minLength: 1, maxLength: 6 }).map((l) => l.join('.'))), (name) => {
    let problems: string[] = [];
    try {
      validateConfig({ providers: { vllm: { kind: 'openai', discover: { dns: name, port: 8000 } } } });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems = err.problems;
    }
    const valid = name.length <= 253 && /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/.test(name);
    return valid ? problems.length === 0 : JSON.stringify(problems) === JSON.stringify(['providers.vllm.discover.dns: must be a DNS name (letters, digits and -, dot-separated labels)']);
  }), { seed: 4419, numRuns: 300 });
});

t.test('tollgate check prints the refusals as path: message lines, exit 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-discover-check-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, YAML.stringify({
    providers: {
      both: { kind: 'openai', targets: [{ url: 'http://10.0.0.1:8000/v1' }], discover: { dns: 'vllm', port: 8000 } },
      slow: { kind: 'openai', discover: { dns: 'vllm', port: 70000, refresh_ms: 10, resolver: 'dns.local:53' } },
    },
    models: [{ id: 'm', provider: 'both' }],
  }));
  const run = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, _stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stderr });
    });
  });
  t.equal(run.code, 1, 'exit 1');
  t.strictSame(run.stderr.trimEnd().split('\n').sort(), [
    'providers.both.discover: set exactly one of base_url, targets and discover (discover and targets are exclusive)',
    'providers.slow.discover.port: must be an integer from 1 to 65535',
    'providers.slow.discover.refresh_ms: must be an integer of at least 1000 (ms)',
    'providers.slow.discover.resolver: must be an IP address and port (1.2.3.4:53 or [::1]:53)',
  ].sort());
});
