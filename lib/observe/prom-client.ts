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
export const collectDefaultMetrics = require('prom-client/lib/defaultMetrics.js') as typeof Prom.collectDefaultMetrics;
