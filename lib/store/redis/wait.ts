// store.wait_replicas: a write that moves money (a settlement, a credit or deduction) or
// revokes a credential is reported only once N replicas have it, so a failover that promotes
// one of them loses no write the gateway acknowledged.
//
// The script and `WAIT N timeout` go out together on one connection: WAIT covers the writes made
// on the connection it is sent on, and the two cannot be split by a reconnect (a WAIT sent
// after a reconnect, on a fresh connection, would confirm nothing yet answer at once). On one
// server or a Sentinel's primary they are two commands written in one synchronous stretch, so
// into the same socket (in one write: connect.ts batches a loop turn's commands). A
// connection lost before both are answered fails the unanswered ones at once (connect.ts):
// a script answered and its WAIT not is a ReplicaWaitError.
// On a Cluster they are one ioredis pipeline, which goes to the primary
// owning the script's slot (WAIT has no key; the script's keys choose the node); not elsewhere,
// as each pipeline object stays reachable from the old generation until a mark-compact
// (connect.ts). The script is sent as EVAL, not EVALSHA: a NOSCRIPT retry would be sent
// apart from the WAIT and escape it. WAIT blocks its connection until the replicas
// answer, so waited writes have connections of their own, a few taken in turn: a WAIT delays
// only the waited writes queued behind it on its connection, never holds and reads.
//
// A write applied on the primary whose WAIT is not acknowledged in time rejects with
// ReplicaWaitError (a store fault: 503 service_unavailable with Retry-After). It stays applied
// on the primary and may or may not survive a failover; it is never applied twice: every
// waited script is idempotent (settlements by request id, credits by idempotency key,
// revocations by id), and a repeat's WAIT also covers the first write.

import { Cluster } from 'ioredis';
import type { RedisClient } from './connect.js';

export class ReplicaWaitError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ReplicaWaitError';
  }
}

/** Errors of a Cluster in motion: the script was not applied, and a retry on the new node may succeed. */
const REDIRECT = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /;

export class ReplicaWait {
  readonly #clients: RedisClient[];
  #next = 0;
  readonly #replicas: number;
  readonly #waitMs: number;
  readonly #deadlineMs: number;

  /**
   * `clients` are used for waited writes alone, in turn. `deadlineMs` bounds the whole call
   * (the store's command timeout), and must exceed `waitMs`.
   */
  constructor(clients: RedisClient[], replicas: number, waitMs: number, deadlineMs: number) {
    if (clients.length === 0) throw new RangeError('at least one client');
    if (!Number.isSafeInteger(replicas) || replicas < 1) throw new RangeError('replicas must be a positive integer');
    if (!Number.isSafeInteger(waitMs) || waitMs < 1 || waitMs >= deadlineMs) throw new RangeError('waitMs must be positive and below the deadline');
    this.#clients = clients;
    this.#replicas = replicas;
    this.#waitMs = waitMs;
    this.#deadlineMs = deadlineMs;
  }

  get clients(): readonly RedisClient[] {
    return this.#clients;
  }

  /** Runs `lua` over `keys` and `args`, then waits for the replicas; resolves to the script's reply. */
  async eval(lua: string, keys: string[], args: string[]): Promise<unknown> {
    let timer: NodeJS.Timeout | undefined;
    // A Cluster pipeline waits for the slot map before it is sent: nothing may wait unbounded.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`store command timed out after ${this.#deadlineMs} ms`)), this.#deadlineMs);
    });
    try {
      return await Promise.race([this.#attempt(lua, keys, args, Date.now() + this.#deadlineMs), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #attempt(lua: string, keys: string[], args: string[], deadline: number): Promise<unknown> {
    const client = this.#clients[this.#next]!;
    this.#next = (this.#next + 1) % this.#clients.length;
    for (let attempt = 0; ; attempt++) {
      const [[scriptErr, reply], [waitErr, acked]] = await this.#evalAndWait(client, lua, keys, args);
      if (scriptErr !== null) {
        // Not applied (a redirection is answered before the script runs): try once more where
        // the slot is now, if there is time for a whole WAIT.
        if (attempt === 0 && REDIRECT.test(scriptErr.message) && 'refreshSlotsCache' in client
          && Date.now() + this.#waitMs < deadline) {
          await refresh(client);
          continue;
        }
        throw scriptErr;
      }
      if (waitErr !== null) throw new ReplicaWaitError(`applied on the primary, not confirmed by replicas: ${waitErr.message}`, { cause: waitErr });
      if (typeof acked !== 'number' || acked < this.#replicas) {
        throw new ReplicaWaitError(`applied on the primary, confirmed by ${String(acked)} of ${this.#replicas} replicas within ${this.#waitMs} ms`);
      }
      return reply;
    }
  }

  /** The script's and the WAIT's outcomes, each [error, reply], sent on one connection. */
  async #evalAndWait(client: RedisClient, lua: string, keys: string[], args: string[]): Promise<[Outcome, Outcome]> {
    if (client instanceof Cluster) {
      const p = client.pipeline();
      p.eval(lua, keys.length, ...keys, ...args);
      p.wait(this.#replicas, this.#waitMs);
      const results = await p.exec();
      if (results === null || results.length !== 2) throw new Error('the pipeline was discarded');
      return results as [Outcome, Outcome];
    }
    // Both written before anything else can run: the same socket, in this order.
    const script = client.eval(lua, keys.length, ...keys, ...args);
    const wait = client.wait(this.#replicas, this.#waitMs);
    return Promise.all([outcome(script), outcome(wait)]);
  }
}

type Outcome = [Error | null, unknown];

function outcome(p: Promise<unknown>): Promise<Outcome> {
  return p.then((reply) => [null, reply], (err: unknown) => [err instanceof Error ? err : new Error(String(err)), undefined]);
}

function refresh(cluster: RedisClient): Promise<void> {
  return new Promise((resolve) => {
    (cluster as { refreshSlotsCache(cb: (err?: Error | null) => void): void }).refreshSlotsCache(() => resolve());
  });
}
