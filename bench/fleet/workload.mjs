// The request streams of `npm run bench:fleet` and the closed-loop clients that send them.
// Everything is generated from a seed, and a conversation's later turns carry the answers the
// simulated servers gave (a function of the prompt alone), so every policy sees the same stream.

import { request } from 'undici';

/** xorshift32: a small seeded generator. */
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

const VOCAB = 'the of and to in is that for it as with was on be by this are from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three'.split(' ');

function words(next, tokens) {
  let out = '';
  while (out.length < tokens * 4) out += `${VOCAB[Math.floor(next() * VOCAB.length)]} `;
  return out.trimEnd();
}

/**
 * Workload (a): conversation `i` over one of 4 shared system prompts (~150 tokens each). It
 * opens with its own document (`docTokens`) and a question, and its context grows turn by
 * turn as in a chat or a coding session: each later turn sends `turnTokens` of new text and
 * carries every turn and answer before it. `thinkMs` [min, max] is the pause before a
 * follow-up ([0, 0]: at once, a saturating closed loop).
 */
export function conversations({ turns, outputTokens, turnTokens, docTokens = 0, thinkMs = [0, 0] }, seed) {
  const shared = rng(seed);
  const systems = Array.from({ length: 4 }, (_v, i) => `You are assistant #${i} of the support team. ${words(shared, 150)}`);
  return {
    outputTokens,
    conversation(i) {
      const next = rng(seed ^ Math.imul(i + 1, 0x9e3779b1));
      return {
        system: systems[i % systems.length],
        turns: Array.from({ length: turns }, (_w, t) => ({
          text: t === 0 ? `Conversation ${i}. ${words(next, docTokens + turnTokens)}` : words(next, turnTokens),
          thinkMs: t === 0 ? 0 : thinkMs[0] + Math.floor(next() * (thinkMs[1] - thinkMs[0])),
        })),
      };
    },
  };
}

/** Workload (b): prompt `i` of `tokens` tokens, alone; no two share even a first block. */
export function uniquePrompts({ outputTokens, tokens }, seed) {
  return {
    outputTokens,
    conversation(i) {
      const next = rng(seed ^ Math.imul(i + 1, 0x9e3779b1));
      return { system: undefined, turns: [{ text: `${Math.floor(next() * 1e9).toString(36)}-${i} ${words(next, tokens)}`, thinkMs: 0 }] };
    },
  };
}

/** Sends one streamed request; returns the answer text and the time to its first byte. */
async function ask(origin, key, messages, outputTokens) {
  const t0 = performance.now();
  const res = await request(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim', messages, max_tokens: outputTokens, stream: true }),
    headersTimeout: 300_000, bodyTimeout: 300_000,
  });
  let ttft;
  let raw = '';
  for await (const chunk of res.body) {
    ttft ??= performance.now() - t0;
    raw += chunk.toString('utf8');
  }
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${raw.slice(0, 300)}`);
  if (!raw.includes('data: [DONE]')) throw new Error(`stream without [DONE]: ${raw.slice(-300)}`);
  let text = '';
  for (const line of raw.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const ev = JSON.parse(line.slice(6));
    text += ev.choices?.[0]?.delta?.content ?? '';
  }
  return { text, ttft };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `script` with `clients` closed-loop clients, started evenly over `rampMs`: client c runs
 * conversations c, c + clients, c + 2 clients... turn by turn, each turn waiting for the answer
 * to the one before (and its think time). The first `warmupSeconds` fill the caches and queues
 * and are not measured; then, for `seconds`, throughput counts the requests finished and time
 * to first token is taken of every request begun. No request begins after that; those in
 * flight finish.
 */
export async function runWorkload(script, { origin, key, clients, warmupSeconds, seconds, rampMs }) {
  const ttftMs = [];
  let done = 0;
  const t0 = performance.now();
  const from = t0 + warmupSeconds * 1000;
  const end = from + seconds * 1000;
  const client = async (c) => {
    await sleep((c * rampMs) / clients);
    for (let i = c; performance.now() < end; i += clients) {
      const conv = script.conversation(i);
      const messages = conv.system === undefined ? [] : [{ role: 'system', content: conv.system }];
      for (const turn of conv.turns) {
        if (turn.thinkMs > 0) await sleep(turn.thinkMs);
        const begun = performance.now();
        if (begun >= end) return;
        messages.push({ role: 'user', content: turn.text });
        const { text, ttft } = await ask(origin, key, messages, script.outputTokens);
        const finished = performance.now();
        if (begun >= from) ttftMs.push(ttft);
        if (finished >= from && finished <= end) done++;
        messages.push({ role: 'assistant', content: text });
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_v, c) => client(c)));
  return { requests: done, seconds, ttftMs };
}
