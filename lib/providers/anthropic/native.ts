// The native path: a client speaking Anthropic Messages to an Anthropic upstream. Events are
// still translated (for commit, metering and a client that leaves), and each carries the
// upstream's own event ({event, data}, unframed: the messages dialect frames it), passed to the
// client as it came, with only message_start's model rewritten to the catalog slug: no lossy
// round trip through the chat form.

import type { SseEvent } from '../../sse/parser.js';
import type { StreamTranslator as Translator } from '../http-provider.js';
import { isObj, parseJson, type Obj } from '../shared.js';
import type { NativeEvent, ProviderCall, StreamPart } from '../types.js';
import type { StreamTranslator } from './translate.js';
import { merged } from '../../objects.js';
import { MESSAGES_DIALECT } from '../../hub/anthropic.js';
import { completeUsage, type WholeMessage } from './whole.js';

/** The dialect whose requests this provider's upstream takes as they are. */
export const NATIVE_DIALECT = MESSAGES_DIALECT;

export function isNative(call: ProviderCall): boolean {
  return call.request.native?.dialect === NATIVE_DIALECT;
}

export class NativeTranslator implements Translator {
  readonly #inner: StreamTranslator;
  readonly #model: string;
  /** For a client that asked for no stream (stream_upstream): the message being built, fed each event. */
  readonly #whole: WholeMessage | undefined;

  constructor(inner: StreamTranslator, model: string, whole?: WholeMessage) {
    this.#inner = inner;
    this.#model = model;
    this.#whole = whole;
  }

  get ended(): boolean {
    return this.#inner.ended;
  }

  handle(ev: SseEvent): StreamPart[] {
    if (this.#inner.ended) return [];
    const parts = this.#inner.handle(ev); // throws on an error event: the pipeline tells it
    let data = ev.data;
    let name = ev.event;
    if (name === undefined || name === 'message') {
      const body = parseJson(data);
      name = isObj(body) && typeof body.type === 'string' ? body.type : 'message';
    }
    if (name === 'message_start') {
      const body = parseJson(data);
      if (isObj(body) && isObj(body.message)) {
        data = JSON.stringify(merged<Obj>(body, { message: merged<Obj>(body.message, { model: this.#model, usage: completeUsage(body.message.usage) }) }));
      }
    } else if (name === 'message_delta') {
      // The usage so far (message_start's, with this event's added) fills what this one leaves out.
      const body = parseJson(data);
      if (isObj(body)) data = JSON.stringify(merged<Obj>(body, { usage: completeUsage(body.usage, this.#inner.usageSeen) }));
    }
    if (this.#whole !== undefined) {
      this.#whole.add(name, data);
      return parts;
    }
    const native: NativeEvent = { event: name, data };
    const first = parts.findIndex((p) => p.kind === 'choices');
    if (first === -1) return [{ kind: 'choices', choices: [], native }, ...parts];
    const p = parts[first]!;
    if (p.kind === 'choices') parts[first] = merged<typeof p>(p, { native });
    return parts;
  }
}
