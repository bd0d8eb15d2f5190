// Tracing (CONTRACT section 8): with observe.otlp_endpoint set, each request reaches a test
// OTLP/HTTP receiver (a real server decoding the exporter's JSON) as a span with the GenAI
// attributes; an incoming traceparent is continued and the upstream gets one in the same
// trace, naming the request's span. Off by default: no traceparent upstream, and the
// OpenTelemetry packages are never even imported (checked in a child process).

import t from 'tap';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { validateConfig } from '../../lib/config/load.js';
import { tracesUrl } from '../../lib/observe/trace.js';
import { serveChild } from '../helpers/child.js';
import { DEMO_KEY, authHeaders, baseConfig, postChat, startGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, streamFrames, writeSse } from '../helpers/upstream.js';
import { httpHandler } from '../helpers/async-handler.js';

interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  status?: { code?: number; message?: string };
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
}

/** OTLP/HTTP JSON attributes -> plain values (intValue may come as a string). */
function attrs(list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) {
    if ('intValue' in value) out[key] = Number(value.intValue);
    else if ('stringValue' in value) out[key] = value.stringValue;
    else if ('boolValue' in value) out[key] = value.boolValue;
    else if ('doubleValue' in value) out[key] = value.doubleValue;
  }
  return out;
}

const spans: ReceivedSpan[] = [];
const exports: Array<{ path: string; headers: Record<string, unknown> }> = [];
const receiver: Server = createServer(httpHandler(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  exports.push({ path: req.url ?? '', headers: req.headers });
  if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).includes('application/json')) {
    res.writeHead(400).end();
    return;
  }
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  for (const rs of body.resourceSpans ?? []) {
    const resource = attrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId, name: s.name, kind: s.kind, status: s.status,
          attributes: attrs(s.attributes), resource,
        });
      }
    }
  }
  res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
}));
await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
t.teardown(() => new Promise<void>((r) => receiver.close(() => r())));

const upstream = await startUpstream(async (_req, res, body) => {
  if (String(body.messages?.at(-1)?.content).startsWith('fail')) return json(res, 500, { error: { message: 'boom' } });
  if (body.stream === true) return writeSse(res, streamFrames(['a ', 'b']));
  return json(res, 200, completionBody('hello'));
});
t.teardown(() => upstream.close());

function config(observe?: Record<string, unknown>): Record<string, any> {
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: upstream.baseUrl };
  c.models.push({ id: 'm', provider: 'up', upstream_model: 'internal/m' });
  c.routing = { auto: ['m'] };
  if (observe !== undefined) c.observe = observe;
  return c;
}

async function spanOf(requestId: string): Promise<ReceivedSpan> {
  for (let i = 0; i < 400; i++) {
    const s = spans.find((x) => x.attributes['tollgate.request_id'] === requestId);
    if (s !== undefined) return s;
    await sleep(10);
  }
  throw new Error(`no span for ${requestId}`);
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;

t.test('a request is one span with the GenAI attributes; its traceparent is continued to the upstream', async (t) => {
  const gw = await startGateway(config({ otlp_endpoint: receiverUrl, export_interval_ms: 50, otlp_headers: { 'x-collector-key': 'k-123' } }));
  t.teardown(() => gw.close());
  const traceId = '0af7651916cd43dd8448eb211c80319c';
  const parent = 'b7ad6b7169203331';
  const before = upstream.requests.length;
  const res = await postChat(gw.url, { model: 'auto', messages: [{ role: 'user', content: 'hi' }] },
    { ...authHeaders(), traceparent: `00-${traceId}-${parent}-01`, 'x-request-id': 'trace-1' });
  t.equal(res.status, 200);
  const sent = upstream.requests[before]!.headers.traceparent as string;
  const m = TRACEPARENT.exec(sent);
  t.ok(m, `the upstream got a traceparent: ${sent}`);
  t.equal(m![1], traceId, 'in the client\'s trace');
  t.not(m![2], parent, 'naming the gateway\'s span as its parent, not the client\'s');

  const span = await spanOf('trace-1');
  t.equal(span.traceId, traceId);
  t.equal(span.parentSpanId, parent, 'the client\'s span is its parent');
  t.equal(span.spanId, m![2], 'the upstream\'s parent is this span');
  t.equal(span.name, 'chat auto');
  t.equal(span.kind, 2, 'a server span');
  t.match(span.attributes, {
    'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'auto', 'gen_ai.response.model': 'm', 'gen_ai.provider.name': 'up',
    'gen_ai.usage.input_tokens': 12, 'gen_ai.usage.output_tokens': 7, 'http.response.status_code': 200, 'http.route': '/v1/chat/completions',
    'tollgate.account': 'demo',
  });
  t.equal(span.resource['service.name'], 'tollgate');
  t.equal(exports.at(-1)!.path, '/v1/traces', 'a base URL gains /v1/traces');
  t.equal(exports.at(-1)!.headers['x-collector-key'], 'k-123', 'with the configured headers');
});

t.test('a stream without traceparent starts a trace; a failure is an error span', async (t) => {
  const gw = await startGateway(config({ otlp_endpoint: `${receiverUrl}/v1/traces`, export_interval_ms: 50, service_name: 'edge-gw' }));
  t.teardown(() => gw.close());
  const before = upstream.requests.length;
  const res = await postChat(gw.url, { model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }, { ...authHeaders(), 'x-request-id': 'trace-2' });
  t.equal(res.status, 200);
  const m = TRACEPARENT.exec(upstream.requests[before]!.headers.traceparent as string)!;
  const span = await spanOf('trace-2');
  t.equal(span.traceId, m[1], 'the upstream is in the span\'s trace');
  t.equal(span.spanId, m[2]);
  t.notOk(span.parentSpanId, 'a root span');
  t.match(span.attributes, { 'gen_ai.request.model': 'm', 'gen_ai.response.model': 'm', 'gen_ai.usage.input_tokens': 12, 'gen_ai.usage.output_tokens': 2, 'tollgate.stream': true });
  t.equal(span.resource['service.name'], 'edge-gw');

  const failed = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'fail' }] }, { ...authHeaders(), 'x-request-id': 'trace-3' });
  t.equal(failed.status, 502);
  const bad = await spanOf('trace-3');
  t.equal(bad.status?.code, 2, 'status ERROR');
  t.match(bad.attributes, { 'error.type': 'provider_error', 'http.response.status_code': 502 });

  const refused = await postChat(gw.url, { model: 'm', messages: [] }, { ...authHeaders(), 'x-request-id': 'trace-4' });
  t.equal(refused.status, 400);
  const r = await spanOf('trace-4');
  t.match(r.attributes, { 'error.type': 'invalid_value', 'http.response.status_code': 400 });
  t.notOk(r.status?.code === 2, 'a caller\'s mistake is not an error of the gateway');

  const bogus = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, { ...authHeaders(), traceparent: 'zz-not-a-trace', 'x-request-id': 'trace-5' });
  t.equal(bogus.status, 200, 'a malformed traceparent is ignored');
  t.notOk((await spanOf('trace-5')).parentSpanId);

  const unsampledTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
  const before2 = upstream.requests.length;
  const unsampled = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
    { ...authHeaders(), traceparent: `00-${unsampledTrace}-00f067aa0ba902b7-00`, 'x-request-id': 'trace-6' });
  t.equal(unsampled.status, 200);
  t.match(upstream.requests[before2]!.headers.traceparent, new RegExp(`^00-${unsampledTrace}-[0-9a-f]{16}-00$`), 'continued, not sampled');
  const after = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, { ...authHeaders(), 'x-request-id': 'trace-7' });
  t.equal(after.status, 200);
  await spanOf('trace-7');
  t.notOk(spans.some((s) => s.traceId === unsampledTrace), 'the caller chose not to sample: no span exported');
});

t.test('off by default: no traceparent upstream', async (t) => {
  const gw = await startGateway(config());
  t.teardown(() => gw.close());
  const before = upstream.requests.length;
  const res = await postChat(gw.url, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, { ...authHeaders(), traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' });
  t.equal(res.status, 200);
  t.equal(upstream.requests[before]!.headers.traceparent, undefined);
});

t.test('off by default, the OpenTelemetry packages are not even loaded (child processes)', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-trace-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  // A resolve hook that notes every @opentelemetry module the process asks for.
  const hook = `export async function resolve(s, c, next) { if (s.includes('@opentelemetry/')) (await import('node:fs')).appendFileSync(process.env.OTEL_LOG, s + '\\n'); return next(s, c); }`;
  const register = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hook)}`)});`;
  const importFlag = `--import=data:text/javascript,${encodeURIComponent(register)}`;
  const loaded: Record<string, string> = {};
  for (const [name, observe] of [['off', ''], ['on', `observe: { otlp_endpoint: "${receiverUrl}", export_interval_ms: 50 }\n`]] as const) {
    const file = join(dir, `${name}.yaml`);
    const log = join(dir, `${name}.log`);
    await writeFile(log, '');
    await writeFile(file, `server: { port: 0 }\naccounts: [{ id: demo, plan: free, wallet_units: 100000, keys: [${DEMO_KEY}] }]\n` +
      `providers: { up: { kind: openai, base_url: "${upstream.baseUrl}" } }\nmodels: [{ id: m, provider: up }]\n${observe}`);
    const child = await serveChild(t, file, { NODE_OPTIONS: importFlag, OTEL_LOG: log });
    const res = await postChat(child.url, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200, name);
    child.proc.kill('SIGTERM');
    await new Promise((r) => child.proc.once('exit', r));
    loaded[name] = await readFile(log, 'utf8');
  }
  t.match(loaded.on, /@opentelemetry\/sdk-trace-base/, 'the hook sees the packages when tracing is on');
  t.equal(loaded.off, '', 'and none when it is off');
});

t.test('config: observe and usage keys are checked', async (t) => {
  const problems = (c: Record<string, any>) => {
    try { validateConfig(c); return ''; } catch (e) { return (e as Error).message; }
  };
  t.equal(problems({ observe: { otlp_endpoint: null }, usage: { retention_days: 1 } }), '');
  t.match(problems({ observe: { otlp_endpoint: 'collector:4318' } }), /observe\.otlp_endpoint: must be an http:\/\/ or https:\/\/ URL, or null/);
  t.match(problems({ observe: { otlp_endpoint: 42 } }), /observe\.otlp_endpoint/);
  t.match(problems({ observe: { export_interval_ms: 0 } }), /observe\.export_interval_ms: must be a positive integer/);
  t.match(problems({ observe: { otlp_headers: { a: ['x'] } } }), /observe\.otlp_headers\.a/);
  t.match(problems({ observe: { sample: 1 } }), /observe.*sample/);
  t.match(problems({ usage: { retention_days: 0 } }), /usage\.retention_days: must be a positive integer/);
  t.match(problems({ usage: { retention_days: 1.5 } }), /usage\.retention_days: must be a positive integer/);
  t.match(problems({ usage: { retention_days: 36501 } }), /usage\.retention_days: must be at most 36500/);
  t.match(problems({ usage: { retention_days: 'ninety' } }), /usage\.retention_days/);
  t.equal(validateConfig({ usage: { retention_days: '30' } }).usage.retention_days, 30, 'a number from ${ENV} is taken, as everywhere in the config');
  t.match(problems({ usage: { keep: 3 } }), /usage.*keep/);
  const defaults = validateConfig({});
  t.strictSame(defaults.usage, { retention_days: 90 });
  t.strictSame(defaults.observe, { otlp_endpoint: null, otlp_headers: {}, service_name: null, export_interval_ms: 1000 });
  t.equal(tracesUrl('http://c:4318'), 'http://c:4318/v1/traces');
  t.equal(tracesUrl('http://c:4318/'), 'http://c:4318/v1/traces');
  t.equal(tracesUrl('https://c/otel/v1/traces'), 'https://c/otel/v1/traces');
});

t.test('the OTLP URL in the log: no password, no query value, no fragment', async (t) => {
  const { redacted } = await import('../../lib/observe/trace.js');
  t.equal(redacted('http://user:pw@collector:4318/v1/traces?api_key=OTLPSECRET&x=1#frag'), 'http://***:***@collector:4318/v1/traces?api_key=***&x=***');
  t.equal(redacted('http://collector:4318/v1/traces'), 'http://collector:4318/v1/traces');
});
