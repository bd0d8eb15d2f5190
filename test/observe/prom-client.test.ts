// lib/observe/prom-client.ts loads prom-client's classes from their own modules, not from its
// index: they must be the very objects the index exports, and a registry of them must still
// expose the default metrics and the gateway's own in the text format.

import t from 'tap';
import * as prom from 'prom-client';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from '../../lib/observe/prom-client.js';

t.test('the same classes and functions as the index', async (t) => {
  t.equal(Registry, prom.Registry);
  t.equal(Counter, prom.Counter);
  t.equal(Gauge, prom.Gauge);
  t.equal(Histogram, prom.Histogram);
  t.equal(collectDefaultMetrics, prom.collectDefaultMetrics);
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
