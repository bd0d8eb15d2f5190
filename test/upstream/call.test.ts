// Upstream calls through undici's dispatch API (lib/upstream/call.ts), on real sockets: headers
// as undici's request() parses them, a body read whole or chunk by chunk with backpressure, the
// cap of a whole read aborting the call, and an abort signal ending it with its reason.

import t from 'tap';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { call } from '../../lib/upstream/call.js';
import { CallAbort } from '../../lib/upstream/abort.js';

type Script = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;
let script: Script = (_req, res) => { res.end('ok'); };
/** Answers 200 with `first`, then holds the answer open until the call is cut. */
const writeThenHold = (first: string): Script => async (_req, res) => {
  res.writeHead(200);
  res.write(first);
  await new Promise((r) => res.once('close', r));
};
const closed: boolean[] = [];
const server = createServer((req, res) => {
  const i = closed.push(false) - 1;
  res.on('close', () => { closed[i] = !res.writableFinished; });
  void script(req, res);
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
t.teardown(async () => { await pool.close(); server.close(); });

const post = (signal = new AbortController().signal) =>
  call(pool, { method: 'POST', path: '/x', headers: { 'content-type': 'application/json' }, body: '{"a":1}', signal });

t.test('status, headers as undici parses them (lower-cased, repeats as arrays), the request body sent', async (t) => {
  let got = '';
  script = async (req, res) => {
    for await (const c of req) got += c;
    res.writeHead(201, [['X-One', 'a'], ['Set-Cookie', 'c1'], ['Set-Cookie', 'c2'], ['Content-Type', 'text/plain'],
      ['X-Latin', 'caf\u00e9'], ['__proto__', 'p']].flat());
    res.end('hello');
  };
  const a = await post();
  t.equal(a.statusCode, 201);
  t.equal(a.headers['x-one'], 'a');
  t.strictSame(a.headers['set-cookie'], ['c1', 'c2']);
  t.equal(a.headers['content-type'], 'text/plain');
  t.equal(Object.getPrototypeOf(a.headers), Object.prototype, 'a __proto__ header is a plain entry');
  t.equal((await a.body.collect(1000, () => new Error('big'))).toString(), 'hello');
  t.equal(got, '{"a":1}');
  const viaRequest = await pool.request({ method: 'POST', path: '/x', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
  await viaRequest.body.text();
  const { date: _d1, ...mine } = a.headers;
  const { date: _d2, ...theirs } = viaRequest.headers;
  t.strictSame(mine, theirs, 'exactly the headers pool.request gives, latin-1 values and __proto__ included');
});

t.test('read chunk by chunk: a large body arrives whole and in order though the reader is slow', async (t) => {
  const piece = (i: number) => String.fromCharCode(97 + (i % 26)).repeat(32 * 1024);
  script = async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < 64; i++) {
      if (!res.write(piece(i))) await new Promise((r) => res.once('drain', r));
    }
    res.end();
  };
  const a = await post();
  const parts: Buffer[] = [];
  for await (const c of a.body) {
    parts.push(c);
    if (parts.length % 8 === 0) await sleep(5);
  }
  const text = Buffer.concat(parts).toString();
  t.equal(text.length, 64 * 32 * 1024);
  t.equal(text, Array.from({ length: 64 }, (_, i) => piece(i)).join(''));
});

t.test('a whole read above its cap rejects with the cap error and aborts the call', async (t) => {
  script = async (_req, res) => {
    res.writeHead(200);
    for (let i = 0; i < 200 && !res.destroyed; i++) {
      res.write('x'.repeat(16 * 1024));
      await sleep(2);
    }
    res.end();
  };
  const a = await post();
  const big = new Error('too large');
  await t.rejects(a.body.collect(64 * 1024, () => big), big);
  for (let i = 0; i < 100 && closed.at(-1) !== true; i++) await sleep(10);
  t.equal(closed.at(-1), true, 'the upstream saw the call cut');
});

t.test('poll without a promise: undefined until a chunk comes (arrival() says when), the chunks, null at the end; a failure is thrown', async (t) => {
  let finish!: () => void;
  script = async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('one');
    await new Promise<void>((r) => { finish = r; });
    res.end('two');
  };
  const a = await post();
  /** Everything until poll() says undefined (then false) or null (then true). */
  const drain = async (into: string[], wait: boolean): Promise<boolean> => {
    for (;;) {
      const chunks = a.body.poll();
      if (chunks === null) return true;
      if (chunks === undefined) {
        if (!wait) return false;
        await a.body.arrival();
        continue;
      }
      into.push(Buffer.concat(chunks).toString());
      wait = false;
    }
  };
  const got: string[] = [];
  t.equal(await drain(got, true), false);
  t.equal(got.join(''), 'one');
  t.equal(a.body.poll(), undefined, 'nothing more has come');
  const arrived = a.body.arrival();
  finish();
  await arrived;
  let ended = false;
  while (!ended) ended = await drain(got, true);
  t.equal(got.join(''), 'onetwo');
  t.equal(a.body.poll(), null, 'the end, again');

  script = writeThenHold('first');
  const ac = new AbortController();
  const b = await post(ac.signal);
  while (b.body.poll() === undefined) await b.body.arrival();
  const waiting = b.body.arrival();
  const reason = Symbol('timeout');
  ac.abort(reason);
  await waiting;
  let thrown: unknown;
  try { b.body.poll(); } catch (e) { thrown = e; }
  t.equal(thrown, reason, 'poll throws the call\'s error');
});

t.test('aborting the signal mid-body ends the read with the signal reason and cuts the call', async (t) => {
  script = writeThenHold('first');
  const ac = new AbortController();
  const a = await post(ac.signal);
  const reason = Symbol('timeout');
  const it = a.body[Symbol.asyncIterator]();
  t.equal((await it.next()).value?.toString(), 'first');
  setTimeout(() => ac.abort(reason), 20);
  let thrown: unknown;
  try { await it.next(); } catch (e) { thrown = e; }
  t.equal(thrown, reason, 'the read failed with the signal reason');
  for (let i = 0; i < 100 && closed.at(-1) !== true; i++) await sleep(10);
  t.equal(closed.at(-1), true, 'the upstream saw the call cut');
});

t.test('a signal aborted before the answer rejects the call with its reason', async (t) => {
  script = async (_req, res) => { await sleep(200); res.end('late'); };
  const ac = new AbortController();
  const p = post(ac.signal);
  setTimeout(() => ac.abort(new Error('gone')), 20);
  await t.rejects(p, { message: 'gone' });
});

t.test('a body destroyed unread aborts the call; the next call on the pool works', async (t) => {
  script = writeThenHold('x');
  const a = await post();
  a.body.destroy();
  t.ok(a.body.destroyed);
  for (let i = 0; i < 100 && closed.at(-1) !== true; i++) await sleep(10);
  t.equal(closed.at(-1), true);
  script = (_req, res) => { res.end('again'); };
  const b = await post();
  t.equal((await b.body.collect(100, () => new Error('big'))).toString(), 'again');
});

t.test('a CallAbort aborts the call like a signal; its AbortSignal, made late, carries the same reason', async (t) => {
  script = writeThenHold('first');
  const abort = new CallAbort();
  const a = await call(pool, { method: 'POST', path: '/x', headers: {}, body: '{}', signal: abort });
  const it = a.body[Symbol.asyncIterator]();
  t.equal((await it.next()).value?.toString(), 'first');
  const reason = Symbol('gone');
  let heard = 0;
  const off = abort.onAbort(() => heard++);
  const offToo = abort.onAbort(() => heard += 10);
  offToo();
  setTimeout(() => abort.abort(reason), 20);
  let thrown: unknown;
  try { await it.next(); } catch (e) { thrown = e; }
  t.equal(thrown, reason);
  t.equal(heard, 1, 'a listener hears the abort once; an unsubscribed one does not');
  off();
  abort.abort(Symbol('again'));
  t.equal(abort.reason, reason, 'the first reason stays');
  t.equal(abort.signal.aborted, true);
  t.equal(abort.signal.reason, reason);
  for (let i = 0; i < 100 && closed.at(-1) !== true; i++) await sleep(10);
  t.equal(closed.at(-1), true, 'the upstream saw the call cut');
});

t.test('a CallAbort aborted before the call: the call rejects with its reason', async (t) => {
  script = async (_req, res) => { await sleep(100); res.end('late'); };
  const abort = new CallAbort();
  abort.abort(new Error('already gone'));
  await t.rejects(call(pool, { method: 'POST', path: '/x', headers: {}, body: '{}', signal: abort }), { message: 'already gone' });
});
