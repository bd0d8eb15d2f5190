// Callers' MCP sessions (CONTRACT section 17): each `Mcp-Session-Id` the gateway issues at
// initialize is bound to the credential that opened it and to the endpoint (`/mcp` or
// `/mcp/<server>`); presented by another credential, on another endpoint, after DELETE ended it
// or after MAX_AGE_MS, it is not found (404). An id carries its own proof (an HMAC over when it
// was issued, a nonce, the credential and the endpoint), so nothing is stored per session: ids
// survive a reload, and with console.session_secret or admin.token set every instance of one
// config accepts the others' (without either, the key is this process's own). The upstream
// sessions are the gateway's (upstream/mcp.ts) and never shown to a caller.

import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Config } from '../config/types.js';

/** A session lasts this long from initialize; the client then initializes again on its 404. */
const MAX_AGE_MS = 24 * 60 * 60 * 1000;
/** Ids ended by DELETE, remembered (on this instance) until they would have expired anyway. */
const MAX_ENDED = 100_000;
const PROCESS_KEY = randomBytes(32);
const ID = /^([0-9a-z]{1,12})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

export class McpSessions {
  readonly #key: Buffer;
  readonly #ended = new LRUCache<string, true>({ max: MAX_ENDED, ttl: MAX_AGE_MS });

  constructor(config: Config) {
    const secret = config.console.session_secret ?? config.admin.token;
    this.#key = secret === null ? PROCESS_KEY : createHash('sha256').update('tollgate mcp sessions\u0000').update(secret).digest();
  }

  #mac(issued: string, nonce: string, credential: string, server: string | null): string {
    return createHmac('sha256', this.#key).update(`${issued}.${nonce}\u0000${credential}\u0000${server ?? ''}`).digest('base64url');
  }

  /** A new session id for `credential` on the endpoint of `server` (null: the aggregate /mcp). */
  open(credential: string, server: string | null): string {
    const issued = Date.now().toString(36);
    const nonce = randomBytes(16).toString('base64url');
    return `${issued}.${nonce}.${this.#mac(issued, nonce, credential, server)}`;
  }

  /** True when `id` is a live session of this credential on this endpoint. */
  valid(id: string, credential: string, server: string | null): boolean {
    const m = ID.exec(id);
    if (m === null || this.#ended.has(id)) return false;
    const age = Date.now() - parseInt(m[1]!, 36);
    if (!(age >= -60_000 && age < MAX_AGE_MS)) return false;
    const want = Buffer.from(this.#mac(m[1]!, m[2]!, credential, server));
    const got = Buffer.from(m[3]!);
    return got.length === want.length && timingSafeEqual(got, want);
  }

  end(id: string): void {
    this.#ended.set(id, true);
  }
}

const byConfig = new WeakMap<Config, McpSessions>();

/** The sessions of a config (one key per config: a reload with the same secret keeps them). */
export function sessionsOf(config: Config): McpSessions {
  let s = byConfig.get(config);
  if (s === undefined) byConfig.set(config, (s = new McpSessions(config)));
  return s;
}
