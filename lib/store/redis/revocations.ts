// Revocation announcements of the Redis store: the channel P + "revocations" (see the key
// layout in ./store.ts), its subscriber connection, and this instance's listeners.
//
// Revocations: the script that records a revocation also publishes it, so a revocation is
// announced if and only if it was newly recorded. This instance's listeners are called directly
// (before revokeKey/revokeSession resolve); messages from the subscription that carry this
// instance's id are ignored, so each listener hears each revocation exactly once. Pub/sub is
// fire-and-forget: an instance whose subscriber connection is down at that moment misses it,
// and so does this instance when the script applied but its reply was lost (the call rejected).
// When the subscriber connects again, listeners hear `missed` (see Revocation).

import { randomUUID } from 'node:crypto';
import { connect, keepSubscribed, type RedisClient, type RedisTopology } from './connect.js';
import type { Revocation } from '../types.js';

interface Message { from: string; r: Revocation }

/** The revocation channel of one store: what it publishes, what it hears, who listens. */
export class RedisRevocations {
  readonly channel: string;
  /** Tells this instance's own messages apart from other instances'. */
  readonly instance = randomUUID();
  readonly #listeners = new Set<(r: Revocation) => void>();
  /** The subscriber connection: it runs no other command. */
  readonly sub: RedisClient;
  /** The revocation channel's subscription: its latest attempt (see keepSubscribed). */
  readonly subscribed: () => Promise<void>;

  constructor(prefix: string, topology: RedisTopology, connectTimeout: number, onError: (err: Error) => void) {
    this.channel = `${prefix}revocations`;
    // A subscriber connection runs no other command. Its SUBSCRIBE waits for the first connect
    // however long that takes; ioredis subscribes again after every reconnect.
    this.sub = connect(topology, { connectionName: 'tollgate-sub', connectTimeout, subscriber: true });
    this.sub.on('error', onError);
    this.sub.on('message', (channel: string, text: string) => {
      if (channel !== this.channel) return;
      const m = parseMessage(text);
      if (m !== undefined && m.from !== this.instance) this.emit(m.r);
    });
    this.subscribed = keepSubscribed(this.sub, this.channel); // a failure is surfaced by ready()
    // A subscription re-established after a cut may have missed announcements meanwhile.
    let connected = false;
    this.sub.on('ready', () => {
      if (connected) this.emit({ kind: 'missed' });
      connected = true;
    });
  }

  listen(listener: (r: Revocation) => void): () => void {
    const wrapped = (r: Revocation) => listener(r);
    this.#listeners.add(wrapped);
    return () => { this.#listeners.delete(wrapped); };
  }

  /** Forgets every listener (the store is closing). */
  clear(): void {
    this.#listeners.clear();
  }

  message(r: Revocation): string {
    const m: Message = { from: this.instance, r };
    return JSON.stringify(m);
  }

  emit(r: Revocation): void {
    for (const l of [...this.#listeners]) {
      try {
        l(r);
      } catch {
        // One listener's failure must not keep the others from hearing the revocation.
      }
    }
  }
}

function parseMessage(text: string): Message | undefined {
  let m: unknown;
  try { m = JSON.parse(text); } catch { return undefined; }
  if (typeof m !== 'object' || m === null) return undefined;
  const { from, r } = m as { from?: unknown; r?: { kind?: unknown; digest?: unknown; sid?: unknown } };
  if (typeof from !== 'string' || typeof r !== 'object' || r === null) return undefined;
  if (r.kind === 'key' && typeof r.digest === 'string') return { from, r: { kind: 'key', digest: r.digest } };
  if (r.kind === 'session' && typeof r.sid === 'string') return { from, r: { kind: 'session', sid: r.sid } };
  if (r.kind === 'key-changed' && typeof r.digest === 'string') return { from, r: { kind: 'key-changed', digest: r.digest } };
  return undefined;
}
