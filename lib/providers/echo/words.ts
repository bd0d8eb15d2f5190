// How the echo provider answers a text: its words, each with its leading whitespace, no further
// than the output limit (shared by chat answers and plain-text completions).

import type { ModelConfig } from '../../config/types.js';
import type { FinishReason } from '../../hub/chat.js';
import { counter } from '../../tokens/count.js';

/**
 * `text`'s words with their leading whitespace (so that the deltas concatenate back into the
 * text; trailing whitespace dropped), as many as `limit` tokens take. Words are found one at a
 * time and no further than the limit: a long text costs what is answered, not its length. A
 * plain scan for runs of non-space: the backtracking /\s*\S+/g this replaced took quadratic time
 * on a long run of spaces (minutes for 600 KB).
 */
export function echoWords(text: string, tokenizer: ModelConfig['tokenizer'], limit: number): { words: string[]; finish: FinishReason; completion: number } {
  const count = counter(tokenizer);
  const words: string[] = [];
  let completion = 0;
  let finish: FinishReason = 'stop';
  const take = (w: string): boolean => {
    const n = count(w);
    if (completion + n > limit) { finish = 'length'; return false; }
    words.push(w);
    completion += n;
    return true;
  };
  const word = /\S+/g;
  let start = 0;
  for (let m = word.exec(text); m !== null; m = word.exec(text)) {
    const end = m.index + m[0].length;
    if (!take(text.slice(start, end))) break;
    start = end;
  }
  if (start === 0 && words.length === 0 && finish === 'stop') take(text);
  return { words, finish, completion };
}

