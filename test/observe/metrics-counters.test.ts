// The request path's counters (requests, tokens, units) are added up by Metrics and handed to
// prom-client when the registry is read: what /metrics shows must be exactly what incrementing
// prom-client directly would show, at every read.

import t from 'tap';
import { Counter, Registry } from 'prom-client';
import { Metrics } from '../../lib/observe/metrics.js';

const series = (text: string) => text.split('\n').filter((l) => /^tollgate_(requests_total|tokens_total|units_charged_total)/.test(l)).sort();

t.test('deferred counts read exactly as direct increments, across reads', async (t) => {
  const m = new Metrics();
  const reg = new Registry();
  const requests = new Counter({ name: 'tollgate_requests_total', help: 'x', labelNames: ['route', 'status', 'code'], registers: [reg] });
  const tokens = new Counter({ name: 'tollgate_tokens_total', help: 'x', labelNames: ['kind'], registers: [reg] });
  const units = new Counter({ name: 'tollgate_units_charged_total', help: 'x', registers: [reg] });
  tokens.inc({ kind: 'prompt' }, 0);
  tokens.inc({ kind: 'completion' }, 0);
  units.inc(0);
  const steps: Array<() => void> = [];
  for (let i = 0; i < 50; i++) {
    const route = ['chat', 'messages', 'embeddings'][i % 3]!;
    const status = [200, 429, 499][i % 3]!;
    const code = status === 200 ? '' : status === 429 ? 'rate_limit_exceeded' : 'client_closed_request';
    steps.push(() => { m.countRequest(route, status, code); requests.inc({ route, status: String(status), code }); });
    steps.push(() => { m.countTokens(i * 7, i % 5); tokens.inc({ kind: 'prompt' }, i * 7); tokens.inc({ kind: 'completion' }, i % 5); });
    steps.push(() => { m.countUnits(i * 1_000_003); units.inc(i * 1_000_003); });
  }
  for (let i = 0; i < steps.length; i++) {
    steps[i]!();
    if (i % 17 === 0) t.strictSame(series(await m.registry.metrics()), series(await reg.metrics()), `read after step ${i}`);
  }
  t.strictSame(series(await m.registry.metrics()), series(await reg.metrics()), 'the last read');
  t.equal(series(await m.registry.metrics()).length, 6, 'three request series, two token kinds, units');
});
