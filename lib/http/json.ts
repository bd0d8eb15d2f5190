// JSON parsing that a hostile body cannot hurt: nesting is bounded and prototype-polluting
// keys are refused (CONTRACT section 4, Hostile input), and a large body is parsed off the
// event loop, on a worker thread (CONTRACT section 16: no request holds the loop more than a
// few milliseconds; JSON.parse of 20 MB takes 30-60 ms, its decoding as much again).

import { Worker } from 'node:worker_threads';
import { GatewayError, clip } from '../errors.js';
import type { IncomingMessage } from 'node:http';
import { isJsonContentType, readBody } from './body.js';

export const MAX_JSON_DEPTH = 64;

function invalid(message: string): GatewayError {
  return new GatewayError('invalid_json', message);
}

/**
 * The most JSON values (objects, arrays, strings, numbers, literals; a string of any length is
 * one) a body may hold. Not its bytes: its pieces are what costs, on the main thread, once the
 * worker hands a parsed body over (a structured clone is rebuilt value by value, about a
 * microsecond each) and in every loop over messages, parts and inputs. A million empty messages
 * held the event loop for seconds; 100,000 values stay within tens of milliseconds, and no
 * conversation a model could take comes near (OpenAI takes 2,048 embedding inputs).
 */
export const MAX_JSON_VALUES = 100_000;

function tooManyValues(): GatewayError {
  return new GatewayError('request_too_large',
    `The request body holds more than ${MAX_JSON_VALUES} JSON values (messages, parts, inputs, numbers); send fewer in one request.`);
}

/** Values seen by the inspection under way (one at a time: inspection never awaits). */
let seen = 0;

/** Depth of the top-level value is 1. */
function inspect(value: unknown, depth: number): void {
  if (++seen > MAX_JSON_VALUES) throw tooManyValues();
  if (value === null || typeof value !== 'object') return;
  if (depth > MAX_JSON_DEPTH) throw invalid(`The JSON body is nested deeper than ${MAX_JSON_DEPTH} levels.`);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) inspect(value[i], depth + 1);
    return;
  }
  for (const key in value) {
    if (key === '__proto__') throw invalid('The JSON body contains a forbidden "__proto__" key.');
    const child = (value as Record<string, unknown>)[key];
    if (key === 'constructor' && child !== null && typeof child === 'object' && Object.hasOwn(child, 'prototype')) {
      throw invalid('The JSON body contains a forbidden "constructor.prototype" key.');
    }
    inspect(child, depth + 1);
  }
}

/** Parses and inspects a body; any problem is 400 invalid_json. */
export function parseJsonBody(buf: Buffer): unknown {
  if (buf.length === 0) throw invalid('The request body is empty; a JSON object is required.');
  let value: unknown;
  try {
    value = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    // V8 quotes a bit of the body; clipped all the same, as any echo of client input.
    throw invalid(`The request body is not valid JSON: ${clip((err as Error).message)}`);
  }
  seen = 0;
  inspect(value, 1);
  return value;
}

/** One body for the worker (json-thread.ts), and its answer. */
export interface JsonJob { id: number; bytes: Uint8Array }
export type JsonAnswer = { id: number; value: unknown } | { id: number; invalid: string; code: 'invalid_json' | 'request_too_large' } | { id: number; failed: string };

/** Bodies this large and larger are parsed on the worker: below it, a parse takes about a millisecond. */
export const OFF_THREAD_BYTES = 512 * 1024;
/** The worker ends after this long without work (it is started again when needed). */
const IDLE_MS = 30_000;

/** The one worker thread large bodies are parsed on, started at the first and ended when idle. */
class JsonThread {
  #worker: Worker | undefined;
  #next = 0;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  #idle: NodeJS.Timeout | undefined;

  parse(buf: Buffer): Promise<unknown> {
    const worker = this.#worker ?? this.#start();
    clearTimeout(this.#idle);
    const id = this.#next++;
    // A buffer that owns its memory is handed over whole (the caller has no further use for
    // it); a view of shared memory is copied.
    const owned = buf.byteOffset === 0 && buf.byteLength === buf.buffer.byteLength && !(buf.buffer instanceof SharedArrayBuffer);
    const job: JsonJob = { id, bytes: buf };
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      worker.postMessage(job, owned ? [buf.buffer as ArrayBuffer] : []);
    });
  }

  #start(): Worker {
    const file = import.meta.url.endsWith('.ts') ? './json-thread.ts' : './json-thread.js';
    const worker = new Worker(new URL(file, import.meta.url));
    worker.unref();
    worker.on('message', (answer: JsonAnswer) => {
      const job = this.#pending.get(answer.id);
      if (job === undefined) return;
      this.#pending.delete(answer.id);
      if ('value' in answer) job.resolve(answer.value);
      else if ('invalid' in answer) job.reject(new GatewayError(answer.code, answer.invalid));
      else job.reject(new Error(`JSON worker: ${answer.failed}`));
      if (this.#pending.size === 0) this.#idleSoon();
    });
    // A worker that dies (out of memory on a hostile body) fails what it held; the next body starts another.
    const died = (err: unknown) => {
      if (this.#worker !== worker) return;
      this.#worker = undefined;
      for (const job of this.#pending.values()) job.reject(err instanceof Error ? err : new Error(`JSON worker exited: ${String(err)}`));
      this.#pending.clear();
    };
    worker.on('error', died);
    worker.on('exit', (code) => died(new Error(`JSON worker exited with code ${code}`)));
    this.#worker = worker;
    return worker;
  }

  #idleSoon(): void {
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      const worker = this.#worker;
      if (worker === undefined || this.#pending.size > 0) return;
      this.#worker = undefined;
      void worker.terminate();
    }, IDLE_MS);
    this.#idle.unref();
  }
}

const thread = new JsonThread();

/**
 * parseJsonBody, on the worker thread for a body of OFF_THREAD_BYTES or more. The buffer is
 * handed over: the caller must not read it afterwards.
 */
export async function parseJsonBodyOffThread(buf: Buffer): Promise<unknown> {
  if (buf.length < OFF_THREAD_BYTES) return parseJsonBody(buf);
  return thread.parse(buf);
}

/**
 * A route's JSON body: 415 for another media type, then the body read under the server's size
 * and time limits and parsed (off the event loop when large).
 */
export async function readJsonBody(req: IncomingMessage, server: { max_body_bytes: number; body_timeout_ms: number }): Promise<unknown> {
  if (!isJsonContentType(req.headers['content-type'])) {
    throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
  }
  return parseJsonBodyOffThread(await readBody(req, server.max_body_bytes, server.body_timeout_ms));
}
