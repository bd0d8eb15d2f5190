// Tracing (CONTRACT section 8): with `observe.otlp_endpoint` set, every /v1 request becomes one
// OpenTelemetry span, exported over OTLP/HTTP (JSON) in batches by the official SDK, with the
// GenAI semantic conventions' attributes. An incoming W3C `traceparent` is continued (the span
// is its child) and the upstream gets a `traceparent` naming this span, so the model server's
// own spans join the same trace.
//
// Off by default, and then free: the OpenTelemetry packages are imported only when tracing is
// configured, and a request without tracing carries no span (one undefined check).

import type { IncomingHttpHeaders } from 'node:http';
import type { Attributes, Span, Tracer } from '@opentelemetry/api';
import type { Config } from '../config/types.js';
import type { Logger } from './log.js';

/** The span of one request; `end` is called once, when its record is written. */
export interface RequestSpan {
  /** Headers for the upstream: traceparent (and tracestate when the client sent one). */
  readonly upstreamHeaders: Record<string, string>;
  end(outcome: SpanOutcome): void;
}

export interface SpanOutcome {
  route: string;
  /** GenAI operation: chat, embeddings; undefined for routes that generate nothing. */
  operation: string | undefined;
  requestModel: string | undefined;
  responseModel: string | undefined;
  provider: string | undefined;
  inputTokens: number | undefined;
  outputTokens: number | undefined;
  status: number;
  code: string;
  account: string | undefined;
  units: number | undefined;
  requestId: string;
  stream: boolean;
  /** Time waited in a provider's queue (ms), when the request went through one. */
  queueMs?: number | undefined;
}

export interface Tracing {
  /** Starts a request's span at `startTime` (ms since the epoch), continuing `headers`' traceparent. */
  start(headers: IncomingHttpHeaders, method: string, path: string, startTime: number): RequestSpan;
  /** Exports what is pending, then stops. */
  shutdown(): Promise<void>;
}

/** The OTLP/HTTP traces URL of an endpoint: a base URL gains /v1/traces, a full one is kept. */
export function tracesUrl(endpoint: string): string {
  const u = new URL(endpoint);
  if (!u.pathname.endsWith('/v1/traces')) u.pathname = `${u.pathname.replace(/\/+$/, '')}/v1/traces`;
  return u.toString();
}

/** Tracing as `config.observe` asks, or null when it is off (nothing imported then). */
export async function createTracing(config: Config, logger: Logger): Promise<Tracing | null> {
  const observe = config.observe;
  if (observe.otlp_endpoint === null) return null;
  const [api, core, resources, sdk, otlp] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/exporter-trace-otlp-http'),
  ]);
  const url = tracesUrl(observe.otlp_endpoint);
  const exporter = new otlp.OTLPTraceExporter({ url, headers: { ...observe.otlp_headers } });
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ 'service.name': observe.service_name ?? config.service.name }),
    spanProcessors: [new sdk.BatchSpanProcessor(exporter, { scheduledDelayMillis: observe.export_interval_ms })],
  });
  const tracer: Tracer = provider.getTracer('tollgate');
  const propagator = new core.W3CTraceContextPropagator();
  const getter = {
    keys: (carrier: IncomingHttpHeaders) => Object.keys(carrier),
    get: (carrier: IncomingHttpHeaders, key: string) => carrier[key],
  };
  logger.info({ url: redacted(url) }, 'tracing: spans exported over OTLP/HTTP');

  return {
    start(headers, method, path, startTime) {
      const parent = propagator.extract(api.ROOT_CONTEXT, headers, getter);
      const span: Span = tracer.startSpan(`${method} ${path}`, { kind: api.SpanKind.SERVER, startTime }, parent);
      const upstreamHeaders: Record<string, string> = {};
      propagator.inject(api.trace.setSpan(parent, span), upstreamHeaders, api.defaultTextMapSetter);
      return {
        upstreamHeaders,
        end(o) {
          const attrs: Attributes = {
            'http.request.method': method,
            'http.route': o.route,
            'http.response.status_code': o.status,
            'tollgate.request_id': o.requestId,
          };
          if (o.operation !== undefined) attrs['gen_ai.operation.name'] = o.operation;
          if (o.requestModel !== undefined) attrs['gen_ai.request.model'] = o.requestModel;
          if (o.responseModel !== undefined) attrs['gen_ai.response.model'] = o.responseModel;
          if (o.provider !== undefined) attrs['gen_ai.provider.name'] = o.provider;
          if (o.inputTokens !== undefined) attrs['gen_ai.usage.input_tokens'] = o.inputTokens;
          if (o.outputTokens !== undefined) attrs['gen_ai.usage.output_tokens'] = o.outputTokens;
          if (o.account !== undefined) attrs['tollgate.account'] = o.account;
          if (o.units !== undefined) attrs['tollgate.units_charged'] = o.units;
          if (o.operation !== undefined) attrs['tollgate.stream'] = o.stream;
          if (o.queueMs !== undefined) attrs['tollgate.queue_ms'] = Math.round(o.queueMs);
          if (o.code !== '') attrs['error.type'] = o.code;
          span.setAttributes(attrs);
          // GenAI spans are named "{operation} {model}"; other routes keep "METHOD path".
          if (o.operation !== undefined && o.requestModel !== undefined) span.updateName(`${o.operation} ${o.requestModel}`);
          // As for server spans: the gateway's or the upstream's failures are errors, the caller's are not.
          if (o.status >= 500) {
            span.setStatus({ code: api.SpanStatusCode.ERROR, message: o.code });
          }
          span.end();
        },
      };
    },
    shutdown: () => provider.shutdown(),
  };
}

/** The OTLP URL as the log shows it: no user info, no query value, no fragment. */
export function redacted(url: string): string {
  const u = new URL(url);
  if (u.password !== '') u.password = '***';
  if (u.username !== '') u.username = '***';
  // An API key may ride in the query (?api_key=...): the names are kept, never a value.
  for (const name of [...new Set(u.searchParams.keys())]) u.searchParams.set(name, '***');
  u.hash = '';
  return u.toString();
}
