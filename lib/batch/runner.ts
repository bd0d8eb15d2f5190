// Runs batches (CONTRACT section 18). Each line goes through the gateway's own request handler,
// in-process, as a request of its route made by the batch's key: the same pipeline as a live
// request (gating, holds, budgets, wallet, fallbacks, usage record), in the queue's `low` band,
// charged less the plan's batch_discount_percent (the principal carries the batch: auth/
// principal.ts, billing/meter.ts). The requests go over a loopback listener of this process
// that only answers requests it was told of (a one-time token per line), so a line is a real
// HTTP request and answer, streamed and closed as any other.
// - batch.concurrency lines of a batch in flight per instance; and, where the lines' provider has
//   a queue (max_outstanding), more while its replicas have free slots and nothing waits in it,
//   so a batch fills idle capacity (up to twice the fleet's max_outstanding in all) and no more:
//   extra lines stop being sent once requests wait, and interactive ones go first.
// - Exactly once: a line's hold and settlement take the id `batch:<batch>:<line>`, and its
//   outcome is stored once (store/batches.ts); a batch found unfinished (a restart, another
//   instance's crash) runs only the lines without an outcome, and a line whose answer was
//   settled but not stored is settled again as a repeat: not charged twice.
// - A lease per batch: one instance runs it; another takes it once the lease lapses.

import { randomBytes } from 'node:crypto';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { delegate } from '../auth/authenticator.js';
import type { Principal } from '../auth/principal.js';
import type { Logger } from '../observe/log.js';
import type { Metrics } from '../observe/metrics.js';
import type { GatewayState } from '../state.js';
import type { Fleet } from '../upstream/balance/index.js';
import type { BatchError, BatchRecord, BatchStore, FileRecord, LineOutcome } from '../store/batches.js';
import { newId } from './files.js';
import { sweep } from './retention.js';
import { validateLines, type BatchLine } from './validate.js';

/** How often the store is asked for batches to run: at first, and while any were found... */
const POLL_MS = 200;
/** ...doubling after each look that found none, up to this (a batch waits at most this to start when idle). */
const IDLE_POLL_MS = 2000;
const LEASE_MS = 15_000;
const SWEEP_MS = 60_000;
/** How often a running batch reads its key again (revoked or expired: it stops). */
const PRINCIPAL_MS = 1000;
/** Refusals before any hold (rate limits, a full queue) are tried again this many times. */
const RETRIES = 20;
const TOKEN_HEADER = 'x-tollgate-batch-line';
/** How often a running batch looks for idle capacity beyond batch.concurrency (besides its start). */
const GROW_MS = 100;

export interface RunnerOptions {
  store: BatchStore;
  /** The gateway's state now (undefined while it starts). */
  state: () => GatewayState | undefined;
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  logger: Logger;
  metrics?: Metrics;
}

export class BatchRunner {
  readonly #o: RunnerOptions;
  readonly #owner = randomBytes(8).toString('hex');
  readonly #running = new Map<string, Promise<void>>();
  readonly #tokens = new Map<string, Principal>();
  #server: Server | undefined;
  #port = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Lines in flight now on this instance, and each running batch's lines not started yet (metrics). */
  inFlight = 0;
  readonly #waiting = new Map<string, BatchLine[]>();

  constructor(o: RunnerOptions) {
    this.#o = o;
    if (o.metrics !== undefined) {
      o.metrics.batchLines = () => {
        let waiting = 0;
        for (const q of this.#waiting.values()) waiting += q.length;
        return { waiting, running: this.inFlight };
      };
      o.metrics.batchLinesDone.inc({ outcome: 'completed' }, 0);
      o.metrics.batchLinesDone.inc({ outcome: 'failed' }, 0);
    }
  }

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      const token = req.headers[TOKEN_HEADER];
      const principal = typeof token === 'string' ? this.#tokens.get(token) : undefined;
      if (principal === undefined) {
        res.writeHead(404).end();
        return;
      }
      this.#tokens.delete(token as string);
      delete req.headers[TOKEN_HEADER];
      delegate(req, principal);
      this.#o.handler(req, res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.#server = server;
    this.#port = (server.address() as AddressInfo).port;
    this.#schedule();
  }

  /** The wait before the next look at the store: POLL_MS while batches are found, backing off to IDLE_POLL_MS. */
  #pollMs = POLL_MS;

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#tick().then((found) => { this.#pollMs = found ? POLL_MS : Math.min(IDLE_POLL_MS, this.#pollMs * 2); })
        .catch((err: unknown) => this.#o.logger.warn({ err: (err as Error).message }, 'batch runner: could not read batches'))
        .finally(() => this.#schedule());
    }, this.#pollMs);
    this.#timer.unref();
  }

  /** When expired files were last looked for (performance.now()). */
  #swept = -Infinity;

  /** One look at the store; true when there were batches to run (or running here). */
  async #tick(): Promise<boolean> {
    const state = this.#o.state();
    // batch.concurrency 0: this instance runs no lines and never reads the store for batches.
    if (state === undefined || state.config.batch.concurrency === 0) return false;
    if (performance.now() - this.#swept >= SWEEP_MS) {
      // Files and batches past batch.retention_days are deleted; a full sweep is followed by another at the next look.
      const full = await sweep(this.#o.store, Math.floor(Date.now() / 1000), state.config.batch.retention_days);
      this.#swept = full ? -Infinity : performance.now();
    }
    const active = await this.#o.store.activeBatches();
    for (const b of active) {
      if (this.#running.has(b.id)) continue;
      if (!(await this.#o.store.lease(b.id, this.#owner, LEASE_MS))) continue;
      const run = this.#run(b.id).catch((err: unknown) => this.#o.logger.error({ batch: b.id, err: (err as Error).message }, 'batch runner: batch stopped'))
        .finally(() => this.#running.delete(b.id));
      this.#running.set(b.id, run);
    }
    return active.length > 0 || this.#running.size > 0;
  }

  /** Starts no new line; resolves once the lines in flight are done and the listener is closed. */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  #stopping: Promise<void> | undefined;

  async #stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await Promise.allSettled([...this.#running.values()]);
    await new Promise<void>((resolve) => (this.#server === undefined ? resolve() : this.#server.close(() => resolve())));
  }

  async #run(id: string): Promise<void> {
    const store = this.#o.store;
    const state = this.#o.state()!;
    let b = await store.getBatch(id);
    if (b === undefined) return;
    const now = () => Math.floor(Date.now() / 1000);
    let principal: Principal;
    try {
      principal = await this.#principal(state, b);
    } catch (err) {
      await this.#fail(b, 'invalid_key', `The key that made this batch can no longer be used: ${(err as Error).message}`);
      return;
    }
    const content = await store.fileContent(b.input_file_id);
    if (content === undefined) {
      await this.#fail(b, 'file_not_found', 'The input file is gone.');
      return;
    }
    const { lines, errors } = await validateLines(content, b.endpoint, state.config.batch.max_lines, state.catalog, principal);
    if (b.status === 'validating') {
      if (errors.length > 0) {
        b.status = 'failed';
        b.failed_at = now();
        b.errors = { object: 'list', data: errors };
        await store.putBatch(b);
        return;
      }
      b = { ...b, status: 'in_progress', in_progress_at: now(), request_counts: { total: lines.length, completed: 0, failed: 0 } };
      await store.putBatch(b);
    }
    const done = new Set((await store.outcomes(id)).map((o) => o.line));
    const queue = lines.filter((l) => !done.has(l.line));
    const discount = principal.plan.batch_discount_percent ?? 0;
    let status = b.status;
    let stopAt = 0;
    let keyGone: string | undefined;
    let principalAt = performance.now();
    /** No new line starts: cancelled, expired, the key gone, or the runner stopping. */
    let halted = false;
    /** The fleet the line goes to first (its model's provider), if the model is known. */
    const fleetOf = (line: BatchLine): Fleet | undefined => {
      const model = typeof line.body.model === 'string' ? state.catalog.get(line.body.model) : undefined;
      return model === undefined ? undefined : state.targets(model)[0]?.provider.fleet;
    };
    // A worker beyond batch.concurrency (`beyond`) takes a line only while nothing waits in the
    // queue of the line's fleet: it fills idle capacity and leaves once others wait. A line
    // leaves `queue` only when it starts: one that never starts (cancelled, expired, the key
    // gone, a shutdown) stays for the error file or the next run.
    const worker = async (beyond: boolean) => {
      for (;;) {
        if (halted || queue.length === 0 || (beyond && (fleetOf(queue[0]!)?.queue?.size ?? 1) > 0)) return;
        if (this.#stopped || keyGone !== undefined) { halted = true; return; }
        const current = await store.getBatch(id);
        status = current?.status ?? 'cancelled';
        if (status !== 'in_progress') { halted = true; return; }
        if (now() >= b.expires_at) { stopAt = now(); halted = true; return; }
        // The key as it is now: revoked or expired, the batch's remaining lines do not run.
        if (performance.now() - principalAt >= PRINCIPAL_MS) {
          principalAt = performance.now();
          try {
            principal = await this.#principal(state, b);
          } catch (err) {
            keyGone = (err as Error).message;
            halted = true;
            return;
          }
        }
        const line = queue.shift();
        if (line === undefined) return;
        const outcome = await this.#line(b, line, { ...principal, batch: { id, customId: line.custom_id, billingId: `batch:${id}:${line.line}`, discountPercent: discount } });
        if (await store.addOutcome(id, outcome)) this.#o.metrics?.batchLinesDone.inc({ outcome: outcome.ok ? 'completed' : 'failed' });
      }
    };
    // The workers running now (each leaves the set as it ends), and those beyond batch.concurrency.
    const workers = new Set<Promise<void>>();
    let extra = 0;
    /** The first worker's failure (a store fault): no new line starts, and the batch stops with it once the others end. */
    let failure: { err: unknown } | undefined;
    const start = (beyond: boolean) => {
      const w: Promise<void> = worker(beyond).catch((err: unknown) => {
        failure ??= { err };
        halted = true;
      }).finally(() => {
        workers.delete(w);
        if (beyond) extra--;
      });
      workers.add(w);
    };
    for (let i = Math.min(state.config.batch.concurrency, queue.length); i > 0; i--) start(false);
    // Idle capacity: more workers while the fleet has free slots and nothing waiting, up to
    // twice its slots beyond batch.concurrency (a line spends part of its time off the replica:
    // admission, its answer's way back, its outcome's write). Looked at every GROW_MS, and only
    // slots free at two looks in a row count: a line just sent (by this batch or another) is not
    // on a replica yet, and would otherwise be counted as room.
    let idleBefore = 0;
    const grow = () => {
      const fleet = queue.length === 0 || halted || this.#stopped ? undefined : fleetOf(queue[0]!);
      const idle = fleet === undefined ? 0 : fleet.idleSlots();
      const room = fleet === undefined ? 0 : Math.min(idle, idleBefore, queue.length, 2 * fleet.capacity - extra);
      idleBefore = idle;
      for (let i = 0; i < room; i++) {
        extra++;
        start(true);
      }
    };
    // The lease is renewed while lines run, however long each takes.
    this.#waiting.set(id, queue);
    const renew = setInterval(() => { store.lease(id, this.#owner, LEASE_MS).catch(() => undefined); }, LEASE_MS / 3);
    const growing = state.config.batch.concurrency > 0 ? setInterval(grow, GROW_MS) : undefined;
    try {
      // Workers join while others run: done once none is left.
      while (workers.size > 0) await Promise.all(workers);
      if (failure !== undefined) throw failure.err;
    } finally {
      clearInterval(renew);
      clearInterval(growing);
      this.#waiting.delete(id);
    }
    // Stopping (a shutdown): the lines left run after the restart, or on another instance.
    if (this.#stopped) return;
    const end = keyGone !== undefined
      ? { code: 'invalid_key', line: null, message: `The key that made this batch can no longer be used: ${keyGone}`, param: null }
      : stopAt > 0 ? 'expired' as const : undefined;
    await this.#finish(id, end, end === 'expired' ? queue : []);
  }

  /** The principal of the key that made the batch, as it is now (revoked: refused). */
  async #principal(state: GatewayState, b: BatchRecord): Promise<Principal> {
    const key = await state.store.getKey(b.key_id);
    if (key === undefined || key.revoked_at !== null) throw new Error('it was revoked or removed');
    const principal = await state.auth.keyPrincipal(key.digest);
    const expires = principal.key?.expiresAt ?? null;
    if (expires !== null && Date.now() >= expires) throw new Error(`it expired at ${new Date(expires).toISOString()}`);
    return principal;
  }

  async #fail(b: BatchRecord, code: string, message: string): Promise<void> {
    b.status = 'failed';
    b.failed_at = Math.floor(Date.now() / 1000);
    b.errors = { object: 'list', data: [{ code, line: null, message, param: null }] };
    await this.#o.store.putBatch(b);
  }

  /**
   * Writes the output and error files and the batch's last status. An expired batch's lines that
   * never started (`unrun`) are in its error file as `batch_expired`, as OpenAI writes them.
   */
  async #finish(id: string, end: 'expired' | BatchError | undefined, unrun: readonly BatchLine[]): Promise<void> {
    const store = this.#o.store;
    const b = await store.getBatch(id);
    if (b === undefined) return;
    const now = Math.floor(Date.now() / 1000);
    const cancelled = b.status === 'cancelling';
    if (!cancelled && end === undefined) {
      b.status = 'finalizing';
      b.finalizing_at = now;
      await store.putBatch(b);
    }
    const outcomes = (await store.outcomes(id)).sort((x, y) => x.line - y.line);
    const ok = outcomes.filter((o) => o.ok);
    const failed = outcomes.filter((o) => !o.ok).concat(unrun.map(expiredLine)).sort((x, y) => x.line - y.line);
    b.output_file_id = await this.#file(b, ok);
    b.error_file_id = await this.#file(b, failed);
    b.request_counts = { total: b.request_counts.total, completed: ok.length, failed: failed.length };
    if (cancelled) {
      b.status = 'cancelled';
      b.cancelled_at = now;
    } else if (end === 'expired') {
      b.status = 'expired';
      b.expired_at = now;
    } else if (end !== undefined) {
      b.status = 'failed';
      b.failed_at = now;
      b.errors = { object: 'list', data: [end] };
    } else {
      b.status = 'completed';
      b.completed_at = now;
    }
    await store.putBatch(b);
  }

  async #file(b: BatchRecord, outcomes: LineOutcome[]): Promise<string | null> {
    if (outcomes.length === 0) return null;
    const content = Buffer.from(outcomes.map((o) => o.text + '\n').join(''));
    const state = this.#o.state()!;
    const now = Math.floor(Date.now() / 1000);
    const f: FileRecord = {
      id: newId('file-'), object: 'file', bytes: content.length, created_at: now, filename: `${b.id}_${outcomes[0]!.ok ? 'output' : 'error'}.jsonl`,
      purpose: outcomes[0]!.ok ? 'batch_output' : 'batch_error', expires_at: now + state.config.batch.retention_days * 86_400, account: b.account,
    };
    await this.#o.store.putFile(f, content);
    return f.id;
  }

  /** Runs one line; its output-file line (ok) or error-file line. */
  async #line(b: BatchRecord, line: BatchLine, principal: Principal): Promise<LineOutcome> {
    const requestId = `${b.id}-${line.line}`;
    let answer: { status: number; body: string } = { status: 0, body: '' };
    for (let attempt = 0; attempt <= RETRIES; attempt++) {
      this.inFlight++;
      try {
        answer = await this.#send(b.endpoint, requestId, JSON.stringify(line.body), principal);
      } catch (err) {
        answer = { status: 500, body: JSON.stringify({ error: { code: 'internal_error', message: (err as Error).message } }) };
      } finally {
        this.inFlight--;
      }
      // Refused before any hold (rate limits, concurrency, a full queue): tried again shortly.
      if (!retryable(answer)) break;
      await new Promise((r) => setTimeout(r, Math.min(5000, 100 * 2 ** attempt)));
    }
    let body: unknown;
    try {
      body = JSON.parse(answer.body);
    } catch {
      body = answer.body;
    }
    const ok = answer.status >= 200 && answer.status < 300;
    const error = ok ? null : errorOf(body, answer.status);
    const text = JSON.stringify({ id: `batch_req_${randomBytes(12).toString('hex')}`, custom_id: line.custom_id, response: { status_code: answer.status, request_id: requestId, body }, error });
    return { line: line.line, ok, text };
  }

  #send(path: string, requestId: string, body: string, principal: Principal): Promise<{ status: number; body: string }> {
    const token = randomBytes(16).toString('hex');
    this.#tokens.set(token, principal);
    return new Promise((resolve, reject) => {
      const req = request({
        host: '127.0.0.1', port: this.#port, method: 'POST', path,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-request-id': requestId, [TOKEN_HEADER]: token },
      }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('error', (err) => { this.#tokens.delete(token); reject(err); });
      req.end(body);
    });
  }
}

/** A line the completion window ended before: no request was made, nothing charged. */
function expiredLine(line: BatchLine): LineOutcome {
  const error = { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' };
  return { line: line.line, ok: false, text: JSON.stringify({ id: `batch_req_${randomBytes(12).toString('hex')}`, custom_id: line.custom_id, response: null, error }) };
}

function retryable(a: { status: number; body: string }): boolean {
  if (a.status !== 429 && a.status !== 503) return false;
  return /"code":"(rate_limit_exceeded|too_many_concurrent|model_overloaded)"/.test(a.body);
}

function errorOf(body: unknown, status: number): { code: string; message: string } {
  const e = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  return {
    code: typeof e?.code === 'string' ? e.code : `http_${status}`,
    message: typeof e?.message === 'string' ? e.message : `The request failed with status ${status}.`,
  };
}
