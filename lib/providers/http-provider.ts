// What every HTTP provider does the same way: send a JSON POST over the undici pool of the
// replica the balancer picked, turn a failing status into our error, read an answer, and turn
// an event stream into parts. A provider supplies only its translation: the request body, the
// answer, and a per-stream translator of events.

import type { Dispatcher, FormData } from 'undici';
import type { ChoicesAndUsage } from './shared.js';
import type { ProviderConfig } from '../config/types.js';
import { GatewayError } from '../errors.js';
import { SseLimitError, SseParser, type SseEvent } from '../sse/parser.js';
import {
  createEndpoint, forwardedHeaders, readCapped, transportError, unavailable, type UpstreamEndpoint,
} from '../upstream/http.js';
import { Fleet, type Replica } from '../upstream/balance/index.js';
import { call as upstreamCall, type UpstreamAnswer, type UpstreamBody } from '../upstream/call.js';
import { ENDED_EARLY, isEventStream, mapErrorBody } from './shared.js';
import { assemble } from './assemble.js';
import { withCallHeaders, type CompletionResult, type Provider, type ProviderCall, type StreamPart, type UpstreamStream } from './types.js';

/** Turns one stream's events into parts; `ended` once the upstream said the answer is whole. */
export interface StreamTranslator {
  handle(ev: SseEvent): StreamPart[];
  readonly ended: boolean;
}

export interface HttpShape {
  /** Path under the base URL's path, e.g. "/chat/completions". */
  path: string;
  /** Headers of every call (auth included). */
  headers: Record<string, string>;
  /** Statuses that mean "not now" (503 model_unavailable, Retry-After passed on). */
  unavailable: ReadonlySet<number>;
}

export abstract class HttpProvider implements Provider {
  readonly name: string;
  readonly config: ProviderConfig;
  readonly fleet: Fleet;
  protected readonly headers: Record<string, string>;
  /** One pool per replica (and per replica discovery dropped, until its requests end), with the path of every call on it. */
  readonly #endpoints = new Map<Replica, UpstreamEndpoint & { callPath: string }>();
  readonly #path: string;
  readonly #unavailable: ReadonlySet<number>;
  /** The operator's secrets sent upstream (api_key, header values), never to be echoed back. */
  readonly #secrets: string[];

  constructor(name: string, config: ProviderConfig, shape: HttpShape, fleet = new Fleet(name, config)) {
    this.name = name;
    this.config = config;
    this.fleet = fleet;
    this.#path = shape.path;
    for (const r of fleet.replicas) this.#open(r);
    // A fleet found in DNS changes: a replica's pool is made as it joins, closed once it left and its requests ended.
    fleet.members = { joined: (r) => this.#open(r), left: (r) => this.#close(r) };
    this.headers = shape.headers;
    this.#unavailable = shape.unavailable;
    this.#secrets = [config.api_key, ...Object.values(config.headers)].filter((v) => v.length >= 8);
  }

  /**
   * Upstreams echo what they were sent in their error messages ("Incorrect API key provided:
   * sk-..."), and some of those messages reach the client: the operator's secrets are cut out.
   */
  #redact(err: unknown): unknown {
    if (err instanceof GatewayError && this.#secrets.some((s) => err.message.includes(s))) {
      err.message = this.#secrets.reduce((m, s) => m.split(s).join('[redacted]'), err.message);
    }
    return err;
  }

  #open(r: Replica): void {
    if (this.#endpoints.has(r)) return;
    const ep = createEndpoint(this.config, r.url);
    this.#endpoints.set(r, { ...ep, callPath: `${ep.basePath}${this.#path}` });
  }

  #close(r: Replica): void {
    const ep = this.#endpoints.get(r);
    if (ep === undefined) return;
    this.#endpoints.delete(r);
    // Graceful: undici lets whatever still runs on it end first.
    ep.pool.close().catch(() => { /* already closed or destroyed: nothing left to end */ });
  }

  /** The first replica's pool; with a discovered fleet that has none yet, 503 model_unavailable. */
  get #first(): UpstreamEndpoint & { callPath: string } {
    const r = this.fleet.replicas[0];
    const ep = r === undefined ? undefined : this.#endpoints.get(r);
    if (ep === undefined) throw new GatewayError('model_unavailable', `The model provider '${this.name}' has no replica yet (none found in DNS).`);
    return ep;
  }

  /** For calls outside the balancer (discovery, /tokenize): a healthy replica's pool, else the first. */
  protected get endpoint(): UpstreamEndpoint {
    const r = this.fleet.firstHealthy();
    return (r === undefined ? undefined : this.#endpoints.get(r)) ?? this.#first;
  }

  start(): void {
    this.fleet.watch((replica, path, signal) => this.#healthy(replica, path, signal));
  }

  /** An active health check: GET {replica url}{path}, answered 2xx. */
  async #healthy(replica: Replica, path: string, signal: AbortSignal): Promise<boolean> {
    const ep = this.#endpoints.get(replica);
    if (ep === undefined) return false;
    const res = await ep.pool.request({ method: 'GET', path: `${ep.basePath}${path}`, headers: this.headers, signal });
    await readCapped(res.body, 0);
    return res.statusCode >= 200 && res.statusCode <= 299;
  }

  /** The upstream request body. */
  protected abstract body(call: ProviderCall, stream: boolean): string;
  /** A 2xx answer's text (its HTTP status: `status`) -> our choices and usage; throws GatewayError. */
  protected abstract completion(text: string, call: ProviderCall, status: number): ChoicesAndUsage;
  /** A fresh translator for one stream, answered with HTTP status `status`. */
  protected abstract translator(call: ProviderCall, status: number): StreamTranslator;
  /** The headers of one call: the provider's own, unless a call adds some. */
  protected callHeaders(_call: ProviderCall): Record<string, string> {
    return this.headers;
  }

  /** A failing answer (not one of the shape's "not now" statuses) -> our error; a provider may know some of its upstream's own. */
  protected failure(status: number, text: string, call: ProviderCall): GatewayError {
    return mapErrorBody(status, text, call, this.name);
  }

  /** The path a call goes to: the shape's, unless a provider sends some calls elsewhere (a native dialect's own route). */
  protected pathOf(_call: ProviderCall, ep: UpstreamEndpoint & { callPath: string }): string {
    return ep.callPath;
  }

  /** The pool of the replica the balancer picked for `call` (the first replica for calls outside it). */
  protected endpointOf(call: ProviderCall): UpstreamEndpoint & { callPath: string } {
    return (call.replica === undefined ? undefined : this.#endpoints.get(call.replica)) ?? this.#first;
  }

  /**
   * POST `body` to `path` (under the base URL's path) on the call's replica, for a route beside
   * generation (embeddings, rerank, audio): a transport failure, a "not now" status (503
   * model_unavailable, the upstream's Retry-After passed on) and any other failing status (its
   * error body mapped, read within 64 KiB) are thrown as ours; a 2xx answer comes back unread.
   */
  async post(call: ProviderCall, path: string, body: string | Buffer | FormData, headers = withCallHeaders(this.headers, call)): Promise<Dispatcher.ResponseData> {
    const ep = this.endpointOf(call);
    let res: Dispatcher.ResponseData;
    try {
      res = await ep.pool.request({ method: 'POST', path: `${ep.basePath}${path}`, headers, body, signal: call.signal });
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
    if (this.#unavailable.has(res.statusCode)) {
      void readCapped(res.body, 0);
      throw unavailable(res.headers, this.name, res.statusCode);
    }
    if (res.statusCode >= 200 && res.statusCode <= 299) return res;
    let text: string;
    try {
      text = await readCapped(res.body, 65536);
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
    throw this.#redact(mapErrorBody(res.statusCode, text, call, this.name));
  }

  /** post() of a JSON body: the 2xx answer's text, read within `max` bytes, and its forwarded headers. */
  async postJson(call: ProviderCall, path: string, body: string | Buffer, max: number): Promise<{ text: string; headers: Record<string, string> }> {
    const res = await this.post(call, path, body);
    let text: string;
    try {
      text = await readCapped(res.body, max);
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    }
    return { text, headers: forwardedHeaders(res.headers) };
  }

  /** The call sent; what fails on the way is thrown as transportError says. Not an async function: one promise less per call. */
  #send(call: ProviderCall, stream: boolean): Promise<UpstreamAnswer> {
    const ep = this.endpointOf(call);
    let answer: Promise<UpstreamAnswer>;
    try {
      answer = upstreamCall(ep.pool, {
        method: 'POST', path: this.pathOf(call, ep), headers: withCallHeaders(this.callHeaders(call), call), body: this.body(call, stream), signal: call.abort ?? call.signal,
      });
    } catch (err) {
      return Promise.reject(transportError(err, call.signal, this.name));
    }
    return answer.catch((err: unknown) => {
      throw transportError(err, call.signal, this.name);
    });
  }

  async #failure(res: UpstreamAnswer, call: ProviderCall): Promise<unknown> {
    if (this.#unavailable.has(res.statusCode)) {
      void readCapped(res.body, 0);
      return unavailable(res.headers, this.name, res.statusCode);
    }
    return this.#redact(this.failure(res.statusCode, await readCapped(res.body), call));
  }

  /**
   * Whether `call`, for a client that asked for no stream, goes streamed upstream and is
   * assembled here (stream_upstream): `always`, or what the provider learned of its server; on
   * every route, a native call's too (its answer assembled in its own dialect's shape).
   */
  protected streamsUpstream(_call: ProviderCall): boolean {
    return this.config.stream_upstream === 'always';
  }

  /**
   * A whole answer read from the upstream's stream (streamsUpstream). A provider whose native
   * calls answer in the client's dialect builds that answer too (`native`).
   */
  protected async assembled(call: ProviderCall): Promise<CompletionResult> {
    return assemble(await this.stream(call), call);
  }

  /** A whole answer read as one (not assembled), as the pipeline gets it: a provider may adjust its usage. */
  protected answered(result: CompletionResult, _call: ProviderCall): CompletionResult | Promise<CompletionResult> {
    return result;
  }

  async complete(call: ProviderCall): Promise<CompletionResult> {
    if (this.streamsUpstream(call)) return this.assembled(call);
    const res = await this.#send(call, false);
    if (res.statusCode < 200 || res.statusCode > 299) throw await this.#failure(res, call);
    // Within max_response_bytes: one announced (Content-Length) or received above it aborts the
    // upstream call, so a huge answer is never buffered, nor charged.
    const max = this.config.max_response_bytes;
    const tooLarge = () => new GatewayError('provider_error', `The model provider '${this.name}' sent an answer larger than ${max} bytes.`);
    let body: Buffer;
    try {
      if (Number(res.headers['content-length']) > max) throw tooLarge();
      body = await res.body.collect(max, tooLarge);
    } catch (err) {
      throw transportError(err, call.signal, this.name);
    } finally {
      if (!res.body.destroyed) res.body.destroy();
    }
    // As undici's text(): a UTF-8 BOM is not part of the JSON.
    const text = body.toString('utf8', body.length > 2 && body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0);
    let result: CompletionResult;
    try {
      // Not a spread-first literal (objects.ts): the completion is this call's own object.
      result = Object.assign(this.completion(text, call, res.statusCode), { headers: forwardedHeaders(res.headers) });
    } catch (err) {
      throw this.#redact(err);
    }
    return this.answered(result, call);
  }

  async stream(call: ProviderCall): Promise<UpstreamStream> {
    const res = await this.#send(call, true);
    if (res.statusCode < 200 || res.statusCode > 299) throw await this.#failure(res, call);
    if (!isEventStream(res.headers)) {
      // Some servers answer a failing stream request with a JSON error and a 2xx.
      throw this.#redact(this.failure(res.statusCode, await readCapped(res.body), call));
    }
    return new PartStream(res.body, this.translator(call, res.statusCode), (err) => {
      if (err instanceof SseLimitError) {
        return new GatewayError('provider_error', `The model provider '${this.name}' sent an event stream line or event larger than ${err.limit} bytes.`, { cause: err });
      }
      return this.#redact(transportError(err, call.signal, this.name));
    }, forwardedHeaders(res.headers));
  }

  async close(): Promise<void> {
    this.fleet.stop();
    await Promise.all([...this.#endpoints.values()].map((ep) => ep.pool.close()));
  }
}

/**
 * A stream's parts, translated from each upstream read as it arrives: every event of the read
 * at once, its parts then handed out one by one (no async generator per part). A failure (the
 * transport, an event too large, an error event) comes after the parts before it, as the
 * upstream sent them; an upstream that ends without saying the answer is whole is provider_error.
 * While the upstream is silent, what waits is one promise on the body's next arrival, not an
 * async frame here and another in the body: an open stream holds every frame it waits in
 * (about 500 bytes each), and most of a stream's life is that wait.
 */
class PartStream implements UpstreamStream, AsyncIterator<StreamPart> {
  readonly headers: Record<string, string>;
  readonly #body: UpstreamBody;
  readonly #parser = new SseParser();
  readonly #translator: StreamTranslator;
  readonly #mapError: (err: unknown) => unknown;
  #queue: StreamPart[] = [];
  #next = 0;
  /** The failure to throw once the queue is drained. */
  #failure: { err: unknown } | undefined;
  #ended = false;
  #done = false;

  constructor(body: UpstreamBody, translator: StreamTranslator, mapError: (err: unknown) => unknown, headers: Record<string, string>) {
    this.#body = body;
    this.#translator = translator;
    this.#mapError = mapError;
    this.headers = headers;
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamPart> {
    return this;
  }

  next(): Promise<IteratorResult<StreamPart>> {
    try {
      const step = this.#step();
      if (step !== undefined) return Promise.resolve(step);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#body.arrival().then(() => this.#step() ?? this.next());
  }

  /** The next result, or undefined while it waits for the upstream (the body's arrival()). */
  #step(): IteratorResult<StreamPart> | undefined {
    for (;;) {
      if (this.#next < this.#queue.length) return { value: this.#queue[this.#next++]!, done: false };
      if (this.#done) return { value: undefined, done: true };
      if (this.#failure !== undefined) {
        this.#finish();
        throw this.#failure.err;
      }
      if (this.#ended) {
        this.#finish();
        if (!this.#translator.ended) throw new GatewayError('provider_error', ENDED_EARLY);
        return { value: undefined, done: true };
      }
      this.#queue = [];
      this.#next = 0;
      try {
        const bufs = this.#body.poll();
        if (bufs === undefined) return undefined;
        if (bufs === null) {
          this.#ended = true;
          this.#translate(this.#parser.end());
        } else {
          for (const buf of bufs) this.#translate(this.#parser.push(buf));
        }
      } catch (err) {
        this.#failure = { err: this.#mapError(err) };
      }
    }
  }

  /** The next part, when it came with the one before it (next() would not wait for it). */
  take(): StreamPart | undefined {
    return this.#next < this.#queue.length ? this.#queue[this.#next++] : undefined;
  }

  #translate(events: Iterable<SseEvent>): void {
    for (const ev of events) for (const part of this.#translator.handle(ev)) this.#queue.push(part);
  }

  #finish(): void {
    this.#done = true;
    this.#queue = [];
    this.#next = 0;
    if (!this.#body.destroyed) this.#body.destroy();
  }

  async return(): Promise<IteratorResult<StreamPart>> {
    this.#finish();
    return { value: undefined, done: true };
  }
}
