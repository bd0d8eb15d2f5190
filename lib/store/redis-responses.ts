// Stored responses for the Redis store (Responses API, `store: true`).
//
// Key layout (P = the store's prefix): P{resp:ACCOUNT}:ID  string  the stored response (JSON),
// with a TTL of `responses.retention_hours`. The hash tag is the account's own `{resp:...}`, so
// an account's responses sit on one cluster slot apart from its metering keys, and a lookup
// by another account can never find them. Single commands only: SET PX, GET, DEL.

import type { RedisClient } from './redis-connect.js';

export class RedisResponses {
  readonly #redis: RedisClient;
  readonly #prefix: string;

  constructor(redis: RedisClient, prefix: string) {
    this.#redis = redis;
    this.#prefix = prefix;
  }

  #key(account: string, id: string): string {
    return `${this.#prefix}{resp:${account}}:${id}`;
  }

  async put(account: string, id: string, value: string, ttlMs: number): Promise<void> {
    await this.#redis.set(this.#key(account, id), value, 'PX', Math.max(1, Math.ceil(ttlMs)));
  }

  async get(account: string, id: string): Promise<string | undefined> {
    return (await this.#redis.get(this.#key(account, id))) ?? undefined;
  }

  async delete(account: string, id: string): Promise<boolean> {
    return (await this.#redis.del(this.#key(account, id))) > 0;
  }
}
