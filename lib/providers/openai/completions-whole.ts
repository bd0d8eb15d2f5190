// A whole text_completion made from the upstream's streamed chunks, for a client that asked
// for no stream while the upstream was called streaming (stream_upstream, CONTRACT section 11):
// the answer a non-streaming call would have had, in the upstream's own shape, so that a
// client of legacy completions gets its logprobs, stop_reason and any member the server adds,
// as on the direct path. Fed the chunks the translator already parsed (no second parse).
// Like every native completions answer it leaves out `id` and `usage`: the completions dialect
// puts Tollgate's id (one per answer) and the charged usage there.

import { isObj, type Obj } from '../shared.js';
import { merged } from '../../objects.js';

/** Log probabilities of two pieces of one choice: arrays member by member joined, else the later. */
function joinedLogprobs(a: unknown, b: unknown): unknown {
  if (!isObj(b)) return a ?? b;
  if (!isObj(a)) return b;
  const out = merged<Obj>(a);
  for (const [k, v] of Object.entries(b)) {
    if (k === '__proto__') continue;
    const before = out[k];
    out[k] = Array.isArray(before) && Array.isArray(v) ? before.concat(v) : v;
  }
  return out;
}

export class WholeCompletion {
  /** The chunks' top-level members (later ones win), but for id, choices and usage. */
  readonly #top: Obj = {};
  readonly #choices = new Map<number, Obj>();

  /** One parsed chunk (its model already the catalog slug). */
  add(chunk: Obj): void {
    for (const [k, v] of Object.entries(chunk)) {
      if (k !== 'id' && k !== 'choices' && k !== 'usage' && k !== '__proto__') this.#top[k] = v;
    }
    if (!Array.isArray(chunk.choices)) return;
    chunk.choices.forEach((c: unknown, i) => {
      if (!isObj(c)) return;
      const index = typeof c.index === 'number' ? c.index : i;
      let whole = this.#choices.get(index);
      if (whole === undefined) {
        whole = { text: '', index, logprobs: null, finish_reason: null };
        this.#choices.set(index, whole);
      }
      for (const [k, v] of Object.entries(c)) {
        if (k === 'text') { if (typeof v === 'string') whole.text += v; }
        else if (k === 'logprobs') whole.logprobs = joinedLogprobs(whole.logprobs, v);
        // A finish (and vLLM's stop_reason) is said on a choice's last piece; a null before it says nothing.
        else if (k === 'finish_reason' || k === 'stop_reason') { if (v !== null || !(k in whole)) whole[k] = v; }
        else if (k !== 'index' && k !== '__proto__') whole[k] = v;
      }
    });
  }

  /** The answer's JSON: text_completion, its choices by index; no id, no usage. */
  json(): string {
    const choices = [...this.#choices.values()].sort((a, b) => (a.index as number) - (b.index as number));
    return JSON.stringify(merged<Obj>(this.#top, { object: 'text_completion', choices }));
  }
}
