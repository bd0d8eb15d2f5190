// The operator's paths: /healthz (the process answers), /readyz (it should get traffic: not
// draining, started, catalog populated, accounts seeded, store reachable) and /metrics
// (Prometheus). GET and HEAD only; never authenticated, never metered.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError, clip } from '../errors.js';
import { requestIdFor } from '../http/request-id.js';
import { sendError, sendJson, sendWhole } from '../http/respond.js';
import type { Logger } from '../observe/log.js';
import type { Metrics } from '../observe/metrics.js';
import type { GatewayState } from '../state.js';

/** What the ops paths read of the gateway. */
export interface OpsView {
  readonly draining: boolean;
  readonly state: GatewayState | undefined;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

export async function serveOps(req: IncomingMessage, res: ServerResponse, path: string, gw: OpsView): Promise<void> {
  const requestId = requestIdFor(req.headers['x-request-id']);
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    sendError(res, new GatewayError('method_not_allowed', `Method ${clip(req.method ?? '', 16)} is not allowed on ${path}; use GET.`, {
      headers: { allow: 'GET, HEAD' },
    }), requestId);
    return;
  }
  if (path === '/healthz') {
    sendJson(res, 200, '{"status":"ok"}', { 'cache-control': 'no-store' });
  } else if (path === '/readyz') {
    const problems: string[] = [];
    if (gw.draining) problems.push('draining');
    if (gw.state === undefined) problems.push('starting');
    else {
      if (gw.state.catalog.size === 0) problems.push('catalog empty');
      if (!gw.state.seeded) problems.push('accounts not seeded');
      try {
        await gw.state.store.ping();
      } catch {
        problems.push('store unreachable');
      }
    }
    const ok = problems.length === 0;
    sendJson(res, ok ? 200 : 503, JSON.stringify(ok ? { status: 'ready' } : { status: 'not_ready', problems }), { 'cache-control': 'no-store' });
  } else {
    try {
      const text = await gw.metrics.registry.metrics();
      sendWhole(res, 200, text, { 'content-type': gw.metrics.registry.contentType, 'cache-control': 'no-store' });
    } catch (err) {
      gw.logger.error({ err }, 'metrics collection failed');
      sendError(res, new GatewayError('internal_error', 'Metrics could not be collected.'), requestId);
    }
  }
}
