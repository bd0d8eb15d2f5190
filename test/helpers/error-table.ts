// The table of section 7 errors (spec chat-completion-service-v1.md, CONTRACT section 4) that
// every dialect must answer in its own shape: before the first byte with the real status, its
// headers (x-request-id, Retry-After on 429/503) and nothing consumed (balance unchanged, no
// hold left); after the first byte of a stream as the dialect's in-stream error, charged once
// for what was delivered. Each dialect's test file supplies a DialectSpec and calls runErrorTable.

import { HttpProvider } from '../../lib/providers/http-provider.js';
import { OpenAIProvider } from '../../lib/providers/openai/index.js';
import { schemas } from './schemas.js';
import {
  ADMIN, KEYS, PARTIAL_TOKENS, PNG, account, deadPort, jwt, settledAccount, startRig, type AccountId, type Kind, type Rig,
} from './error-rig.js';

export interface Answer { status: number; headers: Headers; text: string }

export interface BodyOptions { model: string; text: string; stream?: boolean; images?: string[] }

export interface DialectSpec {
  name: string;
  path: string;
  /** Does the route stream (Messages, Responses) or not (embeddings)? */
  streams: boolean;
  /** Does the route take images? */
  images: boolean;
  /** The rig's models as this route serves them. */
  models: { main: string; paid: string; tiny: string };
  headers(credential: string): Record<string, string>;
  body(o: BodyOptions): unknown;
  /** The 400s this dialect's parser raises: [code, param, body]. */
  invalid(): Array<[string, string, unknown]>;
  /** A body with an image whose URL is not acceptable (image routes only). */
  badImage?(): unknown;
  /** Asserts the dialect's error shape for `status`/`code`; returns the fields extras live beside. */
  errorFields(t: any, res: Answer, status: number, code: string): Record<string, any>;
  /** Asserts the dialect's error after the first byte (and no normal close); returns its code. */
  streamError?(t: any, text: string, requestId: string): string;
}

/** A data URL of a real PNG. */
export const IMAGE = `data:image/png;base64,${PNG}`;

async function send(rig: Rig, spec: DialectSpec, body: unknown, credential: string = KEYS.demo, signal?: AbortSignal): Promise<Answer> {
  const res = await fetch(`${rig.gw.url}${spec.path}`, {
    method: 'POST', headers: spec.headers(credential), body: typeof body === 'string' ? body : JSON.stringify(body), signal,
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

interface Case {
  name: string;
  status: number;
  code: string;
  account?: AccountId;
  /** Extra fields the error carries, as the dialect places them. */
  extras?: Record<string, unknown>;
  /** Answers carry Retry-After (429, 503). */
  retry?: boolean;
  /** Runs the request (default: the body with the account's key). */
  run?: (rig: Rig) => Promise<Answer>;
  body?: () => unknown;
  credential?: () => Promise<string>;
  /** Runs before the balance is read (e.g. the request that uses up the minute). */
  prepare?: (rig: Rig) => Promise<void>;
  /** Also through a streaming request (errors that only the upstream causes). */
  stream?: boolean;
}

function cases(spec: DialectSpec): Case[] {
  const { main, paid, tiny } = spec.models;
  const ask = (text = 'Hello', model = main, stream = false) => spec.body({ model, text, stream });
  const list: Case[] = [
    { name: 'invalid_json', status: 400, code: 'invalid_json', body: () => '{"model": "m", ' },
    ...spec.invalid().map(([code, _param, body]): Case => ({ name: `${code} (parser)`, status: 400, code, body: () => body })),
    { name: 'invalid_api_key', status: 401, code: 'invalid_api_key', credential: async () => 'tg_nobody_000000000000' },
    { name: 'token_expired', status: 401, code: 'token_expired', credential: () => jwt({}, -120) },
    {
      name: 'session_revoked', status: 401, code: 'session_revoked',
      credential: async () => {
        const sid = `sid-${spec.name}-${Math.random().toString(36).slice(2)}`;
        return jwt({ sid });
      },
    },
    { name: 'insufficient_credits', status: 402, code: 'insufficient_credits', account: 'poor', extras: { wallet_balance_units: 0 } },
    { name: 'quota_exceeded', status: 402, code: 'quota_exceeded', account: 'quota', extras: { quota_code: 'requests_per_day', wallet_balance_units: 1_000_000 } },
    { name: 'model_requires_paid_plan', status: 403, code: 'model_requires_paid_plan', body: () => ask('Hello', paid) },
    { name: 'content_blocked', status: 403, code: 'content_blocked', body: () => ask('say forbidden-word now') },
    { name: 'model_not_found', status: 404, code: 'model_not_found', body: () => ask('Hello', 'no-such-model') },
    { name: 'request_too_large', status: 413, code: 'request_too_large', body: () => ask('word '.repeat(20_000)) },
    { name: 'context_length_exceeded (estimate)', status: 422, code: 'context_length_exceeded', body: () => ask('many words '.repeat(200), tiny) },
    { name: 'context_length_exceeded (upstream)', status: 422, code: 'context_length_exceeded', body: () => ask('CTXERR please'), stream: true },
    {
      name: 'rate_limit_exceeded', status: 429, code: 'rate_limit_exceeded', account: 'rpm', retry: true,
      prepare: async (rig) => {
        const first = await send(rig, spec, ask(), KEYS.rpm);
        if (first.status !== 200) throw new Error(`the first request of the minute failed: ${first.status} ${first.text.slice(0, 200)}`);
      },
    },
    {
      name: 'too_many_concurrent', status: 429, code: 'too_many_concurrent', account: 'conc', retry: true,
      run: async (rig) => {
        const seen = rig.up.requests.length;
        const ac = new AbortController();
        const holding = send(rig, spec, ask('HOLD this'), KEYS.conc, ac.signal).catch(() => undefined);
        for (let i = 0; i < 200 && rig.up.requests.length === seen; i++) await new Promise((r) => setTimeout(r, 10));
        const res = await send(rig, spec, ask(), KEYS.conc);
        ac.abort();
        await holding;
        return res;
      },
    },
    {
      name: 'internal_error (a provider bug)', status: 500, code: 'internal_error',
      run: async (rig) => {
        // A provider that throws something other than a GatewayError: a bug, reported as such.
        const proto = (spec.streams ? HttpProvider.prototype : OpenAIProvider.prototype) as any;
        const method = spec.streams ? 'complete' : 'embed';
        const original = proto[method];
        proto[method] = async () => { throw new TypeError('simulated bug'); };
        try {
          return await send(rig, spec, ask());
        } finally {
          proto[method] = original;
        }
      },
    },
    { name: 'provider_error', status: 502, code: 'provider_error', body: () => ask('FAIL500 please'), stream: true },
    { name: 'model_unavailable', status: 503, code: 'model_unavailable', retry: true, body: () => ask('BUSY503 please'), stream: true },
    { name: 'provider_timeout', status: 504, code: 'provider_timeout', body: () => ask('SLOW please'), stream: true },
  ];
  if (spec.images) {
    list.push(
      { name: 'invalid_image_url', status: 400, code: 'invalid_image_url', body: () => spec.badImage!() },
      { name: 'too_many_images', status: 400, code: 'too_many_images', body: () => spec.body({ model: 'mv', text: 'look', images: [IMAGE, IMAGE] }) },
      { name: 'model_does_not_support_images', status: 422, code: 'model_does_not_support_images', body: () => spec.body({ model: main, text: 'look', images: [IMAGE] }) },
    );
  }
  return list;
}

/** The streaming variant of a body (the same request with stream: true). */
function streamed(spec: DialectSpec, c: Case): Case {
  const plain = c.body!() as Record<string, unknown>;
  return { ...c, name: `${c.name}, streamed`, body: () => ({ ...plain, stream: true }) };
}

export function runErrorTable(t: any, spec: DialectSpec, kinds: readonly Kind[]): void {
  for (const kind of kinds) {
    t.test(`${spec.name} on an ${kind} upstream: every section 7 error before the first byte`, async (t: any) => {
      const rig = await startRig(kind);
      t.teardown(() => rig.close());
      const all = cases(spec).flatMap((c) => (c.stream === true && spec.streams ? [c, streamed(spec, c)] : [c]));
      for (const c of all) {
        const id: AccountId = c.account ?? 'demo';
        if (c.prepare !== undefined) await c.prepare(rig);
        if (c.name === 'session_revoked') {
          // Revoked before use: the token names its session.
          const tok = await c.credential!();
          const sid = JSON.parse(Buffer.from(tok.split('.')[1]!, 'base64url').toString()).sid;
          const r = await fetch(`${rig.gw.url}/admin/sessions/${sid}/revoke`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}` } });
          t.equal(r.status, 204, 'session revoked');
          c.credential = async () => tok;
        }
        const before = await settledAccount(rig, id);
        const res = c.run !== undefined
          ? await c.run(rig)
          : await send(rig, spec, (c.body ?? (() => spec.body({ model: spec.models.main, text: 'Hello' })))(),
            c.credential !== undefined ? await c.credential() : KEYS[id]);
        t.equal(res.status, c.status, `${c.name}: status ${c.status} (${res.text.slice(0, 160)})`);
        const rid = res.headers.get('x-request-id');
        t.ok(rid !== null && rid !== '', `${c.name}: x-request-id`);
        t.match(res.headers.get('content-type') ?? '', /^application\/json/, `${c.name}: JSON, not a stream`);
        const fields = spec.errorFields(t, res, c.status, c.code);
        for (const [k, v] of Object.entries(c.extras ?? {})) t.equal(fields[k], v, `${c.name}: ${k}`);
        if (c.retry === true) {
          t.ok(Number(res.headers.get('retry-after')) >= 1, `${c.name}: Retry-After`);
          t.ok(Number(res.headers.get('retry-after-ms')) >= 1, `${c.name}: retry-after-ms`);
        }
        const after = await settledAccount(rig, id);
        t.equal(after.balance_units, before.balance_units, `${c.name}: balance unchanged`);
        t.equal(after.held_units, 0, `${c.name}: no hold left`);
      }
      t.equal(await rig.gw.gateway.slotsInUse('demo'), 0, 'no concurrency slot left');
      t.equal(await rig.gw.gateway.slotsInUse('conc'), 0, 'no concurrency slot left (conc)');
    });

    if (spec.streams) {
      t.test(`${spec.name} on an ${kind} upstream: errors after the first byte are in-stream, charged what was delivered once`, async (t: any) => {
        const rig = await startRig(kind);
        t.teardown(() => rig.close());
        const midStream = [
          ['MIDCUT', 'provider_error'], ['MIDSTALL', 'provider_timeout'], ['MIDBUSY', 'model_unavailable'], ['MIDCTX', 'context_length_exceeded'],
          ['BUG', 'internal_error'],
        ] as const;
        for (const [marker, code] of midStream) {
          const before = await settledAccount(rig, 'demo');
          const seen = rig.up.requests.length;
          const original = HttpProvider.prototype.stream;
          if (marker === 'BUG') {
            // A provider that throws something other than a GatewayError once text went out.
            HttpProvider.prototype.stream = async function (this: HttpProvider, call) {
              const upstream = await original.call(this, call);
              async function* parts() {
                for await (const p of upstream) {
                  yield p;
                  if (p.kind === 'choices' && p.choices.some((c) => typeof c.delta.content === 'string' && c.delta.content !== '')) throw new TypeError('simulated bug');
                }
              }
              return Object.assign(parts(), { headers: upstream.headers });
            };
          }
          let res: Answer;
          try {
            res = await send(rig, spec, spec.body({ model: spec.models.main, text: `${marker} please`, stream: true }));
          } finally {
            HttpProvider.prototype.stream = original;
          }
          t.equal(res.status, 200, `${marker}: committed`);
          t.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
          t.equal(spec.streamError!(t, res.text, res.headers.get('x-request-id')!), code, `${marker}: in-stream ${code}`);
          const after = await settledAccount(rig, 'demo');
          t.equal(before.balance_units - after.balance_units, PARTIAL_TOKENS, `${marker}: charged the ${PARTIAL_TOKENS} delivered tokens`);
          t.equal(after.held_units, 0, `${marker}: no hold left`);
          if (marker === 'MIDSTALL') t.equal(rig.up.requests[seen]!.aborted, true, 'the stalled upstream call was aborted');
          await new Promise((r) => setTimeout(r, 50));
          t.equal((await account(rig, 'demo')).balance_units, after.balance_units, `${marker}: charged once`);
        }
      });
    }
  }

  t.test(`${spec.name}: the store down is 503 service_unavailable in the dialect's shape`, async (t: any) => {
    const port = await deadPort();
    const rig = await startRig(kinds[0]!, (c) => { c.store = { kind: 'redis', url: `redis://127.0.0.1:${port}`, timeout_ms: 200 }; });
    t.teardown(() => rig.close());
    const res = await send(rig, spec, spec.body({ model: spec.models.main, text: 'Hello' }));
    t.equal(res.status, 503, res.text.slice(0, 200));
    spec.errorFields(t, res, 503, 'service_unavailable');
    t.ok(Number(res.headers.get('retry-after')) >= 1, 'Retry-After');
  });

  t.test(`${spec.name}: a malformed dashboard token is 422 {"msg"}`, async (t: any) => {
    const rig = await startRig(kinds[0]!);
    t.teardown(() => rig.close());
    const res = await send(rig, spec, spec.body({ model: spec.models.main, text: 'Hello' }), 'abc.def.ghi');
    t.equal(res.status, 422);
    t.same(Object.keys(JSON.parse(res.text)), ['msg']);
    t.ok(res.headers.get('x-request-id'));
  });
}

/** OpenAI's type for a status (CONTRACT section 4). */
export function openaiType(status: number): string {
  if (status === 402) return 'insufficient_credits';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'server_error';
  return 'invalid_request_error';
}

/** The envelope of CONTRACT section 4 (Responses and embeddings errors). */
export function envelopeFields(t: any, res: Answer, status: number, code: string): Record<string, any> {
  const body = JSON.parse(res.text);
  t.same(schemas.error(body), [], `${code}: validates against TollgateErrorEnvelope`);
  t.equal(body.code, code, `${code}: code`);
  t.equal(body.error?.code, code, `${code}: error.code`);
  t.equal(body.type, openaiType(status), `${code}: type`);
  t.equal(body.request_id, res.headers.get('x-request-id'), `${code}: request_id = x-request-id`);
  return body;
}
