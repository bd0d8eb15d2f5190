// Stream rewriting under hostile transport, for /v1/messages and /v1/responses on both upstream
// kinds: an upstream that writes its stream one byte per TCP write (multi-byte UTF-8 characters
// split across writes) gives the client exactly what one write would; a client that stops
// reading holds the upstream back (backpressure through the gateway, no unbounded buffering)
// and gets the whole stream once it reads again; a client that leaves mid-stream has the
// upstream call aborted (the fake upstream sees its socket close) and is charged exactly the
// tokens that were generated, once.

import t from 'tap';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { chunk, streamFrames, type Script } from '../helpers/upstream.js';
import { KEYS, PARTIAL, PARTIAL_TOKENS, account, namedEvents, settledAccount, startRig, type Kind, type Rig } from '../helpers/error-rig.js';

const FIXTURES = new URL('../fixtures/anthropic/', import.meta.url);
/** Anthropic's own stream of "Hello wörld 😀" (usage: 4 output tokens). */
const ANT_TEXT = readFileSync(new URL('text.sse', FIXTURES), 'utf8').split(/(?<=\n\n)/).filter((f) => f.trim() !== '');
const OAI_TEXT = streamFrames(['Hel', 'lo', ' wör', 'ld 😀'], { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 });
const TEXT = 'Hello wörld 😀';

type DialectName = 'messages' | 'responses';
const DIALECTS: Record<DialectName, { path: string; headers: Record<string, string>; body: (text: string) => unknown; end: string }> = {
  messages: {
    path: '/v1/messages',
    headers: { 'x-api-key': KEYS.demo, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: (text) => ({ model: 'm', max_tokens: 100, stream: true, messages: [{ role: 'user', content: text }] }),
    end: 'event: message_stop',
  },
  responses: {
    path: '/v1/responses',
    headers: { authorization: `Bearer ${KEYS.demo}`, 'content-type': 'application/json' },
    body: (text) => ({ model: 'm', input: text, max_output_tokens: 100, stream: true }),
    end: 'event: response.completed',
  },
};

/** Writes each byte of `frames` as its own write, yielding to the event loop between. */
function byteByByte(frames: string[], crlf: boolean): Script {
  return async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.socket?.setNoDelay(true);
    const bytes = Buffer.from(frames.join('').replace(/\n/g, crlf ? '\r\n' : '\n'));
    for (let i = 0; i < bytes.length && !res.destroyed; i++) {
      res.write(bytes.subarray(i, i + 1));
      await new Promise((r) => setImmediate(r));
    }
    res.end();
  };
}

/** The text a client reads from a Messages or Responses stream, and its event names. */
function readStream(dialect: DialectName, body: string): { text: string; names: string[]; usage: any } {
  const evs = namedEvents(body);
  let text = '';
  let usage: any;
  for (const [name, d] of evs) {
    if (name === 'content_block_delta' && d.delta.type === 'text_delta') text += d.delta.text;
    if (name === 'response.output_text.delta') text += d.delta;
    if (name === 'message_delta') usage = d.usage;
    if (name === 'response.completed') usage = d.response.usage;
  }
  return { text, names: evs.map(([n]) => n), usage: dialect === 'messages' ? usage?.output_tokens : usage?.output_tokens };
}

async function post(rig: Rig, dialect: DialectName, text: string, signal?: AbortSignal): Promise<Response> {
  const d = DIALECTS[dialect];
  return fetch(`${rig.gw.url}${d.path}`, { method: 'POST', headers: d.headers, body: JSON.stringify(d.body(text)), signal });
}

for (const kind of ['openai', 'anthropic'] as const satisfies readonly Kind[]) {
  t.test(`${kind} upstream`, async (t) => {
    const rig = await startRig(kind, (c) => { c.providers.up.timeout_ms = 60_000; });
    t.teardown(() => rig.close());
    const frames = kind === 'openai' ? OAI_TEXT : ANT_TEXT;

    for (const dialect of ['messages', 'responses'] as const) {
      t.test(`${dialect}: one byte per TCP write is rewritten exactly as one write`, async (t) => {
        rig.up.setScript(async (_req, res) => { res.writeHead(200, { 'content-type': 'text/event-stream' }); res.end(frames.join('')); });
        const whole = readStream(dialect, await (await post(rig, dialect, 'Hi')).text());
        t.equal(whole.text, TEXT, 'one write: the text');
        for (const crlf of [false, true]) {
          rig.up.setScript(byteByByte(frames, crlf));
          const before = await settledAccount(rig, 'demo');
          const res = await post(rig, dialect, 'Hi');
          t.equal(res.status, 200);
          const split = readStream(dialect, await res.text());
          t.equal(split.text, TEXT, `byte by byte${crlf ? ', CRLF' : ''}: the same text, multi-byte characters whole`);
          t.same(split.names, whole.names, 'the same events');
          t.equal(split.usage, 4, 'the upstream usage');
          const after = await settledAccount(rig, 'demo');
          t.equal(before.balance_units - after.balance_units, 4, 'charged the 4 output tokens, once');
        }
      });

      t.test(`${dialect}: a client that stops reading holds the upstream back, then gets it all`, async (t) => {
        const piece = 'x'.repeat(16 * 1024);
        const total = 1600; // ~26 MB if nothing held it back
        let written = 0;
        let finished = false;
        rig.up.setScript(async (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          const frame = (i: number) => (kind === 'openai'
            ? `data: ${JSON.stringify(chunk(i === 0 ? { role: 'assistant', content: piece } : { content: piece }))}\n\n`
            : (i === 0 ? ANT_TEXT[0]! + ANT_TEXT[1]! : '') +
              `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: piece } })}\n\n`);
          for (let i = 0; i < total && !res.destroyed; i++) {
            const ok = res.write(frame(i));
            written++;
            if (!ok) await new Promise((r) => res.once('drain', r));
          }
          res.end(kind === 'openai'
            ? `data: ${JSON.stringify(chunk({}, 'stop'))}\n\ndata: ${JSON.stringify({ ...chunk({}), choices: [], usage: { prompt_tokens: 5, completion_tokens: total, total_tokens: total + 5 } })}\n\ndata: [DONE]\n\n`
            : `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n` +
              `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":${total}}}\n\n` +
              'event: message_stop\ndata: {"type":"message_stop"}\n\n');
          finished = true;
        });
        const before = await settledAccount(rig, 'demo');
        const { port } = new URL(rig.gw.url);
        const sock = connect(Number(port), '127.0.0.1');
        await new Promise((r) => sock.once('connect', r));
        const d = DIALECTS[dialect];
        const payload = JSON.stringify(d.body('Hi'));
        const head = Object.entries(d.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
        sock.write(`POST ${d.path} HTTP/1.1\r\nhost: x\r\n${head}content-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
        sock.pause();
        await sleep(1000);
        t.notOk(finished, 'the upstream did not finish while the client was not reading');
        // Loopback socket buffers hold a few MB each way; the point is they are not all 26 MB.
        t.ok(written < total / 2, `the upstream was held back after ${written} of ${total} events`);
        let bytes = 0;
        let tail = '';
        let sawEnd = false;
        let ended = false;
        sock.on('data', (b: Buffer) => {
          bytes += b.length;
          const window = tail + b.toString('latin1');
          if (window.includes(d.end)) sawEnd = true;
          // The chunked body's last chunk: the answer is whole.
          if (sawEnd && window.endsWith('\r\n0\r\n\r\n')) ended = true;
          tail = window.slice(-200);
        });
        sock.resume();
        const deadline = Date.now() + 30_000;
        while (!ended && Date.now() < deadline) await sleep(20);
        sock.destroy();
        t.ok(finished, 'the upstream finished once the client read again');
        t.ok(sawEnd && ended, `the client got the end of the stream (${d.end}, then the last chunk)`);
        t.ok(bytes > total * piece.length, `the client got the whole stream (${bytes} bytes)`);
        const after = await settledAccount(rig, 'demo');
        t.equal(before.balance_units - after.balance_units, total, `charged the ${total} output tokens the upstream reported, once`);
      });

      t.test(`${dialect}: a client that leaves mid-stream aborts the upstream, charged what was generated once`, async (t) => {
        let leftAt = 0;
        const before = await settledAccount(rig, 'demo');
        const seen = rig.up.requests.length;
        rig.up.setScript(async (_req, res) => {
          // PARTIAL, then nothing more until the gateway hangs up.
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(kind === 'openai'
            ? `data: ${JSON.stringify(chunk({ role: 'assistant', content: '' }))}\n\ndata: ${JSON.stringify(chunk({ content: PARTIAL }))}\n\n`
            : ANT_TEXT[0]! + ANT_TEXT[1]! + `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: PARTIAL } })}\n\n`);
          await new Promise((r) => res.once('close', r));
        });
        const ac = new AbortController();
        const res = await post(rig, dialect, 'Hi', ac.signal);
        t.equal(res.status, 200);
        let got = '';
        const decoder = new TextDecoder();
        for await (const b of res.body as any) {
          got += decoder.decode(b, { stream: true });
          if (got.includes(PARTIAL)) break;
        }
        ac.abort();
        leftAt = Date.now();
        while (rig.up.requests[seen]?.aborted !== true && Date.now() - leftAt < 2000) await sleep(10);
        t.equal(rig.up.requests[seen]!.aborted, true, 'the fake upstream saw its socket close');
        t.ok(rig.up.requests[seen]!.abortedAt! - leftAt < 1000, 'within 1 s of the client leaving');
        const after = await settledAccount(rig, 'demo');
        t.equal(before.balance_units - after.balance_units, PARTIAL_TOKENS, `charged the ${PARTIAL_TOKENS} generated tokens`);
        await sleep(100);
        t.equal((await account(rig, 'demo')).balance_units, after.balance_units, 'charged once');
        t.equal(await rig.gw.gateway.slotsInUse('demo'), 0, 'the concurrency slot is free');
      });
    }
  });
}
