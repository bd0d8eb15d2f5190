// Pins the fleet keys of a provider (CONTRACT section 7): targets, balance, affinity, metrics,
// max_outstanding, outlier and health_check: their defaults, and every problem with its path.

import t from 'tap';
import { ConfigError, parseConfig, validateConfig } from '../../lib/config/load.js';

function problems(t: any, provider: Record<string, unknown>, extra: Record<string, unknown> = {}): string[] {
  try {
    validateConfig({ providers: { vllm: provider }, ...extra });
  } catch (err) {
    t.ok(err instanceof ConfigError, 'a ConfigError');
    return (err as ConfigError).problems;
  }
  t.fail('the config was accepted');
  return [];
}

t.test('targets with defaults: weight 1, least_outstanding, 256 prefix tokens, no health checks', async (t) => {
  const c = parseConfig([
    'providers:',
    '  vllm:',
    '    kind: openai',
    '    targets:',
    '      - { url: http://10.0.0.11:8000/v1, weight: 2, metrics_url: http://10.0.0.11:8000/metrics }',
    '      - { url: http://10.0.0.12:8000/v1 }',
    '    health_check: {}',
  ].join('\n'), {});
  const p = c.providers.vllm!;
  t.strictSame(p.targets, [
    { url: 'http://10.0.0.11:8000/v1', weight: 2, metrics_url: 'http://10.0.0.11:8000/metrics' },
    { url: 'http://10.0.0.12:8000/v1', weight: 1 },
  ]);
  t.equal(p.base_url, undefined);
  t.equal(p.balance, 'least_outstanding');
  t.equal(p.affinity_prefix_tokens, 256);
  t.equal(p.metrics_interval_ms, 1000);
  t.equal(p.max_outstanding, null);
  t.strictSame(p.outlier, { consecutive_failures: 5, eject_ms: 30000 });
  t.strictSame(p.health_check, { path: '/models', interval_ms: 5000 }, 'an empty health_check takes its defaults');
  t.equal(parseConfig('providers:\n  a:\n    kind: openai\n    base_url: http://x/v1\n', {}).providers.a!.health_check, null, 'off unless asked for');
});

t.test('the contract example of section 7 is accepted as written', async (t) => {
  const c = parseConfig([
    'providers:',
    '  vllm:',
    '    kind: openai',
    '    targets:',
    '      - { url: http://10.0.0.11:8000/v1, weight: 1, metrics_url: http://10.0.0.11:8000/metrics }',
    '      - { url: http://10.0.0.12:8000/v1 }',
    '    balance: prefix_affinity',
    '    affinity_prefix_tokens: 256',
    '    metrics_interval_ms: 1000',
    '    max_outstanding: null',
    '    outlier: { consecutive_failures: 5, eject_ms: 30000 }',
    '    health_check: { path: /models, interval_ms: 5000 }',
  ].join('\n'), {});
  t.equal(c.providers.vllm!.balance, 'prefix_affinity');
  t.equal(c.providers.vllm!.targets!.length, 2);
});

t.test('exactly one of base_url and targets; replicas are URLs, listed once', async (t) => {
  const two = [{ url: 'http://a:1/v1' }, { url: 'http://b:1/v1' }];
  t.strictSame(problems(t, { kind: 'openai', base_url: 'http://a:1/v1', targets: two }), ['providers.vllm.targets: set exactly one of base_url and targets']);
  t.strictSame(problems(t, { kind: 'openai' }), ['providers.vllm.base_url: is required for kind openai (or targets: a list of replicas)']);
  t.strictSame(problems(t, { kind: 'openai', targets: [] }), ['providers.vllm.targets: must be a non-empty list of {url, weight, metrics_url}']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ url: 'ftp://a/v1' }] }), ['providers.vllm.targets[0].url: must be an http:// or https:// URL']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ url: 'http://a:1/v1' }, { url: 'http://a:1/v1/' }] }), ['providers.vllm.targets[1].url: the same replica is listed twice']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ weight: 1 }] }), ['providers.vllm.targets[0].url: is required']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ url: 'http://a:1/v1', wieght: 2 }] }), ['providers.vllm.targets[0].wieght: unknown key']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ url: 'http://a:1/v1', weight: 0 }] }), ['providers.vllm.targets[0].weight: must be a positive integer']);
  t.strictSame(problems(t, { kind: 'openai', targets: [{ url: 'http://a:1/v1', metrics_url: 'nope' }] }), ['providers.vllm.targets[0].metrics_url: must be an http:// or https:// URL']);
  t.strictSame(problems(t, { kind: 'echo', targets: two }), ['providers.vllm.targets: the echo provider has no replicas']);
  t.strictSame(problems(t, { kind: 'openai', targets: 'http://a:1/v1' }), ['providers.vllm.targets: must be a non-empty list of {url, weight, metrics_url}']);
});

t.test('balance, affinity, metrics, max_outstanding, outlier and health_check values', async (t) => {
  const base = { kind: 'openai', targets: [{ url: 'http://a:1/v1' }] };
  t.strictSame(problems(t, { ...base, balance: 'random' }), ['providers.vllm.balance: must be one of round_robin, least_outstanding, prefix_affinity']);
  t.strictSame(problems(t, { ...base, affinity_prefix_tokens: 0 }), ['providers.vllm.affinity_prefix_tokens: must be a positive integer']);
  t.strictSame(problems(t, { ...base, metrics_interval_ms: -5 }), ['providers.vllm.metrics_interval_ms: must be a positive integer']);
  t.strictSame(problems(t, { ...base, max_outstanding: 0 }), ['providers.vllm.max_outstanding: must be a positive integer or null']);
  t.strictSame(problems(t, { ...base, outlier: { consecutive_failures: 0 } }), ['providers.vllm.outlier.consecutive_failures: must be a positive integer']);
  t.strictSame(problems(t, { ...base, outlier: { eject: 5 } }), ['providers.vllm.outlier.eject: unknown key']);
  t.strictSame(problems(t, { ...base, health_check: { path: 'models' } }), ['providers.vllm.health_check.path: must be a path beginning with /']);
  t.strictSame(problems(t, { ...base, health_check: { interval_ms: 1.5 } }), ['providers.vllm.health_check.interval_ms: must be a positive integer']);
  // Every problem at once, each with its path.
  t.strictSame(problems(t, { kind: 'openai', base_url: 'http://a/v1', targets: [{ url: 'x' }], balance: 'x' }), [
    'providers.vllm.targets[0].url: must be an http:// or https:// URL',
    'providers.vllm.balance: must be one of round_robin, least_outstanding, prefix_affinity',
    'providers.vllm.targets: set exactly one of base_url and targets',
  ]);
});

t.test('the queue (CONTRACT section 13): providers.*.queue and plans.*.priority / fair_weight, defaults and problems', async (t) => {
  const c = validateConfig({ plans: { free: {} }, providers: { vllm: { kind: 'openai', targets: [{ url: 'http://a:1/v1' }], max_outstanding: 8 } } });
  t.strictSame(c.providers.vllm!.queue, { max_wait_ms: 30000, max_queued: 1000, fairness: 'account' });
  t.equal(c.plans.free!.priority, 'normal');
  t.equal(c.plans.free!.fair_weight, 1);
  t.equal(validateConfig({ providers: { vllm: { kind: 'openai', base_url: 'http://a:1/v1', queue: null } } }).providers.vllm!.queue, null, 'null: no queue');
  t.equal(validateConfig({ plans: { p: { fair_weight: 0.5 } } }).plans.p!.fair_weight, 0.5, 'a fractional weight');

  const base = { kind: 'openai', targets: [{ url: 'http://a:1/v1' }], max_outstanding: 8 };
  t.strictSame(problems(t, { ...base, queue: { fairness: 'user' } }), ['providers.vllm.queue.fairness: must be one of account, key, none']);
  t.strictSame(problems(t, { ...base, queue: { max_wait_ms: 0 } }), ['providers.vllm.queue.max_wait_ms: must be a positive integer']);
  t.strictSame(problems(t, { ...base, queue: { max_queued: -1 } }), ['providers.vllm.queue.max_queued: must be a non-negative integer']);
  t.strictSame(problems(t, { ...base, queue: { size: 3 } }), ['providers.vllm.queue.size: unknown key']);
  t.strictSame(problems(t, base, { plans: { free: { priority: 'urgent' } } }), ['plans.free.priority: must be one of high, normal, low']);
  t.strictSame(problems(t, base, { plans: { free: { fair_weight: 0 } } }), ['plans.free.fair_weight: must be a number above 0 and at most 1000000']);
});
