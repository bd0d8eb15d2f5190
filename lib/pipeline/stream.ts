// The event-stream answer of an admitted generation, through its attempt chain
// (./attempts.ts): it commits only once a chunk carries something, so that a failing or empty
// upstream still gets a real status and the next fallback. It settles the hold with the usage
// before the answer reports it.

import { GatewayError } from '../errors.js';
import type { ChoicesPart, ProviderCall, StreamPart } from '../providers/types.js';
import { emptyAnswer, hasStop } from '../providers/shared.js';
import { KEEPALIVE_FRAME, SSE_HEADERS, writeFrame } from '../sse/writer.js';
import type { Renderer } from '../dialects/types.js';
import type { Charge } from '../billing/meter.js';
import type { ChunkChoice, Usage } from '../hub/chat.js';
import { keep } from './answer.js';
import type { Attempt, Attempts } from './attempts.js';
import { answerHeaders, type Exchange } from './context.js';
import { flattened } from '../strings.js';

/** Deltas appended to a stream's text before it may be flattened (see StreamAnswer's #append). */
const UNFLAT_DELTAS = 8;

/** A stream's frames written together are cut at this length, so backpressure is felt. */
const MAX_BATCH_CHARS = 16_384;

/**
 * A chunk "commits" the stream (sends the 200 and headers) only once it carries something:
 * text, reasoning, tool calls, a refusal, or a finish reason that explains an empty answer
 * (length, content_filter, or stop when the client's own stop sequences may have emptied it).
 * Until then chunks are held, so an upstream that fails or answers nothing still gets a real
 * status and the next fallback can be tried.
 */
function isSubstantive(choices: readonly ChunkChoice[], stopExplains: boolean): boolean {
  for (const c of choices) {
    const d = c.delta;
    if ((d.content !== undefined && d.content !== null && d.content !== '') || d.tool_calls !== undefined ||
      (d.reasoning_content !== undefined && d.reasoning_content !== '') ||
      (d.refusal !== undefined && d.refusal !== null && d.refusal !== '') ||
      (c.finish_reason !== null && (c.finish_reason !== 'stop' || stopExplains))) return true;
  }
  return false;
}

/**
 * One streamed answer: the request's Exchange, its attempt chain, its hold and its dialect's
 * renderer, and what the stream has done so far (committed, the text that reached the client,
 * the keep-alive timer). `run()` answers; each attempt is `#pump`ed into the client.
 */
export class StreamAnswer {
  readonly #x: Exchange;
  readonly #attempts: Attempts;
  readonly #charge: Charge;
  readonly #renderer: Renderer;
  readonly #stopExplains: boolean;
  /** From the first attempt's start: a wait in a provider's queue is not the upstream's time. */
  #started = 0;
  /**
   * Keep-alives run from the moment the first upstream is called: one that is slow to send even
   * its headers is silent too. The first keep-alive commits the stream (200 + headers), and
   * from then on no fallback is tried.
   */
  #committed = false;
  #upstreamHeaders: Record<string, string> = {};
  #keepalive: NodeJS.Timeout | undefined;
  /**
   * What reached the client, counted if the upstream reports no usage or the stream is cut
   * short: one string built by appending every delta, a tree of V8 cons strings (32 bytes a
   * node, beside each delta's own string of 20 bytes and more) that an open stream holds until
   * it ends. It is flattened now and then, when the deltas appended since are as many as a 64th
   * of its length (at least UNFLAT_DELTAS): about 60 bytes a chunk held become the chunk's
   * characters, and each flatten's copy stays at most 64 characters a delta, whatever the
   * answer's length (below 512 characters, the whole text every 8 deltas).
   */
  #text = '';
  #unflat = 0;
  /** The current attempt's usage, as its upstream reported it. */
  #usage: Usage | undefined;

  constructor(x: Exchange, attempts: Attempts, charge: Charge, renderer: Renderer) {
    this.#x = x;
    this.#attempts = attempts;
    this.#charge = charge;
    this.#renderer = renderer;
    this.#stopExplains = hasStop({ request: attempts.request });
  }

  #commit(): void {
    const { ctx, res, metrics } = this.#x;
    this.#committed = true;
    res.writeHead(200, answerHeaders(ctx, SSE_HEADERS, this.#upstreamHeaders));
    // node:http keeps the head it built (`_header`) for the answer's life, to say the headers
    // were sent: a cons string per piece of it, about 50 nodes and 2.7 KB; flat, about 500 bytes.
    const head = (res as { _header?: unknown })._header;
    if (typeof head === 'string') flattened(head);
    const opening = this.#renderer.open();
    if (opening !== '') res.write(opening);
    metrics.openStreams.inc();
  }

  // Not while the request waits in a provider's queue (before the stream is committed): a
  // refusal there is a real 503, and the wait has its own bound (max_wait_ms).
  readonly #tick = (): void => {
    const res = this.#x.res;
    if (res.destroyed) return;
    if (!this.#committed) this.#commit();
    res.write(KEEPALIVE_FRAME);
    this.#keepalive?.refresh();
  };

  #append(delta: string): void {
    this.#text += delta;
    if (++this.#unflat >= UNFLAT_DELTAS && this.#unflat * 64 >= this.#text.length) {
      this.#text = flattened(this.#text);
      this.#unflat = 0;
    }
  }

  async run(): Promise<void> {
    const { state, ctx, res, metrics } = this.#x;
    const attempts = this.#attempts;
    const charge = this.#charge;
    try {
      for (;;) {
        if (!this.#committed) { clearTimeout(this.#keepalive); this.#keepalive = undefined; }
        const attempt = await attempts.next();
        if (this.#started === 0) this.#started = performance.now();
        this.#keepalive ??= setTimeout(this.#tick, state.config.server.sse_keepalive_ms);
        this.#text = '';
        this.#unflat = 0;
        this.#usage = undefined;
        try {
          const finished = await attempts.run(attempt, (call) => this.#pump(attempt, call));
          if (!finished) {
            if (this.#text !== '') {
              ctx.usageSource = 'counted';
              ctx.usage = await attempts.counted(this.#text);
              await charge.settle(ctx.usage);
            }
            return;
          }
        } catch (err) {
          if (!this.#committed && attempts.canFallBack(err)) continue;
          throw err;
        }
        const usage = this.#usage;
        ctx.usageSource = usage === undefined ? 'counted' : 'upstream';
        ctx.usage = usage ?? await attempts.counted(this.#text);
        await charge.settle(ctx.usage);
        const last = this.#renderer.close(ctx.usage);
        if (this.#renderer.keep !== undefined) await keep(this.#renderer.keep(), this.#x);
        res.end(last);
        return;
      }
    } catch (err) {
      // A stream cut short, by the client leaving or the upstream failing, is charged for what
      // reached the client (nothing, if only keep-alives did). Not one whose settle was tried and
      // failed (a store fault): that settle's figures were the only ones, and it debited nothing.
      if (this.#committed && charge.pending && this.#text !== '') {
        ctx.usageSource = 'counted';
        ctx.usage = await attempts.counted(this.#text);
        await charge.settle(ctx.usage).catch(() => undefined);
      }
      if (!this.#committed || res.destroyed) throw err;
      // After the first byte an error can only be told in the stream, in the dialect's way; the
      // stream then ends without its normal close, so the client knows the answer is incomplete.
      const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed mid-stream.', { cause: err });
      ctx.code = e.code;
      res.end(this.#renderer.fail(e, ctx.id));
      if (!(err instanceof GatewayError)) throw err;
    } finally {
      clearTimeout(this.#keepalive);
      if (this.#committed) metrics.openStreams.dec();
    }
  }

  /**
   * One attempt's stream into the client: false when the client left (or stopped reading until
   * the time ran out), true once the upstream's answer is whole.
   */
  async #pump(attempt: Attempt, call: ProviderCall): Promise<boolean> {
    const res = this.#x.res;
    const provider = attempt.target.provider;
    const roleSent: boolean[] = [];
    const held: ChoicesPart[] = [];
    const upstream = await provider.stream(call);
    this.#upstreamHeaders = upstream.headers;
    const iterator = upstream[Symbol.asyncIterator]();
    // The frames of the parts one upstream read brought, written together: one chunk of
    // the answer's chunked encoding instead of one per frame. Never held past that read.
    let out = '';
    for (;;) {
      let part = upstream.take?.();
      if (part === undefined || out.length >= MAX_BATCH_CHARS) {
        if (out !== '') {
          const ok = writeFrame(res, out, call.abort ?? call.signal);
          out = '';
          if (ok !== true && !(await ok)) {
            // The client left, or stopped reading until the time ran out: the upstream is
            // aborted and what was generated so far is charged.
            void iterator.return?.();
            if (!res.destroyed) res.destroy();
            return false;
          }
        }
        if (part === undefined) {
          const step = await iterator.next();
          this.#keepalive?.refresh();
          if (step.done === true) break;
          part = step.value;
        }
      }
      out = this.#frames(part, out, roleSent, held, provider.name);
    }
    if (!this.#committed) throw emptyAnswer();
    return true;
  }

  /**
   * One part of the upstream's answer: its usage kept, its text appended, and its frame (with
   * the held ones before it) added to `out` once the stream is committed. Apart from #pump, so
   * that #pump's frame, which an open stream holds while it waits for the upstream, stays small.
   */
  #frames(part: StreamPart, out: string, roleSent: boolean[], held: ChoicesPart[], provider: string): string {
    if (part.kind === 'usage') { this.#usage = part.usage; return out; }
    for (const c of part.choices) {
      if (roleSent[c.index] !== true) {
        roleSent[c.index] = true;
        if (c.delta.role === undefined) {
          c.delta = { role: 'assistant', ...c.delta };
          part.chatJson = undefined;
        }
      }
      if (typeof c.delta.content === 'string') this.#append(c.delta.content);
      if (c.delta.reasoning_content !== undefined) this.#append(c.delta.reasoning_content);
      if (c.delta.tool_calls !== undefined) for (const tc of c.delta.tool_calls) this.#append(tc.function?.arguments ?? '');
    }
    if (!this.#committed) {
      if (!isSubstantive(part.choices, this.#stopExplains)) { held.push(part); return out; }
      this.#commit();
    }
    const { ctx, metrics } = this.#x;
    if (ctx.ttfcMs === undefined) {
      ctx.ttfcMs = performance.now() - this.#started;
      ctx.ttftMs = performance.now() - ctx.start;
      metrics.observe(metrics.timeToFirstChunk, provider, ctx.ttfcMs / 1000);
    }
    const renderer = this.#renderer;
    if (held.length > 0) for (const h of held.splice(0)) out += renderer.chunk(h.choices, h.native, h.chatJson);
    return out + renderer.chunk(part.choices, part.native, part.chatJson);
  }
}
