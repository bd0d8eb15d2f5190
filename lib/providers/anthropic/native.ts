// The native path: a client speaking Anthropic Messages to an Anthropic upstream. Events are
// still translated (for commit, metering and a client that leaves), and each carries the
// upstream's own event, passed to the client as it came, with only message_start's model
// rewritten to the catalog slug: no lossy round trip through the chat form.

import type { SseEvent } from '../../sse/parser.js';
import type { StreamTranslator as Translator } from '../http-provider.js';
import { isObj, parseJson } from '../shared.js';
import type { ProviderCall, StreamPart } from '../types.js';
import type { StreamTranslator } from './translate.js';
import { merged } from '../../objects.js';

/** The dialect whose requests this provider's upstream takes as they are. */
export const NATIVE_DIALECT = 'messages';

export function isNative(call: ProviderCall): boolean {
  return call.request.native?.dialect === NATIVE_DIALECT;
}

export class NativeTranslator implements Translator {
  readonly #inner: StreamTranslator;
  readonly #model: string;

  constructor(inner: StreamTranslator, model: string) {
    this.#inner = inner;
    this.#model = model;
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
      if (isObj(body) && isObj(body.message)) data = JSON.stringify(merged<Record<string, unknown>>(body, { message: merged<Record<string, unknown>>(body.message, { model: this.#model }) }));
    }
    // A multi-line data field stays multi-line.
    const native = `event: ${name}\ndata: ${data.includes('\n') ? data.replace(/\n/g, '\ndata: ') : data}\n\n`;
    const first = parts.findIndex((p) => p.kind === 'choices');
    if (first === -1) return [{ kind: 'choices', choices: [], native }, ...parts];
    const p = parts[first]!;
    if (p.kind === 'choices') parts[first] = merged<typeof p>(p, { native });
    return parts;
  }
}
