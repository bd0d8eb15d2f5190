// A whole Messages answer made from the upstream's own events, for a client speaking Messages
// natively that asked for no stream while the upstream was called streaming (stream_upstream:
// always, CONTRACT section 11; llama.cpp serves /v1/messages too, and cancels only streamed
// work when its client leaves). The message as a non-streaming call would have had it:
// message_start's message, each content block with its deltas applied (text, thinking and its
// signature, a tool call's input JSON, citations), message_delta's stop and usage. Only on that
// path, so each event is parsed here once more rather than burdening the streamed path.

import { isObj, parseJson, type Obj } from '../shared.js';
import { merged } from '../../objects.js';
import { USAGE_COUNTS } from '../../hub/anthropic.js';

/**
 * An upstream usage object with all four counts: each as the upstream gave it, else what the
 * stream said of it before (`known`: message_start's counts, for a message_delta), else 0. Clients
 * sum the four; an upstream that leaves the cache counts out (most servers speaking Messages)
 * must not make them read undefined. Members the upstream adds beyond these are kept.
 */
export function completeUsage(usage: unknown, known?: Obj): Obj {
  const out: Obj = isObj(usage) ? merged<Obj>(usage) : {};
  for (const k of USAGE_COUNTS) {
    if (out[k] !== undefined && out[k] !== null) continue;
    const before = known?.[k];
    out[k] = typeof before === 'number' ? before : 0;
  }
  return out;
}

export class WholeMessage {
  #message: Obj = {};
  readonly #blocks = new Map<number, Obj>();
  /** A tool call's input as streamed (input_json_delta), parsed at its block's end. */
  readonly #json = new Map<number, string>();
  #usage: Obj = {};

  /** One upstream event (its name, its data as the client would get it: model the slug). */
  add(name: string, data: string): void {
    const body = parseJson(data);
    if (!isObj(body)) return;
    const index = typeof body.index === 'number' ? body.index : 0;
    switch (name) {
      case 'message_start':
        if (isObj(body.message)) {
          this.#message = merged<Obj>(body.message);
          if (isObj(body.message.usage)) this.#usage = merged<Obj>(body.message.usage);
        }
        break;
      case 'content_block_start':
        if (isObj(body.content_block)) this.#blocks.set(index, merged<Obj>(body.content_block));
        break;
      case 'content_block_delta':
        if (isObj(body.delta)) this.#delta(index, body.delta);
        break;
      case 'content_block_stop':
        this.#stop(index);
        break;
      case 'message_delta':
        if (isObj(body.delta)) {
          for (const k of ['stop_reason', 'stop_sequence'] as const) if (k in body.delta) this.#message[k] = body.delta[k];
        }
        if (isObj(body.usage)) this.#usage = merged<Obj>(this.#usage, body.usage);
        break;
      default:
        break;
    }
  }

  #delta(index: number, d: Obj): void {
    const block = this.#blocks.get(index) ?? { type: 'text', text: '' };
    this.#blocks.set(index, block);
    switch (d.type) {
      case 'text_delta': block.text = `${typeof block.text === 'string' ? block.text : ''}${typeof d.text === 'string' ? d.text : ''}`; break;
      case 'thinking_delta': block.thinking = `${typeof block.thinking === 'string' ? block.thinking : ''}${typeof d.thinking === 'string' ? d.thinking : ''}`; break;
      case 'signature_delta': if (typeof d.signature === 'string') block.signature = d.signature; break;
      case 'input_json_delta': this.#json.set(index, (this.#json.get(index) ?? '') + (typeof d.partial_json === 'string' ? d.partial_json : '')); break;
      case 'citations_delta': if (d.citation !== undefined) block.citations = [...(Array.isArray(block.citations) ? block.citations : []), d.citation]; break;
      default: break;
    }
  }

  #stop(index: number): void {
    const json = this.#json.get(index);
    const block = this.#blocks.get(index);
    if (json === undefined || block === undefined) return;
    const input = json === '' ? {} : parseJson(json);
    if (input !== undefined) block.input = input;
    this.#json.delete(index);
  }

  /** The message's JSON, its usage with all four counts. */
  json(): string {
    for (const index of [...this.#json.keys()]) this.#stop(index);
    const content = [...this.#blocks].sort((a, b) => a[0] - b[0]).map(([, b]) => b);
    return JSON.stringify(merged<Obj>(this.#message, { content, usage: completeUsage(this.#usage) }));
  }
}
