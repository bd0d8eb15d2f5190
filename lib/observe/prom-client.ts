// The prom-client classes the gateway's metrics use, from their own modules: the package's
// index also loads its Pushgateway, its cluster aggregator and Summary (a t-digest), which the
// gateway never uses (about 0.15 MB of heap in a running gateway, where node:tls and
// node:cluster are loaded anyway, by undici's HTTP/2 client and by net). They are the very
// objects the index exports (one module cache): test/observe/prom-client.test.ts checks it.

import { createRequire } from 'node:module';
import type * as Prom from 'prom-client';

const require = createRequire(import.meta.url);

export const Registry = require('prom-client/lib/registry.js') as typeof Prom.Registry;
export type Registry = Prom.Registry;
export const Counter = require('prom-client/lib/counter.js') as typeof Prom.Counter;
export type Counter<T extends string = string> = Prom.Counter<T>;
export const Gauge = require('prom-client/lib/gauge.js') as typeof Prom.Gauge;
export type Gauge<T extends string = string> = Prom.Gauge<T>;
export const Histogram = require('prom-client/lib/histogram.js') as typeof Prom.Histogram;
export type Histogram<T extends string = string> = Prom.Histogram<T>;

// prom-client's default metrics (its collectDefaultMetrics), each from its own module, but for the
// process CPU counters: their module loads @opentelemetry/api when it is loaded, for exemplars,
// which the gateway never enables (about 0.45 MB of heap in every gateway, traced or not; the
// API is loaded only with observe.otlp_endpoint). The three counters are made here as that
// module makes them without exemplars. test/observe/prom-client.test.ts holds the output to
// prom-client's own, metric by metric.
type DefaultMetric = (registry: Registry, config: { prefix: string; eventLoopMonitoringPrecision: number }) => void;
const metric = (name: string) => require(`prom-client/lib/metrics/${name}.js`) as DefaultMetric;
const DEFAULT_METRICS: readonly DefaultMetric[] = [
  'processStartTime', 'osMemoryHeap', 'processOpenFileDescriptors', 'processMaxFileDescriptors', 'eventLoopLag',
  ...(typeof process.getActiveResourcesInfo === 'function' ? ['processResources'] : []),
  'processHandles', 'processRequests', 'heapSizeAndUsed', 'heapSpacesSizeAndUsed', 'version', 'gc',
].map(metric);

/** process_cpu_{user,system}_seconds_total and process_cpu_seconds_total, as prom-client's processCpuTotal without exemplars. */
function processCpu(registry: Registry, prefix: string): void {
  let last = process.cpuUsage();
  const registers = [registry];
  const user = new Counter({
    name: `${prefix}process_cpu_user_seconds_total`, help: 'Total user CPU time spent in seconds.', registers,
    // This one metric's collect sets all three.
    collect() {
      const now = process.cpuUsage();
      const userUs = now.user - last.user;
      const systemUs = now.system - last.system;
      last = now;
      user.inc(userUs / 1e6);
      system.inc(systemUs / 1e6);
      total.inc((userUs + systemUs) / 1e6);
    },
  });
  const system = new Counter({ name: `${prefix}process_cpu_system_seconds_total`, help: 'Total system CPU time spent in seconds.', registers });
  const total = new Counter({ name: `${prefix}process_cpu_seconds_total`, help: 'Total user and system CPU time spent in seconds.', registers });
}

/** prom-client's default metrics on `register`, their names prefixed with `prefix`. */
export function collectDefaultMetrics({ register, prefix }: { register: Registry; prefix: string }): void {
  processCpu(register, prefix);
  for (const m of DEFAULT_METRICS) m(register, { prefix, eventLoopMonitoringPrecision: 10 });
}
