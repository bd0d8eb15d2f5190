// lib/observe/prom-client.ts loads prom-client's classes from their own modules, not from its
// index: they must be the very objects the index exports, and a registry of them must still
// expose the default metrics and the gateway's own in the text format. Its default metrics are
// prom-client's, taken module by module but for the process CPU counters (whose module loads
// @opentelemetry/api): the same metrics, names, help, types and series as prom-client's own.

import t from 'tap';
import * as prom from 'prom-client';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from '../../lib/observe/prom-client.js';

t.test('the same classes and functions as the index', async (t) => {
  t.equal(Registry, prom.Registry);
  t.equal(Counter, prom.Counter);
  t.equal(Gauge, prom.Gauge);
  t.equal(Histogram, prom.Histogram);
});

/** A registry's text without the values: every comment line, and each series' name and labels. */
function shape(text: string): string[] {
  return text.split('\n').filter(Boolean).map((line) => (line.startsWith('#') ? line : line.replace(/ [^ ]+$/, '')));
}

t.test("the default metrics are prom-client's own, series by series", async (t) => {
  const ours = new Registry();
  collectDefaultMetrics({ register: ours, prefix: 'x_' });
  const theirs = new Registry();
  prom.collectDefaultMetrics({ register: theirs, prefix: 'x_' });
  // Both loops' event-loop lag and GC observers have run at least once.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const [a, b] = [await ours.metrics(), await theirs.metrics()];
  t.ok(shape(a).length > 40, `the default metrics are there (${shape(a).length} lines)`);
  t.same(shape(a), shape(b), 'the same metrics, help, types and series, in the same order');
  const cpu = (text: string, name: string) => Number(text.match(new RegExp(`^x_process_cpu_${name} (\\S+)$`, 'm'))?.[1]);
  for (let i = 0; i < 2e6; i++) Math.sqrt(i); // some CPU between two reads
  const later = await ours.metrics();
  t.ok(cpu(later, 'user_seconds_total') >= cpu(a, 'user_seconds_total'), 'user CPU only grows');
  t.ok(cpu(later, 'seconds_total') > 0, 'total CPU is counted');
  t.ok(Math.abs(cpu(later, 'seconds_total') - cpu(later, 'user_seconds_total') - cpu(later, 'system_seconds_total')) < 1e-6, 'total = user + system');
});

t.test('a registry renders default metrics and its own series', async (t) => {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'x_' });
  const c = new Counter({ name: 'x_requests_total', help: 'h', labelNames: ['a'], registers: [registry] });
  c.inc({ a: 'b' }, 2);
  const text = await registry.metrics();
  t.match(text, /^x_requests_total\{a="b"\} 2$/m);
  t.match(text, /^x_process_cpu_seconds_total /m);
  t.match(text, /^x_nodejs_eventloop_lag_seconds /m);
});
